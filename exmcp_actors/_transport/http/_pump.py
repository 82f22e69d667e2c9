"""From an SSE body to frames: every event one network read completed goes to
the sink as one batch, until the awaited response arrives.

Once a stream's response has arrived the worker reads the rest of the body
for up to two seconds, so the connection returns to the pool instead of
being dropped (a server should end the body right after the response).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import httpx

from ..._protocol._jsonrpc import answer_id
from ..._protocol._peer_text import peer_text
from ..._protocol._ratelog import RateLimitedLog
from .._base import Frame, InvalidFrame
from .._framing import decode_message, decode_text, invalid_frame
from ._config import IO_ERRORS, io_error_text, logger
from ._sse import SSEEvent, SSEParser

if TYPE_CHECKING:
    from ._outlet import Outlet
    from ._plumbing import TrackingBackend
    from ._requests import Post

__all__ = ["EventPump", "Pumped", "answers", "decode"]

#: After a stream's response arrived, how long to wait for the end of the body
#: (reading to the end lets the connection be reused).
_DRAIN_SECONDS: Final = 2.0
#: ``_frames``' request id when no response is awaited (None is a valid JSON-RPC id).
_NO_REQUEST: Final = object()


class Pumped(NamedTuple):
    """How an SSE body ended: whether the awaited response arrived, and how many frames the
    body delivered (a stream that delivered none made no progress: see ``_resume``)."""

    answered: bool
    frames: int


class EventPump:
    """Reads SSE bodies (POST replies and GET streams alike) into the outlet."""

    def __init__(self, max_frame_bytes: int, backend: TrackingBackend, outlet: Outlet, log: RateLimitedLog) -> None:
        self._max_frame_bytes = max_frame_bytes
        self._backend = backend
        self._outlet = outlet
        self._log = log

    def pump(self, response: httpx.Response, parser: SSEParser, post: Post | None) -> Pumped:
        """Deliver the events of an SSE body, one batch per network read.

        ``answered`` when ``post``'s response arrived (the body is then drained
        so the connection can be reused), not when the stream ended first.
        """
        chunks = response.iter_bytes()
        request_id = post.request_id if post is not None and post.has_id else _NO_REQUEST
        outlet = self._outlet
        delivered = 0
        try:
            for chunk in chunks:
                items = parser.feed_messages(chunk)
                if items:
                    frames, done = self._frames(items, request_id)
                    if frames:
                        outlet.deliver(frames, post)
                        delivered += len(frames)
                    if done:
                        self._drain(chunks)
                        return Pumped(True, delivered)
                    if post is not None and outlet.silenced(post):
                        return Pumped(False, delivered)
                if parser.violation is not None:
                    # Bounded memory is kept by skipping; the stream itself is no longer
                    # trusted: dropped, it is resumed or reopened like any broken stream.
                    self._log.warning("sse-violation", "SSE stream dropped: the server sent %s", parser.violation)
                    return Pumped(False, delivered)
        except IO_ERRORS as exc:
            if not (post is not None and outlet.silenced(post)) and not outlet.halt.is_set():
                logger.debug("SSE stream broke: %s", io_error_text(exc))
        return Pumped(False, delivered)

    def _frames(self, items: list[str | SSEEvent], request_id: Any) -> tuple[list[Frame], bool]:
        """The frames of a read's events, and whether the last one answers ``request_id``.

        Stops at that answer. ``request_id`` is :data:`_NO_REQUEST` when none is awaited.
        """
        frames: list[Frame] = []
        append = frames.append
        awaited = request_id is not _NO_REQUEST
        for item in items:
            if isinstance(item, str):
                frame = decode_text(item)  # a plain event's data, decoded from UTF-8 by the parser
                if frame.__class__ is list:
                    frame = _batch_refused(item)
            else:
                frame = self._event_frame(item)
                if frame is None:
                    continue
            append(frame)
            if awaited and answers(frame, request_id):
                return frames, True
        return frames, False

    def _event_frame(self, event: SSEEvent) -> Frame | None:
        """The frame an event from the parser's general path carries, if any."""
        if event.oversize:
            return InvalidFrame(f"SSE event larger than {self._max_frame_bytes} bytes")
        if event.event != "message":
            logger.debug("ignored SSE event of type %s", peer_text(event.event, quote=True))
            return None
        if not event.data:
            return None  # a priming event: it only carries an id
        return decode(event.data)

    def _drain(self, chunks: Iterator[bytes]) -> None:
        """Read the rest of a finished stream, briefly, so its connection is reused.

        The deadline is enforced by the socket wrapper, for this thread only:
        the connection may serve another thread as soon as it is released.
        """
        tid = threading.get_ident()
        stream = self._backend.stream_of(tid)
        if stream is not None:
            stream.deadline = (tid, time.monotonic() + _DRAIN_SECONDS)
        try:
            # Too slow or broken: httpcore drops the connection instead.
            with contextlib.suppress(*IO_ERRORS):
                for _ in chunks:
                    pass
        finally:
            if stream is not None:
                stream.deadline = None


def decode(data: bytes) -> Frame:
    """One JSON-RPC message, or an InvalidFrame (bad JSON, bad UTF-8, or a batch).

    The size cap was applied when the body or event was read, so none is applied here.
    """
    value = decode_message(data, len(data))
    if isinstance(value, list):
        return _batch_refused(data)
    return value


def _batch_refused(data: bytes | str) -> InvalidFrame:
    return invalid_frame("JSON-RPC batches are not accepted", data)


def answers(frame: Frame, request_id: Any) -> bool:
    """Whether ``frame`` is the response to ``request_id``, read as the session reads ids: a
    response whose id only looks like ours (``"7"`` or ``true`` for ``7``) is not the end of
    the stream, or the request would wait for an answer nobody reads any more."""
    if not isinstance(frame, dict) or "method" in frame or not ("result" in frame or "error" in frame):
        return False
    return bool(answer_id(frame.get("id")) == request_id)
