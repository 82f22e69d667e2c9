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
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Final

import httpx

from ..._protocol._param_headers import encode_header_value
from ._config import IO_ERRORS, Config, logger

if TYPE_CHECKING:
    from ._requests import Post

__all__ = ["HttpSession", "session_gone"]

_ACCEPT_BOTH: Final = "application/json, text/event-stream"


class HttpSession:
    """What the server assigned and the client negotiated, for one connection."""

    def __init__(self, cfg: Config) -> None:
        self._cfg = cfg
        self._lock = threading.Lock()
        self._session_id: str | None = None
        self._protocol_version: str | None = None
        #: The negotiated era (read without the lock, as a hint for new messages).
        self.era: str | None = None

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
            logger.debug("DELETE session failed: %s", exc)

    @staticmethod
    def _stamp(headers: httpx.Headers, session_id: str | None, version: str | None) -> None:
        if session_id:
            headers["Mcp-Session-Id"] = session_id
        if version:
            headers["MCP-Protocol-Version"] = version


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
