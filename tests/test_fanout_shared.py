"""A reader's fan-out to many inboxes: one shared event per notification, each inbox's get()
making its own handle's Notification. What the host sees must not change: a Notification of
exactly that type, for that listener, in wire order with everything else its inbox receives,
within its bound, and again after the server is killed and restarted."""

from __future__ import annotations

import queue
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import FakeServer
from tests.sdk_helpers import (
    FAST_BACKOFF,
    RESOURCE_UPDATED,
    TOOLS_CHANGED,
    URI_A,
    WAIT,
    expect_notification,
    kill_pid,
    next_message,
    target_for,
)

LISTENERS = 40


def expect_reconnected(listener: Any, resubscribed: list[str]) -> None:
    msg = next_message(listener, 3 * WAIT)
    assert isinstance(msg, mcp.Reconnected) and msg.listener is listener, msg
    assert msg.report["resubscribed"] == resubscribed and msg.report["failed"] == [], msg.report


def drain_each(listeners: list[Any], count: int, uri: str) -> None:
    """Each listener holds exactly ``count`` updates of ``uri``, each a Notification of its own."""
    for listener in listeners:
        for _ in range(count):
            msg = expect_notification(listener, RESOURCE_UPDATED, uri)
            assert type(msg) is mcp.Notification
        with pytest.raises(queue.Empty):
            listener.get(timeout=0)


@pytest.mark.parametrize("kind", ["stdio", "ws"])
def test_one_thread_with_many_listeners_gets_each_update_once_per_listener_before_and_after_a_restart(
    request: pytest.FixtureRequest, connected_clients: list[mcp.Client], kind: str
) -> None:
    target = target_for(request, kind, "legacy")
    tap = target.tap()
    client = mcp.connect(tap, backoff=FAST_BACKOFF, max_reconnect_attempts=60, request_timeout=WAIT)
    connected_clients.append(client)
    listeners = [client.subscribe_notifications({"resourceSubscriptions": [URI_A]}) for _ in range(LISTENERS)]
    client.call_tool("flood", {"uri": URI_A, "count": 25}, timeout=WAIT)
    drain_each(listeners, 25, URI_A)

    # Half go; the rest still get every update, and the gone ones nothing more.
    gone, kept = listeners[: LISTENERS // 2], listeners[LISTENERS // 2 :]
    for listener in gone:
        listener.unsubscribe()
    client.call_tool("flood", {"uri": URI_A, "count": 10}, timeout=WAIT)
    drain_each(kept, 10, URI_A)
    for listener in gone:
        with pytest.raises(queue.Empty):
            listener.get(timeout=0)

    # Killed and restarted: each kept listener hears of it, then gets the new server's updates.
    if kind == "stdio":
        assert target.argv is not None and tap.pid is not None
        tap.use_next(mcp.StdioTransport(target.argv))
        kill_pid(tap.pid)
    else:
        target.peer.kill()
        target.peer.restart()
    for listener in kept:
        expect_reconnected(listener, [URI_A])
    client.call_tool("flood", {"uri": URI_A, "count": 10}, timeout=WAIT)
    drain_each(kept, 10, URI_A)


def test_shared_events_keep_wire_order_with_the_other_messages_of_an_inbox_and_its_bound() -> None:
    with FakeServer() as server:
        client = mcp.connect(server.transport(), protocol="legacy", request_timeout=WAIT)
        try:
            both = {"resourceSubscriptions": [URI_A], "toolsListChanged": True}
            wide = client.subscribe_notifications(both)
            raw = client.subscribe_notifications({"resourceSubscriptions": [URI_A], "methods": ["notifications/x"]})
            # max_pending=2: past it the same-URI updates coalesce (the bound's slow path).
            tight = client.subscribe_notifications({"resourceSubscriptions": [URI_A]}, max_pending=2)
            server.send_batch(
                [
                    {"jsonrpc": "2.0", "method": RESOURCE_UPDATED, "params": {"uri": URI_A, "n": 1}},
                    {"jsonrpc": "2.0", "method": TOOLS_CHANGED},
                    {"jsonrpc": "2.0", "method": "notifications/x", "params": {"n": 2}},
                    {"jsonrpc": "2.0", "method": RESOURCE_UPDATED, "params": {"uri": URI_A, "n": 3}},
                    {"jsonrpc": "2.0", "method": RESOURCE_UPDATED, "params": {"uri": URI_A, "n": 4}},
                    {"jsonrpc": "2.0", "method": RESOURCE_UPDATED, "params": {"uri": URI_A, "n": 5}},
                ]
            )
            seen = [(m.method, m.params.get("n")) for m in (wide.get(timeout=WAIT) for _ in range(5))]
            assert seen == [(RESOURCE_UPDATED, 1), (TOOLS_CHANGED, None), *[(RESOURCE_UPDATED, n) for n in (3, 4, 5)]]
            first, second = raw.get(timeout=WAIT), raw.get(timeout=WAIT)
            assert (type(first), first.params["n"]) == (mcp.Notification, 1)
            assert (type(second), second.method, second.params["n"]) == (mcp.RawNotification, "notifications/x", 2)
            assert [raw.get(timeout=WAIT).params["n"] for _ in range(3)] == [3, 4, 5]
            kept = [tight.get(timeout=WAIT) for _ in range(tight.pending())]
            assert all(type(m) is mcp.Notification and m.listener is tight for m in kept)
            assert [m.params["n"] for m in kept] == [1, 3, 4], kept  # at the bound: 4 queued once, 5 coalesced into it
            for handle in (wide, raw, tight):
                with pytest.raises(queue.Empty):
                    handle.get(timeout=0)
        finally:
            client.disconnect()


def test_a_shared_event_read_after_unsubscribing_still_names_its_listener() -> None:
    with FakeServer() as server:
        client = mcp.connect(server.transport(), protocol="legacy", request_timeout=WAIT)
        try:
            listeners = [client.subscribe_notifications({"resourceSubscriptions": [URI_A]}) for _ in range(3)]
            server.updated(URI_A)
            server.updated(URI_A)
            # The last registered is landed last: once it has both, every inbox has.
            assert [m.listener for m in (listeners[-1].get(timeout=WAIT) for _ in range(2))] == [listeners[-1]] * 2
            for listener in listeners:
                listener.unsubscribe()
            for listener in listeners[:-1]:
                assert [listener.get(timeout=WAIT).listener for _ in range(2)] == [listener, listener]
        finally:
            client.disconnect()
