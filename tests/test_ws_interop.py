"""The WebSocket transport against other implementations' servers, with MCP over them: a
server on the ``websockets`` library and one on Node's ``ws``, each bridging to a stdio MCP
server. Their handshake answers pass the strict checks (subprotocol echoed exactly, the
accept key as computed, whatever other headers they add), and the closing handshake ends
cleanly on both sides."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers_transport import WAIT, join_exmcp_threads, ws_server
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection

import exmcp_actors as mcp
from exmcp_actors._transport.websocket import _handshake
from tests.peers.everything import everything_argv
from tests.peers.everything import missing_tools as npm_missing
from tests.peers.node_ws import BRIDGE, ws_module

#: The official SDK's server on stdio (the bridges give it a WebSocket front).
SDK_SERVER = [sys.executable, str(Path(__file__).resolve().parent / "peers" / "sdk_server.py"), "--transport", "stdio"]


@pytest.fixture
def heads(monkeypatch: pytest.MonkeyPatch) -> list[_handshake.Head]:
    """Every handshake answer the transport parses in this test."""
    seen: list[_handshake.Head] = []
    real = _handshake.parse_head

    def recording(lines: list[bytes]) -> _handshake.Head:
        head = real(lines)
        seen.append(head)
        return head

    monkeypatch.setattr(_handshake, "parse_head", recording)
    return seen


def bridge_to_stdio(argv: list[str]) -> Callable[[ServerConnection], None]:
    """A ``websockets`` handler giving each connection its own stdio MCP server."""

    def handler(conn: ServerConnection) -> None:
        child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdin is not None and child.stdout is not None
        stdout = child.stdout

        def to_client() -> None:
            with contextlib.suppress(ConnectionClosed, ValueError):
                for line in stdout:
                    if line.strip():
                        conn.send(line.strip())

        pump = threading.Thread(target=to_client, name="test-bridge", daemon=True)
        pump.start()
        try:
            with contextlib.suppress(ConnectionClosed, BrokenPipeError):
                for message in conn:
                    child.stdin.write(f"{message if isinstance(message, str) else message.decode()}\n")
                    child.stdin.flush()
        finally:
            child.stdin.close()
            child.terminate()
            child.wait(WAIT)
            pump.join(WAIT)

    return handler


@contextlib.contextmanager
def node_ws_bridge(argv: list[str]) -> Iterator[str]:
    """A Node ``ws`` server bridging each connection to ``argv``; yields its URL."""
    process = subprocess.Popen(
        ["node", str(BRIDGE), str(ws_module()), *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("LISTENING "), f"the bridge said {line!r}"
        yield f"ws://127.0.0.1:{int(line.split()[1])}/mcp"
    finally:
        process.terminate()
        process.wait(WAIT)


def check_mcp_works(url: str) -> dict[str, Any]:
    """Connect, list and call a tool, disconnect; the server's info."""
    client = mcp.connect(mcp.WebSocketTransport(url), connect_timeout=WAIT * 3, reconnect=False)
    try:
        names = [tool["name"] for tool in client.list_tools(timeout=WAIT)]
        assert "echo" in names, names
        answer = client.call_tool("echo", {"message": "over the wire", "text": "over the wire"}, timeout=WAIT)
        assert "over the wire" in str(answer["content"]), answer
        return client.server_info
    finally:
        client.disconnect()


def check_the_answer_was_strict_and_is_what_they_send(heads: list[_handshake.Head]) -> None:
    [head] = heads
    assert (head.status, head.version) == (101, "HTTP/1.1")
    assert head.headers["upgrade"].lower() == "websocket"
    assert head.headers["sec-websocket-protocol"] == "mcp"
    assert "sec-websocket-extensions" not in head.headers  # none offered, none chosen


def test_mcp_over_a_websockets_library_server(heads: list[_handshake.Head]) -> None:
    with ws_server(bridge_to_stdio(SDK_SERVER)) as (url, _):
        info = check_mcp_works(url)

    assert info.get("name")
    check_the_answer_was_strict_and_is_what_they_send(heads)
    assert join_exmcp_threads() == []


def test_mcp_over_a_node_ws_server(heads: list[_handshake.Head]) -> None:
    why = npm_missing()
    if why is not None:
        pytest.skip(why)
    with node_ws_bridge(everything_argv()) as url:
        info = check_mcp_works(url)

    assert info.get("name")
    check_the_answer_was_strict_and_is_what_they_send(heads)
    assert join_exmcp_threads() == []
