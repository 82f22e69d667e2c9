"""FrameParser: the sans-IO parser of server-to-client WebSocket frames."""

from __future__ import annotations

import itertools
import struct

import pytest

from exmcp_actors._transport._framing import RAW_PREVIEW_BYTES
from exmcp_actors._transport.websocket._frames import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    FrameParser,
    Oversized,
    ProtocolError,
    WsEvent,
)


def frame(
    opcode: int,
    payload: bytes,
    *,
    fin: bool = True,
    rsv: int = 0,
    mask: bytes | None = None,
    length_bytes: int | None = None,
) -> bytes:
    """A frame as a server would send it; ``length_bytes`` (0, 2, 8) forces the length encoding."""
    first = (0x80 if fin else 0) | rsv << 4 | opcode
    mask_bit = 0x80 if mask is not None else 0
    size = len(payload)
    if length_bytes is None:
        length_bytes = 0 if size < 126 else 2 if size < 1 << 16 else 8
    if length_bytes == 0:
        header = struct.pack("!BB", first, mask_bit | size)
    elif length_bytes == 2:
        header = struct.pack("!BBH", first, mask_bit | 126, size)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, size)
    if mask is not None:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        header += mask
    return header + payload


def feed_all(data: bytes, *cuts: int, max_frame_bytes: int = 1 << 20) -> list[WsEvent]:
    """Feed ``data`` split at ``cuts``; all the events, in order."""
    parser = FrameParser(max_frame_bytes)
    events: list[WsEvent] = []
    bounds = [0, *cuts, len(data)]
    for start, end in itertools.pairwise(bounds):
        events += parser.feed(data[start:end])
    return events


def assert_split_invariant(data: bytes, max_frame_bytes: int = 1 << 20) -> list[WsEvent]:
    """The events are the same fed whole, split in two at every byte, and byte by byte."""
    whole = feed_all(data, max_frame_bytes=max_frame_bytes)
    for cut in range(1, len(data)):
        assert feed_all(data, cut, max_frame_bytes=max_frame_bytes) == whole, f"split at {cut}"
    assert feed_all(data, *range(1, len(data)), max_frame_bytes=max_frame_bytes) == whole
    return whole


# -- data messages ---------------------------------------------------------------


def test_text_and_binary_frames_become_messages() -> None:
    data = frame(OP_TEXT, b'{"a":1}') + frame(OP_BINARY, b"\x00\x01") + frame(OP_TEXT, b"")

    assert feed_all(data) == [(OP_TEXT, b'{"a":1}'), (OP_BINARY, b"\x00\x01"), (OP_TEXT, b"")]


@pytest.mark.parametrize(
    ("size", "length_bytes"),
    [(125, 0), (126, 2), (300, 2), (65535, 2), (65536, 8), (70000, 8), (5, 8), (5, 2)],
)
def test_7_16_and_64_bit_lengths_parse_alike_whole_or_in_chunks(size: int, length_bytes: int) -> None:
    payload = bytes(i % 251 for i in range(size))
    data = frame(OP_TEXT, payload, length_bytes=length_bytes) + frame(OP_TEXT, b"next")

    events = feed_all(data)
    chunked = feed_all(data, *range(1, len(data), 1000))

    assert events == chunked == [(OP_TEXT, payload), (OP_TEXT, b"next")]


def test_a_fragmented_message_is_reassembled() -> None:
    data = frame(OP_TEXT, b"one ", fin=False) + frame(OP_CONT, b"two ", fin=False) + frame(OP_CONT, b"three")

    assert feed_all(data) == [(OP_TEXT, b"one two three")]


def test_a_fragmented_binary_message_keeps_its_opcode() -> None:
    data = frame(OP_BINARY, b"\x01", fin=False) + frame(OP_CONT, b"\x02")

    assert feed_all(data) == [(OP_BINARY, b"\x01\x02")]


def test_control_frames_between_fragments_come_out_at_once() -> None:
    data = (
        frame(OP_TEXT, b"a", fin=False)
        + frame(OP_PING, b"p1")
        + frame(OP_CONT, b"b", fin=False)
        + frame(OP_PONG, b"p2")
        + frame(OP_CONT, b"c")
        + frame(OP_TEXT, b"d")
    )

    assert feed_all(data) == [(OP_PING, b"p1"), (OP_PONG, b"p2"), (OP_TEXT, b"abc"), (OP_TEXT, b"d")]


def test_ping_pong_and_close_frames_come_out_as_they_are() -> None:
    close_payload = struct.pack("!H", 1001) + b"bye"
    data = frame(OP_PING, b"") + frame(OP_PING, b"x" * 125) + frame(OP_PONG, b"y") + frame(OP_CLOSE, close_payload)

    assert feed_all(data) == [(OP_PING, b""), (OP_PING, b"x" * 125), (OP_PONG, b"y"), (OP_CLOSE, close_payload)]


def test_nothing_is_parsed_after_a_close_frame() -> None:
    parser = FrameParser()

    assert parser.feed(frame(OP_CLOSE, b"") + frame(OP_TEXT, b"late")) == [(OP_CLOSE, b"")]
    assert parser.done
    assert parser.feed(frame(OP_TEXT, b"later")) == []


def test_any_split_of_a_stream_gives_the_same_events() -> None:
    data = (
        frame(OP_TEXT, b'{"n":1}')
        + frame(OP_TEXT, b"x" * 300)
        + frame(OP_TEXT, b"64-bit", length_bytes=8)
        + frame(OP_TEXT, b"frag", fin=False)
        + frame(OP_PING, b"ping")
        + frame(OP_CONT, b"mented", fin=False)
        + frame(OP_PONG, b"")
        + frame(OP_CONT, b"!")
        + frame(OP_BINARY, b"\xff\x00")
        + frame(OP_CLOSE, struct.pack("!H", 1000))
    )

    events = assert_split_invariant(data)

    assert events == [
        (OP_TEXT, b'{"n":1}'),
        (OP_TEXT, b"x" * 300),
        (OP_TEXT, b"64-bit"),
        (OP_PING, b"ping"),
        (OP_PONG, b""),
        (OP_TEXT, b"fragmented!"),
        (OP_BINARY, b"\xff\x00"),
        (OP_CLOSE, struct.pack("!H", 1000)),
    ]


def test_a_large_frame_in_small_reads_is_not_rejoined_per_read() -> None:
    payload = b"z" * 200_000
    data = frame(OP_TEXT, payload)
    parser = FrameParser()
    events: list[WsEvent] = []
    pieces: list[int] = []

    for start in range(0, len(data), 4096):
        events += parser.feed(data[start : start + 4096])
        pieces.append(len(parser._parts))

    assert events == [(OP_TEXT, payload)]
    assert max(pieces) > 40  # kept as pieces until the frame is whole, then joined once


def test_an_empty_feed_is_harmless() -> None:
    parser = FrameParser()

    assert parser.feed(b"") == []
    assert parser.feed(frame(OP_TEXT, b"ok")) == [(OP_TEXT, b"ok")]


# -- oversized messages ------------------------------------------------------------


def oversized_whatever_the_split(data: bytes, max_frame_bytes: int) -> list[WsEvent]:
    """The events fed whole; split in two at every byte they are the same but for the preview
    (the payload bytes already received), which is always a prefix of the whole one's."""
    whole = feed_all(data, max_frame_bytes=max_frame_bytes)
    assert isinstance(whole[-1], Oversized)
    for cuts in [*((cut,) for cut in range(1, len(data))), tuple(range(1, len(data)))]:
        events = feed_all(data, *cuts, max_frame_bytes=max_frame_bytes)
        assert events[:-1] == whole[:-1], f"split at {cuts[:3]}"
        last = events[-1]
        assert isinstance(last, Oversized) and last.size == whole[-1].size, f"split at {cuts[:3]}"
        assert whole[-1].preview.startswith(last.preview), f"split at {cuts[:3]}"
    return whole


def test_an_oversized_frame_is_reported_at_its_header_and_nothing_after_it_is_parsed() -> None:
    big = bytes(range(256)) * 4  # 1024 bytes
    data = frame(OP_TEXT, big) + frame(OP_TEXT, b"after")

    events = oversized_whatever_the_split(data, max_frame_bytes=100)

    assert events == [Oversized(1024, big[:RAW_PREVIEW_BYTES])]
    parser = FrameParser(100)
    assert parser.feed(frame(OP_TEXT, big)[:4]) == [Oversized(1024, b"")]  # the header is enough
    assert parser.done
    assert parser.feed(frame(OP_TEXT, b"after")) == []


def test_a_message_of_exactly_max_frame_bytes_is_kept() -> None:
    assert feed_all(frame(OP_TEXT, b"x" * 100), max_frame_bytes=100) == [(OP_TEXT, b"x" * 100)]


def test_a_fragmented_message_growing_past_the_limit_is_oversized_when_the_frame_passing_it_begins() -> None:
    data = (
        frame(OP_TEXT, b"a" * 60, fin=False)
        + frame(OP_PING, b"still answered")
        + frame(OP_CONT, b"b" * 60, fin=False)
        + frame(OP_CONT, b"c" * 60)
        + frame(OP_TEXT, b"after")
    )

    events = oversized_whatever_the_split(data, max_frame_bytes=100)

    # 60 kept (plus FRAGMENT_OVERHEAD) and 60 more pass 100: reported at the second fragment.
    assert events == [(OP_PING, b"still answered"), Oversized(120, b"a" * 60 + b"b" * 60)]


def test_an_oversized_message_is_reported_as_it_begins_not_buffered() -> None:
    limit = 10_000
    payload = b"q" * 5_000_000
    data = frame(OP_TEXT, payload) + frame(OP_TEXT, b'{"after":1}')
    parser = FrameParser(limit)
    events: list[WsEvent] = []
    held: list[int] = []

    for start in range(0, len(data), 65536):
        events += parser.feed(data[start : start + 65536])
        held.append(parser.held)

    assert events == [Oversized(len(payload), payload[:RAW_PREVIEW_BYTES])]
    assert max(held) == 0


def test_an_endless_fragmented_message_is_oversized_as_soon_as_it_passes_the_limit() -> None:
    piece = b"r" * 40_000
    data = frame(OP_TEXT, piece, fin=False) + frame(OP_CONT, piece, fin=False)
    parser = FrameParser(50_000)

    assert parser.feed(data[:1000]) == []
    assert parser.feed(data[1000:]) == [Oversized(80_000, piece[:RAW_PREVIEW_BYTES])]
    assert parser.done
    assert parser.held == 0  # what was kept of it is dropped


# -- protocol errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (frame(OP_TEXT, b"hi", mask=b"\x01\x02\x03\x04"), "masked"),
        (frame(OP_TEXT, b"hi", rsv=4), "reserved bits"),
        (frame(OP_TEXT, b"hi", rsv=2), "reserved bits"),
        (frame(OP_TEXT, b"hi", rsv=1), "reserved bits"),
        *((frame(op, b"hi"), "unknown opcode") for op in (3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF)),
        (frame(OP_PING, b"hi", fin=False), "fragmented control frame"),
        (frame(OP_CLOSE, b"", fin=False), "fragmented control frame"),
        (frame(OP_PING, b"p" * 126), "control frame with a 126-byte payload"),
        (frame(OP_PONG, b"p" * 200), "control frame with a 200-byte payload"),
        (frame(OP_CONT, b"hi"), "continuation frame without a message"),
        (frame(OP_TEXT, b"a", fin=False) + frame(OP_TEXT, b"b"), "new data frame inside a fragmented message"),
        (frame(OP_TEXT, b"a", fin=False) + frame(OP_BINARY, b"b"), "new data frame inside a fragmented message"),
        (b"\x81\x7f" + struct.pack("!Q", 1 << 63), "most significant bit"),
    ],
)
def test_protocol_errors_end_the_stream(bad: bytes, reason: str) -> None:
    data = frame(OP_TEXT, b"before") + bad + frame(OP_TEXT, b"never")

    events = assert_split_invariant(data)
    parser = FrameParser()
    parser.feed(data)

    assert events[0] == (OP_TEXT, b"before")
    assert len(events) == 2
    assert isinstance(events[1], ProtocolError)
    assert reason in events[1].reason
    assert parser.done
    assert parser.feed(frame(OP_TEXT, b"more")) == []


def test_a_protocol_error_in_the_frame_that_would_pass_the_limit_is_found_first() -> None:
    data = frame(OP_TEXT, b"x" * 50, fin=False) + frame(OP_TEXT, b"y" * 500)

    events = feed_all(data, max_frame_bytes=100)

    assert len(events) == 1
    assert isinstance(events[0], ProtocolError)
