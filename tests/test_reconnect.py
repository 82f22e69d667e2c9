"""Reconnect against the real SDK server: the server process is killed (SIGKILL),
then comes back (stdio: the client spawns a new process; WebSocket: the peer
restarts on the same port), or never does.

Contract: BEHAVIOUR.md, sections Reconnect and Lifecycle. Server-side changes
on the way back (a refused or slow ``resources/subscribe``) come from the
peer's ``--refuse-subscribe`` / ``--subscribe-delay`` flags: on restart for
WebSocket, in the command line of the next process for stdio.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import exmcp_actors as mcp
from tests.peers.launch import peer_argv
from tests.sdk_helpers import (
    FAST_BACKOFF,
    RESOURCE_UPDATED,
    TOOLS_CHANGED,
    URI_A,
    URI_B,
    URI_C,
    WAIT,
    Collected,
    TapTransport,
    assert_nothing_after_closed,
    child_pids,
    configure,
    expect_closed,
    expect_notification,
    kill_pid,
    next_message,
    notify,
    only_live_session,
    process_exists,
    run_in_thread,
    server_stats,
    settle,
    surviving_library_threads,
    target_for,
)

KINDS = ["stdio", "ws"]
#: Enough attempts to outlast a peer restart on a loaded machine (fast backoff caps at 0.5s).
PATIENT = 60


@dataclass
class Server:
    """A legacy SDK peer the test can kill and bring back."""

    kind: str
    tap: TapTransport
    argv: list[str] | None = None
    peer: Any = None
    killed_pid: int | None = None

    def kill(self) -> None:
        """SIGKILL the server process: no close frame, no final answers."""
        if self.kind == "stdio":
            pid = self.tap.pid
            assert pid is not None and pid in child_pids(), "the stdio server is a child of this process"
            kill_pid(pid)
            self.killed_pid = pid
        else:
            self.peer.kill()

    def kill_and_bring_back(self, *extra_args: str) -> None:
        """Kill the server; the next connection reaches a fresh one started with ``extra_args``."""
        if self.kind == "stdio":
            assert self.argv is not None
            self.tap.use_next(mcp.StdioTransport(self.argv + list(extra_args)))  # before the kill: no race
            self.kill()
        else:
            self.kill()
            self.peer.restart(extra_args=list(extra_args))

    def kill_and_bring_back_modern(self) -> None:
        """Kill the server; the next connection reaches a dual-era peer (auto mode then picks 2026-07-28)."""
        if self.kind == "stdio":
            self.tap.use_next(mcp.StdioTransport(peer_argv("stdio", "both")))
            self.kill()
        else:
            self.kill()
            self.peer.era = "both"
            self.peer.restart()

    def check_old_process_gone(self) -> None:
        if self.killed_pid is not None:
            assert not process_exists(self.killed_pid), "the killed server was reaped"
            assert self.tap.pid != self.killed_pid


@pytest.fixture(params=KINDS)
def server(request: pytest.FixtureRequest) -> Server:
    target = target_for(request, request.param, "legacy")
    return Server(target.kind, target.tap(), argv=target.argv, peer=target.peer)


@pytest.fixture
def clients() -> Iterator[list[mcp.Client]]:
    made: list[mcp.Client] = []
    yield made
    for client in made:
        client.disconnect()


def connect(clients: list[mcp.Client], server: Server, **kwargs: Any) -> mcp.Client:
    kwargs.setdefault("backoff", FAST_BACKOFF)
    kwargs.setdefault("max_reconnect_attempts", PATIENT)
    client = mcp.connect(server.tap, **kwargs)
    clients.append(client)
    assert client.era == "legacy"
    return client


def expect_reconnected(handle: Any, resubscribed: list[str], failed: list[str], timeout: float = 3 * WAIT) -> list[Any]:
    """The next message is Reconnected with exactly these lists (in filter order); returns the failure reasons."""
    msg = next_message(handle, timeout)
    assert isinstance(msg, mcp.Reconnected), f"expected Reconnected for {handle!r}, got {msg!r}"
    assert msg.listener is handle
    assert msg.report["resubscribed"] == resubscribed, msg.report
    assert [uri for uri, _ in msg.report["failed"]] == failed, msg.report
    return [reason for _, reason in msg.report["failed"]]


# --------------------------------------------------------------------------- reconnect


def test_after_the_server_is_killed_the_client_reconnects_resubscribes_once_and_reports_to_each_listener(
    clients: list[mcp.Client], server: Server
) -> None:
    client = connect(clients, server)
    b_then_a = client.subscribe_notifications({"resourceSubscriptions": [URI_B, URI_A]})
    c_then_a = client.subscribe_notifications({"resourceSubscriptions": [URI_C, URI_A]})
    tools = client.subscribe_notifications({"toolsListChanged": True})
    collected = Collected()
    b_only = client.subscribe_notifications({"resourceSubscriptions": [URI_B]}, subscriber=collected)

    server.kill_and_bring_back("--refuse-subscribe", URI_B)

    reasons = expect_reconnected(b_then_a, resubscribed=[URI_A], failed=[URI_B])
    assert "-32602" in repr(reasons[0]) or "refused" in repr(reasons[0]).lower(), reasons
    expect_reconnected(c_then_a, resubscribed=[URI_C, URI_A], failed=[])
    expect_reconnected(tools, resubscribed=[], failed=[])
    report = collected.items.get(timeout=WAIT)
    assert report[:2] == ("ex_mcp_notification_reconnected", b_only)
    assert report.report["resubscribed"] == [] and [u for u, _ in report.report["failed"]] == [URI_B]

    assert client.status == "ready"
    assert server.tap.connection == 2
    server.check_old_process_gone()

    # The new session holds exactly one subscription per held URI, asked for once.
    stats = server_stats(client)
    session = only_live_session(stats)
    assert session["subscribe_calls"] == {URI_A: 1, URI_B: 1, URI_C: 1}
    assert sorted(session["subscribed"]) == [URI_A, URI_C]
    assert session["unsubscribe_calls"] == {}
    assert len(stats["sessions"]) == 1, "a fresh server saw only the new connection"
    state = settle(client)
    assert state["refcount"]["counts"] == {URI_A: 2, URI_B: 2, URI_C: 1}
    assert state["refcount"]["lost"] == [URI_B]

    # Notifications flow again.
    notify(client, "resource_updated", URI_A)
    expect_notification(b_then_a, RESOURCE_UPDATED, URI_A)
    expect_notification(c_then_a, RESOURCE_UPDATED, URI_A)
    notify(client, "resource_updated", URI_C)
    expect_notification(c_then_a, RESOURCE_UPDATED, URI_C)
    notify(client, "tools")
    expect_notification(tools, TOOLS_CHANGED)
    assert b_then_a.pending() == 0 and c_then_a.pending() == 0 and tools.pending() == 0
    assert list(collected) == []


def test_a_uri_lost_on_resubscribe_is_tried_again_by_the_next_listener_and_never_unsubscribed_while_lost(
    clients: list[mcp.Client], server: Server
) -> None:
    client = connect(clients, server)
    holds_b = client.subscribe_notifications({"resourceSubscriptions": [URI_B]})
    holds_c = client.subscribe_notifications({"resourceSubscriptions": [URI_C]})

    server.kill_and_bring_back("--refuse-subscribe", URI_B, "--refuse-subscribe", URI_C)
    expect_reconnected(holds_b, resubscribed=[], failed=[URI_B])
    expect_reconnected(holds_c, resubscribed=[], failed=[URI_C])
    new_connection = server.tap.connection

    # Releasing the last holder of a lost URI sends no unsubscribe.
    holds_b.unsubscribe()
    settle(client)
    assert server.tap.sent_messages("resources/unsubscribe", connection=new_connection) == []

    # The next listener naming a lost URI tries the wire again.
    configure(client, allow_subscribe=[URI_C])
    again_c = client.subscribe_notifications({"resourceSubscriptions": [URI_C]})
    session = only_live_session(server_stats(client))
    assert session["subscribe_calls"] == {URI_B: 1, URI_C: 2}
    assert session["subscribed"] == [URI_C]
    notify(client, "resource_updated", URI_C)
    expect_notification(holds_c, RESOURCE_UPDATED, URI_C)
    expect_notification(again_c, RESOURCE_UPDATED, URI_C)

    # Found again: the last holder going away unsubscribes it, once.
    holds_c.unsubscribe()
    again_c.unsubscribe()
    state = settle(client)
    session = only_live_session(server_stats(client))
    assert session["unsubscribe_calls"] == {URI_C: 1}
    assert session["subscribed"] == []
    assert state["refcount"]["empty"] is True


def test_listeners_registered_during_the_resubscribe_are_not_in_its_report_and_held_notifications_follow_it(
    clients: list[mcp.Client], server: Server
) -> None:
    client = connect(clients, server)
    existing = client.subscribe_notifications({"resourceSubscriptions": [URI_A], "toolsListChanged": True})

    server.kill_and_bring_back("--subscribe-delay", f"{URI_A}=1.5")  # holds the reconnect's resubscribe for 1.5s
    server.tap.wait_sent("resources/subscribe", connection=2, timeout=3 * WAIT)
    assert client.status == "ready"

    newcomer = client.subscribe_notifications({"toolsListChanged": True})
    notify(client, "tools")  # arrives while delivery is paused for the resubscribe
    assert existing.pending() == 0, "the test must register and notify before the report"
    later_with_uri = client.subscribe_notifications({"resourceSubscriptions": [URI_C]}, timeout=WAIT)

    expect_reconnected(existing, resubscribed=[URI_A], failed=[])
    expect_notification(existing, TOOLS_CHANGED)  # held, then delivered right after the report
    expect_notification(newcomer, TOOLS_CHANGED)  # no Reconnected for a listener that was not there at the loss
    notify(client, "resource_updated", URI_C)
    expect_notification(later_with_uri, RESOURCE_UPDATED, URI_C)
    notify(client, "tools")  # marker: nothing else is queued for anyone
    expect_notification(existing, TOOLS_CHANGED)
    expect_notification(newcomer, TOOLS_CHANGED)
    assert existing.pending() == 0 and newcomer.pending() == 0 and later_with_uri.pending() == 0


def test_a_report_made_stale_by_another_drop_is_discarded_and_each_listener_gets_one_reconnected(
    clients: list[mcp.Client], server: Server
) -> None:
    client = connect(clients, server)
    listener = client.subscribe_notifications({"resourceSubscriptions": [URI_A], "toolsListChanged": True})

    server.kill_and_bring_back("--subscribe-delay", f"{URI_A}=30")  # the resubscribe will never finish ...
    server.tap.wait_sent("resources/subscribe", connection=2, timeout=3 * WAIT)
    server.kill_and_bring_back()  # ... because this connection drops too: its report is stale

    expect_reconnected(listener, resubscribed=[URI_A], failed=[])
    assert server.tap.connection == 3
    session = only_live_session(server_stats(client))
    assert session["subscribe_calls"] == {URI_A: 1}
    notify(client, "resource_updated", URI_A)
    expect_notification(listener, RESOURCE_UPDATED, URI_A)  # not a second Reconnected
    assert listener.pending() == 0


def test_a_peer_that_comes_back_modern_closes_legacy_listeners_with_era_changed_and_watches_carry_on(
    clients: list[mcp.Client], server: Server
) -> None:
    client = connect(clients, server)
    listener = client.subscribe_notifications({"resourceSubscriptions": [URI_A], "toolsListChanged": True})
    watch = client.watch({"resourceSubscriptions": [URI_A], "toolsListChanged": True})

    server.kill_and_bring_back_modern()

    assert expect_closed(listener, timeout=3 * WAIT).reason == ("era_changed", "modern")
    assert_nothing_after_closed(listener)
    expect_reconnected(watch, resubscribed=[URI_A], failed=[])
    assert client.era == "modern" and client.protocol_version == "2026-07-28"
    notify(client, "tools")
    expect_notification(watch, TOOLS_CHANGED)
    notify(client, "resource_updated", URI_A)
    expect_notification(watch, RESOURCE_UPDATED, URI_A)
    with pytest.raises(mcp.UseListen):
        client.subscribe_notifications({"toolsListChanged": True})


# --------------------------------------------------------------------------- in-flight requests


def test_an_in_flight_request_fails_quickly_with_connection_lost_when_the_server_dies(
    clients: list[mcp.Client], server: Server
) -> None:
    client = connect(clients, server)
    thread, outcome = run_in_thread(lambda: client.call_tool("sleep", {"seconds": 60}, timeout=3 * WAIT), "in-flight")
    server.tap.wait_sent("tools/call", lambda m: m["params"]["name"] == "sleep")

    server.kill()
    killed = time.monotonic()
    kind, error, _ = outcome.get(timeout=WAIT)
    failed_after = time.monotonic() - killed
    thread.join(WAIT)

    assert kind == "error", f"the call returned {error!r}"
    assert isinstance(error, mcp.NotConnected), f"expected NotConnected/ConnectionLost, got {error!r}"
    assert failed_after < 5.0, f"the caller waited {failed_after:.1f}s"
    assert settle(client)["pending"] == 0


def test_an_in_flight_http_request_fails_quickly_when_the_server_dies(
    clients: list[mcp.Client], sdk_http_peer_legacy: Any
) -> None:
    tap = TapTransport(mcp.HttpTransport(sdk_http_peer_legacy.url))
    client = mcp.connect(tap, backoff=FAST_BACKOFF, max_reconnect_attempts=PATIENT)
    clients.append(client)
    thread, outcome = run_in_thread(lambda: client.call_tool("sleep", {"seconds": 60}, timeout=3 * WAIT), "in-flight")
    tap.wait_sent("tools/call", lambda m: m["params"]["name"] == "sleep")

    sdk_http_peer_legacy.kill()
    killed = time.monotonic()
    kind, error, _ = outcome.get(timeout=WAIT)
    failed_after = time.monotonic() - killed
    thread.join(WAIT)

    assert kind == "error", f"the call returned {error!r}"
    # HTTP has no connection to lose: the broken response stream fails the request as the
    # transport's failure (ExchangeFailed, a ConnectionLost), never as a server's error answer.
    assert isinstance(error, mcp.ConnectionLost) and not isinstance(error, mcp.RequestError), f"unexpected {error!r}"
    assert failed_after < 5.0, f"the caller waited {failed_after:.1f}s"


# --------------------------------------------------------------------------- giving up


@pytest.mark.parametrize(
    "kind, how",
    [
        ("stdio", "cannot_start"),  # the command is missing: open() fails
        ("ws", "down"),  # connection refused: open() fails
        ("stdio", "dies_in_handshake"),  # opens, then the server exits before answering
        ("http", "down"),  # open() does no I/O; the first POST fails
    ],
)
def test_reconnect_gives_up_after_max_reconnect_attempts_and_closes_listeners_with_reconnect_exhausted(
    request: pytest.FixtureRequest, clients: list[mcp.Client], kind: str, how: str
) -> None:
    attempts = 3
    target = target_for(request, kind, "legacy")
    tap = target.tap()
    client = connect(clients, Server(kind, tap, argv=target.argv, peer=target.peer), max_reconnect_attempts=attempts)
    listener = client.subscribe_notifications({"resourceSubscriptions": [URI_A], "toolsListChanged": True})
    inbox = tap.subscriber()
    other = client.subscribe_notifications({"toolsListChanged": True}, subscriber=inbox)

    if how == "cannot_start":
        tap.use_next(mcp.StdioTransport(["/nonexistent/mcp-server"]))
    elif how == "dies_in_handshake":
        tap.use_next(mcp.StdioTransport([sys.executable, "-c", "import time; time.sleep(0.2)"]))
    pid = tap.pid
    if kind == "stdio":
        assert pid is not None
        kill_pid(pid)
    else:
        target.peer.kill()

    # Wakes on the closing message, or as soon as the client tries once more than allowed.
    tap.wait_for(lambda: inbox.messages or tap.open_attempts > 1 + attempts, 6 * WAIT, "Closed or one attempt too many")
    assert tap.open_attempts == 1 + attempts, "the first connection, then exactly max_reconnect_attempts"
    assert inbox.messages[0][:2] == ("ex_mcp_notification_closed", other)
    reason = inbox.messages[0].reason
    assert isinstance(reason, tuple) and reason[0] == "reconnect_exhausted", reason
    assert reason[1], "the reason carries the last error"
    assert expect_closed(listener).reason == reason
    assert_nothing_after_closed(listener)
    assert inbox.messages[1:] == []

    assert client.status == "disconnected"
    with pytest.raises(mcp.NotConnected):
        client.call_tool("echo", {"text": "anyone?"}, timeout=WAIT)
    assert surviving_library_threads(timeout=WAIT) == [], "a client that gave up leaves no thread"


def test_with_reconnect_disabled_a_transport_loss_closes_every_listener_with_transport_closed(
    clients: list[mcp.Client], server: Server
) -> None:
    client = connect(clients, server, reconnect=False)
    with_uri = client.subscribe_notifications({"resourceSubscriptions": [URI_A]})
    categories = client.subscribe_notifications({"toolsListChanged": True, "promptsListChanged": True})

    server.kill()

    for listener in (with_uri, categories):
        closed = expect_closed(listener)
        assert isinstance(closed.reason, tuple) and closed.reason[0] == "transport_closed", closed
        assert closed.reason[1], "the reason says what happened to the transport"
        assert_nothing_after_closed(listener)
    assert client.status == "disconnected"
    assert server.tap.open_attempts == 1, "no reconnect attempt"
    assert server.tap.sent_messages("resources/unsubscribe") == []
    with pytest.raises(mcp.NotConnected):
        client.subscribe_notifications({"toolsListChanged": True})
    assert surviving_library_threads(timeout=WAIT) == [], "a closed client leaves no thread"
