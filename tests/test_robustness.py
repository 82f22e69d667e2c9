"""Bad input from a server never kills the client or loses a listener; server requests are
answered; a silent WebSocket peer is noticed by the heartbeat."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from helpers_transport import RawWsPeer

import exmcp_actors as mcp
from exmcp_actors._protocol._errors import TransitionError
from exmcp_actors._protocol._session import Session
from exmcp_actors.testing import NO_REPLY, FakeError, FakeServer

TIMEOUT = 5.0
URI = "file:///watched.txt"
UPDATED = "notifications/resources/updated"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as fake:
        yield fake


@pytest.fixture
def client(server: FakeServer) -> Iterator[mcp.Client]:
    transport = server.transport()
    transport.max_frame_bytes = 4096  # small, so an oversized frame is cheap to make
    client = mcp.connect(transport, reconnect=False)
    yield client
    client.disconnect()


# Each case: what the server sends, and a word the logged warning must contain.
BAD_FRAMES: list[tuple[str, Any, str]] = [
    ("malformed-json", '{"jsonrpc": "2.0", "method": ', "invalid"),
    ("batch", [{"jsonrpc": "2.0", "method": UPDATED, "params": {"uri": URI}}], "batch"),
    ("not-an-object", 42, "JSON object"),
    ("wrong-version", {"jsonrpc": "1.0", "method": UPDATED, "params": {"uri": URI}}, "jsonrpc"),
    ("response-to-unknown-id", {"jsonrpc": "2.0", "id": 987654, "result": {}}, "unknown request id"),
    ("error-to-unknown-id", {"jsonrpc": "2.0", "id": "nope", "error": {"code": -1, "message": "x"}}, "unknown"),
    ("params-of-wrong-type", {"jsonrpc": "2.0", "method": UPDATED, "params": "file:///watched.txt"}, "params"),
    ("uri-of-wrong-type", {"jsonrpc": "2.0", "method": UPDATED, "params": {"uri": 7}}, ""),
    ("unknown-notification", {"jsonrpc": "2.0", "method": "notifications/made_up", "params": {}}, ""),
    ("oversized", "x" * 10_000, "large"),
    ("invalid-utf8", b'{"jsonrpc": "2.0", "method": "\xff"}', ""),
]


@pytest.mark.parametrize(("frame", "word"), [(f, w) for _, f, w in BAD_FRAMES], ids=[i for i, _, _ in BAD_FRAMES])
def test_a_bad_frame_is_logged_and_skipped_and_the_client_and_its_listener_carry_on(
    client: mcp.Client, server: FakeServer, caplog: pytest.LogCaptureFixture, frame: Any, word: str
) -> None:
    listener = client.subscribe_notifications({"resourceSubscriptions": [URI]})
    caplog.set_level(logging.DEBUG, logger="exmcp_actors")

    if isinstance(frame, (str, bytes)):
        server.send_raw(frame)
    else:
        server.send_raw(json.dumps(frame))
    server.updated(URI)  # a good frame right behind the bad one

    message = listener.get(timeout=TIMEOUT)
    assert (message.method, message.params) == (UPDATED, {"uri": URI})
    assert client.status == "ready"
    assert client.list_tools() is not None  # requests are still served
    assert listener.pending() == 0  # the bad frame delivered nothing, before or after
    if word:
        logged = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
        assert word.lower() in logged.lower(), logged


def test_our_own_bug_handling_a_frame_closes_the_client_as_crashed_and_is_not_blamed_on_the_server(
    client: mcp.Client, server: FakeServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    listener = client.subscribe_notifications({"resourceSubscriptions": [URI]})
    original = Session._on_server_request

    def buggy(session: Session, msg: Any) -> None:
        if msg.method == "test/bug":
            raise TransitionError("no move 'negotiated' from the ready phase")
        original(session, msg)

    monkeypatch.setattr(Session, "_on_server_request", buggy)
    caplog.set_level(logging.DEBUG, logger="exmcp_actors")

    server.request("test/bug")  # a server request: the client actor handles it, not the reader

    closed = listener.get(timeout=TIMEOUT)
    assert isinstance(closed, mcp.Closed)
    assert closed.reason == ("crashed", "TransitionError(\"no move 'negotiated' from the ready phase\")")
    assert client.status == "disconnected"
    internal = [r for r in caplog.records if "internal error handling a frame" in r.getMessage()]
    assert len(internal) == 1 and internal[0].levelno == logging.ERROR and internal[0].exc_info
    assert not [r for r in caplog.records if "invalid frame" in r.getMessage()]  # never the peer's fault
    with pytest.raises(mcp.NotConnected):
        client.list_tools()


def test_a_server_ping_is_answered_and_an_unknown_server_request_gets_method_not_found(
    client: mcp.Client, server: FakeServer
) -> None:
    ping = server.request("ping")
    assert server.wait_response(ping, timeout=TIMEOUT)["result"] == {}
    unknown = server.request("sampling/createMessage", {"messages": []})
    error = server.wait_response(unknown, timeout=TIMEOUT)["error"]
    assert error["code"] == -32601
    assert "sampling/createMessage" in error["message"]
    assert client.status == "ready"


def test_a_request_answered_with_an_error_raises_request_error_with_code_message_and_data(
    client: mcp.Client, server: FakeServer
) -> None:
    def refuse(params: dict[str, Any], ctx: Any) -> Any:
        raise FakeError(-32042, "not today", {"why": "test"})

    server.on("tools/call", refuse)
    with pytest.raises(mcp.RequestError) as info:
        client.call_tool("x")
    assert (info.value.code, info.value.message, info.value.data) == (-32042, "not today", {"why": "test"})


def test_a_silent_websocket_peer_is_noticed_by_the_heartbeat_and_the_listener_is_told() -> None:
    peer = RawWsPeer()
    try:
        transport = mcp.WebSocketTransport(peer.url, heartbeat_interval=0.2, heartbeat_timeout=0.3)
        answered: list[Any] = []

        def answer_handshake() -> None:
            _, payload = peer.recv_frame()
            request = json.loads(payload)
            answered.append(request["method"])
            result = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "raw"}}
            peer.send_text(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}))
            peer.recv_frame()  # notifications/initialized; from here on the peer is silent

        helper = threading.Thread(target=answer_handshake, name="test-raw-handshake")
        helper.start()
        client = mcp.connect(transport, protocol="legacy", reconnect=False)
        helper.join(TIMEOUT)
        assert answered == ["initialize"]
        listener = client.subscribe_notifications({"toolsListChanged": True})

        closed = listener.get(timeout=0.2 + 0.3 + TIMEOUT)
        assert closed.tag == "ex_mcp_notification_closed"
        kind, reason = closed.reason
        assert kind == "transport_closed" and "heartbeat" in reason
        assert client.status == "disconnected"
    finally:
        peer.close()


# Responses whose id is no JSON-RPC id: each must be dropped with a warning, never a traceback.
BAD_IDS: list[Any] = [[1], {"a": 1}, 1.5, True]


@pytest.mark.parametrize("bad_id", BAD_IDS, ids=["array", "object", "fraction", "bool"])
@pytest.mark.parametrize("kind", ["result", "error"])
def test_a_response_with_a_bad_id_is_dropped_with_a_rate_limited_warning_and_no_traceback(
    client: mcp.Client, server: FakeServer, caplog: pytest.LogCaptureFixture, bad_id: Any, kind: str
) -> None:
    listener = client.subscribe_notifications({"resourceSubscriptions": [URI]})
    caplog.set_level(logging.DEBUG)
    answer = {"result": {}} if kind == "result" else {"error": {"code": -1, "message": "x"}}

    server.send_batch([{"jsonrpc": "2.0", "id": bad_id, **answer}] * 200)
    server.updated(URI)

    assert listener.get(timeout=TIMEOUT).method == UPDATED
    assert client.list_tools() is not None
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("exmcp_actors")]
    assert 1 <= len(warnings) <= 2, [r.getMessage() for r in warnings]  # 200 bad frames, one record
    assert "id" in warnings[0].getMessage()


@pytest.mark.parametrize("kind", ["result", "error"])
def test_an_id_equal_to_ours_as_a_number_answers_our_request(client: mcp.Client, server: FakeServer, kind: str) -> None:
    def answer_with_a_float_id(params: dict[str, Any], ctx: Any) -> Any:
        assert isinstance(ctx.request_id, int)
        if kind == "result":
            ctx.send({"jsonrpc": "2.0", "id": float(ctx.request_id), "result": {"content": [], "n": 7}})
        else:
            ctx.send({"jsonrpc": "2.0", "id": float(ctx.request_id), "error": {"code": -5, "message": "no"}})
        return NO_REPLY

    server.on("tools/call", answer_with_a_float_id)

    if kind == "result":
        assert client.call_tool("t", {}, timeout=TIMEOUT)["n"] == 7
    else:
        with pytest.raises(mcp.RequestError) as info:
            client.call_tool("t", {}, timeout=TIMEOUT)
        assert info.value.code == -5
