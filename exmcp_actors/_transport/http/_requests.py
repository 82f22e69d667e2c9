"""The outgoing messages: one :class:`Post` per message, and the requests in
flight, by id, so ``cancel_stream`` can find them.

``cancel_stream(request_id)`` aborts the request's HTTP exchange at once
(its socket is shut down, so the reading worker unblocks even mid-read; no
further frame for that request is delivered) and returns True for a request
sent in the modern era, where closing the stream *is* the cancellation (how
a client ends a ``subscriptions/listen``). For a legacy request it aborts
the same way but returns False: on the legacy wire a disconnect is not a
cancellation, so the client still sends ``notifications/cancelled``.
Unknown or finished ids return False.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..._protocol._handshake import META_PROTOCOL_VERSION
from ..._protocol._versions import MODERN_VERSIONS

if TYPE_CHECKING:
    from ._plumbing import TrackingBackend

__all__ = ["InFlight", "Post"]

#: Method -> params key mirrored in the ``Mcp-Name`` header (modern era).
_NAME_PARAMS: Final = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    # The tasks extension routes by task (SEP-2663, Streamable HTTP).
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}


class Post:
    """One outgoing message and the state of its HTTP exchange."""

    __slots__ = (
        "body",
        "cancelled",
        "has_id",
        "meta_version",
        "method",
        "modern",
        "name",
        "param_headers",
        "request_id",
        "sent_session",
        "thread_id",
        "written",
    )

    def __init__(
        self,
        message: dict[str, Any],
        body: bytes,
        era: str | None,
        param_headers: Callable[[str, Any], dict[str, str]] | None = None,
    ) -> None:
        self.body = body
        method = message.get("method")
        self.method: str | None = method if isinstance(method, str) else None
        #: A request (has a method and an id): it is owed a response.
        self.has_id = self.method is not None and "id" in message
        self.request_id: Any = message.get("id")
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        version = meta.get(META_PROTOCOL_VERSION) if isinstance(meta, dict) else None
        self.meta_version: str | None = version if isinstance(version, str) else None
        self.modern = era == "modern" or self.meta_version in MODERN_VERSIONS
        name = None
        if self.method in _NAME_PARAMS and isinstance(params, dict):
            value = params.get(_NAME_PARAMS[self.method])
            name = value if isinstance(value, str) else None
        self.name: str | None = name
        #: A modern ``tools/call``'s arguments marked ``x-mcp-header``, as ``Mcp-Param-*`` headers.
        self.param_headers: dict[str, str] = {}
        if self.modern and self.method == "tools/call" and name is not None and param_headers is not None:
            assert isinstance(params, dict)
            self.param_headers = param_headers(name, params.get("arguments"))
        self.cancelled = False
        self.sent_session = False
        self.thread_id: int | None = None
        #: Set once the request body is on the wire (or the exchange ended).
        self.written = threading.Event()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore trace hook: learn when the body has been written."""
        if event.endswith(("send_request_body.complete", "send_request_body.failed")):
            self.written.set()

    def describe(self) -> str:
        if self.has_id:
            return f"{self.method} (id {self.request_id!r})"
        return self.method or f"response (id {self.request_id!r})"


def _id_key(request_id: Any) -> tuple[str, Any]:
    # JSON-RPC ids "1" and 1 are different requests.
    return (type(request_id).__name__, request_id)


class InFlight:
    """The requests sent and not yet finished, and which worker thread runs each."""

    def __init__(self, silenced: Callable[[Post], bool], backend: TrackingBackend) -> None:
        #: Whether nothing more will be delivered for a post (the outlet's word).
        self._silenced = silenced
        self._backend = backend
        self._lock = threading.Lock()
        #: Notified whenever a request's exchange ends (see wait_quiet).
        self._quiet = threading.Condition(self._lock)
        self._posts: dict[tuple[str, Any], Post] = {}

    def add(self, post: Post) -> None:
        """Register a request (a message with an id); others are not tracked."""
        if post.has_id:
            with self._lock:
                # A reused id takes over: cancel_stream reaches the newest.
                self._posts[_id_key(post.request_id)] = post

    def cancel(self, request_id: Any) -> Post | None:
        """Mark the request cancelled and abort its socket; None when unknown or finished."""
        with self._lock:
            post = self._posts.get(_id_key(request_id))
            if post is None:
                return None
            post.cancelled = True
            # Under the lock: the worker unregisters under it too, so the
            # socket aborted here is this request's, not its next job's.
            if post.thread_id is not None:
                stream = self._backend.stream_of(post.thread_id)
                if stream is not None:
                    stream.abort()
        return post

    def claim(self, post: Post) -> bool:
        """The calling worker takes ``post`` on; False when it is silenced already."""
        with self._lock:
            if self._silenced(post):
                return False
            post.thread_id = threading.get_ident()
        return True

    def remove(self, post: Post) -> None:
        """The exchange of ``post`` is over (or will never run)."""
        if post.has_id:
            with self._lock:
                key = _id_key(post.request_id)
                if self._posts.get(key) is post:
                    del self._posts[key]
                self._quiet.notify_all()

    def wait_quiet(self, timeout: float) -> bool:
        """Wait until no request is in flight (for tests and diagnostics)."""
        with self._lock:
            return self._quiet.wait_for(lambda: not self._posts, timeout)
