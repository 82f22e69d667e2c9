"""The SSE parser gives the same events however the stream is cut into reads and
whichever line ends it uses (its LF-only fast path agrees with the general path)."""

from __future__ import annotations

import random

import pytest

from exmcp_actors._transport._sse import SSEEvent, SSEParser

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
