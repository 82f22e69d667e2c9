"""The SSE parser gives the same events however the stream is cut into reads and
whichever line ends it uses (its LF-only fast path agrees with the general path)."""

from __future__ import annotations

import random
import re

import pytest

from exmcp_actors._transport.http._sse import SSEEvent, SSEParser

STREAM = (
    b": keep-alive\n\n"
    b'id: 1\nretry: 250\ndata: {"a": 1}\n\n'
    b"event: ping\ndata: x\n\n"
    b"data: line one\ndata: line two\n\n"
    b"data:no-space\n\n"
    b"id: 7\n\n"
    b"data: " + b"y" * 300 + b"\n\n"  # over the 256-byte cap below: reported oversize, once
    b'data: {"after": true}\n\n'
    b"data: tail-without-blank-line\n"
)


def parse(stream: bytes, cuts: list[int]) -> tuple[list[SSEEvent], str | None, int | None]:
    parser = SSEParser(256)
    events: list[SSEEvent] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        events += parser.feed(stream[start:cut])
        start = cut
    return events, parser.last_event_id, parser.retry_ms


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
@pytest.mark.parametrize("seed", range(20))
def test_events_do_not_depend_on_how_the_stream_is_cut_or_its_line_ends(line_end: bytes, seed: int) -> None:
    stream = STREAM.replace(b"\n", line_end)
    whole = parse(stream, [])
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, 40)))
    assert parse(stream, cuts) == whole
    events, last_id, retry = whole
    assert [(e.event, e.data, e.id, e.oversize) for e in events] == [
        ("message", b'{"a": 1}', "1", False),
        ("ping", b"x", "1", False),
        ("message", b"line one\nline two", "1", False),
        ("message", b"no-space", "1", False),
        ("message", b"", "7", True),
        ("message", b'{"after": true}', "7", False),
    ]
    assert (last_id, retry) == ("7", 250)


# --------------------------------------------------------------------------
# feed_messages: plain events come back as their data, as text; everything else
# exactly as the general path gives it


def reference(stream: bytes, cap: int) -> tuple[list[tuple[str, bytes, bool]], str | None, int | None]:
    """An independent, whole-stream reading of the WHATWG rules (this parser's flavour:
    an event with an empty ``data:`` line is dispatched, with empty data)."""
    if stream.startswith(b"\xef\xbb\xbf"):
        stream = stream[3:]
    events: list[tuple[str, bytes, bool]] = []
    last_id: str | None = None
    id_buffer: str | None = None
    retry: int | None = None
    event_type, data, oversize = "", None, False
    for line in re.split(rb"\r\n|\r|\n", stream)[:-1]:  # the last piece has no line end yet
        if not line:
            last_id = id_buffer
            if oversize:
                events.append((event_type or "message", b"", True))
            elif data is not None:
                events.append((event_type or "message", data, False))
            event_type, data, oversize = "", None, False
            continue
        if line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if field == b"data":
            data = value if data is None else data + b"\n" + value
            oversize = oversize or len(data) > cap
        elif field == b"event":
            event_type = value.decode()
        elif field == b"id" and b"\x00" not in value:
            id_buffer = value.decode()
        elif field == b"retry" and value.isdigit():
            retry = int(value)
    return events, last_id, retry


def as_events(items: list[str | SSEEvent]) -> list[tuple[str, bytes, bool]]:
    """``feed_messages`` items as (type, data, oversize), a ``str`` being a plain message."""
    return [("message", i.encode(), False) if isinstance(i, str) else (i.event, i.data, i.oversize) for i in items]


MIXED = (
    b'data: {"a": 1}\n\n'
    b'data: {"b": "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"}\n\n'  # multi-byte characters, cut anywhere
    b"id: 5\n"
    b'data: {"c": 3}\n\n'  # an id line in the middle of a run of plain events
    b'data: {"d": 4}\n\n'
    b"event: other\ndata: skip me\n\n"
    b"event: message\ndata: typed\n\n"  # the MCP SDK's shape
    b": ping\n\n"
    b"data: two\ndata: lines\n\n"
    b"data:\n\n"  # a priming event: empty data
    b"data:no-space\n\n"
    b"retry: 70\n\n"
    b"data: " + b"z" * 80 + b"\n\n"  # over the 64-byte cap below
    b'data: {"after": "big"}\n\n'
    b"id: 6\nevent: message\ndata: last\n\n"
    b"data: unterminated"
)
LINE_ENDS = {
    "lf": MIXED,
    "crlf": MIXED.replace(b"\n", b"\r\n"),
    "cr": MIXED.replace(b"\n", b"\r"),
    # CRLF everywhere but one LF and one CR: the general path, in parts
    "mixed": MIXED.replace(b"\n", b"\r\n").replace(b"\r\n\r\nid: 5\r\n", b"\n\nid: 5\r").replace(b"\r\n", b"\n", 3),
}


@pytest.mark.parametrize("line_end", list(LINE_ENDS))
def test_feed_messages_agrees_with_the_reference_wherever_the_stream_is_cut(line_end: str) -> None:
    stream = LINE_ENDS[line_end]
    for cap in (64, 1 << 20):  # a small cap also sends whole reads down the general path
        expected, last_id, retry = reference(stream, cap)
        assert ("message", b"z" * 80, False) in expected or cap == 64
        for cut in range(len(stream) + 1):
            for method in ("feed_messages", "feed"):
                parser = SSEParser(cap)
                feed = getattr(parser, method)
                first = as_events(feed(stream[:cut]))
                head_events, head_id, _ = reference(stream[:cut], cap)
                assert (first, parser.last_event_id) == (head_events, head_id), (method, cap, cut)
                rest = as_events(feed(stream[cut:]))
                assert (first + rest, parser.last_event_id, parser.retry_ms) == (expected, last_id, retry), (
                    method,
                    cap,
                    cut,
                )


@pytest.mark.parametrize("line_end", list(LINE_ENDS))
@pytest.mark.parametrize("seed", range(10))
def test_feed_messages_agrees_with_the_reference_in_many_small_reads(line_end: str, seed: int) -> None:
    stream = LINE_ENDS[line_end] * 3
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, 60)))
    parser = SSEParser(64)
    items: list[str | SSEEvent] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        items += parser.feed_messages(stream[start:end])
    assert (as_events(items), parser.last_event_id, parser.retry_ms) == reference(stream, 64)


def test_plain_events_come_back_as_text_and_others_as_events() -> None:
    parser = SSEParser(1000)
    items = parser.feed_messages(
        b'data: {"a":1}\n\n'
        b'data: {"b":"\xc3\xa9"}\n\n'
        b"id: 7\ndata: {}\n\n"
        b'data: {"c":3}\n\n'
        b"event: other\ndata: x\n\n"
        b'event: message\ndata: {"d":4}\n\n'
    )
    assert items == [
        '{"a":1}',
        '{"b":"é"}',
        SSEEvent("message", b"{}", "7"),
        '{"c":3}',
        SSEEvent("other", b"x", "7"),
        '{"d":4}',
    ]
    assert parser.last_event_id == "7"


def test_sse_starlette_crlf_events_come_back_as_text() -> None:
    parser = SSEParser(1000)
    items = parser.feed_messages(b'event: message\r\ndata: {"a":1}\r\n\r\nid: 3\r\nevent: message\r\ndata: {"b"')
    assert items == ['{"a":1}']
    assert parser.last_event_id is None
    items = parser.feed_messages(b":2}\r")  # the CRLF itself cut in two
    assert items == [] and parser.last_event_id is None
    items = parser.feed_messages(b'\n\r\nevent: message\r\ndata: {"c":3}\r\n\r\n')
    assert items == [SSEEvent("message", b'{"b":2}', "3"), '{"c":3}']
    assert parser.last_event_id == "3"


def test_the_last_event_id_moves_only_when_its_event_is_dispatched() -> None:
    parser = SSEParser(1000, last_event_id="1")
    assert parser.feed_messages(b"data: a\n\nid: 2\ndata: b\n") == ["a"]
    assert parser.last_event_id == "1"  # event 2 is not complete yet
    assert parser.feed_messages(b"\ndata: c\n\n") == [SSEEvent("message", b"b", "2"), "c"]
    assert parser.last_event_id == "2"


def test_an_event_with_bad_utf8_is_an_event_with_its_bytes_and_the_others_still_parse() -> None:
    parser = SSEParser(1000)
    items = parser.feed_messages(b"data: ok\n\ndata: \xff\xfe\n\ndata: fine\n\n")
    assert as_events(items) == [
        ("message", b"ok", False),
        ("message", b"\xff\xfe", False),
        ("message", b"fine", False),
    ]
    assert parser.feed_messages(b"data: again\n\n") == ["again"]


def test_feed_messages_reports_an_oversized_event_once_and_goes_on() -> None:
    parser = SSEParser(10)
    items = parser.feed_messages(b"data: " + b"x" * 11 + b"\n\ndata: ok\n\n")
    assert items == [SSEEvent("message", b"", None, oversize=True), SSEEvent("message", b"ok", None)]
    parser = SSEParser(10)
    items = [i for chunk in (b"data: x", b"x" * 5000, b"\n\ndata: ok\n\n") for i in parser.feed_messages(chunk)]
    assert as_events(items) == [("message", b"", True), ("message", b"ok", False)]
    assert len(parser._partial) == 0
