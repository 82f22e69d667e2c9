"""The SDK test peers start, answer both eras as documented in FRAMES.md, and stop cleanly.

Raw pipes / sockets only: these tests must not depend on the library under test.
"""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websocket

from tests.peers.launch import READY_TIMEOUT, ROOT, Peer

TIMEOUT = 10.0  # generous per-step bound; every wait below uses it or less

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "smoke", "version": "0"},
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "smoke", "version": "0"},
    },
}
DISCOVER = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "server/discover",
    "params": {"_meta": MODERN_META},
}
HTTP_ACCEPT = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}


def modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    headers = {
        **HTTP_ACCEPT,
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def assert_initialize_result(message: dict[str, Any]) -> None:
    assert message["id"] == 1
    result = message["result"]
    assert result["protocolVersion"] == "2025-11-25"
    assert result["capabilities"]["resources"] == {
        "subscribe": True,
        "listChanged": True,
    }
    assert result["capabilities"]["tools"] == {"listChanged": True}
    assert result["serverInfo"]["name"] == "exmcp-test-peer"


def assert_discover_result(message: dict[str, Any]) -> None:
    assert message["id"] == 2
    result = message["result"]
    assert result["supportedVersions"] == ["2026-07-28"]
    assert result["resultType"] == "complete"
    assert result["capabilities"]["resources"]["subscribe"] is True


# --------------------------------------------------------------------------- stdio


class StdioProc:
    """A stdio peer driven over raw pipes; a reader thread makes every read bounded."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._answered = False
        self.reader = threading.Thread(target=self._read, name="stdio-peer-reader")
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(json.loads(raw))
        self.lines.put(None)  # EOF

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def recv(self, timeout: float = TIMEOUT) -> dict[str, Any] | None:
        return self.lines.get(timeout=timeout)

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        # The first answer waits for the interpreter to start (and import the SDK) too.
        reply = self.recv(TIMEOUT if self._answered else READY_TIMEOUT)
        assert reply is not None, "peer closed stdout"
        self._answered = True
        return reply

    def close(self) -> int:
        """Close stdin (how a client ends a stdio session) and wait for a clean exit."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            rc = self.proc.wait(TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(TIMEOUT)
            self.reader.join(TIMEOUT)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        return rc


@pytest.fixture
def stdio_proc() -> Iterator[Any]:
    procs: list[StdioProc] = []

    def spawn(argv: list[str]) -> StdioProc:
        procs.append(StdioProc(argv))
        return procs[-1]

    yield spawn
    for proc in procs:
        proc.close()


def test_a_stdio_peer_answers_initialize_and_pushes_what_notify_asks_before_its_result(
    sdk_stdio_argv: list[str], stdio_proc: Any
) -> None:
    peer = stdio_proc(sdk_stdio_argv)
    assert_initialize_result(peer.request(INITIALIZE))
    peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert peer.request(
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "resources/subscribe",
            "params": {"uri": "file:///a.txt"},
        }
    ) == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {},
    }
    notify = {"kind": "resource_updated", "uri": "file:///a.txt", "count": 2}
    peer.send(
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "notify", "arguments": notify},
        }
    )
    frames = [peer.recv() for _ in range(3)]
    updated = {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"uri": "file:///a.txt"},
    }
    assert frames[:2] == [updated, updated]
    assert frames[2] is not None and frames[2]["id"] == 4
    assert peer.close() == 0


def test_a_stdio_peer_answers_discover_and_acknowledges_then_completes_a_listen(
    sdk_stdio_argv: list[str], stdio_proc: Any
) -> None:
    peer = stdio_proc(sdk_stdio_argv)
    assert_discover_result(peer.request(DISCOVER))
    listen = {
        "jsonrpc": "2.0",
        "id": "listen-1",
        "method": "subscriptions/listen",
        "params": {"_meta": MODERN_META, "notifications": {"toolsListChanged": True}},
    }
    ack = peer.request(listen)
    assert ack == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {
            "_meta": {"io.modelcontextprotocol/subscriptionId": "listen-1"},
            "notifications": {"toolsListChanged": True},
        },
    }
    call = {"_meta": MODERN_META, "name": "close_listens", "arguments": {}}
    peer.send({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": call})
    # The tool result and the listen's final result race; collect both.
    frames = {str(f["id"]): f for f in (peer.recv(), peer.recv()) if f is not None}
    assert frames["listen-1"]["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"
    assert frames["listen-1"]["result"]["resultType"] == "complete"
    assert peer.close() == 0


@pytest.mark.parametrize("sdk_stdio_argv", ["legacy"], indirect=True)
def test_a_legacy_stdio_peer_refuses_discover_and_answers_initialize(
    sdk_stdio_argv: list[str], stdio_proc: Any
) -> None:
    peer = stdio_proc(sdk_stdio_argv)
    reply = peer.request(DISCOVER)
    assert reply["error"]["code"] == -32601
    assert_initialize_result(peer.request(INITIALIZE))
    assert peer.close() == 0


def test_a_stdio_peer_with_a_silent_probe_never_answers_discover_but_answers_initialize(
    sdk_stdio_argv_silent: list[str], stdio_proc: Any
) -> None:
    peer = stdio_proc(sdk_stdio_argv_silent)
    peer.send(DISCOVER)
    # The markers: two round trips behind the probe come back first, and nothing before them.
    assert_initialize_result(peer.request(INITIALIZE))
    peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert peer.request({"jsonrpc": "2.0", "id": 3, "method": "ping"}) == {"jsonrpc": "2.0", "id": 3, "result": {}}
    assert peer.close() == 0


def test_a_stdio_peer_exits_cleanly_on_sigterm_with_its_stdin_still_open(
    sdk_stdio_argv: list[str], stdio_proc: Any
) -> None:
    peer = stdio_proc(sdk_stdio_argv)
    assert_initialize_result(peer.request(INITIALIZE))
    peer.proc.terminate()  # stdin still open: the peer must not wait for EOF
    assert peer.proc.wait(TIMEOUT) == 0
    assert peer.recv() is None  # stdout reached EOF


# --------------------------------------------------------------------------- websocket


def ws_connect(peer: Peer) -> websocket.WebSocket:
    return websocket.create_connection(peer.url, subprotocols=["mcp"], timeout=TIMEOUT)


def ws_request(ws: websocket.WebSocket, message: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps(message))
    reply: dict[str, Any] = json.loads(ws.recv())
    return reply


def assert_ws_closed(ws: websocket.WebSocket) -> None:
    """The server side is gone: recv sees a close frame ('') or a dead socket."""
    try:
        assert ws.recv() == ""
    except (websocket.WebSocketConnectionClosedException, OSError):
        pass


def test_a_ws_peer_serves_both_eras_and_exits_cleanly_when_stopped(sdk_ws_peer: Peer) -> None:
    legacy = ws_connect(sdk_ws_peer)
    modern = ws_connect(sdk_ws_peer)
    try:
        assert legacy.getsubprotocol() == "mcp"
        assert_initialize_result(ws_request(legacy, INITIALIZE))
        assert_discover_result(ws_request(modern, DISCOVER))
    finally:
        legacy.close()
        modern.close()
    sdk_ws_peer.stop()
    assert sdk_ws_peer.proc is not None and sdk_ws_peer.proc.returncode == 0


def test_a_ws_peer_refuses_a_connection_without_the_mcp_subprotocol(shared_ws_peer: Peer) -> None:
    with pytest.raises(websocket.WebSocketBadStatusException):
        websocket.create_connection(shared_ws_peer.url, timeout=TIMEOUT)


def test_a_legacy_ws_peer_refuses_discover_and_answers_initialize(shared_ws_peer_legacy: Peer) -> None:
    ws = ws_connect(shared_ws_peer_legacy)
    try:
        assert ws_request(ws, DISCOVER)["error"]["code"] == -32601
        assert_initialize_result(ws_request(ws, INITIALIZE))
    finally:
        ws.close()


def test_a_ws_peer_restarts_on_the_same_port_and_a_kill_closes_its_connections(sdk_ws_peer: Peer) -> None:
    port = sdk_ws_peer.port
    ws = ws_connect(sdk_ws_peer)
    sdk_ws_peer.restart()
    assert sdk_ws_peer.port == port
    # The old connection was closed by the stop; the restarted peer accepts new ones.
    assert_ws_closed(ws)
    ws.close()
    ws = ws_connect(sdk_ws_peer)
    try:
        assert_initialize_result(ws_request(ws, INITIALIZE))
        sdk_ws_peer.kill()
        assert sdk_ws_peer.proc is not None and sdk_ws_peer.proc.returncode == -9
        assert_ws_closed(ws)
    finally:
        ws.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT).close()


# --------------------------------------------------------------------------- http


def sse_messages(response: httpx.Response) -> list[dict[str, Any]]:
    """JSON-RPC messages from a complete SSE body (data: lines with content)."""
    return [
        json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:") and line[5:].strip()
    ]


def test_an_http_peer_serves_both_eras_and_a_deleted_session_is_gone(sdk_http_peer: Peer) -> None:
    with httpx.Client(timeout=TIMEOUT) as client:
        init = client.post(sdk_http_peer.url, json=INITIALIZE, headers=HTTP_ACCEPT)
        assert init.status_code == 200
        assert init.headers["content-type"].startswith("text/event-stream")
        session_id = init.headers["mcp-session-id"]
        [message] = sse_messages(init)
        assert_initialize_result(message)

        discover = client.post(sdk_http_peer.url, json=DISCOVER, headers=modern_headers("server/discover"))
        assert discover.status_code == 200
        assert discover.headers["content-type"] == "application/json"
        assert "mcp-session-id" not in discover.headers
        assert_discover_result(discover.json())

        # Modern has no GET stream; legacy sessions end with DELETE and then 404.
        assert client.get(sdk_http_peer.url, headers=modern_headers("server/discover")).status_code == 405
        legacy = {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
        assert client.delete(sdk_http_peer.url, headers=legacy).status_code == 200
        ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
        assert client.post(sdk_http_peer.url, json=ping, headers={**HTTP_ACCEPT, **legacy}).status_code == 404
    sdk_http_peer.stop()
    assert sdk_http_peer.proc is not None and sdk_http_peer.proc.returncode == 0


def test_a_legacy_http_peer_refuses_discover_with_400_and_answers_initialize(shared_http_peer_legacy: Peer) -> None:
    with httpx.Client(timeout=TIMEOUT) as client:
        discover = client.post(
            shared_http_peer_legacy.url,
            json=DISCOVER,
            headers=modern_headers("server/discover"),
        )
        assert discover.status_code == 400
        assert discover.json()["error"]["code"] == -32600
        init = client.post(shared_http_peer_legacy.url, json=INITIALIZE, headers=HTTP_ACCEPT)
        assert init.status_code == 200
        assert_initialize_result(sse_messages(init)[0])


def test_http_legacy_get_stream_carries_notifications(shared_http_peer: Peer) -> None:
    url = shared_http_peer.url
    with (
        httpx.Client(timeout=TIMEOUT) as client,
        httpx.Client(timeout=TIMEOUT) as streamer,
    ):
        init = client.post(url, json=INITIALIZE, headers=HTTP_ACCEPT)
        legacy = {
            **HTTP_ACCEPT,
            "Mcp-Session-Id": init.headers["mcp-session-id"],
            "MCP-Protocol-Version": "2025-11-25",
        }
        assert (
            client.post(
                url,
                json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                headers=legacy,
            ).status_code
            == 202
        )
        with streamer.stream("GET", url, headers={**legacy, "Accept": "text/event-stream"}) as stream:
            assert stream.status_code == 200
            call = {"name": "notify", "arguments": {"kind": "tools"}}
            result = client.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "tools/call",
                    "params": call,
                },
                headers=legacy,
            )
            assert sse_messages(result)[0]["id"] == 3
            lines = stream.iter_lines()
            data = next(line for line in lines if line.startswith("data:"))
            assert json.loads(data[5:]) == {
                "jsonrpc": "2.0",
                "method": "notifications/tools/list_changed",
            }
