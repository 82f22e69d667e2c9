"""Against the official TypeScript SDK v2 server (npm ``@modelcontextprotocol/server`` 2.4.0,
tests/peers/ts_server.mjs), a server written elsewhere, over stdio and Streamable HTTP in
both eras: plain answers to calls asked as tasks, a kept ``server/discover`` result reused
with no round trip, arguments mirrored into ``Mcp-Param-*`` headers the SDK checks, its
default HTTP setup, which serves 2025 traffic statelessly (GET answers 405) while it
advertises resource subscriptions, and the sessions of its documented stateful 2025 wiring
across a restart on the same port.

One Streamable HTTP peer serves the module; each stdio client starts its own, and the
restart test its own stateful HTTP peer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sdk_helpers import ClientPool, TapTransport, once
from waiting import wait_until

import exmcp_actors as mcp
from tests.cli_helpers import Cli
from tests.peers.launch import Peer
from tests.peers.ts_peer import missing_tools, ts_argv, ts_http_peer

TIMEOUT = 20.0
#: Reconnect quickly, yet for long enough that a restart on a busy machine fits in.
FAST: dict[str, Any] = {
    "backoff": mcp.Backoff(initial=0.1, factor=2, maximum=0.5, jitter=0.1),
    "max_reconnect_attempts": 40,
}
HTTP_LOGGER = "exmcp_actors.http"

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    with ts_http_peer() as started:
        yield started


@pytest.fixture
def connect(peer: Peer, client_pool: ClientPool) -> Callable[..., mcp.Client]:
    def make(target: Any, protocol: str = "auto", **kwargs: Any) -> mcp.Client:
        where = {"http": peer.url, "stdio": ts_argv()}.get(target, target) if isinstance(target, str) else target
        return client_pool.connect(where, protocol=protocol, **once(TIMEOUT), **kwargs)

    return make


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(block.get("text", "") for block in result["content"])


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_plain_answer_to_a_call_asked_as_a_task_is_returned(
    connect: Callable[..., mcp.Client], transport: str, protocol: str
) -> None:
    client = connect(transport, protocol)
    assert client.era == ("modern" if protocol == "auto" else "legacy")
    answer = client.call_tool("touch", {"uri": "demo://b"}, task=True, timeout=TIMEOUT)
    assert isinstance(answer, dict), answer  # the tool ran: its result is the answer
    assert client.read_resource("demo://b")["contents"][0]["text"] == text_of(answer)


def test_a_kept_discover_result_connects_with_no_round_trip(connect: Callable[..., mcp.Client]) -> None:
    first = connect("stdio")
    kept = first.discover_result
    assert kept is not None and "2026-07-28" in kept["supportedVersions"]
    assert kept["capabilities"] == first.server_capabilities
    tap = TapTransport(mcp.StdioTransport(ts_argv()))
    again = connect(tap, discover_result=kept)
    assert (again.era, again.server_capabilities, again.discover_result) == ("modern", first.server_capabilities, kept)
    assert {tool["name"] for tool in again.list_tools()} >= {"echo", "touch"}
    assert [message["method"] for _, message in tap.sent] == ["tools/list"]  # no server/discover
    over_http = connect("http", "modern", discover_result=kept)
    assert text_of(over_http.call_tool("echo", {"text": "hi"}, timeout=TIMEOUT)) == "hi"
    assert connect("http", "legacy").discover_result is None
    with pytest.raises(ValueError, match="protocol"):
        mcp.connect(ts_argv(), protocol="legacy", discover_result=kept)
    with pytest.raises(ValueError, match="supportedVersions"):
        mcp.connect(ts_argv(), discover_result={**kept, "supportedVersions": ["2025-11-25"]})


def test_a_legacy_watch_of_a_server_serving_2025_statelessly_is_warned_about_once(
    connect: Callable[..., mcp.Client], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, HTTP_LOGGER)

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == HTTP_LOGGER and "405" in r.getMessage()]

    modern = connect("http")
    modern.watch({"resourceSubscriptions": ["demo://a"]}, timeout=TIMEOUT)
    client = connect("http", "legacy")
    first = client.watch({"resourceSubscriptions": ["demo://a"]}, timeout=TIMEOUT)
    wait_until(lambda: len(warnings()) == 1, TIMEOUT, "the warning about a server that cannot push")
    [warning] = warnings()
    assert "resource subscriptions" in warning and "no session" in warning and "hears nothing" in warning
    client.watch({"toolsListChanged": True}, timeout=TIMEOUT).unsubscribe()
    first.unsubscribe()
    client.call_tool("touch", {"uri": "demo://a"}, timeout=TIMEOUT)  # a request after: no second warning
    assert len(warnings()) == 1


@pytest.mark.parametrize("listed_first", [True, False])
def test_marked_arguments_ride_in_headers_the_sdk_server_checks(
    connect: Callable[..., mcp.Client], listed_first: bool
) -> None:
    client = connect("http")
    assert client.era == "modern"
    if listed_first:
        [route] = [tool for tool in client.list_tools() if tool["name"] == "route"]
        assert route["inputSchema"]["properties"]["region"]["x-mcp-header"] == "Region"
    # Not listed first: the SDK refuses the call without its header (-32020), the client
    # lists the tools and sends it once more. Non-ASCII goes base64-encoded.
    answer = client.call_tool("route", {"region": "Zürich eu", "shard": 3}, timeout=TIMEOUT)
    assert text_of(answer) == "region Zürich eu shard 3"


def test_a_stateful_2025_session_is_watched_across_a_restart_on_the_same_port() -> None:
    peer = ts_http_peer("stateful")
    backoff = mcp.Backoff(initial=0.05, factor=2, maximum=0.5, jitter=0.1)
    try:
        with mcp.connect(peer.url, protocol="legacy", backoff=backoff, connect_timeout=TIMEOUT) as client:
            watch = client.watch({"resourceSubscriptions": ["demo://a"]}, timeout=TIMEOUT)
            client.call_tool("touch", {"uri": "demo://a"}, timeout=TIMEOUT)
            assert watch.get(timeout=TIMEOUT).params == {"uri": "demo://a"}  # its GET stream carries it
            peer.restart()
            reconnected = watch.get(timeout=TIMEOUT)
            assert isinstance(reconnected, mcp.Reconnected), reconnected
            assert reconnected.report == {"resubscribed": ["demo://a"], "failed": []}
            client.call_tool("touch", {"uri": "demo://a"}, timeout=TIMEOUT)
            assert watch.get(timeout=TIMEOUT).params == {"uri": "demo://a"}
    finally:
        peer.stop()


def test_a_modern_watch_comes_back_after_every_outage_however_many() -> None:
    # Each outage (the server killed, then back on the same port before the re-listen is due)
    # costs the watch one re-listen; max_reconnect_attempts bounds the attempts of one outage,
    # not of the watch's life.
    peer = ts_http_peer()
    backoff = mcp.Backoff(initial=2.0, factor=1, maximum=2.0, jitter=0.0)
    try:
        with mcp.connect(peer.url, max_reconnect_attempts=2, backoff=backoff, connect_timeout=TIMEOUT) as client:
            watch = client.watch({"resourceSubscriptions": ["demo://a"]}, timeout=TIMEOUT)
            for _ in range(3):
                peer.kill()
                peer.start()
                back = watch.get(timeout=TIMEOUT)
                assert isinstance(back, mcp.Reconnected), back
            client.call_tool("touch", {"uri": "demo://a"}, timeout=TIMEOUT)
            assert watch.get(timeout=TIMEOUT).params == {"uri": "demo://a"}
    finally:
        peer.stop()


# -- a graceful shutdown (close(): each listen gets its graceful answer), then a restart --------


def test_a_modern_watch_follows_a_server_that_shut_down_gracefully_back_after_its_restart() -> None:
    peer = ts_http_peer()
    try:
        with mcp.connect(peer.url, connect_timeout=TIMEOUT, **FAST) as client:
            watch = client.watch({"resourceSubscriptions": ["demo://a"]}, timeout=TIMEOUT)
            listen_id = watch.subscription_id
            peer.restart()  # SIGTERM: the SDK answers each listen, then exits
            back = watch.get(timeout=TIMEOUT)
            assert isinstance(back, mcp.Reconnected), back
            assert back.report == {"resubscribed": ["demo://a"], "failed": []}
            assert watch.subscription_id != listen_id
            client.call_tool("touch", {"uri": "demo://a"}, timeout=TIMEOUT)
            assert watch.get(timeout=TIMEOUT).params == {"uri": "demo://a"}
            # An explicit listen ends with the server's graceful answer, as the SDKs' clients do.
            subscription = client.listen({"toolsListChanged": True}, timeout=TIMEOUT)
            peer.restart()
            closed = subscription.get(timeout=TIMEOUT)
            assert isinstance(closed, mcp.SubscriptionClosed) and closed.reason[0] == "complete", closed
    finally:
        peer.stop()


def test_a_catalog_follows_a_server_that_shut_down_gracefully_back_after_its_restart() -> None:
    peer = ts_http_peer()
    try:
        with mcp.connect(peer.url, connect_timeout=TIMEOUT, **FAST) as client:
            catalog = client.catalog(timeout=TIMEOUT)
            assert "late" not in {tool["name"] for tool in catalog.tools}
            peer.restart()
            wait_until(lambda: client.status == "ready", TIMEOUT, "the client ready after the restart")
            client.call_tool("add_tool", {"name": "late"}, timeout=TIMEOUT)
            while "late" not in {tool["name"] for tool in catalog.tools}:
                changed = catalog.get(timeout=TIMEOUT)  # queue.Empty: it stopped following
                assert isinstance(changed, mcp.CatalogChanged)
    finally:
        peer.stop()


def test_exmcp_watch_follows_a_server_that_shut_down_gracefully_back_after_its_restart() -> None:
    peer = ts_http_peer()
    try:
        with Cli("--uri", "demo://a", peer.url) as cli:
            assert cli.wait_method("connected", timeout=TIMEOUT)["params"]["era"] == "modern"
            peer.restart()
            assert cli.wait_method("reconnected", timeout=TIMEOUT)["params"]["resubscribed"] == ["demo://a"]
            rc, _ = cli.interrupt()
            assert rc in (0, 130), cli.stderr
    finally:
        peer.stop()
