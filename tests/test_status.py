"""Connection status messages and the keepalive, against FakeServer: the order of a handle's
``Status`` among its other messages across a drop, failed attempts and the close, the
filter's ``status`` key and ``keepalive=`` checked, and a server whose probes go unanswered
found out (a reconnect, or a close with ``("keepalive_timeout", seconds)``) while a busy
connection is never probed."""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import NO_REPLY, FakeConnection, FakeServer
from tests.waiting import assert_next_is_marker, wait_until

WAIT = 10.0
NO_JITTER = mcp.Backoff(initial=0.05, factor=2.0, maximum=1.0, jitter=0.0)
TOOLS = "notifications/tools/list_changed"
ERAS = ["legacy", "modern"]


@pytest.fixture(params=ERAS)
def server(request: pytest.FixtureRequest) -> Iterator[FakeServer]:
    with FakeServer(era=request.param) as fake:
        yield fake


def connect(server: FakeServer, **options: Any) -> mcp.Client:
    options.setdefault("backoff", NO_JITTER)
    return mcp.connect(server.transport(), protocol=server.era, **options)


def status_watch(client: mcp.Client, **extra: Any) -> mcp.Watch:
    return client.watch({"toolsListChanged": True, "status": True, **extra}, timeout=WAIT)


def states(messages: list[Any]) -> list[Any]:
    """Each message as a short word: a Status's state, else the message's tag."""
    return [m.state if isinstance(m, mcp.Status) else m.tag for m in messages]


def read_until(handle: Any, done: Any, timeout: float = WAIT) -> list[Any]:
    """Messages of ``handle`` up to and including the first for which ``done(message)``."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while True:
        message = handle.get(timeout=max(0.0, deadline - time.monotonic()))
        got.append(message)
        if done(message):
            return got


def is_state(state: str) -> Any:
    return lambda m: isinstance(m, mcp.Status) and m.state == state


def tools_changed(server: FakeServer, handle: Any) -> None:
    """A tools list_changed for ``handle``: plain (legacy) or on its subscription (modern)."""
    if server.era == "legacy":
        server.list_changed("tools")
    else:
        server.event(handle.subscription_id, TOOLS)


def mute_probes(server: FakeServer, connection: int) -> None:
    """From now on ``ping`` and ``server/discover`` of connection ``connection`` go unanswered."""
    for method in ("ping", "server/discover"):
        default = server.default_handler(method)
        assert default is not None

        def muted(params: Any, ctx: FakeConnection, default: Any = default) -> Any:
            return NO_REPLY if ctx.number == connection else default(params, ctx)

        server.on(method, muted)


# -- the filter key and the argument ---------------------------------------------------------


def test_the_status_key_is_a_boolean_that_rides_with_something_to_listen_to(server: FakeServer) -> None:
    client = connect(server)
    try:
        with pytest.raises(mcp.FilterError, match="status must be true or false"):
            client.watch({"toolsListChanged": True, "status": 1})
        with pytest.raises(mcp.FilterError, match="enables nothing") as caught:
            client.watch({"status": True})
        assert caught.value.reason == "empty_subscription_filter"
        watch = status_watch(client)
        assert watch.filter == {"toolsListChanged": True, "status": True}
        if server.era == "modern":  # never on the wire: the server's filter has no such key
            [listen] = server.messages("subscriptions/listen")
            assert listen["params"]["notifications"] == {"toolsListChanged": True}
    finally:
        client.disconnect()


@pytest.mark.parametrize(
    ("value", "error"),
    [(True, TypeError), ("5", TypeError), (0, ValueError), (-1.0, ValueError), (math.nan, ValueError)],
)
def test_keepalive_must_be_a_positive_number_of_seconds(value: Any, error: type[Exception]) -> None:
    with FakeServer() as fake, pytest.raises(error, match="keepalive"):
        mcp.connect(fake.transport(), keepalive=value)


# -- the order of status messages ---------------------------------------------------------------


def test_a_status_watch_hears_ready_first_and_a_reconnect_in_order_with_its_other_messages(
    server: FakeServer,
) -> None:
    client = connect(server)
    try:
        watch = status_watch(client)
        first = watch.get(timeout=WAIT)
        assert isinstance(first, mcp.Status) and first.handle is watch and first.state == "ready"
        assert first.detail == {"era": server.era, "protocolVersion": client.protocol_version}
        tools_changed(server, watch)
        assert watch.get(timeout=WAIT).method == TOOLS
        server.drop("gone")
        got = read_until(watch, is_state("ready"))
        assert states(got) == ["reconnecting", "connecting", "ex_mcp_notification_reconnected", "ready"]
        reconnecting, connecting = got[0], got[1]
        assert reconnecting.detail["attempt"] == 1 and reconnecting.detail["delay"] == pytest.approx(0.05)
        assert reconnecting.detail["reason"][0] == "transport_closed" and "gone" in reconnecting.detail["reason"][1]
        assert connecting.detail == {"attempt": 1}
        tools_changed(server, watch)
        assert watch.get(timeout=WAIT).method == TOOLS
        client.disconnect()
        closing = read_until(watch, lambda m: isinstance(m, mcp.Closed))
        assert states(closing) == ["closed", "ex_mcp_notification_closed"]
        assert closing[0].detail == {"reason": "disconnected"} == {"reason": closing[1].reason}
    finally:
        client.disconnect()


def test_failed_attempts_count_up_in_the_reconnecting_status(server: FakeServer) -> None:
    client = connect(server)
    try:
        watch = status_watch(client)
        assert watch.get(timeout=WAIT).state == "ready"
        server.refuse(2)
        server.drop()
        got = read_until(watch, is_state("ready"))
        assert states(got) == [
            "reconnecting",
            "reconnecting",
            "reconnecting",
            "connecting",
            "ex_mcp_notification_reconnected",
            "ready",
        ]
        assert [m.detail["attempt"] for m in got[:3]] == [1, 2, 3]
        assert [m.detail["delay"] for m in got[:3]] == pytest.approx([0.05, 0.1, 0.2])
        assert [m.detail["reason"][0] for m in got[:3]] == ["transport_closed", "attempt_failed", "attempt_failed"]
        assert got[3].detail == {"attempt": 3}
    finally:
        client.disconnect()


def test_the_closed_status_comes_just_before_the_close_with_its_reason(server: FakeServer) -> None:
    client = connect(server, reconnect=False)
    watch = status_watch(client)
    plain = client.watch({"toolsListChanged": True}, timeout=WAIT)
    assert watch.get(timeout=WAIT).state == "ready"
    server.drop("bye")
    got = read_until(watch, lambda m: isinstance(m, mcp.Closed))
    assert states(got) == ["closed", "ex_mcp_notification_closed"]
    assert got[0].detail["reason"] == got[1].reason and got[1].reason[0] == "transport_closed"
    # A handle that did not ask hears no status at all.
    assert isinstance(plain.get(timeout=WAIT), mcp.Closed)


def test_a_reconnect_that_gives_up_closes_with_the_same_reason_in_both(server: FakeServer) -> None:
    client = connect(server, max_reconnect_attempts=2)
    watch = status_watch(client)
    assert watch.get(timeout=WAIT).state == "ready"
    server.refuse()
    server.drop()
    got = read_until(watch, lambda m: isinstance(m, mcp.Closed))
    assert states(got) == ["reconnecting", "reconnecting", "closed", "ex_mcp_notification_closed"]
    assert got[2].detail["reason"] == got[3].reason and got[3].reason[0] == "reconnect_exhausted"


def test_a_listener_and_a_subscription_hear_their_status_too(server: FakeServer) -> None:
    client = connect(server)
    try:
        if server.era == "legacy":
            handle: Any = client.subscribe_notifications({"toolsListChanged": True, "status": True}, timeout=WAIT)
            closing = "ex_mcp_notification_closed"
        else:
            handle = client.listen({"toolsListChanged": True, "status": True}, timeout=WAIT)
            closing = "ex_mcp_subscription_closed"
        assert handle.get(timeout=WAIT).state == "ready"
        server.drop()
        got = read_until(handle, is_state("ready"))
        assert "reconnecting" in states(got) and states(got).index("reconnecting") < states(got).index("connecting")
        if server.era == "legacy":
            handle.unsubscribe()  # a removal: nothing more reaches it, no close
        else:
            handle.cancel()
            assert states(read_until(handle, lambda m: m.tag == closing))[-2:] == ["closed", closing]
    finally:
        client.disconnect()


def test_a_thread_that_disconnects_still_hears_the_closed_status_before_closed(server: FakeServer) -> None:
    client = connect(server)
    watch = status_watch(client)
    for _ in range(3):
        tools_changed(server, watch)
    client.disconnect()  # the backlog is dropped; the closed status goes with the close
    got = read_until(watch, lambda m: isinstance(m, mcp.Closed))
    assert states(got)[-2:] == ["closed", "ex_mcp_notification_closed"]


# -- the keepalive -------------------------------------------------------------------------------


def test_unanswered_probes_are_a_lost_connection_and_the_client_reconnects(server: FakeServer) -> None:
    client = connect(server, keepalive=0.3)
    try:
        watch = status_watch(client)
        assert watch.get(timeout=WAIT).state == "ready"
        probe = "ping" if server.era == "legacy" else "server/discover"
        before = server.count(probe, connection=1)
        mute_probes(server, 1)
        got = read_until(watch, is_state("ready"))
        assert states(got) == ["reconnecting", "connecting", "ex_mcp_notification_reconnected", "ready"]
        assert got[0].detail["reason"] == ("keepalive_timeout", 0.3)
        assert server.count(probe, connection=1) == before + 1  # one probe at a time
        assert client._inspect()["keepalive"][0] >= 1
        # The new connection is probed, and answers.
        wait_until(lambda: client._inspect()["keepalive"][1] >= 1, WAIT, "an answered probe")
        assert client.status == "ready"
    finally:
        client.disconnect()


def test_without_reconnect_an_unanswered_probe_closes_the_client(server: FakeServer) -> None:
    client = connect(server, keepalive=0.2, reconnect=False)
    watch = status_watch(client)
    assert watch.get(timeout=WAIT).state == "ready"
    mute_probes(server, 1)
    got = read_until(watch, lambda m: isinstance(m, mcp.Closed))
    assert states(got) == ["closed", "ex_mcp_notification_closed"]
    assert got[1].reason == ("keepalive_timeout", 0.2) == got[0].detail["reason"]
    wait_until(lambda: client.status == "disconnected", WAIT, "the client closed")


def test_a_silent_server_is_found_out_by_the_keepalive() -> None:
    with FakeServer() as fake:
        client = mcp.connect(fake.transport(), keepalive=0.2, reconnect=False)
        watch = status_watch(client)
        assert watch.get(timeout=WAIT).state == "ready"
        fake.silence()
        got = read_until(watch, lambda m: isinstance(m, mcp.Closed))
        assert got[-1].reason == ("keepalive_timeout", 0.2)


def test_a_connection_with_traffic_is_not_probed_and_an_idle_one_is(server: FakeServer) -> None:
    keepalive = 0.5
    probe = "ping" if server.era == "legacy" else "server/discover"
    # The claim holds for a connection never quiet for a keepalive period; a loaded machine can
    # stall a call for longer than that, so each try measures the longest span in which the
    # client may have read nothing (from a call's start to the next call's end: its answer came
    # after the one and before the other) and judges only a try where every span was shorter.
    judged = 0
    for _try in range(5):
        began = time.monotonic()  # the watch starts while connecting
        client = connect(server, keepalive=keepalive)
        try:
            start = server.count(probe)
            longest, end = 0.0, began + 3 * keepalive
            while True:
                sent = time.monotonic()
                client.call_tool("echo", {"n": 1}, timeout=WAIT)
                done = time.monotonic()
                longest, began = max(longest, done - began), sent
                if done >= end:
                    break
            probes = server.count(probe) - start
            longest = max(longest, time.monotonic() - began)
            if longest < keepalive:
                judged += 1
                assert probes == 0, f"probed {probes} time(s) with no quiet span over {longest:.3f}s"
                server.wait_for(probe, timeout=WAIT)  # quiet now: probed
                wait_until(functools.partial(_probe_answered, client), WAIT, "the probe answered")
                return
        finally:
            client.disconnect()
    pytest.skip(f"the machine stalled a call for a keepalive period in each of 5 tries (judged {judged})")


def _probe_answered(client: mcp.Client) -> bool:
    return bool(client._inspect()["keepalive"][1] >= 1)


def test_an_idle_client_without_keepalive_arms_nothing_and_one_with_it_stops_at_the_end() -> None:
    with FakeServer() as fake:
        quiet = mcp.connect(fake.transport())
        assert quiet._inspect()["timers"] == 0
        shell = _shell(quiet)
        assert not shell.idle.armed
        quiet.disconnect()
        probing = mcp.connect(fake.transport(), keepalive=30.0)
        shell = _shell(probing)
        assert shell.idle.armed
        probing.disconnect()
        assert not shell.idle.armed


def _shell(client: mcp.Client) -> Any:
    return client._ref.proxy().shell.get(timeout=WAIT)


def test_the_status_of_a_put_subscriber_comes_in_order_too(server: FakeServer) -> None:
    got: list[Any] = []
    ready = threading.Event()

    class Sink:
        def put(self, message: Any) -> None:
            got.append(message)
            if isinstance(message, mcp.Status) and message.state == "ready" and len(got) > 1:
                ready.set()

    client = connect(server)
    try:
        watch = client.watch({"toolsListChanged": True, "status": True}, subscriber=Sink(), timeout=WAIT)
        server.drop()
        assert ready.wait(WAIT)
        assert states(got) == ["ready", "reconnecting", "connecting", "ex_mcp_notification_reconnected", "ready"]
        assert all(m[1] is watch for m in got)
    finally:
        client.disconnect()


def test_nothing_follows_the_ready_status_without_a_marker(server: FakeServer) -> None:
    client = connect(server)
    try:
        watch = status_watch(client)
        assert watch.get(timeout=WAIT).state == "ready"
        tools_changed(server, watch)
        assert_next_is_marker(lambda t: watch.get(timeout=t), lambda m: getattr(m, "method", None) == TOOLS)
    finally:
        client.disconnect()


def test_a_hub_passes_keepalive_to_every_server_and_status_through_its_watch() -> None:
    with FakeServer() as fake:
        hub = mcp.Hub.from_config({"mcpServers": {"fake": {"url": fake.serve_websocket()}}}, keepalive=0.2)
        try:
            watch = hub.watch({"toolsListChanged": True, "status": True}, timeout=WAIT)
            first = watch.get(timeout=WAIT)
            assert isinstance(first, mcp.Status) and first.state == "ready"
            fake.wait_for("ping", timeout=WAIT)
            wait_until(lambda: hub.clients["fake"]._inspect()["keepalive"][1] >= 1, WAIT, "the hub's probe answered")
        finally:
            hub.close()
