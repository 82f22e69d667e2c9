"""A hostile Streamable HTTP server (``raw_http``): every answer it can get wrong ends in the
request's clear failure, a retry or a reported loss, at a bounded cost, and nothing it says
reaches an error text or a log record raw. A server that polls (each stream ends after a
message) is reopened and resumed at the pace its ``retry:`` asks, whatever its length."""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hostile_text import RAW_CONTROL, no_raw_control, raw_in_texts
from raw_http import LEGACY_INIT, WAIT, Exchange, RawHttp, legacy_basics, rpc_result

import exmcp_actors as mcp
from exmcp_actors._protocol._errors import ExchangeFailed, ProtocolError, RequestError
from exmcp_actors._transport.http import STREAM_DROPPED
from exmcp_actors._transport.http._config import Config
from exmcp_actors._transport.http._resume import MIN_RETRY_DELAY, GetStreams
from exmcp_actors._transport.http._session import MAX_SESSION_ID_BYTES
from exmcp_actors._transport.http._sse import SSEParser

HOSTILE = "\x1b[2J\x1b[31mforged\x07"


Answer = Callable[[Exchange], bool]
Serve = Callable[..., RawHttp]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """``serve(answer, standalone_get=False)``: a raw server answering the legacy basics, then
    ``answer`` (the standalone GET stream too with ``standalone_get``, else 405)."""
    servers: list[RawHttp] = []

    def start(answer: Answer, *, standalone_get: bool = False) -> RawHttp:
        def answer_all(exchange: Exchange) -> bool:
            if legacy_basics(exchange):
                return True
            if exchange.method == "GET" and "last-event-id" not in exchange.headers and not standalone_get:
                exchange.whole("405 Method Not Allowed")
                return True
            return answer(exchange)

        server = RawHttp(answer_all)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def clients() -> Iterator[list[mcp.Client]]:
    made: list[mcp.Client] = []
    yield made
    for client in made:
        client.disconnect()


def connect(url: str, clients: list[mcp.Client], **transport: Any) -> mcp.Client:
    client = mcp.connect(mcp.HttpTransport(url, **transport), protocol="legacy", reconnect=False)
    clients.append(client)
    return client


def http_config(**settings: Any) -> Config:
    """The settings an ``HttpTransport`` gets by default, with ``settings`` changed."""
    defaults: dict[str, Any] = {"url": "http://127.0.0.1:9/mcp", "headers": {}, "verify": True}
    defaults |= {"max_frame_bytes": 1 << 20, "sse_retry_default": 1.0, "io_timeout": 10.0, "delete_timeout": 2.0}
    defaults |= {"reconnect_attempts": 3, "max_retry_delay": 30.0}
    return Config(**(defaults | settings))


def sse_event(message: Any, event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}data: {json.dumps(message)}\n\n".encode()


# -- the answer a stream waits for ------------------------------------------------------------


def test_a_response_whose_id_only_looks_like_ours_does_not_end_the_stream_before_the_answer(
    serve: Serve, clients: list[mcp.Client]
) -> None:
    def answer(exchange: Exchange) -> bool:
        request_id = exchange.body["id"]
        exchange.start_sse()
        # "7" for our 7: the session routes it to no one, so it must not end the stream.
        exchange.chunk(sse_event({"jsonrpc": "2.0", "id": str(request_id), "result": {"tools": ["fake"]}}))
        exchange.chunk(sse_event({"jsonrpc": "2.0", "id": request_id, "result": {"tools": ["real"]}}))
        exchange.end_chunks()
        return True

    client = connect(serve(answer).url, clients)
    assert client.request("tools/list", timeout=5) == {"tools": ["real"]}


@pytest.mark.parametrize(
    "body",
    [
        {"jsonrpc": "2.0", "id": "someone-else", "result": {}},
        {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"},
    ],
)
def test_a_json_body_that_is_no_answer_fails_its_request_at_once_not_at_its_timeout(
    serve: Serve, clients: list[mcp.Client], body: dict[str, Any]
) -> None:
    def answer(exchange: Exchange) -> bool:
        exchange.whole("200 OK", json.dumps(body).encode())
        return True

    client = connect(serve(answer).url, clients)
    with pytest.raises(ProtocolError, match="no answer to it"):
        client.request("tools/list", timeout=60)
    assert client.status == "ready"


def test_a_json_error_whose_id_is_null_is_the_answer_to_the_request_it_came_back_for(
    serve: Serve, clients: list[mcp.Client]
) -> None:
    def answer(exchange: Exchange) -> bool:
        error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
        exchange.whole("200 OK", json.dumps(error).encode())
        return True

    client = connect(serve(answer).url, clients)
    with pytest.raises(RequestError) as refused:
        client.request("tools/list", timeout=60)
    assert (refused.value.code, refused.value.message) == (-32700, "Parse error")


# -- streams that end at once -------------------------------------------------------------------


LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


def get_streams(serve: Serve, respond: Callable[[Exchange, int], bool]) -> tuple[RawHttp, list[float]]:
    """A server whose standalone GET streams ``respond(exchange, n)`` answers (``n``: which
    opening it is, from 1), and the times they were opened; any other request that is no
    legacy basic closes its connection unanswered."""
    opened: list[float] = []

    def answer(exchange: Exchange) -> bool:
        if exchange.method != "GET":
            return False
        opened.append(time.monotonic())
        return respond(exchange, len(opened))

    return serve(answer, standalone_get=True), opened


def one_message_then_the_end(exchange: Exchange, event_id: str) -> None:
    """A whole SSE answer: ``retry: 0``, one notification, and the end of the stream."""
    exchange.whole("200 OK", b"retry: 0\n" + sse_event(LIST_CHANGED, event_id), content_type="text/event-stream")


def gaps_between(opened: list[float]) -> list[float]:
    return [later - earlier for earlier, later in itertools.pairwise(opened)]


def test_a_get_stream_that_ends_at_once_asking_retry_0_is_reopened_ever_more_slowly(
    serve: Serve, clients: list[mcp.Client]
) -> None:
    def respond(exchange: Exchange, n: int) -> bool:
        exchange.whole("200 OK", b"retry: 0\n\n", content_type="text/event-stream")
        return True

    server, opened = get_streams(serve, respond)
    connect(server.url, clients, sse_retry_default=0.05, max_retry_delay=0.2)
    assert server.wait_until(lambda: len(opened) >= 6)
    gaps = gaps_between(opened)
    # Each stream ended at once with nothing: never sooner than the host's cap on waits, 0.2 s
    # here, which is below the floor (not 0 each time).
    assert gaps[0] >= 0.04 and gaps[1] >= 0.09
    assert all(gap >= 0.19 for gap in gaps[2:5])


def assert_ever_more_slowly(gaps: list[float]) -> None:
    # The floor (0.5 s) at first, then doubled at each quick end: never the 0 the server asked,
    # which each message delivered used to reset to, for hundreds of reopenings a second.
    assert gaps[0] >= 0.45 and gaps[1] >= 0.95 and gaps[2] >= 1.9, gaps


def test_a_get_stream_that_delivers_a_message_and_ends_asking_retry_0_is_reopened_ever_more_slowly(
    serve: Serve, clients: list[mcp.Client]
) -> None:
    def respond(exchange: Exchange, n: int) -> bool:
        one_message_then_the_end(exchange, f"e{n}")
        return True

    server, opened = get_streams(serve, respond)
    connect(server.url, clients)
    assert server.wait_until(lambda: len(opened) >= 4)
    assert_ever_more_slowly(gaps_between(opened))


def test_a_get_stream_whose_reopenings_fail_and_deliver_in_turn_is_reopened_ever_more_slowly(
    serve: Serve, clients: list[mcp.Client]
) -> None:
    def respond(exchange: Exchange, n: int) -> bool:
        if n % 2 == 0:
            exchange.reset()  # a failure to reopen, which a stream that delivered used to forgive
            return False
        one_message_then_the_end(exchange, f"e{n}")
        return True

    server, opened = get_streams(serve, respond)
    client = connect(server.url, clients)
    assert server.wait_until(lambda: len(opened) >= 4)
    assert_ever_more_slowly(gaps_between(opened))
    assert client.status == "ready"


def test_a_resumed_stream_that_delivers_a_message_and_ends_each_time_is_resumed_ever_more_slowly(
    serve: Serve, clients: list[mcp.Client]
) -> None:
    resumed: list[float] = []

    def answer(exchange: Exchange) -> bool:
        if exchange.method == "GET":  # a resumption (Last-Event-ID)
            resumed.append(time.monotonic())
            one_message_then_the_end(exchange, f"e{len(resumed) + 1}")
            return True
        exchange.start_sse()
        exchange.chunk(b"retry: 0\n" + sse_event(LIST_CHANGED, "e1"))
        exchange.end_chunks()  # no response: the client resumes after e1
        return True

    server = serve(answer)
    client = connect(server.url, clients)
    with ThreadPoolExecutor(1) as pool:
        request = pool.submit(client.request, "tools/list", timeout=60)
        assert server.wait_until(lambda: len(resumed) >= 4)
        assert_ever_more_slowly(gaps_between(resumed))
        client.disconnect()
        assert isinstance(request.exception(timeout=WAIT), mcp.Error)


@pytest.mark.parametrize(
    ("retry_ms", "cap", "honoured"),
    [(0, 30.0, MIN_RETRY_DELAY), (200, 30.0, MIN_RETRY_DELAY), (2500, 30.0, 2.5), (60_000, 30.0, 30.0), (0, 0.2, 0.2)],
)
def test_the_retry_a_server_asks_is_honoured_between_the_floor_and_the_hosts_cap(
    retry_ms: int, cap: float, honoured: float
) -> None:
    streams = GetStreams(http_config(max_retry_delay=cap), None, None, None)  # type: ignore[arg-type]
    parser = SSEParser(1024)
    parser.feed(f"retry: {retry_ms}\n\n".encode())
    assert streams.retry_delay(parser) == honoured
    assert streams.pace(honoured, 0) == honoured
    first, second = streams.pace(honoured, 1), streams.pace(honoured, 2)
    assert honoured <= first <= honoured * 1.25  # jitter adds, never takes away
    assert min(2 * honoured, cap) <= second <= min(2 * honoured, cap) * 1.25


def test_a_resumed_stream_that_ends_with_nothing_each_time_fails_its_request_after_the_attempts(
    serve: Serve, clients: list[mcp.Client]
) -> None:
    def answer(exchange: Exchange) -> bool:
        if exchange.method == "GET":  # a resumption (Last-Event-ID): empty, and over at once
            exchange.whole("200 OK", b"retry: 0\n\n", content_type="text/event-stream")
            return True
        exchange.start_sse()
        exchange.chunk(
            b"retry: 0\n" + sse_event({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}, "e1")
        )
        exchange.end_chunks()  # no response: the client resumes after e1
        return True

    server = serve(answer)
    client = connect(server.url, clients, reconnect_attempts=3)
    started = time.monotonic()
    with pytest.raises(ExchangeFailed) as failed:
        client.request("tools/list", timeout=30)
    assert failed.value.what == STREAM_DROPPED
    assert time.monotonic() - started < 10  # not kept resuming until the request's own timeout
    assert sum(1 for r in server.requests if r.method == "GET" and r.headers.get("last-event-id") == "e1") == 3
    assert client.status == "ready"


# -- a server that polls: each stream delivers, then ends, and the next opens after retry: ---
# (the TypeScript SDK's closeSSE with its retryInterval, the Python SDK's close_sse_stream with
# its retry_interval)

#: What the polling servers below ask: above the 0.5 s floor, so it is honoured as asked.
RETRY_MS = 600


def assert_paced_as_asked(gaps: list[float]) -> None:
    # The server's 0.6 s each time, plus at most the jitter and a loaded machine's slack; never
    # the 1.2 s, 2.4 s, ... of a doubling, which would hide what a polling server paces.
    assert all(RETRY_MS / 1000 - 0.05 <= gap < 2 * RETRY_MS / 1000 - 0.1 for gap in gaps), gaps


def test_a_get_stream_that_delivers_and_ends_is_reopened_each_time_after_the_retry_the_server_asked(
    serve: Serve, clients: list[mcp.Client]
) -> None:
    def respond(exchange: Exchange, n: int) -> bool:
        body = f"retry: {RETRY_MS}\n".encode() + sse_event(LIST_CHANGED, f"e{n}")
        exchange.whole("200 OK", body, content_type="text/event-stream")
        return True

    server, opened = get_streams(serve, respond)
    connect(server.url, clients)
    assert server.wait_until(lambda: len(opened) >= 4, timeout=30)
    assert_paced_as_asked(gaps_between(opened))


def test_a_response_stream_the_server_ends_each_time_after_a_message_is_resumed_after_the_retry_it_asked(
    serve: Serve, clients: list[mcp.Client]
) -> None:
    resumed: list[float] = []
    asked: list[Any] = []

    def answer(exchange: Exchange) -> bool:
        if exchange.method == "GET":  # a resumption (Last-Event-ID)
            resumed.append(time.monotonic())
            event = f"e{len(resumed) + 1}"
            if len(resumed) < 4:
                body = sse_event(LIST_CHANGED, event)  # a step of a long call, then polled again
            else:
                body = sse_event({"jsonrpc": "2.0", "id": asked[0], "result": {"tools": []}}, event)
            exchange.whole("200 OK", body, content_type="text/event-stream")
            return True
        asked.append(exchange.body["id"])
        exchange.start_sse()
        exchange.chunk(f"retry: {RETRY_MS}\n".encode() + sse_event(LIST_CHANGED, "e1"))
        exchange.end_chunks()  # closed as the TypeScript SDK's closeSSE() closes it
        return True

    client = connect(serve(answer).url, clients)
    assert client.request("tools/list", timeout=30) == {"tools": []}
    assert_paced_as_asked(gaps_between(resumed))


# -- the retry field: any run of ASCII digits is a reconnection time, however long -------------
# (HTML Living Standard, event stream interpretation)


def test_a_retry_of_more_digits_than_python_converts_is_the_longest_wait_not_a_broken_stream() -> None:
    # "If the field value consists of only ASCII digits, then interpret the field value as an
    # integer in base ten": Python refuses to convert more than 4,300 digits at once.
    parser = SSEParser(1 << 20)
    events = parser.feed(b"retry: " + b"9" * 5000 + b"\ndata: {}\n\n")
    assert [event.data for event in events] == [b"{}"] and parser.violation is None
    assert parser.retry_ms is not None and parser.retry_ms >= 10**9
    streams = GetStreams(http_config(max_retry_delay=30.0), None, None, None)  # type: ignore[arg-type]
    assert streams.retry_delay(parser) == 30.0
    parser.feed(b"retry: " + b"0" * 5000 + b"2500\n\n")  # leading zeros are no part of the number
    assert parser.retry_ms == 2500


def test_a_response_after_a_retry_of_thousands_of_digits_still_answers_its_request(
    serve: Serve, clients: list[mcp.Client]
) -> None:
    def answer(exchange: Exchange) -> bool:
        exchange.start_sse()
        result = rpc_result(exchange.body["id"], {"tools": []})
        exchange.chunk(b"retry: " + b"7" * 5000 + b"\n\ndata: " + result + b"\n\n")
        exchange.end_chunks()
        return True

    client = connect(serve(answer).url, clients)
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(client.request, "tools/list", timeout=WAIT).result(WAIT) == {"tools": []}


# -- what the GET stream says when the client stops --------------------------------------------


def test_a_client_that_disconnects_logs_no_reopening_of_its_get_stream(
    serve: Serve, clients: list[mcp.Client], caplog: pytest.LogCaptureFixture
) -> None:
    streaming = threading.Event()

    def answer(exchange: Exchange) -> bool:
        if exchange.method == "GET":
            exchange.start_sse()
            exchange.chunk(b": open\n\n")
            streaming.set()
            while exchange.conn.recv(1024):  # until the client goes
                pass
            return False
        exchange.whole("200 OK", rpc_result(exchange.body["id"], {"tools": []}))
        return True

    client = connect(serve(answer, standalone_get=True).url, clients)
    assert streaming.wait(WAIT)
    caplog.set_level(logging.DEBUG, logger="exmcp_actors")
    client.disconnect()
    said = [record.getMessage() for record in caplog.records if record.name == "exmcp_actors.http"]
    assert [line for line in said if "reopening" in line] == [], said


# -- the session id -----------------------------------------------------------------------------

#: In every session id below: it must reach no record, no error text, no later request.
MARKER = b"Zs3ss10nZ"


def assigning(*session_ids: bytes) -> RawHttp:
    """A raw server whose ``initialize`` answer carries these ``Mcp-Session-Id`` headers, as bytes."""

    def answer(exchange: Exchange) -> bool:
        if exchange.rpc_method == "initialize":
            body = rpc_result(exchange.body["id"], LEGACY_INIT)
            lines = [b"HTTP/1.1 200 OK", b"Content-Type: application/json", f"Content-Length: {len(body)}".encode()]
            lines += [b"Mcp-Session-Id: " + session_id for session_id in session_ids]
            exchange.write(b"\r\n".join(lines) + b"\r\n\r\n" + body)
            return True
        if exchange.method == "GET":
            exchange.whole("405 Method Not Allowed")
            return True
        if legacy_basics(exchange):
            return True
        exchange.whole("200 OK", rpc_result(exchange.body["id"], {"tools": []}))
        return True

    return RawHttp(answer)


@pytest.mark.parametrize(
    ("session_ids", "named"),
    [
        ([MARKER + b"\x1b[2J"], "byte 0x1b at offset 9"),
        ([MARKER + b" x"], "byte 0x20 at offset 9"),
        ([MARKER + b"\x7f"], "byte 0x7f at offset 9"),
        ([MARKER + b"\xe9"], "byte 0xe9 at offset 9"),  # Latin-1: once kept, and sent back as UTF-8
        ([MARKER + b"x" * MAX_SESSION_ID_BYTES], f"of {MAX_SESSION_ID_BYTES + 9} bytes"),
        ([MARKER, MARKER + b"2"], "2 Mcp-Session-Id headers"),
    ],
)
def test_a_session_id_the_spec_forbids_fails_the_connect_is_never_sent_back_and_never_logged(
    clients: list[mcp.Client], caplog: pytest.LogCaptureFixture, session_ids: list[bytes], named: str
) -> None:
    caplog.set_level(logging.DEBUG)
    with assigning(*session_ids) as server:
        with pytest.raises(mcp.ConnectError) as refused:
            connect(server.url, clients)
        later = [r for r in server.requests if r.rpc_method != "initialize"]
    error = refused.value
    assert "Mcp-Session-Id" in str(error) and named in str(error)
    assert [r.headers for r in later if "mcp-session-id" in r.headers] == []
    texts = [str(error), repr(error), *(record.getMessage() for record in caplog.records)]
    assert [text for text in texts if MARKER.decode() in text] == []
    assert raw_in_texts(*texts) == []
    assert any("the server assigned" in record.getMessage() for record in caplog.records)  # said, once


def test_a_session_id_of_visible_ascii_at_the_bound_is_kept_sent_back_as_it_came_and_never_logged(
    clients: list[mcp.Client], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    session_id = (MARKER + bytes(range(0x21, 0x7F)) * 50)[:MAX_SESSION_ID_BYTES]
    with assigning(session_id) as server:
        client = connect(server.url, clients)
        assert client.request("tools/list", timeout=5) == {"tools": []}
        echoed = [r.headers.get("mcp-session-id") for r in server.requests if r.rpc_method == "tools/list"]
        client.disconnect()
    assert echoed == [session_id.decode()]
    assert [r.getMessage() for r in caplog.records if MARKER.decode() in r.getMessage()] == []


# -- failed exchanges ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", [503, 429])
def test_an_http_error_fails_the_request_with_its_status_a_bounded_body_and_nothing_printed_raw(
    serve: Serve,
    clients: list[mcp.Client],
    caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:
    body = (HOSTILE + "\r\n") * 200_000  # megabytes of it

    def answer(exchange: Exchange) -> bool:
        exchange.whole(f"{status} Busy{HOSTILE}", body.encode(), content_type="text/plain")
        return True

    client = connect(serve(answer).url, clients)
    with caplog.at_level(logging.DEBUG, logger="exmcp_actors"), pytest.raises(ExchangeFailed) as failed:
        client.request("tools/list", timeout=5)
    error = failed.value
    assert error.status == status
    assert error.body is not None and len(error.body) <= 1000 and error.body.startswith(HOSTILE)
    assert error.what == f"HTTP {status} Busy\\x1b[2J\\x1b[31mforged\\x07"
    assert not RAW_CONTROL.search(str(error)) and not RAW_CONTROL.search(repr(error))
    assert no_raw_control(caplog.records) == []
    assert client.status == "ready"


# Each broken answer says whether the connection is still whole. One that finished its
# answer keeps it, as a real server does: closing it unannounced would race the client's reuse
# of a pooled connection, which no client may retry a POST on.


def reset_at_once(exchange: Exchange) -> bool:
    exchange.reset()
    return False


def truncated_sse(exchange: Exchange) -> bool:
    exchange.start_sse()
    exchange.chunk(sse_event({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}))
    exchange.write(b'40\r\ndata: {"jsonrpc')  # a chunk cut short, then the connection closes
    exchange.conn.close()
    return False


def sse_without_the_answer(exchange: Exchange) -> bool:
    exchange.start_sse()
    exchange.chunk(sse_event({"jsonrpc": "2.0", "id": "someone-else", "result": {}}))
    exchange.end_chunks()
    return True


def garbage_json(exchange: Exchange) -> bool:
    exchange.whole("200 OK", b"{\x1b not json")
    return True


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        (reset_at_once, ExchangeFailed),
        (truncated_sse, ExchangeFailed),
        (sse_without_the_answer, ExchangeFailed),
        (garbage_json, ProtocolError),
    ],
)
def test_a_broken_exchange_fails_only_its_request_and_the_client_carries_on(
    serve: Serve,
    clients: list[mcp.Client],
    broken: Callable[[Exchange], bool],
    expected: type[Exception],
) -> None:
    calls = 0
    lock = threading.Lock()

    def answer(exchange: Exchange) -> bool:
        nonlocal calls
        with lock:
            calls += 1
            first = calls == 1
        if first:
            return broken(exchange)
        exchange.whole("200 OK", rpc_result(exchange.body["id"], {"tools": []}))
        return True

    client = connect(serve(answer).url, clients)
    with pytest.raises(expected):
        client.request("tools/list", timeout=5)
    assert client.status == "ready"
    assert client.request("tools/list", timeout=5) == {"tools": []}
