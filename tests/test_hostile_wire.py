"""Real clients against hostile servers (a FakeServer pushing raw frames, a raw HTTP peer):
what the server sends never kills the client, the client answers what it must even when
the server's text cannot be UTF-8, and a flood across a reconnect stays within its bound."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hostile_frames import frames, resolve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raw_http import Exchange, RawHttp, legacy_basics

import exmcp_actors as mcp
from exmcp_actors._protocol._listeners import MAX_HELD_NOTIFICATIONS
from exmcp_actors._runtime._client_actor import InspectClient
from exmcp_actors._transport._framing import encode_message
from exmcp_actors.testing import FakeServer

WAIT = 10.0
LONE_SURROGATE = "\ud800"  # what the JSON text "\ud800" decodes to


class OurBugs(logging.Handler):
    """Keeps every record that says the client hit a bug of its own."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "internal error" in message or "client actor failed" in message:
            self.seen.append(message[:300])


@pytest.fixture
def our_bugs() -> Iterator[OurBugs]:
    handler = OurBugs()
    logger = logging.getLogger("exmcp_actors")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


# -- text UTF-8 cannot carry ------------------------------------------------------------------


def test_a_message_holding_a_lone_surrogate_is_encoded_with_json_escapes() -> None:
    message = {"jsonrpc": "2.0", "id": LONE_SURROGATE, "result": {"note": "café"}}
    wire = encode_message(message)
    assert wire == b'{"jsonrpc":"2.0","id":"\\ud800","result":{"note":"caf\\u00e9"}}'
    assert json.loads(wire) == message
    assert encode_message({"note": "café"}) == '{"note":"café"}'.encode()  # UTF-8 as ever otherwise


def test_a_ping_whose_id_holds_a_lone_surrogate_is_answered_over_a_websocket_and_the_client_lives(
    our_bugs: OurBugs,
) -> None:
    with FakeServer() as server:
        client = mcp.connect(server.serve_websocket(), reconnect=False)
        try:
            server.send_raw('{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}')
            assert server.wait_response(LONE_SURROGATE, timeout=WAIT)["result"] == {}
            assert client.status == "ready"
            assert client.list_tools() is not None
        finally:
            client.disconnect()
    assert our_bugs.seen == []


def test_a_server_request_whose_method_holds_a_lone_surrogate_is_refused_over_http_and_the_client_lives(
    our_bugs: OurBugs,
) -> None:
    refused = threading.Event()

    def answer(exchange: Exchange) -> bool:
        if legacy_basics(exchange):
            body = exchange.body
            if isinstance(body, dict) and body.get("id") == 7 and "error" in body:
                refused.set()  # our -32601, echoing the method as the server sent it
            return True
        if exchange.method == "GET":
            exchange.whole("405 Method Not Allowed")
            return True
        exchange.start_sse()
        exchange.chunk(b'data: {"jsonrpc":"2.0","id":7,"method":"x/\\ud800"}\n\n')
        assert refused.wait(WAIT)
        exchange.chunk(f'data: {{"jsonrpc":"2.0","id":{exchange.body["id"]},"result":{{}}}}\n\n'.encode())
        exchange.end_chunks()
        return True

    with RawHttp(answer) as server:
        client = mcp.connect(server.url, protocol="legacy", reconnect=False)
        try:
            assert client.request("tools/list", timeout=WAIT) == {}
            assert client.status == "ready"
        finally:
            client.disconnect()
    assert our_bugs.seen == []


# -- random frames, real client ---------------------------------------------------------------


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_real_client_stays_ready_whatever_frames_its_server_sends(era: str, our_bugs: OurBugs) -> None:
    with FakeServer(era=era) as server:
        client = mcp.connect(
            server.transport(),
            sampling=lambda params: {"role": "assistant", "content": {"type": "text", "text": "x"}, "model": "m"},
            elicitation=lambda params: {"action": "accept", "content": {}},
            roots=[{"uri": "file:///r"}],
        )
        try:
            if era == "legacy":
                client.subscribe_notifications({"resourceSubscriptions": ["file:///a"], "toolsListChanged": True})
                client.subscribe_notifications({"logMessages": True})
            else:
                client.listen({"resourceSubscriptions": ["file:///a"]})
                client.watch({"toolsListChanged": True})

            @settings(
                max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
            )
            @given(st.lists(frames, max_size=8))
            def hostile_then_a_ping(items: list[Any]) -> None:
                sent = [resolve(item, [1], server.open_listens(), lambda size: 0) for item in items]
                server.send_batch([json.dumps(item) for item in sent])
                ping = server.request("ping")  # answered once everything before it was handled
                server.wait_response(ping, timeout=WAIT)
                assert client.status == "ready"
                assert our_bugs.seen == []

            hostile_then_a_ping()
        finally:
            client.disconnect()


# -- a flood across a legacy reconnect --------------------------------------------------------


def line(method: str, params: dict[str, Any]) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": method, "params": params})


def until(handle: Any, last: Any) -> list[Any]:
    """``handle``'s messages up to the first that ``last(message)`` picks."""
    got = [handle.get(timeout=WAIT)]
    while not last(got[-1]):
        got.append(handle.get(timeout=WAIT))
    return got


def marked_end(message: Any) -> bool:
    return isinstance(message, mcp.Notification) and message.params.get("n") == "end"


def test_a_flood_during_the_resubscription_is_held_to_its_bound_and_overflows_only_who_missed_one() -> None:
    bound = MAX_HELD_NOTIFICATIONS
    a, b = "file:///a", "file:///b"
    flooded = threading.Event()
    held: dict[str, Any] = {}
    with FakeServer() as server:
        client = mcp.connect(server.transport(), protocol="legacy")
        try:
            on_a = client.subscribe_notifications({"resourceSubscriptions": [a]})
            tools = client.subscribe_notifications({"toolsListChanged": True})
            logs = client.subscribe_notifications({"logMessages": True})
            on_b = client.subscribe_notifications({"resourceSubscriptions": [b]})

            @server.on("resources/subscribe", concurrent=True)
            def flood_first(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
                if ctx.number == 1 or flooded.is_set():
                    return {}
                flooded.set()
                # Below the bound: 3 log lines per tools signal; past it: log lines the log
                # listener misses, and updates of one URI that coalesce into one.
                below = [line("notifications/message", {"level": "info", "data": f"line {n}"}) for n in range(bound)]
                for n in range(0, bound, 4):
                    below[n] = line("notifications/tools/list_changed", {"n": n})
                ctx.send_batch(below)
                past = [line("notifications/message", {"level": "info", "data": "missed"})] * 2000
                past += [line("notifications/resources/updated", {"uri": a, "n": n}) for n in range(5000)]
                past += [line("notifications/tools/list_changed", {"n": n}) for n in range(bound, bound + 5000)]
                ctx.send_batch(past)
                marker = ctx.send({"jsonrpc": "2.0", "id": "after-the-flood", "method": "ping"})
                assert marker and server.wait_response("after-the-flood", timeout=WAIT)
                held.update(client._ask(InspectClient(), WAIT))  # the session's counters (the worker is busy)
                return {}

            server.drop()
            server.wait_connections(2)
            got = {"b": [on_b.get(timeout=WAIT)]}  # told when the pause ends: markers now come as sent
            for uri in (a, b):
                server.notify("notifications/resources/updated", {"uri": uri, "n": "end"})
            server.notify("notifications/tools/list_changed", {"n": "end"})
            got["b"] += until(on_b, marked_end)
            got["a"] = until(on_a, marked_end)
            got["tools"] = until(tools, marked_end)
            got["logs"] = list(logs)  # up to its closing message
        finally:
            client.disconnect()

    assert held["paused"] and held["held"] <= 2 * bound
    for messages in got.values():
        assert isinstance(messages[0], mcp.Reconnected)
    # The log listener missed lines past the bound: what was held before, then its end.
    *lines, end = got["logs"][1:]
    assert [message.params["data"] for message in lines] == [f"line {n}" for n in range(bound) if n % 4]
    assert isinstance(end, mcp.Closed) and end.reason == ("overflow", bound)
    # The others missed nothing: every signal in order, the coalesced ones as their latest.
    assert [message.params["n"] for message in got["tools"][1:]] == [*range(0, bound - 4, 4), bound + 4999, "end"]
    assert [message.params["n"] for message in got["a"][1:]] == [4999, "end"]
    assert [message.params["n"] for message in got["b"][1:]] == ["end"]
