"""The session: its id, the negotiated version and era, and the headers they put
on every HTTP request.

Headers on every POST: ``Accept: application/json, text/event-stream``,
``Content-Type: application/json``, the user's headers, ``Mcp-Session-Id``
once the ``initialize`` response carried one (never on ``initialize``
itself), ``MCP-Protocol-Version`` once :meth:`HttpTransport.negotiated` ran
(never on ``initialize``). A modern request (its ``params._meta`` carries
``io.modelcontextprotocol/protocolVersion``, or the era is modern) takes the
version header from that ``_meta`` value, so the first ``server/discover``
probe carries it, plus ``Mcp-Method: <method>`` and, for ``tools/call``,
``prompts/get`` and ``resources/read``, ``Mcp-Name: <params.name or
params.uri>`` (base64-wrapped as ``=?base64?...?=`` when not plain printable
ASCII), and for ``tools/call`` the ``Mcp-Param-*`` headers of its ``x-mcp-header``
arguments (``Post.param_headers``). The SDK server routes on the version header alone: a request
without it, or with a legacy version, takes the legacy path; with
``2026-07-28`` it must match ``_meta`` exactly, as must ``Mcp-Method`` and
``Mcp-Name``, else error -32020 at HTTP 400.

The session id is the server's, echoed on every request, so it is checked before it is kept:
one ``Mcp-Session-Id``, only visible ASCII (0x21-0x7E, as the spec requires of a server), at
most :data:`MAX_SESSION_ID_BYTES`. Anything else fails the ``initialize`` (whose connect
then fails, or is retried as the reconnect policy says) and is never sent back; an empty
value is no session, as in the official SDKs. The id is never logged.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import httpx

from ..._protocol._param_headers import encode_header_value
from ._config import IO_ERRORS, Config, io_error_text, logger

if TYPE_CHECKING:
    from ._requests import Post

__all__ = [
    "MAX_SESSION_ID_BYTES",
    "HttpSession",
    "InvalidSessionId",
    "promised_pushes",
    "session_gone",
    "session_id_from",
]

_ACCEPT_BOTH: Final = "application/json, text/event-stream"
#: The longest session id kept, in bytes. It goes back on every request, and servers bound a
#: request's header line (8 KiB in nginx) and head (16 KiB in Node.js); 4 KiB, the least a
#: cookie may hold (RFC 6265), leaves room for the signed token (a JWT) the spec suggests.
MAX_SESSION_ID_BYTES: Final = 4096
_NOT_VISIBLE_ASCII: Final = re.compile(rb"[^\x21-\x7e]")


class InvalidSessionId(ValueError):
    """The server's ``Mcp-Session-Id`` cannot be kept; the text says why, never quoting it."""


def session_id_from(values: Sequence[bytes]) -> str | None:
    """The session id of an ``initialize`` response's ``Mcp-Session-Id`` values, as received
    (None when there is none, or it is empty).

    Raises:
        InvalidSessionId: more than one, longer than :data:`MAX_SESSION_ID_BYTES`, or a byte
            outside visible ASCII (a control, a space, a Latin-1 or UTF-8 letter).
    """
    if len(values) > 1:
        raise InvalidSessionId(f"{len(values)} Mcp-Session-Id headers")
    value = values[0] if values else b""
    if not value:
        return None
    if len(value) > MAX_SESSION_ID_BYTES:
        raise InvalidSessionId(f"an Mcp-Session-Id of {len(value)} bytes (at most {MAX_SESSION_ID_BYTES} are kept)")
    bad = _NOT_VISIBLE_ASCII.search(value)
    if bad is not None:
        where = f"byte 0x{value[bad.start()]:02x} at offset {bad.start()} of {len(value)}"
        raise InvalidSessionId(f"an Mcp-Session-Id with {where}, outside visible ASCII (0x21-0x7e)")
    return value.decode("ascii")


class HttpSession:
    """What the server assigned and the client negotiated, for one connection."""

    def __init__(self, cfg: Config) -> None:
        self._cfg = cfg
        self._lock = threading.Lock()
        self._session_id: str | None = None
        self._protocol_version: str | None = None
        #: The negotiated era (read without the lock, as a hint for new messages).
        self.era: str | None = None
        #: The pushes the server's capabilities promise, in words (see :func:`promised_pushes`).
        self.promised: list[str] = []

    def advertised(self, capabilities: dict[str, Any]) -> None:
        self.promised = promised_pushes(capabilities)

    def negotiated(self, protocol_version: str, era: str) -> None:
        with self._lock:
            self._protocol_version = protocol_version
            self.era = era

    def assigned(self, session_id: str) -> None:
        """The ``initialize`` response carried this session id."""
        with self._lock:
            self._session_id = session_id
        logger.info("session id assigned by the server")

    def expired(self) -> None:
        with self._lock:
            self._session_id = None

    @property
    def has_session(self) -> bool:
        with self._lock:
            return self._session_id is not None

    def _current(self) -> tuple[str | None, str | None]:
        with self._lock:
            return self._session_id, self._protocol_version

    def post_headers(self, post: Post) -> httpx.Headers:
        headers = httpx.Headers(self._cfg.headers)
        headers["Accept"] = _ACCEPT_BOTH
        headers["Content-Type"] = "application/json"
        session_id, version = self._current()
        if post.method == "initialize":
            # A fresh negotiation: no stale session, no probe-stamped version.
            session_id = version = None
        if post.meta_version is not None:
            version = post.meta_version
        if version:
            headers["MCP-Protocol-Version"] = version
        if session_id and not post.modern:
            headers["Mcp-Session-Id"] = session_id
            post.sent_session = True
        if post.modern and post.method is not None:
            headers["Mcp-Method"] = post.method
            if post.name is not None:
                headers["Mcp-Name"] = encode_header_value(post.name)
            headers.update(post.param_headers)
        return headers

    def get_headers(self, last_event_id: str | None) -> httpx.Headers:
        """Headers for a GET stream, resuming after ``last_event_id`` if any."""
        headers = httpx.Headers(self._cfg.headers)
        headers["Accept"] = "text/event-stream"
        self._stamp(headers, *self._current())
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        return headers

    def delete(self, client: httpx.Client) -> None:
        """DELETE the session, best effort (nothing to do without one)."""
        session_id, version = self._current()
        if session_id is None:
            return
        headers = httpx.Headers(self._cfg.headers)
        self._stamp(headers, session_id, version)
        try:
            response = client.delete(self._cfg.url, headers=headers, timeout=self._cfg.delete_timeout)
            logger.debug("DELETE session: HTTP %d", response.status_code)
        except IO_ERRORS as exc:
            logger.debug("DELETE session failed: %s", io_error_text(exc))

    @staticmethod
    def _stamp(headers: httpx.Headers, session_id: str | None, version: str | None) -> None:
        if session_id:
            headers["Mcp-Session-Id"] = session_id
        if version:
            headers["MCP-Protocol-Version"] = version


def promised_pushes(capabilities: dict[str, Any]) -> list[str]:
    """What a server's capabilities promise to push, in words (empty: nothing)."""
    promised = []
    resources = capabilities.get("resources")
    if isinstance(resources, dict) and resources.get("subscribe") is True:
        promised.append("resource subscriptions")
    for kind in ("tools", "prompts", "resources"):
        advertised = capabilities.get(kind)
        if isinstance(advertised, dict) and advertised.get("listChanged") is True:
            promised.append(f"{kind} list changes")
    return promised


def session_gone(status: int, body: bytes) -> str | None:
    """Why a refusal of a message that carried our session id means the server no longer knows
    the session, or None. The spec answers 404; the Python SDK 1.x and servers built like it
    answer 400 "Bad Request: No valid session ID provided" after a restart, so a 400 whose body
    names the session counts too."""
    if status == 404:
        return "session expired (404)"
    if status == 400 and b"session" in body.lower():
        return "session unknown to the server (400)"
    return None
