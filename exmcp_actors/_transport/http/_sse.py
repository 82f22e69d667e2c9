"""A sans-IO parser for ``text/event-stream`` (Server-Sent Events).

Why not ``httpx-sse``: it is not a declared dependency, it yields one event
per ``next()`` (we want every event a network read completed, as one batch,
so a burst costs one hand-off to the client actor), and it decodes each line
to ``str`` before we can cap its size. This parser works on raw bytes, splits
on CRLF, LF or CR (a CRLF split across two reads included), caps an event's
size before anything is decoded, and keeps the stream's ``id:`` and
``retry:`` state for resumption. It follows the WHATWG "event stream
interpretation" rules.

Reads are handled whole where possible: a read whose CRs all belong to CRLFs
has its complete events split out on blank lines at once (the line left open by
the previous read finished first), and only the general path looks for
CR-only line ends line by line. :meth:`SSEParser.feed_messages` also decodes
those events as one text and hands the data of each plain message event over
as is, with no :class:`SSEEvent` built: the event shape of a flood, at a
fraction of the per-event cost.

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
from typing import Any

__all__ = ["SSEEvent", "SSEParser"]

_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"
# A field name and the separator add a few bytes on top of the value.
_LINE_SLACK = 64
#: Digits of a ``retry:`` value read as a number; a longer run (which Python would refuse to
#: convert past 4,300 digits) is this many nines of milliseconds, a wait beyond any cap.
_RETRY_DIGITS = 12


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
            they arrive, so memory stays bounded (held: at most about twice
            the cap, a partial line and an event's data). Such an event, or a
            line longer than any event, also sets :attr:`violation`.
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
        #: The event's data lines, each followed by LF (one buffer: no object per line).
        self._data = bytearray()
        self._oversize = False
        #: Why the stream broke the size caps (a line or an event too long), once it did:
        #: the reader then drops the stream (and reconnects), see ``EventPump``.
        self.violation: str | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk`` and return every event it completed, in stream order."""
        events: list[SSEEvent] = []
        self._feed(chunk, events, text=False)
        return events

    def feed_messages(self, chunk: bytes) -> list[str | SSEEvent]:
        """Like :meth:`feed`, but a plain message event may come back as its data, as text.

        An item is a ``str`` for an event made of one ``data: `` line, optionally
        after ``event: message`` (no other field, no comment), whose data is
        non-empty, valid UTF-8 and within the cap: that is the data, decoded. Any
        other event is an :class:`SSEEvent` (its data undecoded bytes, which may
        not be valid UTF-8). ``last_event_id`` and ``retry_ms`` are kept exactly
        as with :meth:`feed`; a ``str`` item's id is ``last_event_id`` as it was
        when the item was dispatched (no ``id:`` line came with it).
        """
        items: list[str | SSEEvent] = []
        self._feed(chunk, items, text=True)
        return items

    def _feed(self, chunk: bytes, out: list[Any], *, text: bool) -> None:
        if not chunk:
            return
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
        if b"\r" not in chunk:
            self._feed_lf(chunk, pos, out, text)
            return
        rest = chunk[pos:] if pos else chunk
        if rest.count(b"\r") == rest.count(b"\r\n"):
            # Every CR is part of a CRLF (sse-starlette's line ends): the same lines, LF-ended.
            self._feed_lf(rest.replace(b"\r\n", b"\n"), 0, out, text)
        else:
            self._feed_any_eol(chunk, pos, out)

    def _feed_any_eol(self, chunk: bytes, pos: int, out: list[Any]) -> None:
        """The general case: lines may end in CRLF, LF or CR, one regex match per line."""
        end = len(chunk)
        while pos < end:
            match = _EOL.search(chunk, pos)
            if match is None:
                self._keep_partial(chunk, pos, end)
                break
            self._end_line(chunk, pos, match.start(), out)
            pos = match.end()
            if pos == end and match.group() == b"\r":
                self._skip_lf = True

    def _end_line(self, chunk: bytes, pos: int, eol: int, out: list[Any]) -> None:
        """The line from ``pos`` to ``eol`` ends there (after any partial line kept before)."""
        if self._discarding_line:
            self._discarding_line = False
            self._oversize = True
        elif self._partial:
            self._partial += chunk[pos:eol]
            line = bytes(self._partial)
            self._partial.clear()
            self._line(line, out)
        else:
            self._line(chunk[pos:eol], out)

    def _feed_lf(self, chunk: bytes, pos: int, out: list[Any], text: bool) -> None:
        """The common case, LF line ends only.

        The line and the event a previous read left open are finished first, line
        by line; then every whole event up to the chunk's last blank line is split
        out at once (see :meth:`_blocks`), and the lines after it go through
        :meth:`_line`.
        """
        if self._partial or self._discarding_line:
            newline = chunk.find(b"\n", pos)
            if newline < 0:
                self._keep_partial(chunk, pos, len(chunk))
                return
            self._end_line(chunk, pos, newline, out)
            pos = newline + 1
        while self._data or self._event_type or self._oversize:
            newline = chunk.find(b"\n", pos)
            if newline < 0:
                break  # the rest is a partial line, kept below
            self._line(chunk[pos:newline], out)
            pos = newline + 1
        cut = chunk.rfind(b"\n\n", pos)
        if cut >= 0:
            self._blocks(chunk[pos:cut], out, text)
            pos = cut + 2
        lines = chunk[pos:].split(b"\n")
        tail = lines.pop()  # after the last LF: a partial line, or b""
        for line in lines:
            self._line(line, out)
        if tail:
            self._keep_partial(tail, 0, len(tail))

    def _blocks(self, region: bytes, out: list[Any], text: bool) -> None:
        """Whole events: ``region`` starts where an event may start, a blank line follows it.

        Split on blank lines, each block ends one event. :meth:`feed_messages`
        decodes the region at once and turns a block that is a single ``data: ``
        line into its data without the general field parsing (see
        :meth:`_text_blocks`); everything else takes :meth:`_line`, line by line.
        """
        if text and len(region) <= self._max:  # then no event in it can exceed the cap
            try:
                decoded = region.decode("utf-8")
            except UnicodeDecodeError:
                pass  # the general path reports the bad event as such
            else:
                self._text_blocks(decoded.split("\n\n"), out)
                return
        for block in region.split(b"\n\n"):
            self._slow_block(block, out)

    def _text_blocks(self, blocks: list[str], out: list[Any]) -> None:
        """:meth:`_blocks` for plain events, as text. Every block ends with a
        dispatch, so afterwards ``last_event_id`` is the id buffer."""
        append = out.append
        for block in blocks:
            if block[:6] == "data: " and "\n" not in block and len(block) > 6:
                append(block[6:])
            elif block[:21] == "event: message\ndata: " and block.find("\n", 21) < 0 and len(block) > 21:
                append(block[21:])  # the type every event has by default, spelled out (the MCP SDK)
            else:
                self._slow_block(block.encode("utf-8"), out)
        self.last_event_id = self._id_buffer

    def _slow_block(self, block: bytes, out: list[Any]) -> None:
        for line in block.split(b"\n"):
            self._line(line, out)
        self._line(b"", out)  # the blank line that ended the block

    def _keep_partial(self, chunk: bytes, pos: int, end: int) -> None:
        if self._discarding_line:
            return
        if len(self._partial) + (end - pos) > self._max + _LINE_SLACK:
            # One line longer than any acceptable event: drop it as it streams.
            self._partial.clear()
            self._discarding_line = True
            self.violation = f"a line longer than {self._max + _LINE_SLACK} bytes"
            return
        self._partial += chunk[pos:end]

    def _line(self, line: bytes, events: list[Any]) -> None:
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
            if len(self._data) + len(value) > self._max:
                self._oversize = True
                self._data.clear()
                self.violation = f"an event larger than {self._max} bytes"
                return
            self._data += value
            self._data += b"\n"
        elif field == b"event":
            self._event_type = value.decode("utf-8", "replace")
        elif field == b"id":
            if b"\x00" not in value:
                self._id_buffer = value.decode("utf-8", "replace")
        elif field == b"retry" and value.isdigit():
            # Any run of ASCII digits is a reconnection time, however long (HTML, SSE).
            digits = value.lstrip(b"0") or b"0"
            self.retry_ms = int(digits) if len(digits) <= _RETRY_DIGITS else 10**_RETRY_DIGITS - 1

    def _dispatch(self, events: list[Any]) -> None:
        self.last_event_id = self._id_buffer
        event_type = self._event_type or "message"
        if self._oversize:
            events.append(SSEEvent(event_type, b"", self.last_event_id, oversize=True))
        elif self._data:
            events.append(SSEEvent(event_type, bytes(memoryview(self._data)[:-1]), self.last_event_id))
        self._event_type = ""
        self._data.clear()
        self._oversize = False
