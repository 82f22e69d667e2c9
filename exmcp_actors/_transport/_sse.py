"""A sans-IO parser for ``text/event-stream`` (Server-Sent Events).

Why not ``httpx-sse``: it is not a declared dependency, it yields one event
per ``next()`` (we want every event a network read completed, as one batch,
so a burst costs one hand-off to the client actor), and it decodes each line
to ``str`` before we can cap its size. This parser works on raw bytes, splits
on CRLF, LF or CR (a CRLF split across two reads included), caps an event's
size before anything is decoded, and keeps the stream's ``id:`` and
``retry:`` state for resumption. It follows the WHATWG "event stream
interpretation" rules.

Example:
    >>> p = SSEParser(max_event_bytes=1024)
    >>> [e.data for e in p.feed(b"id: 7\\r\\nretry: 50\\r\\ndata: {}\\r\\n\\r\\ndata: [")]
    [b'{}']
    >>> p.last_event_id, p.retry_ms
    ('7', 50)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SSEEvent", "SSEParser"]

_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"
# A field name and the separator add a few bytes on top of the value.
_LINE_SLACK = 64


@dataclass(slots=True)  # not frozen: one is built per event, and frozen ones cost twice as much
class SSEEvent:
    """One dispatched event.

    Attributes:
        event: the event type; ``"message"`` when the stream gave none.
        data: the data lines joined with LF, still UTF-8 bytes.
        id: the stream's last event id when this event was dispatched.
        oversize: the event exceeded the size cap; ``data`` is then empty.
    """

    event: str
    data: bytes
    id: str | None
    oversize: bool = False


class SSEParser:
    """Incremental parser: ``feed`` bytes as they arrive, get complete events back.

    Args:
        max_event_bytes: the largest event ``data`` accepted. A larger event is
            reported once with ``oversize=True`` and its bytes are dropped as
            they arrive, so memory stays bounded.
        last_event_id: the id to start from (a resumed stream keeps counting).
    """

    def __init__(self, max_event_bytes: int, *, last_event_id: str | None = None) -> None:
        self._max = max_event_bytes
        #: The stream's last event id (the value a reconnect sends as ``Last-Event-ID``).
        self.last_event_id: str | None = last_event_id
        #: The reconnection delay the server asked for, in milliseconds.
        self.retry_ms: int | None = None
        self._partial = bytearray()
        self._discarding_line = False
        self._skip_lf = False
        self._started = False
        self._id_buffer: str | None = last_event_id
        self._event_type = ""
        self._data: list[bytes] = []
        self._data_size = 0
        self._oversize = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk`` and return every event it completed, in stream order."""
        events: list[SSEEvent] = []
        if not chunk:
            return events
        pos = 0
        if not self._started:
            self._started = True
            if chunk.startswith(_BOM):
                pos = len(_BOM)
        if self._skip_lf:
            # The previous chunk ended in CR: a LF here completes that CRLF.
            self._skip_lf = False
            if chunk[pos : pos + 1] == b"\n":
                pos += 1
        if not self._partial and not self._discarding_line and b"\r" not in chunk:
            self._feed_lf_lines(chunk, pos, events)
            return events
        end = len(chunk)
        while pos < end:
            match = _EOL.search(chunk, pos)
            if match is None:
                self._keep_partial(chunk, pos, end)
                break
            if self._discarding_line:
                self._discarding_line = False
                self._oversize = True
            else:
                if self._partial:
                    self._partial += chunk[pos : match.start()]
                    line = bytes(self._partial)
                    self._partial.clear()
                else:
                    line = chunk[pos : match.start()]
                self._line(line, events)
            pos = match.end()
            if pos == end and match.group() == b"\r":
                self._skip_lf = True
        return events

    def _feed_lf_lines(self, chunk: bytes, pos: int, events: list[SSEEvent]) -> None:
        """The common case, LF line ends and no line left over from the last read.

        Whole events (blocks ended by a blank line) are split out at once, and a block
        that is a single ``data:`` line within the cap becomes an event without the
        general field parsing. Everything else goes through :meth:`_line`.
        """
        blocks = (chunk[pos:] if pos else chunk).split(b"\n\n")
        rest = blocks.pop()  # after the last blank line: lines of an event still open
        limit = self._max
        line_of = self._line
        for block in blocks:
            if (
                block[:6] == b"data: "
                and b"\n" not in block
                and len(block) - 6 <= limit
                and not self._data
                and not self._event_type
                and not self._oversize
            ):
                self.last_event_id = self._id_buffer
                events.append(SSEEvent("message", block[6:], self.last_event_id))
                continue
            for line in block.split(b"\n"):
                line_of(line, events)
            line_of(b"", events)  # the blank line that ended the block
        lines = rest.split(b"\n")
        tail = lines.pop()  # after the last LF: a partial line, or b""
        for line in lines:
            line_of(line, events)
        if tail:
            self._keep_partial(tail, 0, len(tail))

    def _keep_partial(self, chunk: bytes, pos: int, end: int) -> None:
        if self._discarding_line:
            return
        if len(self._partial) + (end - pos) > self._max + _LINE_SLACK:
            # One line longer than any acceptable event: drop it as it streams.
            self._partial.clear()
            self._discarding_line = True
            return
        self._partial += chunk[pos:end]

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line[0] == 0x3A:  # ":" starts a comment (keep-alive pings)
            return
        colon = line.find(b":")
        if colon < 0:
            field, value = line, b""
        else:
            field, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if field == b"data":
            if self._oversize:
                return
            self._data_size += len(value) + 1
            if self._data_size > self._max + 1:
                self._oversize = True
                self._data.clear()
                return
            self._data.append(value)
        elif field == b"event":
            self._event_type = value.decode("utf-8", "replace")
        elif field == b"id":
            if b"\x00" not in value:
                self._id_buffer = value.decode("utf-8", "replace")
        elif field == b"retry" and value.isdigit():
            self.retry_ms = int(value)

    def _dispatch(self, events: list[SSEEvent]) -> None:
        self.last_event_id = self._id_buffer
        event_type = self._event_type or "message"
        if self._oversize:
            events.append(SSEEvent(event_type, b"", self.last_event_id, oversize=True))
        elif self._data:
            events.append(SSEEvent(event_type, b"\n".join(self._data), self.last_event_id))
        self._event_type = ""
        self._data = []
        self._data_size = 0
        self._oversize = False
