"""The one way out to the sink: frames, failed exchanges and the loss.

Response frames are delivered as the server sent them; the transport never
rewrites a server's frame except the ``id`` of an HTTP error body, and never
makes one up: a request whose exchange failed gets a
:class:`~exmcp_actors._protocol._jsonrpc.RequestFailed` in the batch instead
(see ``_exchange.py``), saying whose fault it was.
After ``transport_lost`` nothing more is delivered and ``send`` raises
:class:`TransportError`; after ``close`` nothing is delivered at all.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .._base import RequestFailed
from ._config import logger

if TYPE_CHECKING:
    from .._base import Frame, FrameSink
    from ._plumbing import TrackingBackend
    from ._requests import Post

__all__ = ["Outlet"]


class Outlet:
    """Hands frames and the loss to the sink, and knows when every thread must wind down."""

    def __init__(self, sink: FrameSink, backend: TrackingBackend) -> None:
        self._sink = sink
        self._backend = backend
        #: Held while calling the sink, so nothing is delivered after close().
        self._deliver_lock = threading.RLock()
        #: Set by close() or on loss: every thread winds down.
        self.halt = threading.Event()
        self.closed = False
        self.lost = False

    def deliver(self, frames: list[Frame], post: Post | None = None) -> None:
        with self._deliver_lock:
            if self.halt.is_set() or (post is not None and post.cancelled):
                return
            try:
                self._sink.frames_received(frames)
            except Exception:
                logger.exception("sink.frames_received raised")

    def fail(self, post: Post, error: Exception, before: list[Frame] | None = None) -> None:
        """``post``'s request will get no answer: deliver why (after the ``before`` frames, in
        the same batch)."""
        self.deliver([*(before or ()), RequestFailed(post.request_id, error)], post)

    def report_lost(self, reason: str) -> None:
        with self._deliver_lock:
            if self.halt.is_set():
                return
            self.lost = True
            self.halt.set()
        logger.info("connection lost: %s", reason)
        # Nothing more will be delivered: free every thread blocked on a socket.
        self._backend.abort_all()
        try:
            self._sink.transport_lost(reason)
        except Exception:
            logger.exception("sink.transport_lost raised")

    def silenced(self, post: Post) -> bool:
        """Whether nothing more will be delivered for ``post``."""
        return post.cancelled or self.halt.is_set()

    def close(self) -> bool:
        """Deliver nothing more, halt every thread; False when already closed."""
        with self._deliver_lock:
            already = self.closed
            self.closed = True
            self.halt.set()
        return not already
