"""The HTTP side of the authorization flow: the one client every request of the flow goes
through (resource and authorization server metadata, client registration, token requests),
and the one way an answer is read.

- No cleartext: each request's URL is https, or plain http to a loopback host (127.0.0.0/8,
  ``[::1]``, ``localhost``) for development. The name decides, not where it resolves: on
  the path an attacker controls the resolver too. The same rule keeps bearer tokens off
  plain http (:func:`require_secure`).
- A deadline per request: ``timeout`` seconds cover connecting, TLS, the head and the body
  together. httpx's timeouts bound each read, so a server sending a byte a second could
  otherwise hold the flow as long as it liked.
- A bounded answer: read by streaming, at most :data:`MAX_ANSWER_BYTES`, never decoded
  (``identity`` is asked for: a compressed answer can grow a thousandfold in one read).
- Redirects are not followed. Environment proxies are not used: the connection pool is
  ours, as in the HTTP transport.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import httpcore
import httpx

from .._protocol._peer_text import peer_text
from .._protocol._ratelog import RateLimitedLog
from .._util._redact import redact_text, redact_url
from ._errors import AnswerRefused, AuthError, CleartextRefused

__all__ = [
    "MAX_ANSWER_BYTES",
    "Answer",
    "exchange",
    "is_loopback",
    "oauth_client",
    "origin",
    "require_secure",
    "require_url",
    "shown",
]

#: Largest answer read from an authorization server (metadata, registration, token).
MAX_ANSWER_BYTES: Final = 256 * 1024

#: Server misbehaviour on the flow's requests: one record per kind and interval.
misbehaviour: Final = RateLimitedLog(logging.getLogger("exmcp_actors.auth"))


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``, safe to show (no credentials, path or query)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "<unparsable URL>"
    host = f"[{host}]" if ":" in host else host
    return peer_text(f"{parts.scheme}://{host}" + (f":{port}" if port else ""))


def shown(url: str) -> str:
    """An endpoint URL a server supplied, safe to show: no credentials, query or control characters."""
    return peer_text(redact_url(url))


def is_loopback(host: str | None) -> bool:
    """``localhost``, or an address in 127.0.0.0/8 or ``::1`` (an IPv4-mapped one too)."""
    if not host:
        return False
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def require_url(url: str, what: str) -> None:
    """Refuse ``url``, which a server supplied, unless both parsers it meets take it: urllib's
    (compared, shown, given to authlib) and httpx's (requested).

    Raises:
        AuthError: ``what`` and the URL, escaped, without credentials or query, are named.
    """
    try:
        urlsplit(url).port  # noqa: B018 (the port is only parsed when asked for)
        httpx.URL(url)
    except (ValueError, httpx.InvalidURL) as exc:
        # Not redact_url(): it needs the parse that failed.
        raise AuthError(f"{what} {peer_text(redact_text(url), quote=True)} is no usable URL") from exc


def require_secure(url: str, what: str) -> None:
    """Refuse to send ``what`` to ``url`` unless it is https (wss), or http (ws) to a loopback host.

    Raises:
        CleartextRefused: the sentence names ``what`` and the URL's origin, never its query.
    """
    try:
        parts = urlsplit(url)
        scheme, host = parts.scheme.lower(), parts.hostname
    except ValueError:
        scheme, host = "", None
    if scheme in ("https", "wss") or (scheme in ("http", "ws") and is_loopback(host)):
        return
    secure, plain = ("wss", "ws") if scheme == "ws" else ("https", "http")
    raise CleartextRefused(
        f"refused to send {what} to {origin(url)}: OAuth needs {secure}"
        f" (plain {plain} only to a loopback host: 127.0.0.0/8, [::1] or localhost)"
    )


# -- a deadline on every socket operation of a request ---------------------------------


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync backend whose sockets never wait past the current request's deadline."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()
        self._local = threading.local()  # a request runs on one thread, start to end

    def start(self, seconds: float) -> None:
        self._local.deadline = time.monotonic() + seconds

    def end(self) -> None:
        self._local.deadline = None

    def bounded(self, timeout: float | None, error: type[Exception]) -> float | None:
        """``timeout``, shortened to what is left of the deadline; ``error`` once it passed."""
        deadline: float | None = getattr(self._local, "deadline", None)
        if deadline is None:
            return timeout
        left = deadline - time.monotonic()
        if left <= 0:
            raise error("the request ran past its deadline")
        return left if timeout is None else min(timeout, left)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        limit = self.bounded(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_tcp(host, port, limit, local_address, socket_options), self)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        limit = self.bounded(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, limit, socket_options), self)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, backend: _DeadlineBackend) -> None:
        self._inner = inner
        self._backend = backend

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._backend.bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._backend.bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        limit = self._backend.bounded(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, limit), self._backend)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _EndOfRequest(httpx.SyncByteStream):
    """A response body that ends its request's deadline when closed."""

    def __init__(self, inner: httpx.SyncByteStream, backend: _DeadlineBackend) -> None:
        self._inner = inner
        self._backend = backend

    def __iter__(self) -> Iterator[bytes]:
        yield from self._inner

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._backend.end()


class _GuardedTransport(httpx.BaseTransport):
    """Refuses cleartext, and gives each request ``seconds`` from its start to its answer's end."""

    def __init__(self, verify: Any, seconds: float) -> None:
        self._seconds = seconds
        self._backend = _DeadlineBackend()
        self._inner = httpx.HTTPTransport(verify=verify)
        # httpx offers no public way to choose httpcore's network backend (as in
        # _transport/http/_plumbing.py): the pool is rebuilt with ours.
        self._inner._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify),
            max_connections=4,
            max_keepalive_connections=4,
            keepalive_expiry=5.0,
            network_backend=self._backend,
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        require_secure(str(request.url), "an OAuth request")
        self._backend.start(self._seconds)
        try:
            response = self._inner.handle_request(request)
        except BaseException:
            self._backend.end()
            raise
        assert isinstance(response.stream, httpx.SyncByteStream)
        response.stream = _EndOfRequest(response.stream, self._backend)
        return response

    def close(self) -> None:
        self._inner.close()


def oauth_client(timeout: float, verify: Any) -> httpx.Client:
    """The client of one flow's requests: see this module's docstring."""
    return httpx.Client(
        transport=_GuardedTransport(verify, timeout),
        timeout=timeout,
        follow_redirects=False,
        headers={"Accept-Encoding": "identity"},
    )


# -- reading an answer ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer read whole, within :data:`MAX_ANSWER_BYTES`."""

    status: int
    headers: httpx.Headers
    body: bytes

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError):
            return None


def exchange(http: httpx.Client, method: str, url: str, **kwargs: Any) -> Answer:
    """One request and its answer, read by streaming up to :data:`MAX_ANSWER_BYTES`.

    Raises:
        AuthError: ``url`` is no usable URL (:func:`require_url`).
        AnswerRefused: the answer is larger than that, or encoded (not read further).
        httpx.HTTPError: the request failed (deadline included).
    """
    require_url(url, "the request URL")
    with http.stream(method, url, **kwargs) as response:
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding != "identity":
            raise AnswerRefused(f"the answer of {shown(url)} is encoded ({peer_text(encoding, 40)}): not read")
        body = bytearray()
        # An answer already in memory (an httpx.MockTransport's) has no stream left to read.
        for chunk in [response.content] if response.is_stream_consumed else response.iter_raw():
            body += chunk
            if len(body) > MAX_ANSWER_BYTES:  # read no further: bounded memory
                raise AnswerRefused(f"the answer of {shown(url)} is larger than {MAX_ANSWER_BYTES} bytes: not read")
        return Answer(response.status_code, response.headers, bytes(body))
