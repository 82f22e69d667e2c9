"""A hostile WebSocket peer gets bounded cost: a trickled frame is no sign of life, a
redirect is refused (websocket-client would follow it, re-sending Authorization), and a
message over max_frame_bytes fails the connection with 1009 (the client reconnects) instead
of leaving it up but deaf behind a message that never ends."""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers_transport import WAIT, RawWsPeer, RecordingSink, join_exmcp_threads, read_http_head, ws_server
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection

import exmcp_actors as mcp
from exmcp_actors._protocol._errors import TransportError
from exmcp_actors._transport.websocket._connection import WebSocketTransport

SECRET = "s3cr3t-t0k3n"


@pytest.fixture
def raw_peer() -> Iterator[RawWsPeer]:
    peer = RawWsPeer()
    yield peer
    peer.close()
    assert join_exmcp_threads() == []


def test_a_peer_trickling_an_unfinished_frame_is_dead_after_the_heartbeat_window(raw_peer: RawWsPeer) -> None:
    transport = WebSocketTransport(raw_peer.url, heartbeat_interval=0.2, heartbeat_timeout=0.3, close_timeout=0.5)
    sink = RecordingSink()
    transport.open(sink, timeout=WAIT)
    conn = raw_peer.wait_connected()
    stop = threading.Event()

    def trickle() -> None:
        # A text frame announcing 120 bytes, then one byte every 20 ms: never complete within the test.
        with contextlib.suppress(OSError):
            conn.sendall(b"\x81\x78")
            while not stop.wait(0.02):
                conn.sendall(b"x")

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        reason = sink.wait_lost()
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        thread.join(WAIT)
        transport.close()
    assert "heartbeat timeout" in reason
    assert elapsed < 0.2 + 0.3 + 2.0  # the window, plus scheduling slack on a slow machine


@contextlib.contextmanager
def redirecting_server(location: str) -> Iterator[tuple[str, list[bytes]]]:
    """A server that answers every WebSocket handshake with a 302 to ``location``; yields its URL
    and the request heads it received."""
    listener = socket.create_server(("127.0.0.1", 0))
    heads: list[bytes] = []

    stop = threading.Event()
    listener.settimeout(0.05)  # close() does not wake accept(): poll for the end

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with contextlib.suppress(OSError):
                with conn:
                    heads.append(read_http_head(conn))
                    conn.sendall(f"HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n".encode())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"ws://127.0.0.1:{listener.getsockname()[1]}/mcp", heads
    finally:
        stop.set()
        thread.join(WAIT)
        listener.close()


def test_a_redirect_is_not_followed_and_the_error_names_it() -> None:
    with socket.create_server(("127.0.0.1", 0)) as elsewhere:
        target = f"ws://127.0.0.1:{elsewhere.getsockname()[1]}/mcp"
        with redirecting_server(f"{target}?token={SECRET}") as (url, heads):
            transport = WebSocketTransport(url, headers={"Authorization": f"Bearer {SECRET}"}, heartbeat_interval=None)
            with pytest.raises(TransportError) as info:
                transport.open(RecordingSink(), timeout=WAIT)

            with pytest.raises(mcp.ConnectError) as connect_info:
                mcp.connect(transport, reconnect=False, connect_timeout=WAIT)

        elsewhere.settimeout(0.2)
        with pytest.raises(TimeoutError):
            elsewhere.accept()  # the redirect target never saw the client (nor its Authorization)

    text = str(info.value)
    assert "redirect" in text and "302" in text and target in text, text
    assert SECRET not in text and SECRET not in str(connect_info.value)
    assert "redirect" in str(connect_info.value)
    assert len(heads) == 2  # one handshake per attempt, and no more


# -- a message over max_frame_bytes fails the connection -------------------------------------

FAST = mcp.Backoff(initial=0.02, factor=2, maximum=0.1, jitter=0.0)
LIMIT = 64 * 1024


def answer_the_handshake(conn: ServerConnection) -> None:
    """Play a legacy MCP server up to ready: answer initialize, take notifications/initialized."""
    request = json.loads(conn.recv())
    assert request["method"] == "initialize", request
    result = {
        "protocolVersion": request["params"]["protocolVersion"],
        "capabilities": {"tools": {"listChanged": True}},
        "serverInfo": {"name": "hostile", "version": "1"},
    }
    conn.send(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}))
    assert json.loads(conn.recv())["method"] == "notifications/initialized"


class OversizingServer:
    """A WebSocket MCP server whose first connection, once ready and told to ``go`` (the
    host is listening by then: a loss before that would race its subscription), sends
    ``message`` (over LIMIT) and records the close status the client answers with; later
    ones stay quiet."""

    def __init__(self, message: Any) -> None:
        self.message = message
        self.go = threading.Event()
        self.connections = 0
        self.close_codes: list[int | None] = []
        self.first_closed = threading.Event()

    def __call__(self, conn: ServerConnection) -> None:
        self.connections += 1
        first = self.connections == 1
        answer_the_handshake(conn)
        if first:
            assert self.go.wait(WAIT)
            with contextlib.suppress(ConnectionClosed):
                conn.send(self.message)
                conn.recv()
            self.close_codes.append(conn.close_code)
            self.first_closed.set()
            return
        with contextlib.suppress(ConnectionClosed):
            for _ in conn:
                pass


def endless_fragments() -> Iterator[str]:
    """A text message that never ends: 4 KiB fragments for as long as the client takes them."""
    yield '{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"'
    yield from itertools.repeat("x" * 4096)


MESSAGES = {"an endless fragmented message": endless_fragments, "a single oversized frame": lambda: "y" * (2 * LIMIT)}


@contextlib.contextmanager
def sent_an_oversized_message(what: str, **connect: Any) -> Iterator[tuple[OversizingServer, mcp.Client, mcp.Listener]]:
    """A client of an :class:`OversizingServer` sending ``MESSAGES[what]``, listening for
    every change of its connection: (the server, the client, the listener), once it was sent."""
    server = OversizingServer(MESSAGES[what]())
    with ws_server(server) as (url, _):
        transport = WebSocketTransport(url, max_frame_bytes=LIMIT, heartbeat_interval=None, close_timeout=0.5)
        client = mcp.connect(transport, protocol="legacy", connect_timeout=WAIT, **connect)
        try:
            listener = client.subscribe_notifications({"toolsListChanged": True})
            server.go.set()
            yield server, client, listener
        finally:
            client.disconnect()


@pytest.mark.parametrize("what", MESSAGES)
def test_an_oversized_message_closes_with_1009_and_the_client_reconnects(what: str) -> None:
    with sent_an_oversized_message(what, backoff=FAST) as (server, client, listener):
        reconnected = listener.get(timeout=WAIT)
        assert isinstance(reconnected, mcp.Reconnected), reconnected
        assert server.first_closed.wait(WAIT)
        assert server.close_codes == [1009]
        assert server.connections == 2
        assert client.status == "ready"


@pytest.mark.parametrize("what", MESSAGES)
def test_with_reconnect_off_an_oversized_message_is_a_reported_close(what: str) -> None:
    with sent_an_oversized_message(what, reconnect=False) as (server, client, listener):
        closed = listener.get(timeout=WAIT)
        assert isinstance(closed, mcp.Closed), closed
        kind, why = closed.reason
        assert kind == "transport_closed" and "closed it with status 1009" in why, closed.reason
        assert server.first_closed.wait(WAIT)
        assert server.close_codes == [1009]
        assert client.status == "disconnected"
