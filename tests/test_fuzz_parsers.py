"""Fuzz tests (hypothesis) of every frame parser: WebSocket frames, SSE, stdio lines and
JSON-RPC classification. Garbage never raises, what a parser holds stays within its limits
and a small constant of the bytes fed, and the parser (or the client) stays usable after it."""

from __future__ import annotations

import json
import struct
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import exmcp_actors as mcp
from exmcp_actors._protocol import _jsonrpc as rpc
from exmcp_actors._transport._base import InvalidFrame
from exmcp_actors._transport._framing import LineSplitter
from exmcp_actors._transport.http._sse import SSEParser
from exmcp_actors._transport.websocket._frames import (
    FRAGMENT_OVERHEAD,
    MAX_FRAGMENTS,
    OP_BINARY,
    OP_CONT,
    OP_PING,
    OP_TEXT,
    FrameParser,
    Oversized,
    ProtocolError,
)
from exmcp_actors.testing import FakeServer

FAST = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMIT = 512


def chunked(data: bytes, cuts: list[int]) -> Iterator[bytes]:
    """``data`` cut at the given points (taken modulo its length)."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    start = 0
    for point in [*points, len(data)]:
        if point > start:
            yield data[start:point]
            start = point


def ws_frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    first = (0x80 if fin else 0) | opcode
    size = len(payload)
    if size < 126:
        return struct.pack("!BB", first, size) + payload
    if size < 1 << 16:
        return struct.pack("!BBH", first, 126, size) + payload
    return struct.pack("!BBQ", first, 127, size) + payload


def traced(work: Callable[[], object]) -> int:
    """Bytes allocated by ``work`` and still held when it returns (its own result excluded)."""
    tracemalloc.start()
    try:
        result = work()
        del result
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return held


# -- WebSocket frames ------------------------------------------------------------------------

messages = st.lists(
    st.tuples(st.sampled_from([OP_TEXT, OP_BINARY]), st.lists(st.binary(max_size=300), min_size=1, max_size=6)),
    max_size=8,
)


def expected_ws_events(msgs: list[tuple[int, list[bytes]]], pings: bool) -> tuple[bytes, list[Any], int]:
    """The wire of ``msgs``, the events a parser gives for it (up to the first oversized
    message, which ends the stream) and how many whole frames it parses."""
    wire = b""
    expected: list[Any] = []
    frames = 0
    over = False
    for opcode, pieces in msgs:
        kept = 0  # what the parser counts of the fragments it keeps
        for i, piece in enumerate(pieces):
            wire += ws_frame(opcode if i == 0 else OP_CONT, piece, fin=i == len(pieces) - 1)
            if not over and kept + len(piece) > LIMIT:
                expected.append("oversized")
                over = True
            elif not over:
                kept += len(piece) + FRAGMENT_OVERHEAD
                frames += 1
            if pings and i == 0 and len(pieces) > 1:
                wire += ws_frame(OP_PING, b"p")  # control frames may come between fragments
                if not over:
                    expected.append((OP_PING, b"p"))
                    frames += 1
        if not over:
            expected.append((opcode, b"".join(pieces)))
    return wire, expected, frames


@FAST
@given(messages, st.lists(st.integers(min_value=0), max_size=20), st.booleans())
def test_ws_any_fragmentation_and_chunking_gives_the_messages_up_to_the_first_oversized(
    msgs: list[tuple[int, list[bytes]]], cuts: list[int], pings: bool
) -> None:
    wire, expected, frames = expected_ws_events(msgs, pings)
    parser = FrameParser(LIMIT)
    events: list[Any] = []
    for chunk in chunked(wire, cuts):
        events += parser.feed(chunk)
        assert parser.held <= 2 * LIMIT + 64  # an incomplete frame and a message's fragments
    assert ["oversized" if isinstance(e, Oversized) else e for e in events] == expected
    assert parser.done == ("oversized" in expected)
    assert parser.frames == frames


@FAST
@given(st.binary(max_size=2000), st.lists(st.integers(min_value=0), max_size=20))
def test_ws_garbage_never_raises_and_holds_little(garbage: bytes, cuts: list[int]) -> None:
    parser = FrameParser(LIMIT)
    for chunk in chunked(garbage, cuts):
        for event in parser.feed(chunk):
            assert type(event) is tuple or isinstance(event, (Oversized, ProtocolError))
        assert parser.held <= min(2 * LIMIT + 64, len(garbage) + FRAGMENT_OVERHEAD * len(garbage) // 2)


def test_ws_tiny_and_empty_fragments_cost_bounded_memory() -> None:
    """2-byte and empty fragments once grew memory 30x the wire: a message of more than
    MAX_FRAGMENTS fragments is oversized as soon as it has them, and what it held dropped."""
    limit = 16 * 1024 * 1024
    parser = FrameParser(limit)
    fragment = ws_frame(OP_CONT, b"ab", fin=False) + ws_frame(OP_CONT, b"", fin=False)
    wire = ws_frame(OP_TEXT, b"{", fin=False) + fragment * 10_000  # 60 KB of wire, 20,000 fragments
    events: list[Any] = []
    held = traced(lambda: [events.extend(parser.feed(wire[i : i + 65536])) for i in range(0, len(wire), 65536)])
    assert len(events) == 1 and isinstance(events[0], Oversized), events
    assert events[0].preview.startswith(b"{abab")
    assert held < 400_000, held  # was 1.6 MB: about 30 x the wire
    assert parser.done and parser.held == 0
    assert parser.frames == MAX_FRAGMENTS  # the fragments it kept, up to the limit
    assert parser.feed(ws_frame(OP_CONT, b"}") + ws_frame(OP_TEXT, b"[]")) == []  # the stream ended


def test_ws_a_trickled_frame_is_held_as_bytes_not_as_objects() -> None:
    parser = FrameParser(1024 * 1024)
    wire = ws_frame(OP_TEXT, b"x" * 200_000)
    held = traced(lambda: [parser.feed(wire[i : i + 1]) for i in range(30_000)])  # a byte per read
    assert held < 3 * 30_000, held  # was about 35 bytes per byte
    assert parser.feed(wire[30_000:]) == [(OP_TEXT, b"x" * 200_000)]
    assert parser.frames == 1


# -- SSE -------------------------------------------------------------------------------------

sse_lines = st.lists(
    st.one_of(
        st.binary(max_size=80),
        st.sampled_from([b"data: {}", b"data:", b"event: message", b"id: 7", b"retry: 10", b": ping", b""]),
        st.builds(lambda n: b"data: " + b"x" * n, st.integers(0, 3 * LIMIT)),
    ),
    max_size=30,
)


@FAST
@given(sse_lines, st.sampled_from([b"\n", b"\r\n", b"\r"]), st.lists(st.integers(min_value=0), max_size=20))
def test_sse_garbage_never_raises_holds_bounded_bytes_and_the_parser_stays_usable(
    lines: list[bytes], eol: bytes, cuts: list[int]
) -> None:
    wire = eol.join(lines)
    parser = SSEParser(LIMIT)
    for chunk in chunked(wire, cuts):
        for item in parser.feed_messages(chunk):
            data = item if isinstance(item, str) else item.data
            assert len(data) <= LIMIT
        held = len(parser._partial) + len(parser._data)
        assert held <= 2 * LIMIT + 70  # a partial line and an event's data, never more
        assert held <= len(wire)  # and no amplification of what came
    items = parser.feed_messages(b"\n\ndata: {}\n\n")
    assert items[-1] == "{}" or getattr(items[-1], "data", None) == b"{}"


def test_sse_many_tiny_data_lines_cost_their_wire_size() -> None:
    parser = SSEParser(4 * 1024 * 1024)
    held = traced(lambda: [parser.feed(b"data:x\n" * 10_000) for _ in range(4)])  # 280 KB: one event, 40,000 lines
    assert held < 4 * 40_000 + 50_000, held  # two bytes kept per line; was about 50 per line
    assert [len(e.data) for e in parser.feed(b"\n")] == [2 * 40_000 - 1]


def test_sse_a_line_or_an_event_over_the_cap_is_a_violation() -> None:
    parser = SSEParser(100)
    parser.feed(b"data: " + b"x" * 300)
    assert parser.violation is not None and "line" in parser.violation
    parser = SSEParser(100)
    parser.feed(b"data: " + b"x" * 60 + b"\ndata: " + b"y" * 60 + b"\n")
    assert parser.violation is not None and "event" in parser.violation


# -- stdio lines -----------------------------------------------------------------------------


@FAST
@given(st.binary(max_size=3000), st.lists(st.integers(min_value=0), max_size=30))
def test_stdio_garbage_never_raises_holds_bounded_bytes_and_stays_usable(garbage: bytes, cuts: list[int]) -> None:
    splitter = LineSplitter(LIMIT)
    for chunk in chunked(garbage, cuts):
        for frame in splitter.feed(chunk):
            assert not isinstance(frame, InvalidFrame) or len(frame.raw) <= 256
        assert splitter._parts_len <= LIMIT and len(splitter._parts) <= 17
    assert splitter.feed(b'\n{"ok":1}\n')[-1] == {"ok": 1}


def test_stdio_a_trickled_line_is_held_as_bytes_not_as_objects() -> None:
    splitter = LineSplitter(1024 * 1024)
    held = traced(lambda: [splitter.feed(b"x") for _ in range(30_000)])
    assert held < 3 * 30_000, held  # was about 35 bytes per byte
    assert isinstance(splitter.feed(b"\n")[0], InvalidFrame)


# -- JSON-RPC classification -----------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=6,
)
ids = st.one_of(json_values, st.integers(-5, 5).map(float))
frames = st.one_of(
    json_values,
    st.builds(lambda i, r: {"jsonrpc": "2.0", "id": i, "result": r}, ids, json_values),
    st.builds(
        lambda i, c, m: {"jsonrpc": "2.0", "id": i, "error": {"code": c, "message": m}},
        ids,
        st.one_of(st.integers(), json_values),
        json_values,
    ),
    st.builds(lambda m, p: {"jsonrpc": "2.0", "method": m, "params": p}, json_values, json_values),
)


@settings(max_examples=100, deadline=None)
@given(frames)
def test_classify_never_raises_and_every_answer_id_is_a_usable_key(frame: Any) -> None:
    msg = rpc.classify(frame)
    assert isinstance(msg, (rpc.Response, rpc.ErrorResponse, rpc.ServerRequest, rpc.Notification, rpc.Invalid))
    if isinstance(msg, (rpc.Response, rpc.ErrorResponse)):
        assert msg.id is None or (type(msg.id) in (int, str))  # hashable, and never a bool or a float
        hash(msg.id)


@pytest.fixture
def fake() -> Iterator[tuple[FakeServer, mcp.Client]]:
    with FakeServer() as server:
        client = mcp.connect(server.transport(), reconnect=False)
        try:
            yield server, client
        finally:
            client.disconnect()


def test_the_client_stays_usable_after_random_frames(fake: tuple[FakeServer, mcp.Client]) -> None:
    server, client = fake
    listener = client.subscribe_notifications({"resourceSubscriptions": ["file:///a"]})

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(frames, max_size=10), st.binary(max_size=50))
    def garbage_then_an_update(items: list[Any], raw: bytes) -> None:
        server.send_batch([json.loads(json.dumps(item)) for item in items])
        server.send_raw(raw)
        server.updated("file:///a")
        while True:  # random frames may hold updates of their own: the last is ours
            message = listener.get(timeout=5)
            if message.params == {"uri": "file:///a"} and listener.pending() == 0:
                break

    garbage_then_an_update()
    assert client.status == "ready"
    assert client.list_tools() is not None
