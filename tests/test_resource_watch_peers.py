"""Resource watches against real servers over stdio, in both eras: the Python SDK 2.3.0 server
(tests/peers/sdk_server.py, tool ``notify`` bumps a resource's version) and the TypeScript SDK
v2 server (tests/peers/ts_server.mjs, tool ``touch``). The watch delivers the contents first,
the re-read contents after each change, and after a kill and respawn of the server a re-read.
The same over WebSocket and Streamable HTTP, across a kill and a restart on the same port."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import exmcp_actors as mcp
from tests.peers.launch import Peer
from tests.peers.ts_peer import missing_tools, ts_http_peer
from tests.sdk_helpers import STDIO_ERA_PEERS, ClientPool, TapTransport, kill_pid, stdio_era_argv
from tests.waiting import wait_until

WAIT = 20.0
_NO_TS = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))
FAST = mcp.Backoff(initial=0.05, factor=2, maximum=0.5, jitter=0.1)

#: peer -> (uri, the tool that changes it, the text of each version)
SUBJECT: dict[str, tuple[str, str, Any]] = {
    "sdk": ("file:///a.txt", "notify", lambda n: f"a.txt version {n}"),
    "ts": ("demo://a", "touch", lambda n: f"demo://a v{n - 1}"),
}


def change(client: mcp.Client, peer: str) -> None:
    uri, tool, _text = SUBJECT[peer]
    args: dict[str, Any] = {"kind": "resource_updated", "uri": uri} if peer == "sdk" else {"uri": uri}
    client.call_tool(tool, args, timeout=WAIT)


def next_contents(watch: mcp.ResourceWatch) -> Any:
    message = watch.get(timeout=WAIT)
    assert isinstance(message, mcp.ResourceChanged), message
    assert message.handle is watch
    return message.contents[0]["text"]


@pytest.mark.parametrize(("peer", "protocol"), STDIO_ERA_PEERS)
def test_a_watch_carries_contents_across_changes_and_a_kill_and_restart(
    pool: ClientPool, peer: str, protocol: str
) -> None:
    tap = TapTransport(mcp.StdioTransport(stdio_era_argv(peer, protocol)))
    client = pool.connect(tap, protocol=protocol, backoff=FAST, connect_timeout=WAIT, max_reconnect_attempts=60)
    assert client.era == ("legacy" if protocol == "legacy" else "modern")
    uri, _tool, text = SUBJECT[peer]
    watch = client.watch_resource(uri, timeout=WAIT)
    other = client.watch_resource(uri, timeout=WAIT)
    assert next_contents(watch) == text(1)
    assert next_contents(other) == text(1)
    assert watch.follows_changes and other.follows_changes
    change(client, peer)
    assert next_contents(watch) == text(2)
    assert next_contents(other) == text(2)
    reads = watch.reads
    change(client, peer)
    assert next_contents(watch) == text(3)
    assert watch.reads == reads + 1  # two handles, one shared read per change
    assert next_contents(other) == text(3)

    pid = tap.pid
    assert pid is not None
    kill_pid(pid)
    # The new process starts from its first version: the re-read after the reconnect shows it.
    assert next_contents(watch) == text(1)
    assert next_contents(other) == text(1)
    assert tap.pid != pid
    change(client, peer)
    assert next_contents(watch) == text(2)
    other.close()
    client.disconnect()
    closed = watch.get(timeout=WAIT)
    assert isinstance(closed, mcp.Closed), closed


# -- over WebSocket and Streamable HTTP, across a restart on the same port -------------------------

NETWORK_PEERS = [
    pytest.param("sdk", "ws", "legacy", "legacy", id="sdk-ws-legacy"),
    pytest.param("sdk", "ws", "both", "legacy", id="sdk-ws-both-legacy"),
    pytest.param("sdk", "ws", "both", "auto", id="sdk-ws-modern"),
    pytest.param("sdk", "http", "legacy", "legacy", id="sdk-http-legacy"),
    pytest.param("sdk", "http", "both", "legacy", id="sdk-http-both-legacy"),
    pytest.param("sdk", "http", "both", "auto", id="sdk-http-modern"),
    # The SDK's documented stateful composition for 2025 traffic: sessions and a GET stream.
    pytest.param("ts", "http", "stateful", "legacy", id="ts-http-legacy", marks=_NO_TS),
    pytest.param("ts", "http", "stateful", "auto", id="ts-http-modern", marks=_NO_TS),
]


def _network_peer(peer: str, transport: str, era: str) -> Peer:
    if peer == "ts":
        return ts_http_peer(era)
    return Peer(transport, era).start()


@pytest.mark.parametrize(("peer", "transport", "era", "protocol"), NETWORK_PEERS)
def test_a_watch_over_the_network_carries_contents_across_a_restart_of_the_server(
    pool: ClientPool, peer: str, transport: str, era: str, protocol: str
) -> None:
    with _network_peer(peer, transport, era) as server:
        make = mcp.WebSocketTransport if transport == "ws" else mcp.HttpTransport
        client = pool.connect(
            make(server.url), protocol=protocol, backoff=FAST, connect_timeout=WAIT, max_reconnect_attempts=60
        )
        assert client.era == ("legacy" if protocol == "legacy" else "modern")
        uri, _tool, text = SUBJECT[peer]
        watch = client.watch_resource(uri, timeout=WAIT)
        first = next_contents(watch)
        assert watch.follows_changes
        change(client, peer)
        second = next_contents(watch)
        assert second != first
        server.kill()
        server.start()  # the same port; a fresh process, back at its first version
        assert next_contents(watch) == text(1)
        change(client, peer)
        assert next_contents(watch) == text(2)


@_NO_TS
def test_a_legacy_watch_of_the_ts_servers_default_http_setup_is_told_it_hears_nothing(
    pool: ClientPool, caplog: pytest.LogCaptureFixture
) -> None:
    """createMcpHandler's default serves 2025 traffic statelessly: no session, GET answered 405,
    so no resources/updated can reach a 2025 client. The client says so once; the watch still
    has the contents, and a 2026-07-28 connection to the same server hears the change."""
    with ts_http_peer("stateless") as server, caplog.at_level(logging.WARNING, logger="exmcp_actors.http"):
        legacy = pool.connect(mcp.HttpTransport(server.url), protocol="legacy", connect_timeout=WAIT)
        watch = legacy.watch_resource("demo://a", timeout=WAIT)
        assert next_contents(watch) == "demo://a v0"
        wait_until(
            lambda: any("no GET stream (HTTP 405)" in r.getMessage() for r in caplog.records), WAIT, "the warning"
        )
        modern = pool.connect(mcp.HttpTransport(server.url), protocol="auto", connect_timeout=WAIT)
        heard = modern.watch_resource("demo://a", timeout=WAIT)
        assert next_contents(heard) == "demo://a v0"
        change(legacy, "ts")
        assert next_contents(heard) == "demo://a v1"
        assert legacy.read_resource("demo://a")["contents"][0]["text"] == "demo://a v1"
