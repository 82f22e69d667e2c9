"""The transport itself: :class:`HttpTransport`, the public face of one
endpoint, which opens and closes one :class:`Link` (connection) at a time.

``open`` performs no network I/O: HTTP has no connection to open. The first
POST proves the server reachable; if it is not, that request fails with an
``ExchangeFailed`` (see ``_exchange.py``) and the sink gets ``transport_lost``.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from typing import Any

import httpx

from ..._auth import BearerAuth, OAuth
from ..._protocol._errors import TransportError
from ..._util._redact import redact_url
from .._base import DEFAULT_MAX_FRAME_BYTES, FrameSink, Transport
from ._config import Config, logger
from ._link import Link
from ._plumbing import ssl_context_for

__all__ = ["HttpTransport"]


class HttpTransport(Transport):
    """MCP Streamable HTTP client transport (legacy and modern eras).

    Args:
        url: the MCP endpoint, ``http://`` or ``https://``.
        headers: extra headers sent with every HTTP request (e.g.
            ``Authorization``). Protocol headers take precedence.
        verify: TLS verification, as httpx takes it (bool, CA bundle path or
            ``ssl.SSLContext``).
        max_frame_bytes: largest JSON body or SSE event accepted.
        sse_retry_default: seconds to wait before reconnecting a dropped SSE
            stream when the server sent no ``retry:``.
        io_timeout: connect, write and pool timeout in seconds, and the read
            timeout for the 202 answering a notification. Reads of a request's
            response are unbounded in time (a tool call or a listen may take
            hours) but interruptible by ``cancel_stream`` and ``close``.
        delete_timeout: bound on the best-effort ``DELETE`` sent by ``close``.
        reconnect_attempts: consecutive failed reconnections of an SSE stream
            before giving up (then ``transport_lost`` for the GET stream when
            the server is unreachable).
        max_retry_delay: upper bound, in seconds, on the wait before reopening an SSE stream:
            on a server's ``retry:`` (which is also never honoured below 0.5 s, or this bound
            when lower) and on the doubling after attempts that ended at once.
        auth: an :class:`~exmcp_actors.OAuth`: its bearer token goes on every
            request to this URL, and a 401/403 starts its flow (one retry per new token).

    Example:
        >>> t = HttpTransport("http://127.0.0.1:8000/mcp", {"Authorization": "Bearer x"})
        >>> t.describe()
        'http http://127.0.0.1:8000/mcp'
    """

    def __init__(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        *,
        verify: bool | str | ssl.SSLContext = True,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        sse_retry_default: float = 1.0,
        io_timeout: float = 10.0,
        delete_timeout: float = 2.0,
        reconnect_attempts: int = 3,
        max_retry_delay: float = 30.0,
        auth: OAuth | None = None,
    ) -> None:
        parsed = httpx.URL(url)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"not an http(s) URL: {redact_url(url)!r}")
        if auth is not None and not isinstance(auth, OAuth):
            raise TypeError(f"auth must be an exmcp_actors.OAuth, got {type(auth).__name__}")
        self.url = url
        self.max_frame_bytes = max_frame_bytes
        self._tls = parsed.scheme == "https"
        self._cfg = Config(
            url=url,
            headers=dict(headers or {}),
            verify=verify,
            max_frame_bytes=max_frame_bytes,
            sse_retry_default=sse_retry_default,
            io_timeout=io_timeout,
            delete_timeout=delete_timeout,
            reconnect_attempts=max(1, reconnect_attempts),
            max_retry_delay=max_retry_delay,
            auth=BearerAuth(auth, url) if auth is not None else None,
        )
        # Shown in logs and errors: no credentials, no query string.
        self._display = f"http {redact_url(url)}"
        self._lock = threading.Lock()
        self._link: Link | None = None
        # Built on the first open of an https URL and reused: loading the CA
        # bundle costs tens of milliseconds.
        self._ssl_context: ssl.SSLContext | None = None
        #: ``headers_for(tool, arguments)``: a modern ``tools/call``'s ``Mcp-Param-*`` headers.
        self._param_headers: Callable[[str, Any], dict[str, str]] | None = None

    def open(self, sink: FrameSink, *, timeout: float) -> None:
        """Start a fresh connection (no session id, no negotiated version).

        No network I/O happens here; the first POST proves the server
        reachable (see the module docstring). A previous connection still
        open is closed first.

        Raises:
            TransportError: the TLS settings are unusable (e.g. a missing CA bundle).
        """
        self.close()
        try:
            if self._ssl_context is None and self._tls:
                self._ssl_context = ssl_context_for(self._cfg.verify)
            link = Link(self._cfg, sink, self._ssl_context, self._param_headers)
        except (OSError, ValueError, RuntimeError) as exc:  # a bad CA bundle, no thread to start
            raise TransportError(f"{self._display}: cannot open: {exc}") from exc
        with self._lock:
            self._link = link
        logger.debug("%s: opened", self._display)

    def send(self, message: dict[str, Any]) -> None:
        """Queue ``message`` for POSTing; returns at once.

        Raises:
            TransportError: not open, closed, or the connection was lost.
        """
        link = self._link
        if link is None:
            raise TransportError(f"{self._display}: transport is not open")
        link.send(message)

    def cancel_stream(self, request_id: Any) -> bool:
        """Abort the HTTP exchange of an in-flight request.

        Returns:
            True when the request was sent in the modern era (closing the
            stream is the cancellation); False for a legacy request (aborted
            too, but the client must still send ``notifications/cancelled``)
            and for unknown or finished ids.
        """
        link = self._link
        return link.cancel(request_id) if link is not None else False

    def server_capabilities(self, capabilities: dict[str, Any]) -> None:
        """Keep what the server advertised: a legacy server with no GET stream that promises
        notifications is told about at WARNING, once per transport."""
        link = self._link
        if link is not None:
            link.advertised(capabilities)

    def negotiated(self, protocol_version: str, era: str) -> None:
        """Use ``protocol_version`` in headers; in the legacy era open the GET stream."""
        link = self._link
        if link is not None:
            link.negotiated(protocol_version, era)

    def mirror_tool_arguments(self, headers_for: Callable[[str, Any], dict[str, str]]) -> bool:
        """Streamable HTTP mirrors ``x-mcp-header`` arguments: each modern ``tools/call``
        carries ``headers_for(name, arguments)`` (connections opened from now on)."""
        self._param_headers = headers_for
        return True

    def auth_context(self) -> str:
        """A digest of the OAuth token last sent ("" without ``auth``: the headers never change)."""
        auth = self._cfg.auth
        return auth.sent if isinstance(auth, BearerAuth) else ""

    def close(self) -> None:
        """DELETE the session (legacy, best effort), abort all streams, join all threads.

        Idempotent; bounded in time; never calls ``transport_lost``.
        """
        with self._lock:
            link, self._link = self._link, None
        if link is not None:
            link.shutdown()
            logger.debug("%s: closed", self._display)

    def describe(self) -> str:
        """The endpoint without credentials or query, e.g. ``http https://host/mcp``."""
        return self._display
