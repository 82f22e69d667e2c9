"""Review of the security merge from the side of other implementations and of the new threads:
the SSE pacing as polling servers use it (the TypeScript SDK's ``closeSSE`` with its
``retryInterval``, the Python SDK's ``close_sse_stream`` with its ``retry_interval``), what the
GET stream says when it is stopped, and the loopback callback listener in a process with many
files open."""

from __future__ import annotations

import http.client
import itertools
import json
import logging
import os
import resource
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from raw_http import WAIT, Exchange, RawHttp, legacy_basics, rpc_result

import exmcp_actors as mcp
from exmcp_actors._auth._browser import LoopbackListener, free_port

LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
#: What the polling servers below ask: above the 0.5 s floor, so it is honoured as asked.
RETRY_MS = 600


@pytest.fixture
def servers() -> Iterator[list[RawHttp]]:
    started: list[RawHttp] = []
    yield started
    for server in started:
        server.stop()


@pytest.fixture
def clients() -> Iterator[list[mcp.Client]]:
    made: list[mcp.Client] = []
    yield made
    for client in made:
        client.disconnect()


def connect(url: str, clients: list[mcp.Client]) -> mcp.Client:
    client = mcp.connect(mcp.HttpTransport(url), protocol="legacy", reconnect=False)
    clients.append(client)
    return client


def sse_event(message: Any, event_id: str) -> bytes:
    return f"id: {event_id}\ndata: {json.dumps(message)}\n\n".encode()


def gaps_between(times: list[float]) -> list[float]:
    return [later - earlier for earlier, later in itertools.pairwise(times)]


def assert_paced_as_asked(gaps: list[float]) -> None:
    # The server's 0.6 s each time, plus at most the jitter and a loaded machine's slack; never
    # the 1.2 s, 2.4 s, ... of a doubling, which would hide what a polling server paces.
    assert all(RETRY_MS / 1000 - 0.05 <= gap < 2 * RETRY_MS / 1000 - 0.1 for gap in gaps), gaps


# -- a server that polls: each stream delivers, then ends, and the next opens after retry: ---


def test_a_get_stream_that_delivers_and_ends_is_reopened_each_time_after_the_retry_the_server_asked(
    servers: list[RawHttp], clients: list[mcp.Client]
) -> None:
    opened: list[float] = []

    def answer(exchange: Exchange) -> bool:
        if legacy_basics(exchange):
            return True
        if exchange.method == "GET":
            opened.append(time.monotonic())
            body = f"retry: {RETRY_MS}\n".encode() + sse_event(LIST_CHANGED, f"e{len(opened)}")
            exchange.whole("200 OK", body, content_type="text/event-stream")
            return True
        exchange.whole("200 OK", rpc_result(exchange.body["id"], {"tools": []}))
        return True

    server = RawHttp(answer)
    servers.append(server)
    connect(server.url, clients)
    assert server.wait_until(lambda: len(opened) >= 4, timeout=30)
    assert_paced_as_asked(gaps_between(opened))


def test_a_response_stream_the_server_ends_each_time_after_a_message_is_resumed_after_the_retry_it_asked(
    servers: list[RawHttp], clients: list[mcp.Client]
) -> None:
    resumed: list[float] = []
    asked: list[Any] = []

    def answer(exchange: Exchange) -> bool:
        if legacy_basics(exchange):
            return True
        if exchange.method == "GET":
            if "last-event-id" not in exchange.headers:
                exchange.whole("405 Method Not Allowed")
                return True
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

    server = RawHttp(answer)
    servers.append(server)
    client = connect(server.url, clients)
    assert client.request("tools/list", timeout=30) == {"tools": []}
    assert_paced_as_asked(gaps_between(resumed))


# -- what the GET stream says when the client stops --------------------------------------------


def test_a_client_that_disconnects_logs_no_reopening_of_its_get_stream(
    servers: list[RawHttp], clients: list[mcp.Client], caplog: pytest.LogCaptureFixture
) -> None:
    streaming = threading.Event()

    def answer(exchange: Exchange) -> bool:
        if legacy_basics(exchange):
            return True
        if exchange.method == "GET":
            exchange.start_sse()
            exchange.chunk(b": open\n\n")
            streaming.set()
            while exchange.conn.recv(1024):  # until the client goes
                pass
            return False
        exchange.whole("200 OK", rpc_result(exchange.body["id"], {"tools": []}))
        return True

    server = RawHttp(answer)
    servers.append(server)
    client = connect(server.url, clients)
    assert streaming.wait(WAIT)
    caplog.set_level(logging.DEBUG, logger="exmcp_actors")
    client.disconnect()
    said = [record.getMessage() for record in caplog.records if record.name == "exmcp_actors.http"]
    assert [line for line in said if "reopening" in line] == [], said


# -- the loopback callback listener ---------------------------------------------------------------


@pytest.fixture
def files_open_past_1024() -> Iterator[None]:
    """Every descriptor up to past 1024 taken while the test makes its sockets, as in a host
    with many connections open: select() cannot watch those."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        if hard != resource.RLIM_INFINITY and hard < 1200:
            pytest.skip("this machine allows fewer than 1200 open files")
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    taken = [os.dup(0) for _ in range(1100)]
    try:
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_callback_listener_takes_the_callback_when_its_sockets_are_numbered_past_1024(
    files_open_past_1024: None,
) -> None:
    port = free_port("127.0.0.1")
    redirect = f"http://127.0.0.1:{port}/callback"
    listener = LoopbackListener(redirect)
    answered: list[int] = []

    def browser() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        try:
            connection.request("GET", "/callback?code=c0de&state=s1")
            answered.append(connection.getresponse().status)
        finally:
            connection.close()

    thread = threading.Thread(target=browser, daemon=True)
    thread.start()
    assert listener.wait(redirect, 5.0) == f"{redirect}?code=c0de&state=s1"
    thread.join(WAIT)
    assert answered == [200]
