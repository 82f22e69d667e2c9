"""Raw hooks: a listener filter's ``methods`` (notifications of any method, as
:class:`~exmcp_actors.RawNotification`) and ``connect(on_request=)`` (server requests the
library does not know). Against the Python SDK 2.3.0 server (tests/peers/sdk_server.py with
``--extra-tools``: ``raw_notify`` and ``raw_request`` send any method through its session),
and the FakeServer for the bounds, the order with other messages and the wire-level cases.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest
from sdk_helpers import ClientPool, once

import exmcp_actors as mcp
from exmcp_actors.testing import FakeServer
from tests.peers.launch import peer_argv
from tests.waiting import assert_next_is_marker

TIMEOUT = 10.0
#: A cold SDK server on a loaded box may take longer than that to start.
START = 45.0
EXTRA = ("--extra-tools",)
PING = "com.example/ping"
TOOLS_CHANGED = "notifications/tools/list_changed"


def sdk_client(client_pool: ClientPool, **options: Any) -> mcp.Client:
    return client_pool.connect(
        peer_argv("stdio", "both", extra_args=EXTRA), protocol="legacy", **once(START), **options
    )


def ask(client: mcp.Client, method: str, params: dict[str, Any] | None = None) -> Any:
    """What the SDK server got back for the request ``method`` it sent to the client."""
    result = client.call_tool("raw_request", {"method": method, "params": params or {}}, timeout=TIMEOUT)
    return json.loads(result["content"][0]["text"])


# -- methods: raw notifications ------------------------------------------------------------


def test_a_custom_notification_from_the_sdk_server_reaches_the_listener_naming_it_in_order(
    client_pool: ClientPool,
) -> None:
    client = sdk_client(client_pool)
    listener = client.subscribe_notifications({"methods": [PING]})
    client.call_tool("raw_notify", {"method": PING, "params": {"n": 1}, "count": 3}, timeout=TIMEOUT)
    got = [listener.get(TIMEOUT) for _ in range(3)]
    assert got == [mcp.RawNotification("ex_mcp_raw_notification", listener, PING, {"n": 1})] * 3
    assert listener.filter == {"methods": [PING]}


def test_a_known_notification_named_in_methods_is_delivered_raw_and_progress_too(client_pool: ClientPool) -> None:
    client = sdk_client(client_pool)
    listener = client.subscribe_notifications({"methods": ["notifications/progress", PING]})
    progress = {"progressToken": "t", "progress": 1}
    client.call_tool("raw_notify", {"method": "notifications/progress", "params": progress}, timeout=TIMEOUT)
    client.call_tool("raw_notify", {"method": PING}, timeout=TIMEOUT)
    message = listener.get(TIMEOUT)
    assert (message.tag, message.method, message.params) == (
        "ex_mcp_raw_notification",
        "notifications/progress",
        progress,
    )
    assert_next_is_marker(listener.get, lambda m: m.method == PING and m.params == {})


def test_methods_keep_wire_order_with_the_listeners_other_messages(legacy_server: FakeServer) -> None:
    client = mcp.connect(legacy_server.transport(), protocol="legacy", request_timeout=5.0)
    try:
        listener = client.subscribe_notifications({"toolsListChanged": True, "methods": [PING, TOOLS_CHANGED]})
        for n in range(20):
            legacy_server.notify(PING, {"n": n}) if n % 2 else legacy_server.notify(TOOLS_CHANGED)
        got = [listener.get(5.0) for _ in range(20)]
        # one message per notification: the category's Notification, a RawNotification for the rest
        assert [(m.tag, m.method) for m in got] == [
            ("ex_mcp_raw_notification", PING) if n % 2 else ("ex_mcp_notification", TOOLS_CHANGED) for n in range(20)
        ]
        assert [m.params.get("n") for m in got if m.method == PING] == list(range(1, 20, 2))
    finally:
        client.disconnect()


def test_a_notification_no_filter_names_is_not_delivered(legacy_server: FakeServer) -> None:
    client = mcp.connect(legacy_server.transport(), protocol="legacy", request_timeout=5.0)
    try:
        listener = client.subscribe_notifications({"methods": [PING]})
        legacy_server.notify("com.example/other", {"x": 1})
        legacy_server.notify(TOOLS_CHANGED)
        legacy_server.notify(PING, {"marker": True})
        assert_next_is_marker(listener.get, lambda m: m.method == PING and m.params == {"marker": True})
    finally:
        client.disconnect()


@pytest.mark.parametrize(
    ("methods", "reason"),
    [
        ("x/y", "invalid_subscription_filter"),
        ([""], "invalid_method_subscription"),
        ([7], "invalid_method_subscription"),
        (["x" * 257], "invalid_method_subscription"),
        ([f"com.example/m{n}" for n in range(65)], "invalid_method_subscription"),
        ([], "empty_subscription_filter"),
    ],
)
def test_bad_methods_are_refused_before_anything_is_sent(legacy_server: FakeServer, methods: Any, reason: str) -> None:
    client = mcp.connect(legacy_server.transport(), protocol="legacy", request_timeout=5.0)
    try:
        with pytest.raises(mcp.FilterError) as raised:
            client.subscribe_notifications({"methods": methods})
        assert raised.value.reason == reason
        assert "methods" in str(raised.value) or reason == "empty_subscription_filter"
    finally:
        client.disconnect()


def test_the_bounds_are_inclusive(legacy_server: FakeServer) -> None:
    client = mcp.connect(legacy_server.transport(), protocol="legacy", request_timeout=5.0)
    try:
        names = ["x" * 256, *(f"com.example/m{n}" for n in range(63))]
        assert client.subscribe_notifications({"methods": names}).filter == {"methods": names}
    finally:
        client.disconnect()


def test_methods_are_refused_for_a_subscriptions_listen() -> None:
    with FakeServer(era="modern") as server:
        client = mcp.connect(server.transport(), protocol="modern", request_timeout=5.0)
        try:
            with pytest.raises(mcp.FilterError) as raised:
                client.listen({"methods": [PING]})
            assert raised.value.reason == "methods_require_legacy_listener"
            assert server.count("subscriptions/listen") == 0
        finally:
            client.disconnect()


# -- on_request: custom server requests ----------------------------------------------------


def test_the_sdk_servers_custom_request_is_answered_by_on_request_on_a_host_pool_thread(
    client_pool: ClientPool,
) -> None:
    seen: list[tuple[str, dict[str, Any], str]] = []

    def on_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
        seen.append((method, params, threading.current_thread().name))
        return {"answer": 42, "echo": params}

    client = sdk_client(client_pool, on_request=on_request)
    assert ask(client, "com.example/ask", {"q": "x"}) == {"answer": 42, "echo": {"q": "x"}}
    assert [(m, p) for m, p, _ in seen] == [("com.example/ask", {"q": "x"})]
    assert seen[0][2].startswith("exmcp-host-")


def test_without_on_request_a_custom_request_still_gets_method_not_found(client_pool: ClientPool) -> None:
    client = sdk_client(client_pool)
    assert ask(client, "com.example/ask")["error"]["code"] == -32601


def test_an_exception_in_on_request_gives_the_server_a_generic_error_and_the_log_escaped_text(
    client_pool: ClientPool, caplog: pytest.LogCaptureFixture
) -> None:
    def on_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("token=s3cr3t \x1b[31m")

    client = sdk_client(client_pool, on_request=on_request)
    with caplog.at_level(logging.ERROR, logger="exmcp_actors"):
        error = ask(client, "com.example/ask")["error"]
    assert error["code"] == -32603
    assert "s3cr3t" not in error["message"]
    records = [r.getMessage() for r in caplog.records if "on_request raised" in r.getMessage()]
    assert len(records) == 1
    assert "s3cr3t" in records[0] and "\x1b" not in records[0]


def test_a_result_that_is_no_dict_gives_the_server_internal_error_and_logs_why(
    client_pool: ClientPool, caplog: pytest.LogCaptureFixture
) -> None:
    client = sdk_client(client_pool, on_request=lambda method, params: ["not", "a", "dict"])
    with caplog.at_level(logging.ERROR, logger="exmcp_actors"):
        error = ask(client, "com.example/ask")["error"]
    assert error["code"] == -32603
    assert any("returned list, not a dict" in r.getMessage() for r in caplog.records)
    assert ask(client, "ping") == {}  # the client carries on


def test_on_request_never_takes_a_request_the_library_knows(legacy_server: FakeServer) -> None:
    calls: list[str] = []
    client = mcp.connect(
        legacy_server.transport(),
        protocol="legacy",
        request_timeout=5.0,
        on_request=lambda method, params: calls.append(method) or {},
    )
    try:
        request_id = legacy_server.request("sampling/createMessage", {"messages": [], "maxTokens": 1})
        assert legacy_server.wait_response(request_id)["error"]["code"] == -32601
        request_id = legacy_server.request("com.example/x", {"a": 1})
        assert legacy_server.wait_response(request_id)["result"] == {}
        assert calls == ["com.example/x"]
    finally:
        client.disconnect()


def test_a_custom_request_with_params_that_are_no_object_is_refused(legacy_server: FakeServer) -> None:
    client = mcp.connect(legacy_server.transport(), protocol="legacy", request_timeout=5.0, on_request=lambda m, p: {})
    try:
        legacy_server.send({"jsonrpc": "2.0", "id": "r1", "method": "com.example/x", "params": [1, 2]})
        assert legacy_server.wait_response("r1")["error"]["code"] == -32602
    finally:
        client.disconnect()


def test_on_request_must_be_callable() -> None:
    with pytest.raises(TypeError, match="on_request must be a callable"):
        mcp.connect(["/nonexistent/server"], on_request="nope")


def test_junk_answers_to_many_distinct_custom_methods_log_once(
    legacy_server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    # The server picks the method names: they must not each get their own rate-limit slot.
    client = mcp.connect(
        legacy_server.transport(), protocol="legacy", request_timeout=5.0, on_request=lambda m, p: "junk"
    )
    try:
        with caplog.at_level(logging.ERROR, logger="exmcp_actors"):
            for index in range(50):
                request_id = legacy_server.request(f"com.example/m{index}\x1b[2J", {})
                assert legacy_server.wait_response(request_id)["error"]["code"] == -32603
        records = [r.getMessage() for r in caplog.records if "not a dict" in r.getMessage()]
        assert len(records) == 1
        assert "\x1b" not in records[0]
    finally:
        client.disconnect()
