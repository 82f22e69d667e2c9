"""MCP 2026-07-28 (the modern era): era negotiation, ``listen``, resyncs and ``watch``.

The contract is /work/shared/design (API.md "Modern subscriptions", BEHAVIOUR.md
"Modern peers", WIRE.md "Modern" and "Transports"). Real peers are the official
SDK server (tests/peers); wire-level edge cases use ``exmcp_actors.testing.FakeServer``.

Every wait is bounded: ``get(timeout=...)``, ``FakeServer.wait_for``, or
``wait_until`` polling a real server's ``stats`` tool.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import NO_REPLY, SUBSCRIPTION_ID_KEY, FakeConnection, FakeError, FakeServer
from tests.peers.launch import READY_TIMEOUT, Peer
from tests.waiting import assert_next_is_marker, wait_until

MODERN = "2026-07-28"
WAIT = 10.0  # bound for anything that should happen "soon"
QUIET = 0.3  # where no marker can travel, how long "nothing arrives" is awaited
PEER_POLL = 0.05  # seconds between two looks at a real peer's stats
FAST = mcp.Backoff(initial=0.05, factor=2, maximum=0.5, jitter=0.1)
#: Fast backoff, and enough attempts to outlast a real peer's restart on a loaded machine.
RECONNECT: dict[str, Any] = {"backoff": FAST, "max_reconnect_attempts": 1000}
CLIENT_INFO = {"name": "modern-tests", "version": "1.2.3"}

A = "file:///a.txt"
B = "file:///b.txt"
C = "file:///c.txt"

TOOLS_CHANGED = "notifications/tools/list_changed"
PROMPTS_CHANGED = "notifications/prompts/list_changed"
RESOURCES_CHANGED = "notifications/resources/list_changed"
UPDATED = "notifications/resources/updated"
CANCELLED = "notifications/cancelled"

META_KEYS = (
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
)

TRANSPORTS = ["stdio", "ws", "http"]


# --------------------------------------------------------------------------- helpers


def next_message(handle: Any, timeout: float = WAIT) -> Any:
    """The next message in a handle's inbox, failing the test (not hanging) if none comes."""
    try:
        return handle.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"{handle!r} received nothing within {timeout}s") from None


def assert_next(source: Any, marker: Any) -> None:
    """Nothing came before the marker the test had sent behind what must not arrive (on the
    same subscription, so in the same order): ``marker`` is ``source``'s next message."""
    assert_next_is_marker(lambda timeout: source.get(timeout=timeout), lambda message: message == marker)


def assert_nothing_arrives(source: Any, timeout: float = QUIET) -> None:
    """``source`` (a handle or a queue) stays empty for ``timeout`` seconds: only where no marker
    can travel its path."""
    try:
        message = source.get(timeout=timeout)
    except queue.Empty:
        return
    raise AssertionError(f"unexpected message {message!r}")


def notify(
    client: mcp.Client, kind: str, uri: str | None = None, *, count: int = 1, unsubscribed_too: bool = False
) -> None:
    """Make the real SDK peer publish ``count`` events of ``kind`` (see tests/peers/sdk_server.py)."""
    arguments: dict[str, Any] = {"kind": kind, "count": count, "unsubscribed_too": unsubscribed_too}
    if uri is not None:
        arguments["uri"] = uri
    client.call_tool("notify", arguments, timeout=WAIT)


def peer_stats(client: mcp.Client) -> dict[str, Any]:
    """The real SDK peer's counters (its ``stats`` tool)."""
    result = client.call_tool("stats", timeout=WAIT)
    stats: dict[str, Any] = json.loads(result["content"][0]["text"])
    return stats


def listen_ended(client: mcp.Client, listen_id: Any) -> bool:
    stats = peer_stats(client)
    return listen_id not in stats["listen_ids"] and any(e["id"] == listen_id for e in stats["listens_ended"])


@dataclass
class RealServer:
    """A real SDK peer on one transport: how to reach it and how to kill it abruptly."""

    kind: str
    era: str
    argv: list[str] | None = None
    peer: Peer | None = None
    stdio: mcp.StdioTransport | None = field(default=None, repr=False)

    def target(self) -> Any:
        """What ``connect()`` takes: a StdioTransport (kept, to reach its child) or a URL."""
        if self.kind == "stdio":
            assert self.argv is not None
            self.stdio = mcp.StdioTransport(self.argv)
            return self.stdio
        assert self.peer is not None
        return self.peer.url

    def kill_abruptly(self) -> None:
        """SIGKILL the server mid-stream: no listen result, no close frame.

        stdio: the client's child dies and the client spawns a new one.
        ws/http: the peer process dies and comes back on the same port.
        """
        if self.kind == "stdio":
            assert self.stdio is not None and self.stdio.pid is not None
            os.kill(self.stdio.pid, signal.SIGKILL)
            return
        assert self.peer is not None
        self.peer.kill()
        self.peer.restart()


def fresh_server(request: pytest.FixtureRequest, kind: str, era: str) -> RealServer:
    """A server of its own for this test (conftest peers): for kills and exact server-side counters.

    stdio is always fresh: every client spawns its own child.
    """
    suffix = "" if era == "both" else "_legacy"
    if kind == "stdio":
        return RealServer(kind, era, argv=request.getfixturevalue(f"sdk_stdio_argv{suffix}"))
    return RealServer(kind, era, peer=request.getfixturevalue(f"sdk_{kind}_peer{suffix}"))


class SharedPeers:
    """The session's long-lived ws/http peers (conftest ``peer_pool``), for tests that neither kill
    them nor count on server-wide counters (starting a peer costs seconds)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    def server(self, request: pytest.FixtureRequest, kind: str, era: str) -> RealServer:
        if kind == "stdio":
            return fresh_server(request, kind, era)
        return RealServer(kind, era, peer=self._pool.peer(kind, era))


@pytest.fixture
def shared_peers(peer_pool: Any) -> SharedPeers:
    return SharedPeers(peer_pool)


@pytest.fixture(params=TRANSPORTS)
def both_era_server(request: pytest.FixtureRequest, shared_peers: SharedPeers) -> RealServer:
    """A both-era SDK server over each transport (shared by the module)."""
    return shared_peers.server(request, request.param, "both")


@pytest.fixture(params=TRANSPORTS)
def legacy_only_server(request: pytest.FixtureRequest, shared_peers: SharedPeers) -> RealServer:
    """A legacy-only SDK server over each transport (shared by the module)."""
    return shared_peers.server(request, request.param, "legacy")


@pytest.fixture
def clients() -> Iterator[Callable[..., mcp.Client]]:
    """``connect(...)`` that disconnects every client it made after the test."""
    made: list[mcp.Client] = []

    def connect(target: Any, **options: Any) -> mcp.Client:
        options.setdefault("client_info", CLIENT_INFO)
        options.setdefault("request_timeout", WAIT)
        client = mcp.connect(target, **options)
        made.append(client)
        return client

    yield connect
    for client in made:
        client.disconnect()


@pytest.fixture
def modern_fake() -> Iterator[FakeServer]:
    with FakeServer(era="modern") as server:
        yield server


@pytest.fixture
def legacy_fake() -> Iterator[FakeServer]:
    with FakeServer(era="legacy") as server:
        yield server


def acknowledging(notifications: dict[str, Any]) -> Callable[[dict[str, Any], FakeConnection], Any]:
    """A listen handler that acknowledges ``notifications`` whatever was requested."""

    def handler(params: dict[str, Any], ctx: FakeConnection) -> Any:
        ctx.acknowledge(notifications)
        return NO_REPLY

    return handler


def assert_iteration_ends(handle: Any, timeout: float = WAIT) -> list[Any]:
    """Iterating the handle ends (it got its closing message or was removed); returns what it yielded."""
    seen: list[Any] = []
    finished = threading.Event()

    def drain() -> None:
        seen.extend(handle)
        finished.set()

    threading.Thread(target=drain, name="test-drain", daemon=True).start()
    assert finished.wait(timeout), f"iterating {handle!r} did not end; got {seen!r}"
    return seen


def settle(client: mcp.Client) -> None:
    """A client request round trip: the fake's handler thread has handled everything the client sent before it."""
    client.list_tools(timeout=WAIT)


def barrier(server: FakeServer) -> None:
    """Round trip a server->client ping: every frame the fake pushed before it has been handled."""
    server.wait_response(server.request("ping"), timeout=WAIT)


# =========================================================================== negotiation


def test_auto_lands_on_the_modern_revision_for_a_both_era_server(
    both_era_server: RealServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(both_era_server.target())
    assert client.status == "ready"
    assert client.era == "modern"
    assert client.protocol_version == MODERN
    assert client.server_info.get("name") == "exmcp-test-peer"


def test_auto_lands_on_a_legacy_revision_for_a_legacy_only_server(
    legacy_only_server: RealServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(legacy_only_server.target())
    assert client.status == "ready"
    assert client.era == "legacy"
    assert client.protocol_version in mcp.LEGACY_VERSIONS
    assert client.protocol_version == "2025-11-25"
    client.ping()  # a real legacy session: ping exists


def assert_connects_legacy_despite_the_silent_probe(
    target: Any, clients: Callable[..., mcp.Client], start_up: float = 0.0
) -> None:
    """``start_up``: what a server the client spawns may take before it reads the probe (the
    probe's clock starts then), on top of the probe's second and a round trip."""
    started = time.monotonic()
    client = clients(target, protocol="auto", probe_timeout=1.0)
    assert client.era == "legacy"
    assert client.protocol_version == "2025-11-25"
    assert time.monotonic() - started < 1.0 + WAIT + start_up
    client.ping()


def test_auto_connects_legacy_to_a_stdio_server_that_never_answers_the_probe(
    sdk_stdio_argv_silent: list[str], clients: Callable[..., mcp.Client]
) -> None:
    assert_connects_legacy_despite_the_silent_probe(sdk_stdio_argv_silent, clients, start_up=READY_TIMEOUT)


@pytest.mark.parametrize("sdk_ws_peer_legacy", [{"extra_args": ["--silent-probe"]}], indirect=True)
def test_auto_connects_legacy_to_a_websocket_server_that_never_answers_the_probe(
    sdk_ws_peer_legacy: Peer, clients: Callable[..., mcp.Client]
) -> None:
    assert_connects_legacy_despite_the_silent_probe(sdk_ws_peer_legacy.url, clients)


def test_modern_mode_against_a_legacy_only_server_raises_connect_error(
    legacy_only_server: RealServer, clients: Callable[..., mcp.Client]
) -> None:
    with pytest.raises(mcp.ConnectError):
        clients(legacy_only_server.target(), protocol="modern", probe_timeout=1.0)


def test_modern_mode_against_a_silent_legacy_server_raises_connect_error(
    sdk_stdio_argv_silent: list[str], clients: Callable[..., mcp.Client]
) -> None:
    with pytest.raises(mcp.ConnectError):
        clients(sdk_stdio_argv_silent, protocol="modern", probe_timeout=1.0)


def test_legacy_mode_against_a_both_era_server_lands_legacy(
    both_era_server: RealServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(both_era_server.target(), protocol="legacy")
    assert client.era == "legacy"
    assert client.protocol_version == "2025-11-25"
    with pytest.raises(mcp.ListenRequiresModern):
        client.listen({"toolsListChanged": True})


def test_auto_against_a_modern_fake_probes_with_server_discover_and_never_initializes(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport())
    assert (client.era, client.protocol_version) == ("modern", MODERN)
    assert modern_fake.received[0][1]["method"] == "server/discover"
    assert modern_fake.count("initialize") == 0
    assert modern_fake.count("notifications/initialized") == 0


def test_every_modern_request_carries_the_meta_envelope(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport())
    client.list_tools()
    client.list_prompts()
    client.list_resources()
    client.call_tool("echo", {"text": "hi"})
    client.read_resource(A)
    client.get_prompt("greet", {"who": "you"})
    client.request("tools/list", {"_meta": {"progressToken": 7}})  # the caller's own _meta is kept
    sub = client.listen({"toolsListChanged": True})
    sub.cancel()
    requests = [message for _, message in modern_fake.received if "id" in message and "method" in message]
    methods = {message["method"] for message in requests}
    assert {
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/list",
        "tools/call",
        "resources/read",
        "prompts/get",
        "subscriptions/listen",
    } <= methods
    for message in requests:
        meta = message["params"]["_meta"]
        assert meta["io.modelcontextprotocol/protocolVersion"] == MODERN, message
        assert meta["io.modelcontextprotocol/clientCapabilities"] == {}, message
        assert meta["io.modelcontextprotocol/clientInfo"] == CLIENT_INFO, message
    kept = [m for m in requests if m["params"]["_meta"].get("progressToken") == 7]
    assert len(kept) == 1 and all(key in kept[0]["params"]["_meta"] for key in META_KEYS)


def test_legacy_requests_carry_no_modern_meta_envelope(
    legacy_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(legacy_fake.transport())
    client.list_tools()
    _, message = legacy_fake.wait_for("tools/list")
    meta = (message.get("params") or {}).get("_meta") or {}
    # A dual-era server takes a request carrying the protocolVersion key for a modern one.
    assert not any(key in meta for key in META_KEYS)


# =========================================================================== era errors


def test_listen_on_a_legacy_peer_raises_and_sends_nothing(
    legacy_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(legacy_fake.transport())
    before = len(legacy_fake.received)
    with pytest.raises(mcp.ListenRequiresModern) as raised:
        client.listen({"toolsListChanged": True, "resourceSubscriptions": [A]})
    assert raised.value.reason == "subscriptions_require_mcp_2026_07_28"
    client.ping()  # everything the client sent before this ping has arrived
    legacy_fake.wait_for("ping")
    sent_since = [message for _, message in legacy_fake.received[before:]]
    assert [m.get("method") for m in sent_since] == ["ping"]
    assert legacy_fake.count("subscriptions/listen") == 0
    assert legacy_fake.count("resources/subscribe") == 0


def test_subscribe_notifications_on_a_modern_peer_raises_use_listen(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport())
    with pytest.raises(mcp.UseListen) as raised:
        client.subscribe_notifications({"toolsListChanged": True, "resourceSubscriptions": [A]})
    assert raised.value.reason == "use_listen"
    client.list_tools()
    assert modern_fake.count("resources/subscribe") == 0
    assert modern_fake.count("subscriptions/listen") == 0


def test_listen_filter_errors_are_raised_before_anything_is_sent(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport())
    with pytest.raises(mcp.FilterError):
        client.listen({})
    with pytest.raises(mcp.FilterError):
        client.listen({"toolsListChanged": "yes"})
    assert modern_fake.count("subscriptions/listen") == 0


# =========================================================================== listen: real SDK


def test_listen_receives_acknowledged_events_from_a_real_server(
    both_era_server: RealServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(both_era_server.target())
    wanted = {
        "toolsListChanged": True,
        "promptsListChanged": True,
        "resourcesListChanged": True,
        "resourceSubscriptions": [A, B, A],
    }
    sub = client.listen(wanted)
    normalized = {**wanted, "resourceSubscriptions": [A, B]}
    assert sub.requested_filter == normalized
    assert sub.acknowledged_filter == normalized  # the SDK honours everything it was asked
    assert isinstance(sub.subscription_id, (str, int)) and sub.subscription_id
    assert sub.subscription_id in peer_stats(client)["listen_ids"]

    notify(client, "resource_updated", A)
    notify(client, "tools")
    notify(client, "prompts")
    notify(client, "resources")
    notify(client, "resource_updated", B)
    got = [next_message(sub) for _ in range(5)]
    assert got == [
        ("ex_mcp_subscription", sub, UPDATED, {"uri": A}),
        ("ex_mcp_subscription", sub, TOOLS_CHANGED, {}),
        ("ex_mcp_subscription", sub, PROMPTS_CHANGED, {}),
        ("ex_mcp_subscription", sub, RESOURCES_CHANGED, {}),
        ("ex_mcp_subscription", sub, UPDATED, {"uri": B}),
    ]
    assert all(isinstance(message, mcp.SubscriptionEvent) and message.subscription is sub for message in got)


def test_events_a_real_server_pushes_outside_the_filter_are_never_delivered(
    request: pytest.FixtureRequest, shared_peers: SharedPeers, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(shared_peers.server(request, "ws", "both").target())
    sub = client.listen({"toolsListChanged": True, "resourceSubscriptions": [A]})
    # unsubscribed_too writes straight to every open listen stream, bypassing the server's filter.
    notify(client, "prompts", unsubscribed_too=True)
    notify(client, "resources", unsubscribed_too=True)
    notify(client, "resource_updated", C, unsubscribed_too=True)
    notify(client, "resource_updated", A, unsubscribed_too=True)
    assert next_message(sub) == ("ex_mcp_subscription", sub, UPDATED, {"uri": A})
    notify(client, "tools")
    assert next_message(sub) == ("ex_mcp_subscription", sub, TOOLS_CHANGED, {})
    notify(client, "tools")  # the marker
    assert_next(sub, ("ex_mcp_subscription", sub, TOOLS_CHANGED, {}))


def test_a_real_server_closing_the_listen_closes_the_subscription_with_its_result(
    both_era_server: RealServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(both_era_server.target())
    sub = client.listen({"toolsListChanged": True})
    listen_id = sub.subscription_id
    client.call_tool("close_listens")
    closed = next_message(sub)
    assert isinstance(closed, mcp.SubscriptionClosed)
    assert closed[:2] == ("ex_mcp_subscription_closed", sub)
    how, result = closed.reason
    assert how == "complete"
    assert result.get("resultType", "complete") == "complete"
    assert result["_meta"][SUBSCRIPTION_ID_KEY] == listen_id
    keeper = client.listen({"toolsListChanged": True})  # the same subscriber: this thread
    notify(client, "tools")
    assert next_message(keeper) == ("ex_mcp_subscription", keeper, TOOLS_CHANGED, {})
    assert sub.pending() == 0  # the change reached the keeper, and not the closed subscription
    with pytest.raises(mcp.ListenerNotFound):
        sub.cancel()


@pytest.mark.parametrize("kind", ["stdio", "http"])
def test_cancel_ends_the_listen_on_a_real_server(
    kind: str, request: pytest.FixtureRequest, clients: Callable[..., mcp.Client]
) -> None:
    """stdio / WebSocket send notifications/cancelled, HTTP closes the listen's stream: either way
    the real server sees the listen end, and the subscriber gets SubscriptionClosed(..., "cancelled").
    (The WebSocket wire itself is checked against the fake below.)"""
    client = clients(fresh_server(request, kind, "both").target())
    sub = client.listen({"toolsListChanged": True})
    keeper = client.listen({"promptsListChanged": True})
    listen_id = sub.subscription_id
    assert listen_id in peer_stats(client)["listen_ids"]
    sub.cancel()
    assert next_message(sub) == ("ex_mcp_subscription_closed", sub, "cancelled")
    wait_until(lambda: listen_ended(client, listen_id), every=PEER_POLL)
    stats = peer_stats(client)
    assert keeper.subscription_id in stats["listen_ids"]  # only that listen ended
    assert [e["how"] for e in stats["listens_ended"] if e["id"] == listen_id] == ["cancelled"]
    notify(client, "tools")
    notify(client, "prompts")
    assert next_message(keeper) == ("ex_mcp_subscription", keeper, PROMPTS_CHANGED, {})
    assert sub.pending() == 0  # the keeper (the same subscriber) got its marker; sub got nothing


# =========================================================================== listen: fake peer


def test_events_outside_a_narrower_acknowledgment_are_never_delivered(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    modern_fake.on("subscriptions/listen", acknowledging({"toolsListChanged": True, "resourceSubscriptions": [A]}))
    client = clients(modern_fake.transport())
    requested = {"toolsListChanged": True, "promptsListChanged": True, "resourceSubscriptions": [A, B]}
    sub = client.listen(requested)
    assert sub.requested_filter == requested
    assert sub.acknowledged_filter == {"toolsListChanged": True, "resourceSubscriptions": [A]}
    listen_id = sub.subscription_id
    # Requested but dropped by the server: never delivered, even though the server sends them.
    modern_fake.event(listen_id, PROMPTS_CHANGED, {})
    modern_fake.event(listen_id, UPDATED, {"uri": B})
    # Never requested at all.
    modern_fake.event(listen_id, RESOURCES_CHANGED, {})
    modern_fake.event(listen_id, UPDATED, {"uri": C})
    modern_fake.event(listen_id, UPDATED, {})
    # Inside the acknowledgment.
    modern_fake.event(listen_id, UPDATED, {"uri": A})
    modern_fake.event(listen_id, TOOLS_CHANGED, {})
    assert next_message(sub) == ("ex_mcp_subscription", sub, UPDATED, {"uri": A})
    assert next_message(sub) == ("ex_mcp_subscription", sub, TOOLS_CHANGED, {})
    modern_fake.event(listen_id, TOOLS_CHANGED, {"marker": 1})
    assert_next(sub, ("ex_mcp_subscription", sub, TOOLS_CHANGED, {"marker": 1}))


def test_event_params_lose_only_the_subscription_id_stamp(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport())
    sub = client.listen({"resourceSubscriptions": [A]})
    modern_fake.event(sub.subscription_id, UPDATED, {"uri": A, "title": "x", "_meta": {"other": 1}})
    assert next_message(sub) == ("ex_mcp_subscription", sub, UPDATED, {"uri": A, "title": "x", "_meta": {"other": 1}})


def test_updates_of_sub_resources_of_a_subscribed_uri_are_delivered(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport())
    sub = client.listen({"resourceSubscriptions": ["file:///dir"]})
    modern_fake.event(sub.subscription_id, UPDATED, {"uri": "file:///directory"})  # a sibling, not a child
    modern_fake.event(sub.subscription_id, UPDATED, {"uri": "file:///dir/x.txt"})
    modern_fake.event(sub.subscription_id, UPDATED, {"uri": "file:///dir"})
    assert next_message(sub) == ("ex_mcp_subscription", sub, UPDATED, {"uri": "file:///dir/x.txt"})
    assert next_message(sub) == ("ex_mcp_subscription", sub, UPDATED, {"uri": "file:///dir"})
    modern_fake.event(sub.subscription_id, UPDATED, {"uri": "file:///dir", "marker": 1})
    assert_next(sub, ("ex_mcp_subscription", sub, UPDATED, {"uri": "file:///dir", "marker": 1}))


def test_a_wider_acknowledgment_is_rejected_and_the_listen_is_cancelled(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    modern_fake.on(
        "subscriptions/listen",
        acknowledging({"toolsListChanged": True, "promptsListChanged": True}),
    )
    client = clients(modern_fake.transport())
    with pytest.raises(mcp.ProtocolError):
        client.listen({"toolsListChanged": True})
    _, listen = modern_fake.wait_for("subscriptions/listen")
    modern_fake.wait_for(CANCELLED, requestId=listen["id"])
    settle(client)
    assert modern_fake.open_listens() == []
    # The rejected listen is forgotten: later events for its id go nowhere and break nothing.
    modern_fake.event(listen["id"], TOOLS_CHANGED, {})
    assert client._inspect()["subscriptions"] == 0
    assert client.status == "ready"
    client.list_tools()


def test_a_wider_uri_list_in_the_acknowledgment_is_rejected(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    modern_fake.on("subscriptions/listen", acknowledging({"resourceSubscriptions": [A, B]}))
    client = clients(modern_fake.transport())
    with pytest.raises(mcp.ProtocolError):
        client.listen({"resourceSubscriptions": [A]})
    _, listen = modern_fake.wait_for("subscriptions/listen")
    modern_fake.wait_for(CANCELLED, requestId=listen["id"])


def test_events_for_unknown_subscription_ids_are_dropped(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport())
    sub = client.listen({"toolsListChanged": True, "resourceSubscriptions": [A]})
    modern_fake.event("listen-nobody", TOOLS_CHANGED, {}, connection=1)
    modern_fake.event("listen-nobody", UPDATED, {"uri": A}, connection=1)
    modern_fake.event(12345, TOOLS_CHANGED, {}, connection=1)
    modern_fake.event(sub.subscription_id, UPDATED, {"uri": A})
    assert next_message(sub) == ("ex_mcp_subscription", sub, UPDATED, {"uri": A})
    modern_fake.event("listen-nobody", TOOLS_CHANGED, {}, connection=1)
    modern_fake.event(sub.subscription_id, TOOLS_CHANGED, {})
    assert next_message(sub) == ("ex_mcp_subscription", sub, TOOLS_CHANGED, {})
    modern_fake.event(sub.subscription_id, TOOLS_CHANGED, {"marker": 1})
    assert_next(sub, ("ex_mcp_subscription", sub, TOOLS_CHANGED, {"marker": 1}))
    assert client.status == "ready"


def test_events_before_the_acknowledgment_are_delivered_after_it_only_inside_it(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    gate = threading.Event()

    def events_then_ack(params: dict[str, Any], ctx: FakeConnection) -> Any:
        ctx.event(PROMPTS_CHANGED, {})  # requested, but the ack will drop it
        ctx.event(UPDATED, {"uri": A})  # inside the ack
        ctx.event(UPDATED, {"uri": B})  # requested, dropped by the ack
        ctx.event(TOOLS_CHANGED, {})  # inside the ack
        ctx.wait(gate, timeout=WAIT)
        ctx.acknowledge({"toolsListChanged": True, "resourceSubscriptions": [A]})
        return NO_REPLY

    modern_fake.on("subscriptions/listen", events_then_ack, concurrent=True)
    client = clients(modern_fake.transport())
    inbox: queue.Queue[Any] = queue.Queue()
    outcome: dict[str, Any] = {}

    def open_listen() -> None:
        try:
            outcome["sub"] = client.listen(
                {"toolsListChanged": True, "promptsListChanged": True, "resourceSubscriptions": [A, B]},
                subscriber=inbox,
                timeout=WAIT,
            )
        except BaseException as error:  # reported by the assertions below
            outcome["error"] = error

    opener = threading.Thread(target=open_listen, name="test-listen-opener")
    opener.start()
    try:
        modern_fake.wait_for("subscriptions/listen")
        wait_until(
            lambda: sum(1 for _, m in modern_fake.sent if isinstance(m, dict) and m.get("method") == TOOLS_CHANGED) == 1
        )
        barrier(modern_fake)  # the client has handled the four early events
        # Nothing is delivered before the acknowledgment. No marker can travel here: the client
        # holds everything of a listen until its acknowledgment, a marker too.
        assert_nothing_arrives(inbox)
        assert "sub" not in outcome
    finally:
        gate.set()
        opener.join(WAIT)
    assert "error" not in outcome, outcome.get("error")
    sub = outcome["sub"]
    modern_fake.event(sub.subscription_id, TOOLS_CHANGED, {"marker": True})
    assert inbox.get(timeout=WAIT) == ("ex_mcp_subscription", sub, UPDATED, {"uri": A})
    assert inbox.get(timeout=WAIT) == ("ex_mcp_subscription", sub, TOOLS_CHANGED, {})
    assert inbox.get(timeout=WAIT) == ("ex_mcp_subscription", sub, TOOLS_CHANGED, {"marker": True})
    modern_fake.event(sub.subscription_id, TOOLS_CHANGED, {"marker": 2})
    assert_next(inbox, ("ex_mcp_subscription", sub, TOOLS_CHANGED, {"marker": 2}))


def test_a_listen_with_no_acknowledgment_times_out_and_is_cancelled_on_the_wire(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    modern_fake.on("subscriptions/listen", lambda params, ctx: NO_REPLY)
    client = clients(modern_fake.transport())
    started = time.monotonic()
    with pytest.raises(mcp.RequestTimeout):
        client.listen({"toolsListChanged": True}, timeout=0.5)
    assert time.monotonic() - started < 0.5 + WAIT / 2
    _, listen = modern_fake.wait_for("subscriptions/listen")
    modern_fake.wait_for(CANCELLED, requestId=listen["id"])
    settle(client)
    assert modern_fake.open_listens() == []
    # A late acknowledgment and events for the abandoned listen are dropped.
    modern_fake.connection().acknowledge({"toolsListChanged": True}, subscription_id=listen["id"])
    modern_fake.event(listen["id"], TOOLS_CHANGED, {})
    barrier(modern_fake)
    assert client._inspect()["subscriptions"] == 0
    assert client._inspect()["entries"] == 0


def test_an_error_answer_to_listen_raises_request_error(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    def refuse(params: dict[str, Any], ctx: FakeConnection) -> Any:
        raise FakeError(-32021, "tasks extension not negotiated")

    modern_fake.on("subscriptions/listen", refuse)
    client = clients(modern_fake.transport())
    with pytest.raises(mcp.RequestError) as raised:
        client.listen({"toolsListChanged": True})
    assert raised.value.code == -32021
    assert client._inspect()["subscriptions"] == 0


def test_a_graceful_close_delivers_subscription_closed_complete_with_the_result(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport())
    sub = client.listen({"toolsListChanged": True})
    result = {"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: sub.subscription_id}, "note": "bye"}
    modern_fake.close_subscription(sub.subscription_id, result)
    assert next_message(sub) == ("ex_mcp_subscription_closed", sub, ("complete", result))
    # Nothing after the closing message, and iteration has ended.
    modern_fake.event(sub.subscription_id, TOOLS_CHANGED, {}, connection=1)
    assert assert_iteration_ends(sub) == []
    assert modern_fake.count(CANCELLED) == 0  # a closed listen is not cancelled again
    with pytest.raises(mcp.ListenerNotFound):
        sub.cancel()


@pytest.mark.parametrize("over", ["memory", "websocket"])
def test_cancel_sends_notifications_cancelled_with_the_listen_id(
    over: str, modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    target: Any = modern_fake.transport() if over == "memory" else modern_fake.serve_websocket()
    client = clients(target)
    sub = client.listen({"toolsListChanged": True})
    listen_id = sub.subscription_id
    assert modern_fake.open_listens() == [listen_id]
    sub.cancel()
    _, cancelled = modern_fake.wait_for(CANCELLED, requestId=listen_id)
    assert cancelled["params"]["requestId"] == listen_id
    assert "id" not in cancelled  # a notification: no response follows
    assert next_message(sub) == ("ex_mcp_subscription_closed", sub, "cancelled")
    settle(client)
    assert modern_fake.open_listens() == []
    assert modern_fake.stream_cancels == []
    modern_fake.event(listen_id, TOOLS_CHANGED, {}, connection=1)
    assert assert_iteration_ends(sub) == []


def test_leaving_a_subscription_context_cancels_it_once(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport())
    with client.listen({"toolsListChanged": True}) as sub:
        listen_id = sub.subscription_id
    modern_fake.wait_for(CANCELLED, requestId=listen_id)
    assert next_message(sub) == ("ex_mcp_subscription_closed", sub, "cancelled")
    with pytest.raises(mcp.ListenerNotFound):
        sub.cancel()
    settle(client)
    assert modern_fake.count(CANCELLED, requestId=listen_id) == 1


def test_listen_for_a_dead_subscriber_thread_raises_and_sends_nothing(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport())
    finished = threading.Thread(target=lambda: None, name="test-finished-subscriber")
    finished.start()
    finished.join(WAIT)
    with pytest.raises(mcp.SubscriberNotAlive):
        client.listen({"toolsListChanged": True}, subscriber=finished)
    settle(client)
    assert modern_fake.count("subscriptions/listen") == 0


def test_cancel_on_an_http_like_transport_closes_the_stream_and_sends_no_cancelled(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport(stream_cancel=True))
    sub = client.listen({"toolsListChanged": True})
    listen_id = sub.subscription_id
    sub.cancel()
    assert next_message(sub) == ("ex_mcp_subscription_closed", sub, "cancelled")
    assert modern_fake.stream_cancels == [(1, listen_id)]
    client.list_tools()  # a later frame: had a cancel been sent, it would be recorded by now
    modern_fake.wait_for("tools/list")
    assert modern_fake.count(CANCELLED) == 0


def test_a_subscriber_thread_that_ends_cancels_its_subscriptions_on_the_wire(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport())
    opened: dict[str, Any] = {}

    def open_two_and_exit() -> None:
        opened["tools"] = client.listen({"toolsListChanged": True})
        opened["uris"] = client.listen({"resourceSubscriptions": [A]})

    worker = threading.Thread(target=open_two_and_exit, name="test-short-lived-subscriber")
    worker.start()
    worker.join(WAIT)
    assert set(opened) == {"tools", "uris"}
    for sub in opened.values():
        modern_fake.wait_for(CANCELLED, requestId=sub.subscription_id, timeout=WAIT)
    wait_until(lambda: client._inspect()["subscriptions"] == 0)
    settle(client)
    assert modern_fake.open_listens() == []


def test_a_subscriber_thread_that_ends_cancels_only_its_own_subscriptions(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport())
    mine = client.listen({"toolsListChanged": True})
    opened: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: opened.update(sub=client.listen({"toolsListChanged": True})))
    worker.start()
    worker.join(WAIT)
    modern_fake.wait_for(CANCELLED, requestId=opened["sub"].subscription_id)
    modern_fake.event(mine.subscription_id, TOOLS_CHANGED, {})
    assert next_message(mine) == ("ex_mcp_subscription", mine, TOOLS_CHANGED, {})
    assert modern_fake.count(CANCELLED, requestId=mine.subscription_id) == 0


def test_disconnect_closes_subscriptions_and_watches_with_disconnected(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport())
    sub = client.listen({"toolsListChanged": True})
    watch = client.watch({"promptsListChanged": True})
    client.disconnect()
    assert next_message(sub) == ("ex_mcp_subscription_closed", sub, "disconnected")
    assert next_message(watch) == ("ex_mcp_notification_closed", watch, "disconnected")
    assert assert_iteration_ends(sub) == [] and assert_iteration_ends(watch) == []


def test_a_lost_transport_without_reconnect_closes_subscriptions_with_transport_closed(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport(), reconnect=False)
    sub = client.listen({"toolsListChanged": True})
    modern_fake.drop()
    closed = next_message(sub)
    assert closed[:2] == ("ex_mcp_subscription_closed", sub)
    assert closed.reason[0] == "transport_closed"
    assert assert_iteration_ends(sub) == []
    assert modern_fake.connections == 1


def test_events_reach_only_the_subscription_whose_id_they_carry(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport())
    first = client.listen({"toolsListChanged": True})
    second = client.listen({"toolsListChanged": True})
    assert first.subscription_id != second.subscription_id
    modern_fake.event(first.subscription_id, TOOLS_CHANGED, {"for": "first"})
    modern_fake.event(second.subscription_id, TOOLS_CHANGED, {"for": "second"})
    assert next_message(first) == ("ex_mcp_subscription", first, TOOLS_CHANGED, {"for": "first"})
    assert next_message(second) == ("ex_mcp_subscription", second, TOOLS_CHANGED, {"for": "second"})
    modern_fake.event(first.subscription_id, TOOLS_CHANGED, {"marker": "first"})
    modern_fake.event(second.subscription_id, TOOLS_CHANGED, {"marker": "second"})
    assert_next(first, ("ex_mcp_subscription", first, TOOLS_CHANGED, {"marker": "first"}))
    assert_next(second, ("ex_mcp_subscription", second, TOOLS_CHANGED, {"marker": "second"}))


def test_a_peer_that_comes_back_legacy_closes_subscriptions_with_era_changed(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport(), **RECONNECT)
    sub = client.listen({"toolsListChanged": True})
    modern_fake.set_era("legacy")
    modern_fake.drop()
    assert next_message(sub) == ("ex_mcp_subscription_resync", sub, "started")
    assert next_message(sub) == ("ex_mcp_subscription_closed", sub, ("era_changed", "legacy"))
    assert client.era == "legacy"
    assert assert_iteration_ends(sub) == []


# =========================================================================== abrupt drop and resync


@pytest.mark.parametrize(
    "kind",
    [
        "stdio",
        "ws",
        "http",
    ],
)
def test_an_abrupt_drop_resyncs_with_a_new_listen_and_a_snapshot(
    kind: str, request: pytest.FixtureRequest, clients: Callable[..., mcp.Client]
) -> None:
    server = fresh_server(request, kind, "both")
    client = clients(server.target(), **RECONNECT)
    wanted = {
        "toolsListChanged": True,
        "promptsListChanged": True,
        "resourcesListChanged": True,
        "resourceSubscriptions": [A, B],
    }
    sub = client.listen(wanted)
    first_id = sub.subscription_id
    before = {"tools": client.list_tools(), "prompts": client.list_prompts(), "resources": client.list_resources()}

    server.kill_abruptly()

    assert next_message(sub) == ("ex_mcp_subscription_resync", sub, "started")
    resynced = next_message(sub, timeout=2 * WAIT)
    assert resynced[:2] == ("ex_mcp_subscription_resync", sub)
    how, snapshot = resynced.state
    assert how == "complete"
    assert sub.subscription_id != first_id
    assert set(snapshot) == {"tools", "prompts", "resources", "resourceContents"}
    assert snapshot["tools"] == before["tools"]  # every page followed (the peer pages by 2)
    assert snapshot["prompts"] == before["prompts"]
    assert snapshot["resources"] == before["resources"]
    assert set(snapshot["resourceContents"]) == {A, B}
    assert snapshot["resourceContents"][A]["contents"][0]["text"] == "a.txt version 1"
    assert sub.acknowledged_filter == wanted

    stats = peer_stats(client)
    assert stats["listen_ids"] == [sub.subscription_id]  # the new server knows only the new listen
    notify(client, "resource_updated", B)
    notify(client, "tools")
    assert next_message(sub) == ("ex_mcp_subscription", sub, UPDATED, {"uri": B})
    assert next_message(sub) == ("ex_mcp_subscription", sub, TOOLS_CHANGED, {})


def test_the_resync_snapshot_follows_the_acknowledged_filter_not_the_requested_one(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    modern_fake.on("subscriptions/listen", acknowledging({"promptsListChanged": True, "resourceSubscriptions": [B]}))
    modern_fake.set_resource_text(B, "bee")
    client = clients(modern_fake.transport(), backoff=FAST)
    sub = client.listen({"toolsListChanged": True, "promptsListChanged": True, "resourceSubscriptions": [A, B]})
    modern_fake.drop()
    assert next_message(sub) == ("ex_mcp_subscription_resync", sub, "started")
    how, snapshot = next_message(sub).state
    assert how == "complete"
    assert snapshot == {
        "prompts": [{"name": "greet", "description": "Say hello.", "arguments": [{"name": "who", "required": False}]}],
        "resourceContents": {B: {"contents": [{"uri": B, "mimeType": "text/plain", "text": "bee"}]}},
    }
    assert modern_fake.count("tools/list", connection=2) == 0
    assert modern_fake.count("resources/read", connection=2, uri=A) == 0


def test_events_during_the_snapshot_are_delivered_after_complete_in_order(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport(), backoff=FAST)
    sub = client.listen({"toolsListChanged": True, "resourceSubscriptions": [A]})
    first_id = sub.subscription_id
    gate = threading.Event()

    def slow_tools_list(params: dict[str, Any], ctx: FakeConnection) -> Any:
        ctx.wait(gate, timeout=WAIT)
        return {"tools": []}

    modern_fake.on("tools/list", slow_tools_list, concurrent=True)
    modern_fake.drop()
    assert next_message(sub) == ("ex_mcp_subscription_resync", sub, "started")
    modern_fake.wait_connections(2)
    _, relisten = modern_fake.wait_for("subscriptions/listen", connection=2)
    new_id = relisten["id"]
    assert new_id != first_id
    modern_fake.wait_for("tools/list", connection=2)  # the snapshot is being fetched
    modern_fake.event(new_id, UPDATED, {"uri": A, "n": 1})
    modern_fake.event(new_id, TOOLS_CHANGED, {"n": 2})
    modern_fake.event(new_id, UPDATED, {"uri": B, "n": 3})  # outside: dropped even when held
    modern_fake.event(new_id, UPDATED, {"uri": A, "n": 4})
    barrier(modern_fake)
    gate.set()
    # Held until the snapshot completes: its "complete" is the next message, nothing before it.
    how, snapshot = next_message(sub).state
    assert how == "complete"
    assert snapshot["tools"] == []
    assert [next_message(sub) for _ in range(3)] == [
        ("ex_mcp_subscription", sub, UPDATED, {"uri": A, "n": 1}),
        ("ex_mcp_subscription", sub, TOOLS_CHANGED, {"n": 2}),
        ("ex_mcp_subscription", sub, UPDATED, {"uri": A, "n": 4}),
    ]
    assert sub.subscription_id == new_id
    modern_fake.event(new_id, TOOLS_CHANGED, {"n": 5})
    assert next_message(sub) == ("ex_mcp_subscription", sub, TOOLS_CHANGED, {"n": 5})


def test_a_drop_during_the_snapshot_resyncs_again_on_the_next_connection(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport(), **RECONNECT)
    sub = client.listen({"toolsListChanged": True})
    gate = threading.Event()

    def held_tools_list(params: dict[str, Any], ctx: FakeConnection) -> Any:
        ctx.wait(gate, timeout=WAIT)
        return {"tools": []}

    modern_fake.on("tools/list", held_tools_list, concurrent=True)
    modern_fake.drop()
    assert next_message(sub) == ("ex_mcp_subscription_resync", sub, "started")
    modern_fake.wait_for("tools/list", connection=2)  # resyncing: the snapshot is in flight
    modern_fake.off("tools/list")
    modern_fake.drop(connection=2)  # ...and the connection drops again
    modern_fake.wait_connections(3)
    _, relisten = modern_fake.wait_for("subscriptions/listen", connection=3)
    _, snapshot = collect_until_resync_complete(sub)
    assert set(snapshot) == {"tools"}
    assert sub.subscription_id == relisten["id"]
    modern_fake.event(relisten["id"], TOOLS_CHANGED, {"after": "second drop"})
    assert next_message(sub) == ("ex_mcp_subscription", sub, TOOLS_CHANGED, {"after": "second drop"})
    gate.set()


def test_a_drop_before_the_relisten_is_acknowledged_relistens_on_the_next_connection(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport(), **RECONNECT)
    sub = client.listen({"toolsListChanged": True})
    modern_fake.on("subscriptions/listen", lambda params, ctx: NO_REPLY)  # the re-listen is never acknowledged
    modern_fake.drop()
    assert next_message(sub) == ("ex_mcp_subscription_resync", sub, "started")
    modern_fake.wait_for("subscriptions/listen", connection=2)
    modern_fake.off("subscriptions/listen")
    modern_fake.drop(connection=2)
    modern_fake.wait_connections(3)
    _, relisten = modern_fake.wait_for("subscriptions/listen", connection=3)
    collect_until_resync_complete(sub)
    assert sub.subscription_id == relisten["id"]
    modern_fake.event(relisten["id"], TOOLS_CHANGED, {})
    assert next_message(sub) == ("ex_mcp_subscription", sub, TOOLS_CHANGED, {})


def test_events_sent_before_the_relisten_acknowledgment_follow_the_snapshot(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport(), **RECONNECT)
    sub = client.listen({"toolsListChanged": True})

    def early_events_then_ack(params: dict[str, Any], ctx: FakeConnection) -> Any:
        ctx.event(TOOLS_CHANGED, {"n": 1})
        ctx.event(PROMPTS_CHANGED, {"n": 2})  # outside: never delivered
        ctx.event(TOOLS_CHANGED, {"n": 3})
        ctx.acknowledge(params["notifications"])
        return NO_REPLY

    modern_fake.on("subscriptions/listen", early_events_then_ack)
    modern_fake.drop()
    assert next_message(sub) == ("ex_mcp_subscription_resync", sub, "started")
    assert next_message(sub).state == (
        "complete",
        {
            "tools": [
                {"name": "echo", "description": "Echo the arguments back as text.", "inputSchema": {"type": "object"}}
            ]
        },
    )
    assert next_message(sub) == ("ex_mcp_subscription", sub, TOOLS_CHANGED, {"n": 1})
    assert next_message(sub) == ("ex_mcp_subscription", sub, TOOLS_CHANGED, {"n": 3})
    modern_fake.event(sub.subscription_id, TOOLS_CHANGED, {"marker": 1})
    assert_next(sub, ("ex_mcp_subscription", sub, TOOLS_CHANGED, {"marker": 1}))


def test_events_for_the_old_listen_id_are_dropped_after_a_resync(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport(), backoff=FAST)
    sub = client.listen({"toolsListChanged": True})
    old_id = sub.subscription_id
    modern_fake.drop()
    assert next_message(sub) == ("ex_mcp_subscription_resync", sub, "started")
    assert next_message(sub).state[0] == "complete"
    modern_fake.event(old_id, TOOLS_CHANGED, {"stale": True}, connection=2)
    modern_fake.event(sub.subscription_id, TOOLS_CHANGED, {"fresh": True})
    assert next_message(sub) == ("ex_mcp_subscription", sub, TOOLS_CHANGED, {"fresh": True})


def test_a_failed_relisten_reports_resync_failed_then_closes(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport(), backoff=FAST)
    sub = client.listen({"toolsListChanged": True})

    def refuse(params: dict[str, Any], ctx: FakeConnection) -> Any:
        raise FakeError(-32603, "no more listens")

    modern_fake.on("subscriptions/listen", refuse)
    modern_fake.drop()
    assert next_message(sub) == ("ex_mcp_subscription_resync", sub, "started")
    failed = next_message(sub)
    assert failed[:2] == ("ex_mcp_subscription_resync", sub) and failed.state[0] == "failed"
    closed = next_message(sub)
    assert closed[:2] == ("ex_mcp_subscription_closed", sub)
    assert assert_iteration_ends(sub) == []


# =========================================================================== watch()


def run_watch_scenario(client: mcp.Client) -> list[tuple[Any, ...]]:
    """The same server actions whatever the era; returns (tag, method, params) per message."""
    watch = client.watch({"toolsListChanged": True, "resourceSubscriptions": [A]})
    assert isinstance(watch, mcp.Watch)
    notify(client, "resource_updated", A)
    notify(client, "tools")
    notify(client, "prompts", unsubscribed_too=True)  # outside the filter: dropped in both eras
    notify(client, "resource_updated", C, unsubscribed_too=True)
    notify(client, "resource_updated", A, count=2)
    messages = [next_message(watch) for _ in range(4)]
    assert all(isinstance(message, mcp.Notification) and message.listener is watch for message in messages)
    notify(client, "tools")  # the marker
    assert_next_is_marker(
        lambda timeout: watch.get(timeout=timeout),
        lambda message: isinstance(message, mcp.Notification) and message.method == TOOLS_CHANGED,
    )
    watch.unsubscribe()
    return [(message[0], message[2], message[3]) for message in messages]


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_watch_delivers_the_same_tuples_in_both_eras(
    kind: str, request: pytest.FixtureRequest, shared_peers: SharedPeers, clients: Callable[..., mcp.Client]
) -> None:
    legacy_client = clients(shared_peers.server(request, kind, "legacy").target())
    modern_client = clients(shared_peers.server(request, kind, "both").target())
    assert (legacy_client.era, modern_client.era) == ("legacy", "modern")
    legacy_tuples = run_watch_scenario(legacy_client)
    modern_tuples = run_watch_scenario(modern_client)
    assert legacy_tuples == [
        ("ex_mcp_notification", UPDATED, {"uri": A}),
        ("ex_mcp_notification", TOOLS_CHANGED, {}),
        ("ex_mcp_notification", UPDATED, {"uri": A}),
        ("ex_mcp_notification", UPDATED, {"uri": A}),
    ]
    assert modern_tuples == legacy_tuples


@pytest.mark.parametrize("sdk_ws_peer", ["both"], indirect=True)
def test_a_modern_watch_reconnect_reports_the_acknowledged_uris(
    sdk_ws_peer: Peer, clients: Callable[..., mcp.Client]
) -> None:
    server = RealServer("ws", "both", peer=sdk_ws_peer)
    client = clients(server.target(), **RECONNECT)
    watch = client.watch({"toolsListChanged": True, "resourceSubscriptions": [A, B]})
    server.kill_abruptly()
    reconnected = next_message(watch, timeout=2 * WAIT)
    assert reconnected == ("ex_mcp_notification_reconnected", watch, {"resubscribed": [A, B], "failed": []})
    assert isinstance(reconnected, mcp.Reconnected)
    notify(client, "resource_updated", B)
    notify(client, "tools")
    assert next_message(watch) == ("ex_mcp_notification", watch, UPDATED, {"uri": B})
    assert next_message(watch) == ("ex_mcp_notification", watch, TOOLS_CHANGED, {})


def test_a_modern_watch_reconnect_reports_only_what_the_server_acknowledged(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    modern_fake.on("subscriptions/listen", acknowledging({"resourceSubscriptions": [B]}))
    client = clients(modern_fake.transport(), backoff=FAST)
    watch = client.watch({"resourceSubscriptions": [A, B]})
    modern_fake.drop()
    assert next_message(watch) == ("ex_mcp_notification_reconnected", watch, {"resubscribed": [B], "failed": []})
    modern_fake.wait_for("subscriptions/listen", connection=2)
    assert modern_fake.count("tools/list") == 0  # a watch fetches no snapshot


def test_a_modern_watch_delivers_events_sent_before_the_relisten_ack_after_reconnected(
    modern_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(modern_fake.transport(), **RECONNECT)
    watch = client.watch({"resourceSubscriptions": [A]})

    def early_event_then_ack(params: dict[str, Any], ctx: FakeConnection) -> Any:
        ctx.event(UPDATED, {"uri": A})
        ctx.acknowledge(params["notifications"])
        return NO_REPLY

    modern_fake.on("subscriptions/listen", early_event_then_ack)
    modern_fake.drop()
    assert next_message(watch) == ("ex_mcp_notification_reconnected", watch, {"resubscribed": [A], "failed": []})
    assert next_message(watch) == ("ex_mcp_notification", watch, UPDATED, {"uri": A})


@pytest.mark.parametrize("era", ["legacy", "both"])
def test_watch_unsubscribe_ends_it_in_both_eras(
    era: str, request: pytest.FixtureRequest, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(fresh_server(request, "stdio", era).target())
    assert client.era == ("legacy" if era == "legacy" else "modern")
    watch = client.watch({"toolsListChanged": True, "resourceSubscriptions": [A]})
    watch.unsubscribe()
    if client.era == "legacy":
        wait_until(lambda: peer_stats(client)["unsubscribe_calls"].get(A) == 1, every=PEER_POLL)
        assert peer_stats(client)["subscribed"] == {}
    else:
        listen_id = watch.subscription_id
        wait_until(lambda: listen_ended(client, listen_id), every=PEER_POLL)
    notify(client, "tools")
    notify(client, "resource_updated", A, unsubscribed_too=True)
    assert assert_iteration_ends(watch) == []  # no closing message, nothing after
    with pytest.raises(mcp.ListenerNotFound):
        watch.unsubscribe()


def test_a_legacy_watch_survives_the_peer_turning_modern(
    legacy_fake: FakeServer, clients: Callable[..., mcp.Client]
) -> None:
    client = clients(legacy_fake.transport(), backoff=FAST)
    assert client.era == "legacy"
    watch = client.watch({"toolsListChanged": True, "resourceSubscriptions": [A]})
    listener = client.subscribe_notifications({"toolsListChanged": True})
    legacy_fake.updated(A)
    assert next_message(watch) == ("ex_mcp_notification", watch, UPDATED, {"uri": A})

    legacy_fake.set_era("modern")
    legacy_fake.drop()

    assert next_message(listener) == ("ex_mcp_notification_closed", listener, ("era_changed", "modern"))
    assert next_message(watch) == ("ex_mcp_notification_reconnected", watch, {"resubscribed": [A], "failed": []})
    assert client.era == "modern"
    _, relisten = legacy_fake.wait_for("subscriptions/listen", connection=2)
    assert relisten["params"]["notifications"] == {"toolsListChanged": True, "resourceSubscriptions": [A]}
    assert legacy_fake.count("resources/subscribe", connection=2) == 0
    legacy_fake.event(relisten["id"], TOOLS_CHANGED, {})
    legacy_fake.event(relisten["id"], UPDATED, {"uri": A})
    assert next_message(watch) == ("ex_mcp_notification", watch, TOOLS_CHANGED, {})
    assert next_message(watch) == ("ex_mcp_notification", watch, UPDATED, {"uri": A})
    assert assert_iteration_ends(listener) == []  # nothing after its Closed
    watch.unsubscribe()
    legacy_fake.wait_for(CANCELLED, requestId=relisten["id"])


def collect_until_resync_complete(sub: Any, timeout: float = WAIT) -> tuple[list[Any], Any]:
    """Resync messages up to ("complete", snapshot); returns (what came before it, the snapshot)."""
    before: list[Any] = []
    while True:
        message = next_message(sub, timeout)
        assert message[:2] == ("ex_mcp_subscription_resync", sub), message
        if isinstance(message.state, tuple) and message.state[0] == "complete":
            return before, message.state[1]
        before.append(message.state)
