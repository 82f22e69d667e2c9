"""Tests of exmcp_actors.testing: the FakeServer, driven through its MemoryTransport
with a recording sink (no client involved), and over a real WebSocket."""

from __future__ import annotations

import itertools
import json
import os
import select
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import websocket
from helpers_transport import RecordingSink

from exmcp_actors._protocol._errors import TransportError
from exmcp_actors._transport._base import InvalidFrame
from exmcp_actors.testing import (
    LEGACY_VERSIONS,
    MODERN_VERSION,
    NO_REPLY,
    SUBSCRIPTION_ID_KEY,
    FakeConnection,
    FakeError,
    FakeServer,
    MemoryTransport,
    serve_stdio,
)

TIMEOUT = 5.0


class Peer:
    """A minimal client: a MemoryTransport, a RecordingSink and an id counter."""

    def __init__(self, server: FakeServer, **transport_options: Any) -> None:
        self.transport: MemoryTransport = server.transport(**transport_options)
        self.sink = RecordingSink(timeout=TIMEOUT)
        self._ids = itertools.count(1)
        self.transport.open(self.sink, timeout=TIMEOUT)

    def send_request(self, method: str, params: dict[str, Any] | None = None) -> int:
        request_id = next(self._ids)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.transport.send(message)
        return request_id

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.sink.wait_response(self.send_request(method, params))

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.transport.send(message)


def fake_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("exmcp-fake")]


@pytest.fixture
def make_server() -> Iterator[Callable[..., FakeServer]]:
    """Builds FakeServers; closes them after the test and checks that no thread is left."""
    servers: list[FakeServer] = []

    def make(**options: Any) -> FakeServer:
        server = FakeServer(**options)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()
    assert fake_threads() == []


@pytest.fixture
def server(make_server: Callable[..., FakeServer]) -> FakeServer:
    return make_server()


# ---------------------------------------------------------------- handshake and probe


def test_initialize_echoes_an_offered_legacy_version(server: FakeServer) -> None:
    peer = Peer(server)
    for version in LEGACY_VERSIONS:
        result = peer.call("initialize", {"protocolVersion": version, "capabilities": {}})["result"]
        assert result["protocolVersion"] == version
    assert result["capabilities"] == {
        "resources": {"subscribe": True, "listChanged": True},
        "tools": {"listChanged": True},
        "prompts": {"listChanged": True},
    }
    assert result["serverInfo"]["name"] == "exmcp-fake"
    assert server.connection().era == "legacy"


def test_initialize_answers_its_own_version_to_an_unknown_offer(
    make_server: Callable[..., FakeServer],
) -> None:
    server = make_server(
        protocol_version="2025-06-18",
        server_info={"name": "s", "version": "9"},
        instructions="hi",
    )
    peer = Peer(server)
    result = peer.call("initialize", {"protocolVersion": "2099-01-01"})["result"]
    assert result == {
        "protocolVersion": "2025-06-18",
        "capabilities": server.capabilities,
        "serverInfo": {"name": "s", "version": "9"},
        "instructions": "hi",
    }
    peer.notify("notifications/initialized")
    assert server.wait_for("notifications/initialized")[0] == 1


def test_legacy_server_answers_the_probe_with_method_not_found(
    server: FakeServer,
) -> None:
    peer = Peer(server)
    error = peer.call("server/discover")["error"]
    assert error["code"] == -32601


def test_silent_legacy_server_never_answers_the_probe(
    make_server: Callable[..., FakeServer],
) -> None:
    server = make_server(probe="silent")
    peer = Peer(server)
    probe_id = peer.send_request("server/discover")
    # Messages are handled in order: once the ping is answered, the probe was handled too.
    peer.call("ping")
    assert not [f for f in peer.sink.frames if f.get("id") == probe_id]
    assert server.count("server/discover") == 1


def test_discover_probe_on_a_legacy_server_lists_only_legacy_versions(
    make_server: Callable[..., FakeServer],
) -> None:
    server = make_server(probe="discover")
    result = Peer(server).call("server/discover")["result"]
    assert set(result["supportedVersions"]) == set(LEGACY_VERSIONS)
    assert MODERN_VERSION not in result["supportedVersions"]


def test_modern_server_answers_discover_and_refuses_initialize(
    make_server: Callable[..., FakeServer],
) -> None:
    server = make_server(era="modern")
    peer = Peer(server)
    result = peer.call(
        "server/discover",
        {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION}},
    )
    assert result["result"]["supportedVersions"] == [MODERN_VERSION]
    assert result["result"]["capabilities"] == server.capabilities
    assert result["result"]["serverInfo"] == server.server_info
    assert server.connection().era == "modern"
    assert "error" in peer.call("initialize", {"protocolVersion": "2025-11-25"})
    assert peer.call("ping")["error"]["code"] == -32601
    assert peer.call("resources/subscribe", {"uri": "file:///a"})["error"]["code"] == -32601


def test_modern_discover_with_an_unsupported_version_is_error_32022(
    make_server: Callable[..., FakeServer],
) -> None:
    server = make_server(era="modern")
    error = Peer(server).call(
        "server/discover",
        {"_meta": {"io.modelcontextprotocol/protocolVersion": "2030-01-01"}},
    )
    assert error["error"]["code"] == -32022
    assert error["error"]["data"] == {
        "supported": [MODERN_VERSION],
        "requested": "2030-01-01",
    }


def test_both_era_server_answers_discover_and_initialize(
    make_server: Callable[..., FakeServer],
) -> None:
    server = make_server(era="both")
    peer = Peer(server)
    versions = peer.call("server/discover")["result"]["supportedVersions"]
    assert versions[0] == MODERN_VERSION and set(LEGACY_VERSIONS) <= set(versions)
    assert peer.call("initialize", {"protocolVersion": "2025-03-26"})["result"]["protocolVersion"] == "2025-03-26"


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.mark.parametrize(
    ("meta", "named"),
    [
        (None, "params._meta is required"),
        ({"io.modelcontextprotocol/clientCapabilities": {}}, "protocolVersion"),
        ({**MODERN_META, "io.modelcontextprotocol/protocolVersion": "2025-11-25"}, "protocolVersion"),
        ({"io.modelcontextprotocol/protocolVersion": MODERN_VERSION}, "clientCapabilities"),
        ({**MODERN_META, "io.modelcontextprotocol/clientCapabilities": []}, "clientCapabilities"),
    ],
)
def test_a_modern_request_without_its_meta_envelope_is_invalid_params_naming_what_is_missing(
    make_server: Callable[..., FakeServer], meta: dict[str, Any] | None, named: str
) -> None:
    peer = Peer(make_server(era="modern"))
    assert "result" in peer.call("server/discover")  # the probe may come bare
    params: dict[str, Any] = {} if meta is None else {"_meta": meta}
    error = peer.call("tools/list", params)["error"]
    assert error["code"] == -32602 and named in error["message"], error
    assert "result" in peer.call("tools/list", {"_meta": MODERN_META})
    assert peer.call("ping")["error"]["code"] == -32601  # legacy-only: not a _meta question


def test_check_meta_can_be_turned_off_and_never_applies_to_legacy_connections(
    make_server: Callable[..., FakeServer],
) -> None:
    relaxed = Peer(make_server(era="modern", check_meta=False))
    relaxed.call("server/discover")
    assert "result" in relaxed.call("tools/list")
    legacy = Peer(make_server(era="both"))
    legacy.call("initialize", {"protocolVersion": "2025-11-25"})
    assert "result" in legacy.call("tools/list")


def test_set_era_applies_to_the_next_connection(server: FakeServer) -> None:
    peer = Peer(server)
    assert "result" in peer.call("initialize", {"protocolVersion": "2025-11-25"})
    server.set_era("modern")
    peer.transport.close()
    peer = Peer(server)
    assert peer.call("server/discover")["result"]["supportedVersions"] == [MODERN_VERSION]
    assert server.era == "modern"
    assert server.connections == 2


# ---------------------------------------------------------------- scripting


def test_handlers_answer_with_results_errors_or_not_at_all(server: FakeServer) -> None:
    server.on("tools/call", lambda params, ctx: {"echo": params["arguments"]})

    def failing(params: dict[str, Any], ctx: FakeConnection) -> Any:
        raise FakeError(-32000, "nope", {"why": "scripted"})

    server.on("prompts/get", failing)
    server.on("resources/read", lambda params, ctx: NO_REPLY)
    peer = Peer(server)
    assert peer.call("tools/call", {"name": "x", "arguments": {"a": 1}})["result"] == {"echo": {"a": 1}}
    assert peer.call("prompts/get", {"name": "p"})["error"] == {
        "code": -32000,
        "message": "nope",
        "data": {"why": "scripted"},
    }
    held = peer.send_request("resources/read", {"uri": "file:///a"})
    peer.call("ping")
    assert not [f for f in peer.sink.frames if f.get("id") == held]
    # A NO_REPLY request can be answered later from the test.
    server.connection().respond(held, {"contents": []})
    assert peer.sink.wait_response(held)["result"] == {"contents": []}


def test_a_handler_that_raises_answers_internal_error(server: FakeServer) -> None:
    server.on("tools/list", lambda params, ctx: 1 / 0)
    error = Peer(server).call("tools/list")["error"]
    assert error["code"] == -32603
    assert "ZeroDivisionError" in error["message"]


def test_a_handler_returning_none_answers_an_empty_result(server: FakeServer) -> None:
    server.on("custom/thing", lambda params, ctx: None)
    assert Peer(server).call("custom/thing")["result"] == {}


def test_notifications_pushed_by_a_handler_arrive_before_its_result(
    server: FakeServer,
) -> None:
    def handler(params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        assert ctx.method == "tools/call" and ctx.request_id == 1
        ctx.notify("notifications/progress", {"progress": 1})
        return {"done": True}

    server.on("tools/call", handler)
    peer = Peer(server)
    peer.call("tools/call", {"name": "echo"})
    methods = [f.get("method", "response") for f in peer.sink.frames]
    assert methods == ["notifications/progress", "response"]


def test_on_is_a_decorator_and_off_restores_the_builtin(server: FakeServer) -> None:
    @server.on("ping")
    def pong(params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        return {"pong": True}

    peer = Peer(server)
    assert peer.call("ping")["result"] == {"pong": True}
    server.off("ping")
    assert peer.call("ping")["result"] == {}
    assert server.default_handler("ping") is not None


def test_unknown_methods_are_method_not_found_and_notifications_reach_handlers(
    server: FakeServer,
) -> None:
    seen = threading.Event()
    server.on("notifications/roots/list_changed", lambda params, ctx: seen.set())
    peer = Peer(server)
    assert peer.call("no/such")["error"]["code"] == -32601
    peer.notify("notifications/unknown")
    peer.notify("notifications/roots/list_changed")
    assert seen.wait(TIMEOUT)
    assert len(peer.sink.frames) == 1  # notifications are never answered


def test_send_never_waits_for_a_slow_handler(server: FakeServer) -> None:
    release = threading.Event()
    started = threading.Event()

    def slow(params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        started.set()
        ctx.wait(release)
        return {}

    server.on("slow", slow)
    peer = Peer(server)
    slow_id = peer.send_request("slow")
    assert started.wait(TIMEOUT)
    ping_id = peer.send_request("ping")  # returns although the handler thread is busy
    server.wait_for("ping")
    assert peer.sink.frames == []  # in-order handling: the ping waits behind the slow request
    release.set()
    peer.sink.wait_response(ping_id)
    assert [f["id"] for f in peer.sink.frames] == [slow_id, ping_id]


def test_a_concurrent_handler_does_not_hold_up_later_messages(
    server: FakeServer,
) -> None:
    release = threading.Event()

    def held_subscribe(params: dict[str, Any], ctx: FakeConnection) -> Any:
        ctx.wait(release)
        default = server.default_handler("resources/subscribe")
        assert default is not None
        return default(params, ctx)

    server.on("resources/subscribe", held_subscribe, concurrent=True)
    peer = Peer(server)
    sub_id = peer.send_request("resources/subscribe", {"uri": "file:///a"})
    assert peer.call("ping")["result"] == {}
    server.updated("file:///b")
    peer.sink.wait_method("notifications/resources/updated")
    assert not [f for f in peer.sink.frames if f.get("id") == sub_id]
    release.set()
    assert peer.sink.wait_response(sub_id)["result"] == {}
    assert server.subscriptions() == ["file:///a"]


def test_ctx_wait_gives_up_when_the_connection_ends(server: FakeServer) -> None:
    never = threading.Event()
    started = threading.Event()
    outcome: list[bool] = []
    done = threading.Event()

    def handler(params: dict[str, Any], ctx: FakeConnection) -> Any:
        started.set()
        outcome.append(ctx.wait(never, timeout=30.0))
        done.set()
        return {}

    server.on("hold", handler, concurrent=True)
    peer = Peer(server)
    peer.send_request("hold")
    assert started.wait(TIMEOUT)
    server.drop()
    assert done.wait(TIMEOUT)
    assert outcome == [False]


def test_handlers_get_their_own_copy_of_params(server: FakeServer) -> None:
    def mutate(params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        params["uri"] = "changed"
        return {}

    server.on("resources/read", mutate)
    peer = Peer(server)
    sent = {"uri": "file:///a"}
    peer.call("resources/read", sent)
    assert sent == {"uri": "file:///a"}
    assert server.messages("resources/read")[0]["params"] == {"uri": "file:///a"}


# ---------------------------------------------------------------- frames


def test_each_push_is_one_call_on_the_connection_delivery_thread(
    server: FakeServer,
) -> None:
    peer = Peer(server)
    server.notify("a")
    server.notify("b", {"x": 1})
    batches = peer.sink.wait_batches(2)
    assert batches == [
        [{"jsonrpc": "2.0", "method": "a"}],
        [{"jsonrpc": "2.0", "method": "b", "params": {"x": 1}}],
    ]
    assert peer.sink.threads == {"exmcp-fake-1-delivery"}


def test_send_raw_gives_an_invalid_frame(server: FakeServer) -> None:
    peer = Peer(server)
    server.send_raw("{not json")
    server.send_raw(b"\xff\xfe")
    server.send_raw('{"jsonrpc":"2.0","method":"ok"}')
    first, second, third = (batch[0] for batch in peer.sink.wait_batches(3))
    assert isinstance(first, InvalidFrame) and first.raw == b"{not json" and "JSON" in first.error
    assert isinstance(second, InvalidFrame) and second.raw == b"\xff\xfe"
    assert third == {"jsonrpc": "2.0", "method": "ok"}


def test_frames_over_the_transport_limit_are_invalid(server: FakeServer) -> None:
    transport = server.transport()
    transport.max_frame_bytes = 64
    sink = RecordingSink(timeout=TIMEOUT)
    transport.open(sink, timeout=TIMEOUT)
    server.notify("big", {"data": "x" * 100})
    [frame] = sink.wait_batches(1)[0]
    assert isinstance(frame, InvalidFrame) and "too large" in frame.error


def test_send_batch_is_one_frames_received_call(server: FakeServer) -> None:
    peer = Peer(server)
    server.send_batch(
        [
            {"jsonrpc": "2.0", "method": "one"},
            "[1, 2]",
            b"garbage",
            {"jsonrpc": "2.0", "method": "two"},
        ]
    )
    server.notify("after")
    batches = peer.sink.wait_batches(2)
    assert len(batches) == 2
    one, array, garbage, two = batches[0]
    assert one["method"] == "one" and two["method"] == "two"
    assert array == [1, 2]
    assert isinstance(garbage, InvalidFrame)


def test_frames_do_not_share_objects_with_the_test(server: FakeServer) -> None:
    peer = Peer(server)
    params = {"uri": "file:///a"}
    server.notify("notifications/resources/updated", params)
    params["uri"] = "changed"
    assert peer.sink.wait_method("notifications/resources/updated")["params"] == {"uri": "file:///a"}


def test_send_rejects_values_that_are_not_json(server: FakeServer) -> None:
    peer = Peer(server)
    with pytest.raises(TypeError):
        peer.transport.send({"jsonrpc": "2.0", "method": "x", "params": {"bad": object()}})
    with pytest.raises(TypeError):
        server.notify("x", {"bad": object()})


def test_client_requests_and_responses_are_recorded_in_order(
    server: FakeServer,
) -> None:
    peer = Peer(server)
    request_id = server.request("roots/list", {"x": 1})
    request = peer.sink.wait_method("roots/list")
    assert request["id"] == request_id
    peer.transport.send({"jsonrpc": "2.0", "id": request_id, "result": {"roots": []}})
    assert server.wait_response(request_id) == {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {"roots": []},
    }
    assert server.received[-1] == (
        1,
        {"jsonrpc": "2.0", "id": request_id, "result": {"roots": []}},
    )
    assert server.sent[0] == (1, request)


def test_wait_for_raises_with_what_was_received(server: FakeServer) -> None:
    peer = Peer(server)
    peer.notify("notifications/initialized")
    with pytest.raises(AssertionError, match="notifications/initialized"):
        server.wait_for("never/sent", timeout=0.05)
    with pytest.raises(AssertionError):
        server.wait_connections(2, timeout=0.05)
    with pytest.raises(AssertionError):
        server.wait_response("fake-99", timeout=0.05)


def test_wait_for_accepts_predicates_param_filters_and_connections(
    server: FakeServer,
) -> None:
    peer = Peer(server)
    peer.call("resources/subscribe", {"uri": "file:///a"})
    peer.call("resources/subscribe", {"uri": "file:///b"})
    assert server.wait_for("resources/subscribe", uri="file:///b")[1]["params"] == {"uri": "file:///b"}
    number, message = server.wait_for(lambda m: m["params"]["uri"] == "file:///a")
    assert number == 1 and message["method"] == "resources/subscribe"
    with pytest.raises(AssertionError):
        server.wait_for("resources/subscribe", timeout=0.05, connection=2)
    assert server.count("resources/subscribe") == 2
    assert server.count("resources/subscribe", uri="file:///a") == 1


# ---------------------------------------------------------------- built-in behaviour


def test_subscriptions_are_tracked_per_connection(server: FakeServer) -> None:
    peer = Peer(server)
    assert peer.call("resources/subscribe", {"uri": "file:///a"})["result"] == {}
    peer.call("resources/subscribe", {"uri": "file:///b"})
    peer.call("resources/subscribe", {"uri": "file:///a"})
    peer.call("resources/unsubscribe", {"uri": "file:///b"})
    assert server.subscriptions() == ["file:///a"]
    assert peer.call("resources/subscribe", {})["error"]["code"] == -32602
    peer.transport.close()
    peer = Peer(server)
    assert server.subscriptions() == []
    assert server.subscriptions(1) == ["file:///a"]


def test_lists_paginate_with_next_cursor(
    make_server: Callable[..., FakeServer],
) -> None:
    tools = [{"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(5)]
    server = make_server(tools=tools, page_size=2)
    peer = Peer(server)
    seen: list[dict[str, Any]] = []
    cursor = None
    pages = 0
    while True:
        result = peer.call("tools/list", {"cursor": cursor} if cursor else {})["result"]
        seen += result["tools"]
        pages += 1
        cursor = result.get("nextCursor")
        if cursor is None:
            break
    assert seen == tools and pages == 3
    assert peer.call("tools/list", {"cursor": "bogus"})["error"]["code"] == -32602
    server.page_size = None
    server.set_items("prompts", [{"name": "p"}])
    assert peer.call("prompts/list")["result"] == {"prompts": [{"name": "p"}]}
    assert len(peer.call("resources/list")["result"]["resources"]) == 1


def test_the_builtin_tools_resources_and_prompts_answer_by_default(server: FakeServer) -> None:
    peer = Peer(server)
    result = peer.call("tools/call", {"name": "echo", "arguments": {"a": 1}})["result"]
    assert json.loads(result["content"][0]["text"]) == {"a": 1} and result["isError"] is False
    assert peer.call("tools/call", {"name": "missing"})["error"]["code"] == -32602
    server.set_resource_text("file:///a", "hello")
    assert peer.call("resources/read", {"uri": "file:///a"})["result"]["contents"][0]["text"] == "hello"
    assert peer.call("prompts/get", {"name": "greet"})["result"]["messages"][0]["role"] == "user"


def test_list_changed_and_updated_push_one_notification_each_in_order(server: FakeServer) -> None:
    peer = Peer(server)
    server.list_changed("tools")
    server.list_changed("prompts")
    server.list_changed("resources")
    server.updated("file:///a")
    methods = [batch[0]["method"] for batch in peer.sink.wait_batches(4)]
    assert methods == [
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
    ]
    assert peer.sink.frames[3]["params"] == {"uri": "file:///a"}


def test_silence_records_but_never_answers_until_resumed(server: FakeServer) -> None:
    peer = Peer(server)
    server.silence()
    peer.send_request("ping")
    server.wait_for("ping")
    server.notify("still/pushed")
    peer.sink.wait_method("still/pushed")
    server.resume()
    second = peer.send_request("ping")
    peer.sink.wait_response(second)
    assert [f.get("id") for f in peer.sink.frames] == [None, second]


# ---------------------------------------------------------------- faults and lifecycle


def test_drop_delivers_queued_frames_then_transport_lost_once(
    server: FakeServer,
) -> None:
    peer = Peer(server)
    server.notify("before")
    server.drop("boom")
    assert peer.sink.wait_lost() == "boom" and peer.sink.lost == ["boom"]
    assert peer.sink.frames == [{"jsonrpc": "2.0", "method": "before"}]
    with pytest.raises(TransportError):
        peer.transport.send({"jsonrpc": "2.0", "method": "x"})
    with pytest.raises(RuntimeError):
        server.notify("after")
    server.drop()  # no-op: already ended
    peer.transport.close()
    conn = server.connection(1)
    assert conn.closed and conn.closed_by == "drop"
    assert peer.sink.lost == ["boom"]


def test_reopening_after_a_drop_makes_a_new_connection(server: FakeServer) -> None:
    peer = Peer(server)
    server.drop()
    peer.sink.wait_lost()
    sink = RecordingSink(timeout=TIMEOUT)
    peer.transport.open(sink, timeout=TIMEOUT)
    assert server.wait_connections(2).number == 2
    peer.transport.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert sink.wait_response(1)["result"] == {}
    assert peer.transport.describe() == "memory:fake#2"
    assert server.wait_for("ping")[0] == 2


def test_client_close_calls_no_transport_lost_and_delivers_nothing_after(
    server: FakeServer,
) -> None:
    peer = Peer(server)
    conn = server.connection()
    peer.transport.close()
    assert conn.wait_closed(TIMEOUT) and conn.closed_by == "client"
    assert not conn.notify("late")
    with pytest.raises(TransportError):
        peer.transport.send({"jsonrpc": "2.0", "method": "x"})
    peer.transport.close()  # idempotent
    server.close()
    assert peer.sink.lost == [] and peer.sink.batches == []


def test_refuse_fails_the_next_n_opens_or_every_one_until_accept(server: FakeServer) -> None:
    transport = server.transport()
    server.refuse(2)
    for _ in range(2):
        with pytest.raises(TransportError):
            transport.open(RecordingSink(), timeout=TIMEOUT)
    transport.open(RecordingSink(), timeout=TIMEOUT)
    assert server.connections == 1 and server.open_attempts == 3
    server.refuse()
    for _ in range(3):
        with pytest.raises(TransportError):
            transport.open(RecordingSink(), timeout=TIMEOUT)
    server.accept()
    transport.open(RecordingSink(), timeout=TIMEOUT)
    assert server.connections == 2
    assert server.connection(1).closed_by == "client"  # reopening closed the first one


def test_a_hanging_open_times_out_and_accept_releases_one(server: FakeServer) -> None:
    transport = server.transport()
    server.refuse(hang=True)
    with pytest.raises(TransportError):
        transport.open(RecordingSink(), timeout=0.05)
    opened = threading.Event()
    errors: list[BaseException] = []

    def open_slowly() -> None:
        try:
            transport.open(RecordingSink(), timeout=TIMEOUT)
            opened.set()
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=open_slowly)
    thread.start()
    changed = server._shared.changed
    with changed:  # wait until the second attempt is hanging
        assert changed.wait_for(lambda: server.open_attempts == 2, TIMEOUT)
    assert not opened.is_set()
    server.accept()
    thread.join(TIMEOUT)
    assert opened.is_set() and errors == []
    assert server.connections == 1


def test_server_close_loses_open_connections_and_refuses_new_ones(
    server: FakeServer,
) -> None:
    peer = Peer(server)
    server.close()
    assert peer.sink.wait_lost() == "FakeServer closed" and peer.sink.lost == ["FakeServer closed"]
    assert server.connection().closed_by == "server"
    with pytest.raises(TransportError):
        server.transport().open(RecordingSink(), timeout=TIMEOUT)
    server.close()  # idempotent
    assert fake_threads() == []


def test_pushing_before_any_connection_raises(server: FakeServer) -> None:
    with pytest.raises(LookupError):
        server.notify("x")
    assert server.subscriptions() == [] and server.open_listens() == []


# ---------------------------------------------------------------- modern listen


def listen(peer: Peer, notifications: dict[str, Any]) -> int:
    return peer.send_request("subscriptions/listen", {"_meta": {}, "notifications": notifications})


def test_listen_is_acknowledged_gets_events_and_closes_gracefully(
    make_server: Callable[..., FakeServer],
) -> None:
    server = make_server(era="modern")
    peer = Peer(server)
    wanted = {"toolsListChanged": True, "resourceSubscriptions": ["file:///a"]}
    sub = listen(peer, wanted)
    ack = peer.sink.wait_method("notifications/subscriptions/acknowledged")
    assert ack["params"] == {
        "_meta": {SUBSCRIPTION_ID_KEY: sub},
        "notifications": wanted,
    }
    assert server.open_listens() == [sub]
    server.event(sub, "notifications/resources/updated", {"uri": "file:///a"})
    event = peer.sink.wait_method("notifications/resources/updated")
    assert event["params"] == {"uri": "file:///a", "_meta": {SUBSCRIPTION_ID_KEY: sub}}
    server.close_subscription(sub)
    result = peer.sink.wait_response(sub)["result"]
    assert result == {"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: sub}}
    assert server.open_listens() == []


def test_client_cancel_ends_a_listen(make_server: Callable[..., FakeServer]) -> None:
    server = make_server(era="modern")
    peer = Peer(server)
    sub = listen(peer, {"promptsListChanged": True})
    peer.sink.wait_method("notifications/subscriptions/acknowledged")
    peer.notify("notifications/cancelled", {"requestId": sub})
    server.wait_for("notifications/cancelled", requestId=sub)
    peer.call("server/discover")  # handled after the cancel: the listen is gone by now
    assert server.open_listens() == []
    assert server.connection().is_cancelled(sub)
    assert server.count("notifications/cancelled", requestId=sub) == 1


def test_listen_overrides_can_widen_the_ack_or_send_events_first(
    make_server: Callable[..., FakeServer],
) -> None:
    server = make_server(era="modern")

    def early_and_wide(params: dict[str, Any], ctx: FakeConnection) -> Any:
        ctx.event("notifications/tools/list_changed")
        ctx.acknowledge({**params["notifications"], "promptsListChanged": True})
        return NO_REPLY

    server.on("subscriptions/listen", early_and_wide)
    peer = Peer(server)
    sub = listen(peer, {"toolsListChanged": True})
    first, second = (batch[0] for batch in peer.sink.wait_batches(2))
    assert first["method"] == "notifications/tools/list_changed"
    assert first["params"]["_meta"][SUBSCRIPTION_ID_KEY] == sub
    assert second["params"]["notifications"] == {
        "toolsListChanged": True,
        "promptsListChanged": True,
    }

    server.on("subscriptions/listen", lambda params, ctx: NO_REPLY)  # no ack at all
    silent = listen(peer, {"toolsListChanged": True})
    peer.call("server/discover")
    assert not [f for f in peer.sink.frames if f.get("params", {}).get("_meta", {}).get(SUBSCRIPTION_ID_KEY) == silent]
    assert server.open_listens() == [sub, silent]


def test_listen_on_a_legacy_server_is_method_not_found(server: FakeServer) -> None:
    peer = Peer(server)
    sub = listen(peer, {"toolsListChanged": True})
    assert peer.sink.wait_response(sub)["error"]["code"] == -32601
    assert server.open_listens() == []


def test_an_http_like_transport_cancels_listens_by_closing_the_stream(
    make_server: Callable[..., FakeServer],
) -> None:
    server = make_server(era="modern")
    peer = Peer(server, stream_cancel=True)
    sub = listen(peer, {"toolsListChanged": True})
    peer.sink.wait_method("notifications/subscriptions/acknowledged")
    assert peer.transport.cancel_stream(sub) is True
    assert server.stream_cancels == [(1, sub)]
    assert server.open_listens() == []
    assert Peer(server).transport.cancel_stream(sub) is False


def test_negotiated_is_recorded_on_the_connection(server: FakeServer) -> None:
    peer = Peer(server)
    peer.transport.negotiated("2025-11-25", "legacy")
    assert server.connection().negotiated == ("2025-11-25", "legacy")


# ---------------------------------------------------------------- WebSocket


def ws_connect(url: str, **options: Any) -> websocket.WebSocket:
    return websocket.create_connection(url, subprotocols=["mcp"], timeout=TIMEOUT, **options)


def ws_call(ws: websocket.WebSocket, message: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps(message))
    while True:
        frame = json.loads(ws.recv())
        if frame.get("id") == message["id"] and "method" not in frame:
            return dict(frame)


def test_websocket_serves_the_same_fake(server: FakeServer) -> None:
    url = server.serve_websocket()
    assert server.serve_websocket() == url
    ws = ws_connect(url, header={"X-Token": "t"})
    try:
        assert ws.getsubprotocol() == "mcp"
        init = ws_call(
            ws,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": "2025-06-18"},
            },
        )
        assert init["result"]["protocolVersion"] == "2025-06-18"
        assert server.connection().headers["x-token"] == "t"
        server.notify("notifications/tools/list_changed")
        assert json.loads(ws.recv()) == {
            "jsonrpc": "2.0",
            "method": "notifications/tools/list_changed",
        }
        server.send_raw("{not json")
        assert ws.recv() == "{not json"
        server.send_batch([{"jsonrpc": "2.0", "method": "a"}, {"jsonrpc": "2.0", "method": "b"}])
        assert [json.loads(ws.recv())["method"] for _ in range(2)] == ["a", "b"]
        ws.send("garbage")
        assert json.loads(ws.recv())["error"]["code"] == -32700
    finally:
        ws.close()
    assert server.connection().wait_closed(TIMEOUT)
    assert server.connection().closed_by == "client"


def test_websocket_drop_is_an_abrupt_loss(server: FakeServer) -> None:
    ws = ws_connect(server.serve_websocket())
    try:
        ws_call(ws, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
        server.notify("last")
        server.drop()
        assert json.loads(ws.recv())["method"] == "last"  # queued frames go out first
        with pytest.raises((websocket.WebSocketConnectionClosedException, OSError)):
            ws.recv()
    finally:
        ws.close()
    assert server.connection().closed_by == "drop"


def test_websocket_refuse_rejects_the_upgrade(server: FakeServer) -> None:
    url = server.serve_websocket()
    server.refuse(1)
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        ws_connect(url)
    assert refused.value.status_code == 503
    ws = ws_connect(url)
    ws.close()
    assert server.open_attempts == 2 and server.connections == 1


def test_websocket_server_close_closes_the_socket(server: FakeServer) -> None:
    ws = ws_connect(server.serve_websocket())
    try:
        ws_call(ws, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
        closer = threading.Thread(target=server.close)
        closer.start()
        opcode, _ = ws.recv_data(control_frame=True)
        assert opcode == websocket.ABNF.OPCODE_CLOSE
        # recv_data already answered the close frame; now end TCP.
        ws.shutdown()  # type: ignore[no-untyped-call]
        closer.join(TIMEOUT)
        assert not closer.is_alive()
    finally:
        ws.close()
    assert server.connection().closed_by == "server"


# ---------------------------------------------------------------- stdio


def test_serve_stdio_answers_one_line_per_message_until_stdin_ends(server: FakeServer) -> None:
    stdin_fd, to_server_fd = os.pipe()
    from_server_fd, stdout_fd = os.pipe()
    with (
        open(stdin_fd, "rb") as stdin,
        open(stdout_fd, "wb") as stdout,
        open(to_server_fd, "wb", buffering=0) as to_server,
        open(from_server_fd, "rb") as from_server,
    ):
        served: list[FakeConnection] = []
        serving = threading.Thread(target=lambda: served.append(serve_stdio(server, stdin, stdout)))
        serving.start()
        to_server.write(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n\n')  # a blank line is no message
        assert select.select([from_server], [], [], TIMEOUT)[0], "no answer on stdout"
        assert json.loads(from_server.readline()) == {"jsonrpc": "2.0", "id": 1, "result": {}}
        to_server.close()
        serving.join(TIMEOUT)
    assert served == [server.connection()]
    assert served[0].closed_by == "client"
    assert [message for _, message in server.received] == [{"jsonrpc": "2.0", "id": 1, "method": "ping"}]
