"""Helpers shared by the stream transports (stdio and WebSocket).

Nothing here knows about processes or sockets:

- :func:`encode_message` turns one JSON-RPC message into wire bytes;
- :class:`LineSplitter` turns a byte stream into decoded frames, line by line;
- :func:`decode_message` decodes one WebSocket message (:func:`decode_text`, one
  already decoded from UTF-8, e.g. an SSE event's data);
- :class:`LossLatch` delivers to a sink and reports a loss at most once;
- :class:`QueueWriter` is the writer thread: callers enqueue, it writes;
- :func:`join_thread` joins with a timeout and says so when that fails.

Decoding is on the hot path of every transport, so it avoids per-line Python
overhead: a block of complete lines is UTF-8-decoded in one call and each line
goes straight to the C JSON scanner; only lines the scanner does not accept
whole take the slow path (``json.loads``, for whitespace and a precise error).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Final, Generic, Protocol, TypeVar

from ._base import DEFAULT_MAX_FRAME_BYTES, Frame, FrameSink, InvalidFrame

logger = logging.getLogger("exmcp_actors.transport")

#: How many bytes of a bad frame an InvalidFrame keeps for the log.
RAW_PREVIEW_BYTES: Final = 200

# The C scanner behind json.loads, without its per-call Python wrapper:
# scan_once(s, 0) -> (value, end). It does not skip whitespace, so anything
# it does not consume whole is re-parsed by json.loads.
_scan_once: Final[Callable[[str, int], tuple[Any, int]]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]

# json.loads raises ValueError (JSONDecodeError) on bad input, and
# RecursionError on absurdly nested input: neither may kill a reader thread.
_DECODE_ERRORS: Final = (ValueError, RecursionError)


def invalid_frame(error: str, raw: bytes | str = b"") -> InvalidFrame:
    """An :class:`InvalidFrame` carrying at most :data:`RAW_PREVIEW_BYTES` of ``raw``."""
    if isinstance(raw, str):
        raw = raw[:RAW_PREVIEW_BYTES].encode("utf-8", "replace")
    return InvalidFrame(error, bytes(raw[:RAW_PREVIEW_BYTES]))


#: One encoder for every message sent: ``json.dumps`` with options builds a new one per call.
_encode: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def encode_message(message: dict[str, Any]) -> bytes:
    """Serialise one JSON-RPC message compactly as UTF-8 (no trailing newline).

    A lone surrogate (JSON's ``"\\ud800"`` decodes to one) has no UTF-8: such a message
    is sent with its non-ASCII characters escaped, as JSON allows. So an answer that
    echoes a server's id or method as it came (a ping's, a refusal's) can always be sent.

    Raises:
        TypeError: the message holds something JSON cannot represent.
        ValueError: the message holds a circular reference.
    """
    text = _encode(message)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(message, separators=(",", ":")).encode("ascii")


def _decode_text_slow(text: str, out: list[Frame], *, skip_blank: bool) -> None:
    """Full ``json.loads`` of one frame; appends the value or an InvalidFrame."""
    if skip_blank and (not text or text.isspace()):
        return
    try:
        out.append(json.loads(text))
    except _DECODE_ERRORS as exc:
        out.append(invalid_frame(f"invalid JSON: {exc}", text))


def _decode_line_bytes(line: bytes, out: list[Frame]) -> None:
    """Decode one line given as bytes (the slow path for a block with bad UTF-8)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        if line.strip():
            out.append(invalid_frame(f"invalid UTF-8: {exc}", line))
        return
    _decode_text_slow(text, out, skip_blank=True)


def decode_lines(block: bytes, out: list[Frame], max_frame_bytes: int) -> None:
    """Decode newline-separated complete lines, appending one frame per non-blank line.

    Lines longer than ``max_frame_bytes`` become an oversized InvalidFrame.
    """
    if len(block) > max_frame_bytes:
        # Some line may be too long: check them one by one (rare path).
        for line in block.split(b"\n"):
            if len(line) > max_frame_bytes:
                out.append(invalid_frame(oversized_error(len(line), max_frame_bytes), line))
            else:
                _decode_line_bytes(line, out)
        return
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError:
        for line in block.split(b"\n"):
            _decode_line_bytes(line, out)
        return
    append = out.append
    scan = _scan_once
    for line_text in text.split("\n"):
        if not line_text:
            continue
        try:
            value, end = scan(line_text, 0)
        except (StopIteration, *_DECODE_ERRORS):
            pass
        else:
            if end == len(line_text):
                append(value)
                continue
        _decode_text_slow(line_text, out, skip_blank=True)


def decode_message(data: bytes | str, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> Frame:
    """Decode one whole message (a WebSocket frame) into a JSON value or an InvalidFrame."""
    if isinstance(data, str):  # only if a caller already decoded it
        data = data.encode("utf-8", "surrogatepass")
    if len(data) > max_frame_bytes:
        return invalid_frame(oversized_error(len(data), max_frame_bytes), data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return invalid_frame(f"invalid UTF-8: {exc}", data)
    return decode_text(text)


def decode_text(text: str) -> Frame:
    """Decode one whole message already decoded from UTF-8 (no size cap applied here)."""
    try:
        value, end = _scan_once(text, 0)
    except (StopIteration, *_DECODE_ERRORS):
        pass
    else:
        if end == len(text):
            return value
    out: list[Frame] = []
    _decode_text_slow(text, out, skip_blank=False)
    return out[0]


def oversized_error(size: int | None, limit: int) -> str:
    """The InvalidFrame error for a frame over the limit (``size`` None: a line still growing)."""
    if size is None:
        return f"oversized frame: line longer than max_frame_bytes={limit}, rest of it skipped"
    return f"oversized frame: {size} bytes, more than max_frame_bytes={limit}"


#: Pieces of a partial line kept as they came before they are folded into one buffer.
_MAX_PIECES: Final = 16


class LineSplitter:
    """Turns chunks of a newline-delimited JSON stream into frames.

    A partial line is kept as a list of pieces (no quadratic re-copying of a
    long line). A line that grows past ``max_frame_bytes`` yields a single
    oversized InvalidFrame as soon as the limit is crossed, and the rest of
    that line is skipped as it arrives, never held in memory.

    Example:
        >>> s = LineSplitter(max_frame_bytes=1024)
        >>> s.feed(b'{"a":1}\\n{"b"')
        [{'a': 1}]
        >>> s.feed(b':2}\\n')
        [{'b': 2}]
    """

    __slots__ = ("_discarding", "_max", "_parts", "_parts_len")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._max = max_frame_bytes
        self._parts: list[bytes | bytearray] = []
        self._parts_len = 0
        self._discarding = False

    def feed(self, chunk: bytes) -> list[Frame]:
        """Consume one chunk; return the frames completed by it, in order."""
        out: list[Frame] = []
        start = 0
        if self._discarding:
            newline = chunk.find(b"\n")
            if newline < 0:
                return out
            self._discarding = False
            start = newline + 1
        last_newline = chunk.rfind(b"\n")
        if last_newline < start:
            self._keep_partial(chunk[start:] if start else chunk, out)
            return out
        if self._parts:
            # Complete the pending partial line with this chunk's first line.
            first_newline = chunk.find(b"\n", start)
            self._parts.append(chunk[start:first_newline])
            line = b"".join(self._parts)
            self._parts = []
            self._parts_len = 0
            decode_lines(line, out, self._max)
            start = first_newline + 1
        if start < last_newline:
            decode_lines(chunk[start:last_newline], out, self._max)
        if last_newline + 1 < len(chunk):
            self._keep_partial(chunk[last_newline + 1 :], out)
        return out

    def finish(self) -> list[Frame]:
        """At end of stream: decode an unterminated last line, if any (leniently)."""
        out: list[Frame] = []
        if self._parts:
            line = b"".join(self._parts)
            self._parts = []
            self._parts_len = 0
            decode_lines(line, out, self._max)
        self._discarding = False
        return out

    def _keep_partial(self, piece: bytes, out: list[Frame]) -> None:
        if not piece:
            return
        parts = self._parts
        parts.append(piece)
        self._parts_len += len(piece)
        if len(parts) > _MAX_PIECES:
            # A trickle (a byte per read): fold the pieces into one bytearray, so a
            # byte held costs a byte, not a bytes object; each byte is copied once.
            head = parts[0]
            if isinstance(head, bytearray):
                head += b"".join(parts[1:])
                del parts[1:]
            else:
                parts[:] = [bytearray(b"".join(parts))]
        if self._parts_len > self._max:
            preview = b"".join(self._parts)[:RAW_PREVIEW_BYTES]
            out.append(invalid_frame(oversized_error(None, self._max), preview))
            self._parts = []
            self._parts_len = 0
            self._discarding = True


class _Closable(Protocol):
    def close(self) -> None: ...


ConnT = TypeVar("ConnT", bound=_Closable)


class ConnectionSlot(Generic[ConnT]):
    """The one current connection of a transport: ``open`` ends the old one before the new
    one starts, and the last ``open`` wins a race; ``close`` is idempotent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: The open connection, or None. Read without the lock: a reference read is atomic.
        self.current: ConnT | None = None

    def close(self) -> None:
        """End the current connection, if any, without reporting a loss."""
        with self._lock:
            old, self.current = self.current, None
        if old is not None:
            old.close()

    def install(self, conn: ConnT) -> None:
        """Make a started connection current; one a concurrent open() left behind is closed."""
        with self._lock:
            old, self.current = self.current, conn
        if old is not None:
            old.close()


class LossLatch:
    """One connection's link to its sink: frames while it is up, then one loss at most.

    ``close()`` (we ended it) and ``report_lost()`` (it ended by itself) both
    end delivery for good. Sink calls happen under a re-entrant lock, so a
    loss is never reported once ``close()`` has returned, nor after frames
    that follow it; a sink may call back into the transport from its callback.
    """

    __slots__ = ("_lock", "_sink", "closed", "lost_reason", "name")

    def __init__(self, sink: FrameSink, name: str) -> None:
        self._sink = sink
        #: Who we are, for the log.
        self.name = name
        self._lock = threading.RLock()
        self.closed = False
        self.lost_reason: str | None = None

    @property
    def active(self) -> bool:
        """Neither closed by us nor lost."""
        return not self.closed and self.lost_reason is None

    def close(self) -> bool:
        """Mark the connection closed by us; True if it was still active."""
        with self._lock:
            was_active = self.active
            self.closed = True
            return was_active

    def deliver(self, frames: list[Frame]) -> None:
        """Hand a batch to the sink, unless the connection is closed or lost."""
        with self._lock:
            if not self.active:
                return
            try:
                self._sink.frames_received(frames)
            except Exception:
                logger.exception(
                    "%s: the sink failed on a batch of %d frames",
                    self.name,
                    len(frames),
                )

    def reading(self) -> None:
        """Tell the sink the peer reads its input, unless the connection is closed or lost."""
        with self._lock:
            if not self.active:
                return
            try:
                self._sink.peer_reading()
            except Exception:
                logger.exception("%s: the sink failed on peer_reading", self.name)

    def report_lost(self, reason: str) -> bool:
        """Report the loss to the sink if it is the first end of this connection."""
        with self._lock:
            if not self.active:
                return False
            self.lost_reason = reason
            logger.info("connection lost: %s", reason)
            try:
                self._sink.transport_lost(reason)
            except Exception:
                logger.exception("%s: the sink failed on transport_lost", self.name)
            return True


_STOP: Final = object()
_WAKE: Final = object()


class QueueWriter:
    """A writer thread fed by a queue, so that callers never block on I/O.

    It drains whatever is queued (up to ``max_batch_bytes``) and hands it to
    ``write_batch`` in one call, which lets stdio write many lines with one
    system call. ``wake()`` calls ``write_batch([])`` so the owner can slip in
    work of its own (the WebSocket heartbeat ping). After ``stop()`` the thread
    writes what was queued before it, runs ``on_exit`` and ends; on a write
    error it calls ``on_error`` and then ``on_exit``.

    With ``write_now(data) -> bytes written``, a write that cannot block, ``put``
    writes on the caller's thread when nothing is queued or being written: a
    request at a low rate then wakes no writer thread. The order of
    the bytes is the order of the ``put`` calls either way.
    """

    def __init__(
        self,
        name: str,
        write_batch: Callable[[list[bytes]], None],
        *,
        on_error: Callable[[BaseException], None],
        on_exit: Callable[[], None] | None = None,
        max_batch_bytes: int = 1 << 20,
        write_now: Callable[[bytes], int] | None = None,
    ) -> None:
        self._write_batch = write_batch
        self._on_error = on_error
        self._on_exit = on_exit
        self._max_batch_bytes = max_batch_bytes
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._write_now = write_now
        #: Guards the two below; only taken when ``write_now`` is given.
        self._lock = threading.Lock()
        #: Byte strings queued and not yet written: the caller may write only while it is 0.
        self._in_flight = 0
        #: Set by ``stop()`` and on a failure: no more writes from callers (the file closes).
        self._ended = False
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self.thread.start()

    def put(self, data: bytes) -> None:
        """Write bytes now if that cannot block and nothing waits before them; else queue them.
        Never blocks."""
        if self._write_now is None:
            self._queue.put(data)
            return
        with self._lock:
            if not self._in_flight and not self._ended:
                written = self._write_now(data)
                if written == len(data):
                    return
                data = data[written:]
            self._in_flight += 1
            self._queue.put(data)

    def wake(self) -> None:
        """Make the thread call ``write_batch`` soon, even with nothing queued."""
        self._queue.put(_WAKE)

    def stop(self) -> None:
        """Ask the thread to finish what is queued so far and end."""
        with self._lock:
            self._ended = True
        self._queue.put(_STOP)

    def _run(self) -> None:
        get = self._queue.get
        get_nowait = self._queue.get_nowait
        try:
            while True:
                item = get()
                batch: list[bytes] = []
                size = 0
                stopping = False
                while True:
                    if item is _STOP:
                        stopping = True
                        break
                    if isinstance(item, bytes):
                        batch.append(item)
                        size += len(item)
                        if size >= self._max_batch_bytes:
                            break
                    try:
                        item = get_nowait()
                    except queue.Empty:
                        break
                self._write_batch(batch)
                if batch and self._write_now is not None:
                    with self._lock:
                        self._in_flight -= len(batch)
                if stopping:
                    return
        except BaseException as exc:  # any failure ends the writer
            with self._lock:
                self._ended = True
            self._on_error(exc)
        finally:
            if self._on_exit is not None:
                try:
                    self._on_exit()
                except Exception:
                    logger.exception("%s: exit hook failed", self.thread.name)


def join_thread(thread: threading.Thread | None, timeout: float, owner: str | None = None) -> bool:
    """Join ``thread`` within ``timeout``; True if it ended. Never joins the caller itself.

    With an ``owner``, a thread still alive afterwards is logged as a warning;
    without one, the wait was only an optimisation and a timeout is silent.
    """
    if thread is None or thread.ident is None or thread is threading.current_thread():
        return True
    thread.join(max(0.0, timeout))
    if thread.is_alive():
        if owner is None:
            return False
        logger.warning("%s: thread %s did not end within %.1fs", owner, thread.name, timeout)
        return False
    return True
