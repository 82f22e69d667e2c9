"""The client against the real MCP SDK server (tests/peers/sdk_server.py), over
stdio, WebSocket and Streamable HTTP, in both eras where it makes sense.

Contract: /work/shared/design/API.md and BEHAVIOUR.md (Registration, Delivery,
Lifecycle). A TapTransport around the real transport lets tests look at the
wire; the peer's ``stats`` tool shows what the server saw.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import pykka
import pytest

import exmcp_actors as mcp
from exmcp_actors._transport._base import RequestFailed
from tests.sdk_helpers import (
    PEER_INFO,
    PEER_PAGE_SIZE,
    PEER_PROMPTS,
    PEER_RESOURCES,
    PEER_TOOLS,
    PROMPTS_CHANGED,
    RESOURCE_UPDATED,
    RESOURCES_CHANGED,
    TOOLS_CHANGED,
    URI_A,
    URI_B,
    URI_C,
    WAIT,
    ClientPool,
    Collected,
    TapTransport,
    Target,
    assert_nothing_after_closed,
    child_pids,
    configure,
    expect_closed,
    expect_notification,
    library_actors,
    library_threads,
    new_fds,
    notify,
    only_live_session,
    open_fds,
    process_exists,
    run_in_thread,
    server_stats,
    settle,
    shared_target,
    surviving_library_threads,
    target_for,
    tool_text,
    wait_listening,
)

ALL = [(k, e) for k in ("stdio", "ws", "http") for e in ("legacy", "modern")]
LEGACY = [(k, "legacy") for k in ("stdio", "ws", "http")]


def _ids(param: tuple[str, str]) -> str:
    return "-".join(param)


@pytest.fixture
def fresh(request: pytest.FixtureRequest) -> Target:
    """A peer of this test's own (conftest fixtures): for tests that configure it or start it with
    flags of their own."""
    kind, era = request.param
    return target_for(request, kind, era)


@pytest.fixture
def target(request: pytest.FixtureRequest, peer_pool: Any) -> Target:
    """A long-lived peer shared with the session's other tests: they read only their own
    session's counters (``server_stats(client, mine=True)``)."""
    kind, era = request.param
    return shared_target(peer_pool, kind, era)


def connect(pool: ClientPool, target: Target, **kwargs: Any) -> tuple[mcp.Client, TapTransport]:
    tap = target.tap()
    client = pool.connect(tap, **kwargs)
    assert client.era == target.era, f"{target.id}: expected the {target.era} era, got {client.era}"
    if target.kind == "http" and target.era == "legacy":
        wait_listening(tap)
    return client, tap


# --------------------------------------------------------------------------- handshake


@pytest.mark.parametrize("target", ALL, indirect=True, ids=_ids)
def test_the_handshake_reports_status_era_version_server_info_and_capabilities(
    pool: ClientPool, target: Target
) -> None:
    client, tap = connect(pool, target)

    assert client.status == "ready"
    if target.era == "legacy":
        assert client.protocol_version == "2025-11-25"
        assert client.protocol_version in mcp.LEGACY_VERSIONS
        assert [m["method"] for m in tap.sent_messages() if m.get("method") == "initialize"] == ["initialize"]
    else:
        assert client.protocol_version == "2026-07-28"
        assert client.protocol_version in mcp.MODERN_VERSIONS
        assert not tap.sent_messages("initialize"), "a modern handshake never sends initialize"
    assert client.server_info == PEER_INFO
    caps = client.server_capabilities
    assert caps["resources"]["subscribe"] is True
    assert caps["resources"]["listChanged"] is True
    assert caps["tools"]["listChanged"] is True
    assert caps["prompts"]["listChanged"] is True


# --------------------------------------------------------------------------- requests


@pytest.mark.parametrize("target", LEGACY, indirect=True, ids=_ids)
def test_ping_answers_on_a_legacy_peer(pool: ClientPool, target: Target) -> None:
    client, tap = connect(pool, target)

    client.ping(timeout=WAIT)  # returns nothing; raises on an error answer
    assert len(tap.sent_messages("ping")) == 1


@pytest.mark.parametrize("target", [("ws", "modern")], indirect=True, ids=_ids)
def test_ping_is_refused_locally_on_a_modern_peer(pool: ClientPool, target: Target) -> None:
    client, tap = connect(pool, target)

    with pytest.raises(mcp.Error):
        client.ping(timeout=WAIT)
    assert tap.sent_messages("ping") == [], "2026-07-28 has no ping: nothing may be sent"


@pytest.mark.parametrize("target", ALL, indirect=True, ids=_ids)
def test_list_calls_follow_every_page(pool: ClientPool, target: Target) -> None:
    client, tap = connect(pool, target)

    assert [t["name"] for t in client.list_tools(timeout=WAIT)] == PEER_TOOLS
    assert [r["uri"] for r in client.list_resources(timeout=WAIT)] == PEER_RESOURCES
    assert [p["name"] for p in client.list_prompts(timeout=WAIT)] == PEER_PROMPTS

    # The peer pages by PEER_PAGE_SIZE: every page was asked for, each with the cursor the last one gave.
    for method, total in (("tools/list", len(PEER_TOOLS)), ("resources/list", 3), ("prompts/list", 3)):
        cursors = [(m.get("params") or {}).get("cursor") for m in tap.sent_messages(method)]
        pages = -(-total // PEER_PAGE_SIZE)
        assert cursors == [None] + [f"offset-{PEER_PAGE_SIZE * i}" for i in range(1, pages)], (method, cursors)


@pytest.mark.parametrize("target", ALL, indirect=True, ids=_ids)
def test_call_tool_read_resource_and_get_prompt_return_the_result(pool: ClientPool, target: Target) -> None:
    client, _ = connect(pool, target)

    echoed = client.call_tool("echo", {"text": "hello there"}, timeout=WAIT)
    assert tool_text(echoed) == "hello there"
    assert echoed.get("isError") in (None, False)

    read = client.read_resource(URI_A, timeout=WAIT)
    assert read["contents"] == [{"uri": URI_A, "mimeType": "text/plain", "text": "a.txt version 1"}]

    prompt = client.get_prompt("greet", {"name": "Ada"}, timeout=WAIT)
    assert prompt["messages"] == [{"role": "user", "content": {"type": "text", "text": "Hello, Ada!"}}]
    assert client.get_prompt("farewell", timeout=WAIT)["messages"][0]["content"]["text"] == "Goodbye."


@pytest.mark.parametrize("target", ALL, indirect=True, ids=_ids)
def test_a_raw_request_returns_the_result_dict(pool: ClientPool, target: Target) -> None:
    client, _ = connect(pool, target)

    page = client.request("resources/list", {"cursor": "offset-2"}, timeout=WAIT)
    assert [r["uri"] for r in page["resources"]] == [URI_C]
    assert page.get("nextCursor") is None

    first = client.request("tools/list", timeout=WAIT)
    assert [t["name"] for t in first["tools"]] == PEER_TOOLS[:PEER_PAGE_SIZE]
    assert first["nextCursor"] == f"offset-{PEER_PAGE_SIZE}"

    called = client.request("tools/call", {"name": "echo", "arguments": {"text": "raw"}}, timeout=WAIT)
    assert tool_text(called) == "raw"


@pytest.mark.parametrize("target", ALL, indirect=True, ids=_ids)
def test_errors_carry_the_json_rpc_code_and_message(pool: ClientPool, target: Target) -> None:
    client, _ = connect(pool, target)

    with pytest.raises(mcp.RequestError) as unknown_tool:
        client.call_tool("no_such_tool", timeout=WAIT)
    assert unknown_tool.value.code == -32602
    assert unknown_tool.value.message == "Unknown tool: no_such_tool"
    assert unknown_tool.value.reason == ("request_error", -32602, "Unknown tool: no_such_tool")

    with pytest.raises(mcp.RequestError) as unknown_method:
        client.request("no/such/method", timeout=WAIT)
    assert unknown_method.value.code == -32601
    assert unknown_method.value.message == "Method not found"

    with pytest.raises(mcp.RequestError) as unknown_resource:
        client.read_resource("file:///missing.txt", timeout=WAIT)
    assert unknown_resource.value.code == -32002
    assert unknown_resource.value.data == {"uri": "file:///missing.txt"}

    with pytest.raises(mcp.RequestError) as bad_cursor:
        client.request("tools/list", {"cursor": "nonsense"}, timeout=WAIT)
    assert bad_cursor.value.code == -32602

    # Errors are per request: the connection is fine.
    assert client.status == "ready"
    assert tool_text(client.call_tool("echo", {"text": "still here"}, timeout=WAIT)) == "still here"


@pytest.mark.parametrize("target", ALL, indirect=True, ids=_ids)
def test_a_request_timeout_raises_and_cancels_the_request_on_the_wire(pool: ClientPool, target: Target) -> None:
    client, tap = connect(pool, target)
    seconds = 1.5

    started = time.monotonic()
    with pytest.raises(mcp.RequestTimeout) as info:
        client.call_tool("sleep", {"seconds": seconds}, timeout=0.3)
    assert time.monotonic() - started < seconds, "the call must give up at its timeout, not at the answer"
    assert info.value.reason == "timeout"

    call = tap.wait_sent("tools/call", lambda m: m["params"]["name"] == "sleep")
    if (target.kind, target.era) == ("http", "modern"):
        # Modern Streamable HTTP: closing the request's stream is the cancellation.
        tap.wait_for(lambda: (call["id"], True) in tap.stream_cancels, what="the request's stream to be closed")
    else:
        cancelled = tap.wait_sent("notifications/cancelled", lambda m: m["params"].get("requestId") == call["id"])
        assert "id" not in cancelled, "notifications/cancelled is a notification"

    # Marker: a sleep started later that ends later than the cancelled one would have.
    # Had the server not cancelled it, its late answer would have come first.
    assert tool_text(client.call_tool("sleep", {"seconds": seconds}, timeout=WAIT)) == "slept"
    late = [
        f
        for f in tap.received_frames()
        if (isinstance(f, dict) and f.get("id") == call["id"]) or (isinstance(f, RequestFailed) and f.id == call["id"])
    ]
    assert late == [], f"the cancelled request was answered (or failed) after all: {late}"
    assert client.status == "ready"
    assert tool_text(client.call_tool("echo", {"text": "usable"}, timeout=WAIT)) == "usable"
    assert settle(client)["pending"] == 0, "the timed-out request must not stay pending"


# --------------------------------------------------------------------------- delivery


@pytest.mark.parametrize("target", LEGACY, indirect=True, ids=_ids)
def test_a_resource_update_and_each_list_change_reach_a_listener(pool: ClientPool, target: Target) -> None:
    client, _ = connect(pool, target)
    listener = client.subscribe_notifications(
        {
            "toolsListChanged": True,
            "promptsListChanged": True,
            "resourcesListChanged": True,
            "resourceSubscriptions": [URI_A],
        }
    )

    notify(client, "resource_updated", URI_A)
    msg = expect_notification(listener, RESOURCE_UPDATED, URI_A)
    assert msg == ("ex_mcp_notification", listener, RESOURCE_UPDATED, {"uri": URI_A})
    notify(client, "tools")
    expect_notification(listener, TOOLS_CHANGED)
    notify(client, "prompts")
    expect_notification(listener, PROMPTS_CHANGED)
    notify(client, "resources")
    expect_notification(listener, RESOURCES_CHANGED)
    assert listener.pending() == 0


@pytest.mark.parametrize("target", ALL, indirect=True, ids=_ids)
def test_watch_delivers_the_same_messages_in_both_eras(pool: ClientPool, target: Target) -> None:
    client, _ = connect(pool, target)
    watch = client.watch({"toolsListChanged": True, "resourceSubscriptions": [URI_A]})

    notify(client, "resource_updated", URI_A)
    msg = expect_notification(watch, RESOURCE_UPDATED, URI_A)
    assert msg.params["uri"] == URI_A
    notify(client, "tools")
    expect_notification(watch, TOOLS_CHANGED)

    client.disconnect()
    assert expect_closed(watch).reason == "disconnected"


@pytest.mark.parametrize("target", LEGACY, indirect=True, ids=_ids)
def test_updates_for_uris_outside_the_filter_are_never_delivered_though_the_server_sends_them(
    pool: ClientPool, target: Target
) -> None:
    client, tap = connect(pool, target)
    listener = client.subscribe_notifications({"resourceSubscriptions": [URI_A]})

    notify(client, "resource_updated", URI_B, unsubscribed_too=True)  # the server sends it regardless
    notify(client, "resource_updated", URI_A)  # the marker: must be the first thing delivered

    expect_notification(listener, RESOURCE_UPDATED, URI_A)
    assert listener.pending() == 0
    updated = [
        f["params"]["uri"] for f in tap.received_frames() if isinstance(f, dict) and f.get("method") == RESOURCE_UPDATED
    ]
    assert updated == [URI_B, URI_A], "the server really sent the unlisted update, before the marker"


@pytest.mark.parametrize("target", LEGACY, indirect=True, ids=_ids)
def test_a_disabled_list_changed_category_is_dropped(pool: ClientPool, target: Target) -> None:
    client, _ = connect(pool, target)
    tools_only = client.subscribe_notifications({"toolsListChanged": True, "promptsListChanged": False})
    assert tools_only.filter == {"toolsListChanged": True}

    notify(client, "prompts")
    notify(client, "resources")
    notify(client, "resource_updated", URI_A, unsubscribed_too=True)
    notify(client, "tools")  # the marker

    expect_notification(tools_only, TOOLS_CHANGED)
    assert tools_only.pending() == 0


@pytest.mark.parametrize("target", [("ws", "legacy")], indirect=True, ids=_ids)
def test_a_subscriber_with_several_matching_listeners_gets_one_message_per_listener_in_wire_order(
    pool: ClientPool, target: Target
) -> None:
    client, _ = connect(pool, target)
    inbox = Collected()
    first = client.subscribe_notifications({"resourceSubscriptions": [URI_A, URI_B]}, subscriber=inbox)
    second = client.subscribe_notifications(
        {"resourceSubscriptions": [URI_A], "toolsListChanged": True}, subscriber=inbox
    )

    notify(client, "resource_updated", URI_A)
    notify(client, "resource_updated", URI_B)
    notify(client, "tools")  # only `second` wants it: the last message both ways

    got = [inbox.items.get(timeout=WAIT) for _ in range(4)]
    assert [(m.listener, m.method, m.params.get("uri")) for m in got[:2]] in (
        [(first, RESOURCE_UPDATED, URI_A), (second, RESOURCE_UPDATED, URI_A)],
        [(second, RESOURCE_UPDATED, URI_A), (first, RESOURCE_UPDATED, URI_A)],
    )
    assert [(m.listener, m.method, m.params.get("uri")) for m in got[2:]] == [
        (first, RESOURCE_UPDATED, URI_B),
        (second, TOOLS_CHANGED, None),
    ]
    assert inbox.items.empty()


@pytest.mark.parametrize("fresh", [("stdio", "legacy")], indirect=True, ids=_ids)
def test_an_explicit_unsubscribe_resource_silences_a_listener_on_that_uri(pool: ClientPool, fresh: Target) -> None:
    client, tap = connect(pool, fresh)
    listener = client.subscribe_notifications({"resourceSubscriptions": [URI_A], "toolsListChanged": True})

    client.unsubscribe_resource(URI_A, timeout=WAIT)  # direct: not refcounted with the listener
    assert only_live_session(server_stats(client))["subscribed"] == []
    notify(client, "resource_updated", URI_A)  # the server now sends nothing for a.txt
    notify(client, "tools")  # the marker

    expect_notification(listener, TOOLS_CHANGED)
    assert listener.pending() == 0
    assert len(tap.sent_messages("resources/unsubscribe")) == 1


# --------------------------------------------------------------------------- registration


@pytest.mark.parametrize("target", LEGACY, indirect=True, ids=_ids)
def test_one_subscribe_per_uri_is_shared_across_listeners_and_the_last_holder_unsubscribes(
    pool: ClientPool, target: Target
) -> None:
    client, _ = connect(pool, target)
    other = Collected()
    both = client.subscribe_notifications({"resourceSubscriptions": [URI_A, URI_B]})
    a_only = client.subscribe_notifications({"resourceSubscriptions": [URI_A]})
    b_and_c = client.subscribe_notifications({"resourceSubscriptions": [URI_B, URI_C, URI_B]}, subscriber=other)
    assert b_and_c.filter == {"resourceSubscriptions": [URI_B, URI_C]}

    stats = server_stats(client, mine=True)
    session = only_live_session(stats)
    assert stats["subscribe_calls"] == {URI_A: 1, URI_B: 1, URI_C: 1}
    assert sorted(session["subscribed"]) == [URI_A, URI_B, URI_C]
    assert stats["unsubscribe_calls"] == {}

    notify(client, "resource_updated", URI_A)
    expect_notification(both, RESOURCE_UPDATED, URI_A)
    expect_notification(a_only, RESOURCE_UPDATED, URI_A)

    both.unsubscribe()  # a is still held by a_only, b by b_and_c
    settle(client)
    assert server_stats(client, mine=True)["unsubscribe_calls"] == {}

    a_only.unsubscribe()  # the last holder of a
    settle(client)
    stats = server_stats(client, mine=True)
    assert stats["unsubscribe_calls"] == {URI_A: 1}
    assert sorted(only_live_session(stats)["subscribed"]) == [URI_B, URI_C]

    client.unsubscribe_notifications(b_and_c)
    state = settle(client)
    stats = server_stats(client, mine=True)
    assert stats["subscribe_calls"] == {URI_A: 1, URI_B: 1, URI_C: 1}
    assert stats["unsubscribe_calls"] == {URI_A: 1, URI_B: 1, URI_C: 1}
    assert stats["subscribed"] == {}
    assert state["entries"] == 0 and state["refcount"]["empty"] is True


@pytest.mark.parametrize("fresh", LEGACY, indirect=True, ids=_ids)
def test_a_refused_subscribe_fails_the_registration_and_rolls_back_only_its_own_uris(
    pool: ClientPool, fresh: Target
) -> None:
    client, tap = connect(pool, fresh)
    holder = client.subscribe_notifications({"resourceSubscriptions": [URI_C]})
    configure(client, refuse_subscribe=[URI_B])
    late = "file:///never-tried.txt"

    with pytest.raises(mcp.SubscribeFailed) as info:
        client.subscribe_notifications({"resourceSubscriptions": [URI_A, URI_C, URI_B, late]})
    assert info.value.uri == URI_B
    assert info.value.reason[:2] == ("subscribe_failed", URI_B)

    settle(client)
    stats = server_stats(client)
    ops = [(op["op"], op["uri"], op["ok"]) for op in stats["ops"]]
    assert ops == [
        ("subscribe", URI_C, True),  # the holder
        ("subscribe", URI_A, True),  # the failed registration's own URI ...
        ("subscribe", URI_B, False),  # ... the refusal ...
        ("unsubscribe", URI_A, True),  # ... rolls back a; c (shared) only decremented; `late` never tried
    ]
    assert stats["subscribed"] == {URI_C: 1}
    state = settle(client)
    assert state["refcount"]["counts"] == {URI_C: 1}
    assert state["entries"] == 1

    notify(client, "resource_updated", URI_C)
    expect_notification(holder, RESOURCE_UPDATED, URI_C)
    assert not [m for m in tap.sent_messages("resources/subscribe") if m["params"]["uri"] == late]


@pytest.mark.parametrize("target", [("ws", "legacy")], indirect=True, ids=_ids)
def test_a_dead_subscriber_is_refused_before_any_subscribe_is_sent(pool: ClientPool, target: Target) -> None:
    client, tap = connect(pool, target)
    finished = threading.Thread(target=lambda: None, name="already-finished")
    finished.start()
    finished.join()

    with pytest.raises(mcp.SubscriberNotAlive) as info:
        client.subscribe_notifications({"resourceSubscriptions": [URI_A]}, subscriber=finished)
    assert info.value.reason == "subscriber_not_alive"

    assert tap.sent_messages("resources/subscribe") == []
    assert server_stats(client, mine=True)["subscribe_calls"] == {}
    state = settle(client)
    assert state["entries"] == 0 and state["refcount"]["empty"] is True


@pytest.mark.parametrize("target", [("stdio", "modern"), ("http", "modern")], indirect=True, ids=_ids)
def test_a_modern_peer_refuses_legacy_listeners_with_use_listen(pool: ClientPool, target: Target) -> None:
    client, tap = connect(pool, target)

    with pytest.raises(mcp.UseListen) as info:
        client.subscribe_notifications({"resourceSubscriptions": [URI_A]})
    assert info.value.reason == "use_listen"
    assert tap.sent_messages("resources/subscribe") == []


@pytest.mark.parametrize("target", [("ws", "legacy")], indirect=True, ids=_ids)
def test_a_disconnected_client_refuses_new_listeners_with_not_connected(pool: ClientPool, target: Target) -> None:
    client, _ = connect(pool, target)
    client.disconnect()

    with pytest.raises(mcp.NotConnected) as info:
        client.subscribe_notifications({"toolsListChanged": True})
    assert info.value.reason == "not_connected"
    with pytest.raises(mcp.FilterError) as bad:  # filter errors come first, whatever the state
        client.subscribe_notifications({"toolsListChanged": "yes"})
    assert bad.value.reason == "invalid_subscription_filter"


# --------------------------------------------------------------------------- lifecycle


@pytest.mark.parametrize("target", LEGACY, indirect=True, ids=_ids)
def test_a_listener_whose_thread_ends_is_removed_and_its_uri_unsubscribed_within_a_second(
    pool: ClientPool, target: Target
) -> None:
    client, tap = connect(pool, target)
    staying = client.subscribe_notifications({"resourceSubscriptions": [URI_A]})
    registered = threading.Event()
    leave = threading.Event()

    def owner() -> None:
        client.subscribe_notifications({"resourceSubscriptions": [URI_A, URI_B]})
        registered.set()
        leave.wait(WAIT)

    thread = threading.Thread(target=owner, name="short-lived-subscriber")
    thread.start()
    assert registered.wait(WAIT)
    assert server_stats(client, mine=True)["subscribed"] == {URI_A: 1, URI_B: 1}

    leave.set()
    thread.join(WAIT)
    ended = time.monotonic()
    unsubscribe = tap.wait_sent("resources/unsubscribe", timeout=1.0)
    assert time.monotonic() - ended <= 1.0
    assert unsubscribe["params"] == {"uri": URI_B}, "a is still held by `staying`"

    state = settle(client)
    assert state["entries"] == 1 and state["refcount"]["counts"] == {URI_A: 1}
    stats = server_stats(client, mine=True)
    assert stats["subscribed"] == {URI_A: 1}
    assert stats["unsubscribe_calls"] == {URI_B: 1}
    notify(client, "resource_updated", URI_A)
    expect_notification(staying, RESOURCE_UPDATED, URI_A)


class _SinkActor(pykka.ThreadingActor):
    """A pykka subscriber: everything it is told lands on a queue."""

    def __init__(self, inbox: queue.Queue[Any]) -> None:
        super().__init__()
        self.inbox = inbox

    def on_receive(self, message: Any) -> None:
        self.inbox.put(message)


@pytest.mark.parametrize("target", [("ws", "legacy")], indirect=True, ids=_ids)
def test_an_actor_subscriber_is_told_its_messages_and_its_stop_removes_the_listener_within_a_second(
    pool: ClientPool, target: Target
) -> None:
    client, tap = connect(pool, target)
    told: queue.Queue[Any] = queue.Queue()
    sink = _SinkActor.start(told)
    listener = client.subscribe_notifications({"resourceSubscriptions": [URI_A, URI_B]}, subscriber=sink)
    assert listener.subscriber is sink

    notify(client, "resource_updated", URI_B)
    assert told.get(timeout=WAIT) == ("ex_mcp_notification", listener, RESOURCE_UPDATED, {"uri": URI_B})
    with pytest.raises(RuntimeError):
        listener.get(timeout=0)  # delivered to the actor, not to an inbox on the handle

    sink.stop()
    stopped = time.monotonic()
    tap.wait_for(
        lambda: len([m for _, m in tap.sent if m.get("method") == "resources/unsubscribe"]) == 2,
        timeout=1.0,
        what="both URIs to be unsubscribed",
    )
    assert time.monotonic() - stopped <= 1.0
    state = settle(client)
    assert state["entries"] == 0 and state["proxies"] == 0 and state["refcount"]["empty"] is True
    assert server_stats(client, mine=True)["subscribed"] == {}
    with pytest.raises(mcp.ListenerNotFound):
        listener.unsubscribe()


@pytest.mark.peer_args("--subscribe-delay", f"{URI_B}=1.0")
@pytest.mark.parametrize("fresh", [("ws", "legacy")], indirect=True, ids=_ids)
def test_a_subscriber_that_dies_during_its_registration_is_refused_and_leaves_nothing_subscribed(
    pool: ClientPool, fresh: Target
) -> None:
    client, tap = connect(pool, fresh)
    sink = _SinkActor.start(queue.Queue())
    thread, outcome = run_in_thread(
        lambda: client.subscribe_notifications({"resourceSubscriptions": [URI_A, URI_B]}, subscriber=sink, timeout=WAIT)
    )
    tap.wait_sent("resources/subscribe", lambda m: m["params"]["uri"] == URI_B)  # the server holds it for 1s
    sink.stop()

    kind, error, _ = outcome.get(timeout=WAIT)
    thread.join(WAIT)
    assert kind == "error" and isinstance(error, mcp.SubscriberNotAlive), (kind, error)
    state = settle(client)
    assert state["entries"] == 0 and state["proxies"] == 0, state
    assert state["refcount"]["empty"] is True, state["refcount"]
    stats = server_stats(client)
    assert stats["subscribed"] == {}
    assert stats["subscribe_calls"] == stats["unsubscribe_calls"] == {URI_A: 1, URI_B: 1}


@pytest.mark.parametrize("target", [("ws", "legacy")], indirect=True, ids=_ids)
def test_stopping_the_client_actor_closes_every_listener_with_shutdown(pool: ClientPool, target: Target) -> None:
    client, tap = connect(pool, target)
    listener = client.subscribe_notifications({"resourceSubscriptions": [URI_A]})
    collected = Collected()
    by_put = client.subscribe_notifications({"toolsListChanged": True}, subscriber=collected)

    client.actor_ref.stop()

    assert expect_closed(listener).reason == ("shutdown", "normal")
    assert_nothing_after_closed(listener)
    assert collected.items.get(timeout=WAIT) == ("ex_mcp_notification_closed", by_put, ("shutdown", "normal"))
    assert client.status == "disconnected"
    assert tap.sent_messages("resources/unsubscribe") == []


@pytest.mark.parametrize("target", [("ws", "legacy")], indirect=True, ids=_ids)
def test_stopping_every_pykka_actor_still_closes_every_listener_with_shutdown(pool: ClientPool, target: Target) -> None:
    client, _ = connect(pool, target)
    listener = client.subscribe_notifications({"resourceSubscriptions": [URI_A]})
    collected = Collected()
    by_put = client.subscribe_notifications({"toolsListChanged": True}, subscriber=collected)

    pykka.ActorRegistry.stop_all(block=True, timeout=WAIT)  # how pykka applications shut down

    # Every actor has stopped by now: a closing message is delivered already or never.
    assert client.status == "disconnected"
    assert expect_closed(listener, timeout=1.0).reason[0] == "shutdown"
    try:
        closing = collected.items.get(timeout=1.0)
    except queue.Empty:
        pytest.fail("the put() subscriber never got its Closed")
    assert closing[:2] == ("ex_mcp_notification_closed", by_put) and closing.reason[0] == "shutdown", closing


@pytest.mark.parametrize("target", LEGACY, indirect=True, ids=_ids)
def test_disconnect_closes_every_listener_once_and_sends_no_unsubscribe(pool: ClientPool, target: Target) -> None:
    client, tap = connect(pool, target)
    collected = Collected()
    by_thread = client.subscribe_notifications({"resourceSubscriptions": [URI_A]})
    by_put = client.subscribe_notifications(
        {"toolsListChanged": True, "resourceSubscriptions": [URI_B]}, subscriber=collected
    )

    client.disconnect()

    assert client.status == "disconnected"
    assert expect_closed(by_thread).reason == "disconnected"
    assert_nothing_after_closed(by_thread)
    closing = collected.items.get(timeout=WAIT)
    assert closing == ("ex_mcp_notification_closed", by_put, "disconnected")
    assert list(collected) == []
    assert tap.sent_messages("resources/unsubscribe") == []


@pytest.mark.parametrize("target", [("ws", "legacy")], indirect=True, ids=_ids)
def test_unsubscribing_twice_raises_not_found_and_is_a_no_op_on_a_stopped_client(
    pool: ClientPool, target: Target
) -> None:
    client, tap = connect(pool, target)
    listener = client.subscribe_notifications({"resourceSubscriptions": [URI_A]})
    kept = client.subscribe_notifications({"toolsListChanged": True})

    listener.unsubscribe()
    with pytest.raises(mcp.ListenerNotFound) as info:
        client.unsubscribe_notifications(listener)
    assert info.value.reason == "not_found"
    settle(client)
    assert len(tap.sent_messages("resources/unsubscribe")) == 1

    client.disconnect()
    expect_closed(kept)
    client.unsubscribe_notifications(kept)  # a stopped client: nothing to remove, no error


@pytest.mark.parametrize("target", ALL, indirect=True, ids=_ids)
def test_disconnect_leaves_no_thread_actor_child_process_or_socket_behind(pool: ClientPool, target: Target) -> None:
    assert surviving_library_threads(timeout=WAIT) == [], "threads left over from an earlier test"
    fds_before = open_fds(collect=True)
    children_before = child_pids()

    client, tap = connect(pool, target)
    watch = client.watch({"toolsListChanged": True, "resourceSubscriptions": [URI_A]})
    notify(client, "tools")
    expect_notification(watch, TOOLS_CHANGED)
    assert library_threads(), "the client runs on threads"
    assert library_actors(), "... and actors"
    pid = tap.pid
    if target.kind == "stdio":
        assert pid is not None and pid in child_pids()
    else:
        assert any(what.startswith("socket:") for what in open_fds().values())

    client.disconnect()

    assert expect_closed(watch).reason == "disconnected"
    assert surviving_library_threads() == [], "disconnect() returns after every library thread ended"
    assert library_actors() == []
    assert child_pids() == children_before
    if pid is not None:
        assert not process_exists(pid), f"the stdio server {pid} is still there"
    leaked = new_fds(fds_before, open_fds())
    assert leaked == {}, f"file descriptors left open: {leaked}"
