"""A sans-IO parser of the frames a WebSocket server sends to a client (RFC 6455).

Feed it the bytes read from the socket; it returns the complete events they
hold, in order:

- ``(OP_TEXT, payload)`` / ``(OP_BINARY, payload)``: one whole data message,
  reassembled from its continuation frames;
- ``(OP_PING, payload)``, ``(OP_PONG, payload)``, ``(OP_CLOSE, payload)``:
  control frames (they may arrive between the fragments of a message);
- :class:`Oversized`: a message larger than ``max_frame_bytes`` (each kept
  fragment counting ``FRAGMENT_OVERHEAD`` bytes more), or of more than
  ``MAX_FRAGMENTS`` fragments, reported as soon as a frame header shows it;
  nothing more is parsed (the connection is to be failed with status 1009:
  a message that never ends would otherwise hold back every later one);
- :class:`ProtocolError`: the stream breaks the protocol; nothing more is parsed.

Nothing is parsed after a close frame either. No extension is negotiated by
this client, so any RSV bit is an error; server frames must not be masked.

It is on the reader's hot path: the common frame (unfragmented, unmasked,
whole in the buffer) costs a few byte reads and one slice, and the unconsumed
tail is kept once per ``feed``, not copied per frame. An incomplete frame's
bytes are gathered in one bytearray (a peer trickling a byte per read costs a
byte each, not a bytes object each). ``frames`` counts the complete frames
seen: only a complete frame proves the peer alive.

Example:
    >>> p = FrameParser(max_frame_bytes=1024)
    >>> p.feed(b"\\x81\\x02hi\\x01\\x02a")
    [(1, b'hi')]
    >>> p.feed(b"b\\x80\\x01c")
    [(1, b'abc')]
    >>> p.feed(b"\\x81\\x7e\\x04\\x01")  # announces 1025 bytes
    [Oversized(size=1025, preview=b'')]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .._base import DEFAULT_MAX_FRAME_BYTES
from .._framing import RAW_PREVIEW_BYTES

OP_CONT: Final = 0x0
OP_TEXT: Final = 0x1
OP_BINARY: Final = 0x2
OP_CLOSE: Final = 0x8
OP_PING: Final = 0x9
OP_PONG: Final = 0xA
_CONTROL_OPCODES: Final = frozenset((OP_CLOSE, OP_PING, OP_PONG))
#: Largest control frame payload (RFC 6455 section 5.5).
MAX_CONTROL_PAYLOAD: Final = 125
#: What a kept fragment costs besides its payload (a bytes object and a list slot), counted
#: against the message's size limit: tiny or empty fragments cannot grow memory past the wire.
FRAGMENT_OVERHEAD: Final = 64
#: Most fragments one message may have; more and it is handled as oversized.
MAX_FRAGMENTS: Final = 4096
#: Close statuses of a connection the client fails (RFC 6455 section 7.4.1), and the reason
#: its close frame gives for each.
STATUS_PROTOCOL_ERROR: Final = 1002
STATUS_MESSAGE_TOO_BIG: Final = 1009
CLOSE_REASONS: Final = {STATUS_PROTOCOL_ERROR: b"protocol error", STATUS_MESSAGE_TOO_BIG: b"message too big"}


def close_frame_text(payload: bytes) -> str:
    """A close frame's status and reason, in words.

    Example:
        >>> close_frame_text(b"\\x03\\xf1message too big")
        "code 1009, reason 'message too big'"
    """
    if len(payload) < 2:
        return "no status code"
    code = int.from_bytes(payload[:2], "big")
    reason = payload[2:].decode("utf-8", "replace")
    return f"code {code}" + (f", reason {reason!r}" if reason else "")


@dataclass(frozen=True, slots=True)
class Oversized:
    """A data message over ``max_frame_bytes``: its size announced so far (the frames before
    and the one whose header passed the limit) and the first bytes received."""

    size: int
    preview: bytes


@dataclass(frozen=True, slots=True)
class ProtocolError:
    """The server broke the protocol; the connection must be dropped."""

    reason: str


#: What ``feed`` returns: plain ``(opcode, payload)`` tuples for frames and
#: messages, or one of the two classes above (not tuples: ``type(e) is tuple`` tells them apart).
WsEvent = tuple[int, bytes] | Oversized | ProtocolError


class FrameParser:
    """Turns the bytes of a server-to-client WebSocket stream into events (see the module)."""

    __slots__ = (
        "_done",
        "_frag",
        "_frag_count",
        "_frag_len",
        "_frag_op",
        "_max",
        "_need",
        "_parts",
        "frames",
    )

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._max = max_frame_bytes
        #: Unparsed bytes (the start of an incomplete frame), and how many are needed.
        self._parts = bytearray()
        self._need = 0
        #: The fragmented message being received: its opcode (0: none) and pieces.
        self._frag_op = 0
        self._frag: list[bytes] = []
        self._frag_len = 0  # payload plus FRAGMENT_OVERHEAD per fragment
        self._frag_count = 0
        #: A close frame, an oversized message or a protocol error ended the stream.
        self._done = False
        #: Complete frames parsed so far (control frames, fragments and skipped ones too).
        self.frames = 0

    @property
    def done(self) -> bool:
        """A close frame, an oversized message or a protocol error was returned: nothing more will be."""
        return self._done

    @property
    def held(self) -> int:
        """Bytes held between feeds: an incomplete frame and a message's fragments (with
        their ``FRAGMENT_OVERHEAD``)."""
        return len(self._parts) + self._frag_len

    def feed(self, data: bytes) -> list[WsEvent]:
        """Consume bytes read from the socket; return the events they complete, in order."""
        events: list[WsEvent] = []
        if self._done or not data:
            return events
        if self._parts:
            self._parts += data
            if len(self._parts) < self._need:
                return events  # still not enough for the frame waited for
            data = bytes(self._parts)
            self._parts = bytearray()
        self._parse(data, events)
        return events

    def _parse(self, buf: bytes, events: list[WsEvent]) -> None:
        pos = 0
        n = len(buf)
        max_bytes = self._max
        append = events.append
        in_message = self._frag_op != 0
        need = 0
        frames = self.frames
        while True:
            avail = n - pos
            if avail < 2:
                need = 2
                break
            b0 = buf[pos]
            b1 = buf[pos + 1]
            length = b1 & 0x7F
            if length < 126:
                hdr = 2
            elif length == 126:
                if avail < 4:
                    need = 4
                    break
                length = (buf[pos + 2] << 8) | buf[pos + 3]
                hdr = 4
            else:
                if avail < 10:
                    need = 10
                    break
                length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                hdr = 10
            # The common frame: a whole unfragmented text/binary message, unmasked, not too big.
            if 0x81 <= b0 <= 0x82 and b1 < 0x80 and not in_message and length <= max_bytes:
                end = pos + hdr + length
                if end > n:
                    need = hdr + length
                    break
                append((b0 & 0x0F, buf[pos + hdr : end]))
                pos = end
                frames += 1
                continue
            new_pos = self._frame(buf, pos, hdr, length, events)
            if new_pos > pos:
                frames += 1  # whole (a failed frame ends the stream, returning 0)
            if self._done or new_pos == n:
                pos = n
                break
            if new_pos == pos:  # incomplete: _frame set _need
                need = self._need
                break
            pos = new_pos
            in_message = self._frag_op != 0
        self.frames = frames
        if pos < n:
            # Once per feed: keep the tail.
            self._parts = bytearray(memoryview(buf)[pos:])
            self._need = need

    def _frame(self, buf: bytes, pos: int, hdr: int, length: int, events: list[WsEvent]) -> int:
        """Any frame but the common one; returns the new position (``pos`` if incomplete)."""
        b0 = buf[pos]
        opcode = b0 & 0x0F
        fin = bool(b0 & 0x80)
        error = self._check(b0, buf[pos + 1], opcode, fin, length)
        if error:
            return self._fail(error, events)
        start = pos + hdr
        end = start + length
        if opcode in _CONTROL_OPCODES:
            if end > len(buf):
                self._need = hdr + length
                return pos
            events.append((opcode, buf[start:end]))
            if opcode == OP_CLOSE:
                self._done = True
            return end
        if self._frag_len + length > self._max or self._frag_count >= MAX_FRAGMENTS:
            return self._oversized(buf[start : min(end, start + RAW_PREVIEW_BYTES)], length, events)
        if end > len(buf):
            self._need = hdr + length
            return pos
        self._data_frame(opcode, fin, buf[start:end], events)
        return end

    def _check(self, b0: int, b1: int, opcode: int, fin: bool, length: int) -> str:
        """Why this frame header breaks the protocol, or ``""``."""
        if b1 & 0x80:
            return "masked frame from the server"
        if b0 & 0x70:
            return "reserved bits set without a negotiated extension"
        if length >> 63:
            return "64-bit payload length with its most significant bit set"
        if opcode in _CONTROL_OPCODES:
            if not fin:
                return "fragmented control frame"
            if length > MAX_CONTROL_PAYLOAD:
                return f"control frame with a {length}-byte payload (at most {MAX_CONTROL_PAYLOAD})"
            return ""
        if opcode == OP_CONT:
            return "" if self._frag_op else "continuation frame without a message to continue"
        if opcode in (OP_TEXT, OP_BINARY):
            return "new data frame inside a fragmented message" if self._frag_op else ""
        return f"unknown opcode {opcode:#x}"

    def _fail(self, reason: str, events: list[WsEvent]) -> int:
        events.append(ProtocolError(reason))
        self._done = True
        self._frag = []
        return 0

    def _data_frame(self, opcode: int, fin: bool, payload: bytes, events: list[WsEvent]) -> None:
        """A whole text/binary/continuation frame within the size limit."""
        if not self._frag_op:
            if fin:
                events.append((opcode, payload))
                return
            self._frag_op = opcode
        self._frag.append(payload)
        self._frag_len += len(payload) + FRAGMENT_OVERHEAD
        self._frag_count += 1
        if fin:
            events.append((self._frag_op, b"".join(self._frag)))
            self._end_message()

    def _oversized(self, payload_start: bytes, length: int, events: list[WsEvent]) -> int:
        """The message passed the limit with a frame of ``length`` bytes: reported, and the end."""
        size = sum(map(len, self._frag)) + length
        preview = (b"".join(self._frag) + payload_start)[:RAW_PREVIEW_BYTES]
        events.append(Oversized(size, preview))
        self._done = True
        self._end_message()  # what was kept of it is dropped
        return 0

    def _end_message(self) -> None:
        self._frag_op = 0
        self._frag = []
        self._frag_len = 0
        self._frag_count = 0
