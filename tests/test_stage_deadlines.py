"""Never stuck: every stage of a connect and a reconnect is bounded, through the whole client
(actor, timers, refcount worker) against the scriptable FakeServer; and one deadline bounds
the whole connect() whichever transport hangs, at whichever stage, against hostile peers."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import queue
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers_transport import (
    HostileTcpPeer,
    StallingTlsPeer,
    join_exmcp_threads,
    join_threads_named,
    unanswered_port,
    upgrade_answer,
)
from tls_files import make_tls_files

import exmcp_actors as mcp
from exmcp_actors.testing import NO_REPLY, FakeConnection, FakeServer

FAST = mcp.Backoff(initial=0.02, factor=2, maximum=0.1, jitter=0.0)
A, B, SLOW1, SLOW2 = "file:///a", "file:///b", "file:///slow1", "file:///slow2"
WAIT = 10.0


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as fake:
        yield fake


def next_message(handle: Any, timeout: float = WAIT) -> Any:
    try:
        return handle.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"{handle!r} received nothing within {timeout}s") from None


def silent_on(connections: set[int], method: str, server: FakeServer) -> None:
    """``method`` is never answered on these connections (answered as usual on the others)."""
    default = server.default_handler(method)
    assert default is not None

    def handler(params: dict[str, Any], ctx: FakeConnection) -> Any:
        return NO_REPLY if ctx.number in connections else default(params, ctx)

    server.on(method, handler)


def test_connect_timeout_bounds_the_whole_connect_and_names_the_stage(server: FakeServer) -> None:
    server.on("initialize", lambda params, ctx: NO_REPLY)
    started = time.monotonic()
    with pytest.raises(mcp.ConnectError) as caught:
        mcp.connect(server.transport(), protocol="legacy", connect_timeout=0.5)
    elapsed = time.monotonic() - started
    assert elapsed < 2.5, f"connect() took {elapsed:.1f}s with connect_timeout=0.5"
    assert caught.value.reason == ("timeout", "initialize")
    assert str(caught.value) == (
        "gave up after 0.5s waiting for an answer to initialize; check it speaks MCP, or raise connect_timeout"
    )


def test_a_reconnect_whose_initialize_is_never_answered_retries_then_reports_reconnected(
    server: FakeServer,
) -> None:
    client = mcp.connect(server.transport(), protocol="legacy", backoff=FAST, connect_timeout=0.5)
    try:
        listener = client.subscribe_notifications({"resourceSubscriptions": [A]})
        silent_on({2}, "initialize", server)  # the first reconnect hangs in its handshake
        server.drop()
        reconnected = next_message(listener)
        assert isinstance(reconnected, mcp.Reconnected), reconnected
        assert reconnected.report == {"resubscribed": [A], "failed": []}
        assert server.connections == 3
        assert client.status == "ready"
    finally:
        client.disconnect()


def test_reconnects_that_never_finish_their_handshake_end_in_reconnect_exhausted(server: FakeServer) -> None:
    client = mcp.connect(
        server.transport(), protocol="legacy", backoff=FAST, connect_timeout=0.4, max_reconnect_attempts=2
    )
    try:
        listener = client.subscribe_notifications({"resourceSubscriptions": [A]})
        server.on("initialize", lambda params, ctx: NO_REPLY)
        server.drop()
        closed = next_message(listener)
        assert isinstance(closed, mcp.Closed), closed
        assert closed.reason == (
            "reconnect_exhausted",
            "gave up after 0.4s waiting for an answer to initialize; check it speaks MCP, or raise connect_timeout",
        )
        assert client.status == "disconnected"
    finally:
        client.disconnect()


def test_slow_uris_on_resubscribe_do_not_hold_up_the_report_each_for_its_own_timeout(server: FakeServer) -> None:
    # request_timeout stays at 30s: resubscribing one URI after another took 30s per silent URI.
    client = mcp.connect(server.transport(), protocol="legacy", backoff=FAST, connect_timeout=1.0)
    try:
        listener = client.subscribe_notifications({"resourceSubscriptions": [A, SLOW1, B, SLOW2]})
        default = server.default_handler("resources/subscribe")
        assert default is not None

        def subscribe(params: dict[str, Any], ctx: FakeConnection) -> Any:
            if ctx.number > 1 and params["uri"] in (SLOW1, SLOW2):
                return NO_REPLY
            return default(params, ctx)

        server.on("resources/subscribe", subscribe)
        started = time.monotonic()
        server.drop()
        reconnected = next_message(listener)
        elapsed = time.monotonic() - started
        assert isinstance(reconnected, mcp.Reconnected), reconnected
        assert reconnected.report["resubscribed"] == [A, B]
        assert [uri for uri, _ in reconnected.report["failed"]] == [SLOW1, SLOW2]
        assert elapsed < 6.0, f"Reconnected took {elapsed:.1f}s"
        # All four went out before any answer was awaited.
        assert server.count("resources/subscribe", connection=2) == 4
        server.updated(A)
        assert next_message(listener).params == {"uri": A}
    finally:
        client.disconnect()


# -- one deadline for the whole connect(), whatever transport hangs where ----------------------

T = 1.5
#: What connect() may take past connect_timeout (it waits at most 0.5s for the teardown).
MARGIN = 1.5


def trickled_upgrade_answer(conn: socket.socket, head: bytes, stop: threading.Event) -> None:
    conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nX-Slow: ")
    while not stop.wait(0.05):
        conn.sendall(b"a")


def upgraded_then_silent(conn: socket.socket, head: bytes, stop: threading.Event) -> None:
    conn.sendall(upgrade_answer(head))
    stop.wait()  # never answers initialize, nor our close frame


def accepted_then_silent(conn: socket.socket, head: bytes, stop: threading.Event) -> None:
    stop.wait()


IGNORES_SIGTERM = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)",
]
SILENT = [sys.executable, "-c", "import time; time.sleep(3600)"]


@functools.cache
def ca_file() -> str:
    """A CA whose certificate for localhost the TLS cases trust (made once)."""
    pytest.importorskip("cryptography")
    ca, _, _ = make_tls_files(tempfile.mkdtemp(prefix="exmcp-tls-"))
    return ca


@contextlib.contextmanager
def target(case: str) -> Iterator[Any]:
    """The transport of one hanging case (close_timeout and stop_timeout of 3s, io_timeout of
    60s: teardowns and waits that once added themselves to connect(), or outlived it)."""
    if case.endswith("tls-handshake-stalls"):
        with StallingTlsPeer() as peer:
            if case.startswith("wss"):
                yield mcp.WebSocketTransport(
                    f"wss://localhost:{peer.port}/mcp", heartbeat_interval=None, sslopt={"ca_certs": ca_file()}
                )
            else:
                yield mcp.HttpTransport(f"https://localhost:{peer.port}/mcp", verify=ca_file(), io_timeout=60.0)
    elif case.startswith("ws-tcp") or case.startswith("http-tcp"):
        with unanswered_port() as port:
            yield f"ws://127.0.0.1:{port}/mcp" if case.startswith("ws") else f"http://127.0.0.1:{port}/mcp"
    elif case.startswith("ws"):
        behave = trickled_upgrade_answer if case == "ws-trickled-upgrade-answer" else upgraded_then_silent
        with HostileTcpPeer(behave) as peer:
            yield mcp.WebSocketTransport(f"ws://127.0.0.1:{peer.port}/mcp", heartbeat_interval=None, close_timeout=3.0)
    elif case.startswith("http"):
        with HostileTcpPeer(accepted_then_silent) as peer:
            yield f"http://127.0.0.1:{peer.port}/mcp"
    else:
        yield mcp.StdioTransport(IGNORES_SIGTERM if case == "stdio-ignores-sigterm" else SILENT, stop_timeout=3.0)


HANGS = {
    # case: (protocol, the stage the error names)
    "ws-tcp-connect-never-answered": ("legacy", "open"),
    "ws-trickled-upgrade-answer": ("legacy", "open"),
    "ws-upgraded-then-silent": ("legacy", "initialize"),
    "http-tcp-connect-never-answered": ("legacy", "initialize"),
    "http-request-never-answered": ("auto", "discover"),
    "wss-tls-handshake-stalls": ("legacy", "open"),
    "https-tls-handshake-stalls": ("legacy", "initialize"),
    "stdio-silent": ("legacy", "initialize"),
    "stdio-ignores-sigterm": ("auto", "discover"),
}


@pytest.mark.parametrize("case", HANGS)
def test_connect_ends_by_connect_timeout_whatever_hangs(case: str) -> None:
    protocol, stage = HANGS[case]
    with target(case) as transport:
        started = time.monotonic()
        with pytest.raises(mcp.ConnectError) as caught:
            mcp.connect(transport, protocol=protocol, connect_timeout=T, probe_timeout=WAIT)
        elapsed = time.monotonic() - started
        # What connect() left to finish in the background ends too, within its own bounds.
        assert join_exmcp_threads() == []
        assert join_threads_named("exmcp-http-", WAIT) == []
    assert elapsed < T + MARGIN, f"{case}: connect() took {elapsed:.1f}s with connect_timeout={T}"
    assert caught.value.reason == ("timeout", stage)
    assert str(caught.value).startswith(f"gave up after {T:.1f}s waiting for ")


# -- a disconnect() during a reconnect whose open hangs ---------------------------------------


def read_client_frame(conn: socket.socket, pending: bytearray) -> bytes:
    """The payload of the client's next (masked, unfragmented) frame."""

    def take(size: int) -> bytes:
        while len(pending) < size:
            chunk = conn.recv(65536)
            if not chunk:
                raise ConnectionError("the client closed the connection")
            pending.extend(chunk)
        data = bytes(pending[:size])
        del pending[:size]
        return data

    _, second = take(2)
    size = second & 0x7F
    if size == 126:
        size = int.from_bytes(take(2), "big")
    elif size == 127:
        size = int.from_bytes(take(8), "big")
    mask = take(4)
    return bytes(b ^ mask[i % 4] for i, b in enumerate(take(size)))


def ready_then_dropped(conn: socket.socket, head: bytes) -> None:
    """Play a legacy MCP server over a hand-made WebSocket up to ready, then drop the TCP connection."""
    conn.sendall(upgrade_answer(head))
    pending = bytearray()
    request = json.loads(read_client_frame(conn, pending))
    version = request["params"]["protocolVersion"]
    result = {"protocolVersion": version, "capabilities": {}, "serverInfo": {"name": "raw"}}
    answer = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}).encode()
    conn.sendall(bytes([0x81, 126]) + len(answer).to_bytes(2, "big") + answer)
    assert json.loads(read_client_frame(conn, pending))["method"] == "notifications/initialized"
    conn.close()


@pytest.mark.parametrize("hang", ["trickled-upgrade-answer", "upgraded-never-answered"])
def test_disconnect_during_a_reconnect_whose_open_hangs_ends_it_at_once(hang: str) -> None:
    connections = itertools.count(1)
    hanging = threading.Event()

    def behave(conn: socket.socket, head: bytes, stop: threading.Event) -> None:
        if next(connections) == 1:
            ready_then_dropped(conn, head)
            return
        hanging.set()
        if hang == "trickled-upgrade-answer":
            trickled_upgrade_answer(conn, head, stop)
        else:
            accepted_then_silent(conn, head, stop)

    with HostileTcpPeer(behave) as peer:
        transport = mcp.WebSocketTransport(f"ws://127.0.0.1:{peer.port}/mcp", heartbeat_interval=None)
        client = mcp.connect(transport, protocol="legacy", backoff=FAST, connect_timeout=WAIT * 3)
        assert hanging.wait(WAIT), "no reconnect"

        started = time.monotonic()
        client.disconnect()
        elapsed = time.monotonic() - started

        assert join_threads_named("exmcp-connect-", 1.0) == []
        assert join_exmcp_threads() == []
    assert elapsed < 2.0, f"disconnect() took {elapsed:.1f}s"
    assert client.status == "disconnected"
