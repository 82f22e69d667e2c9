"""Connection status and keepalive against real servers over stdio, in both eras: the Python
SDK 2.3.0 server (tests/peers/sdk_server.py) and the TypeScript SDK v2 server
(tests/peers/ts_server.mjs). A killed server is spawned again on reconnect, and the handle
hears it in order; keepalive probes (``ping``, ``server/discover``) are answered by the real
server; a server frozen with SIGSTOP is found out by the keepalive and replaced."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from tests.peers.launch import Peer
from tests.peers.ts_peer import missing_tools, ts_http_peer
from tests.sdk_helpers import (
    STDIO_ERA_PEERS,
    ClientPool,
    TapTransport,
    kill_pid,
    process_exists,
    server_stats,
    stdio_era_argv,
)
from tests.waiting import wait_until

WAIT = 20.0
FAST = mcp.Backoff(initial=0.05, factor=2, maximum=0.5, jitter=0.1)
PATIENT = 60
RECONNECTED = "ex_mcp_notification_reconnected"

no_ts = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))


def start(pool: ClientPool, peer: str, protocol: str, **options: Any) -> tuple[mcp.Client, TapTransport]:
    tap = TapTransport(mcp.StdioTransport(stdio_era_argv(peer, protocol)))
    options.setdefault("max_reconnect_attempts", PATIENT)
    client = pool.connect(tap, protocol=protocol, backoff=FAST, connect_timeout=WAIT, **options)
    assert client.era == ("legacy" if protocol == "legacy" else "modern")
    return client, tap


def status_watch(client: mcp.Client) -> mcp.Watch:
    watch = client.watch({"toolsListChanged": True, "status": True}, timeout=WAIT)
    first = watch.get(timeout=WAIT)
    assert isinstance(first, mcp.Status) and first.state == "ready", first
    assert first.detail == {"era": client.era, "protocolVersion": client.protocol_version}
    return watch


def read_until_ready(watch: mcp.Watch) -> list[Any]:
    """The handle's messages up to the next "ready" status."""
    got: list[Any] = []
    deadline = time.monotonic() + WAIT * 2
    while True:
        message = watch.get(timeout=max(0.0, deadline - time.monotonic()))
        got.append(message)
        if isinstance(message, mcp.Status) and message.state == "ready":
            return got


def words(messages: list[Any]) -> list[str]:
    return [m.state if isinstance(m, mcp.Status) else m.tag for m in messages]


def assert_a_reconnect(got: list[Any], reason: str) -> None:
    """reconnecting (attempt 1, for ``reason``), maybe failed attempts, connecting, Reconnected, ready."""
    said = words(got)
    assert said[0] == "reconnecting" and got[0].detail["attempt"] == 1, got
    assert got[0].detail["reason"][0] == reason, got[0]
    assert said[-3:] == ["connecting", RECONNECTED, "ready"], said
    assert set(said[1:-3]) <= {"reconnecting", "connecting"}, said
    attempts = [m.detail["attempt"] for m in got if isinstance(m, mcp.Status) and m.state == "reconnecting"]
    assert attempts == list(range(1, len(attempts) + 1))
    assert got[-3].detail["attempt"] == attempts[-1]


def freeze_until_the_keepalive_tells(watch: mcp.Watch, pid: int) -> mcp.Status:
    """SIGSTOP the server until the watch hears "reconnecting" for a keepalive of 0.5 s;
    then SIGCONT (the old process may end now: the reconnect stops it)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        first = watch.get(timeout=WAIT)
        assert isinstance(first, mcp.Status) and first.state == "reconnecting", first
        assert first.detail["reason"] == ("keepalive_timeout", 0.5)
    finally:
        os.kill(pid, signal.SIGCONT)
    return first


@pytest.mark.parametrize(("peer", "protocol"), STDIO_ERA_PEERS)
def test_status_across_a_kill_and_a_restart_of_the_server(pool: ClientPool, peer: str, protocol: str) -> None:
    client, tap = start(pool, peer, protocol)
    watch = status_watch(client)
    pid = tap.pid
    assert pid is not None
    kill_pid(pid)
    assert_a_reconnect(read_until_ready(watch), "transport_closed")
    assert tap.pid != pid
    assert client.status == "ready" and client.list_tools()
    client.disconnect()
    assert words([watch.get(timeout=WAIT), watch.get(timeout=WAIT)]) == ["closed", "ex_mcp_notification_closed"]


@pytest.mark.parametrize(("peer", "protocol"), STDIO_ERA_PEERS)
def test_keepalive_probes_of_an_idle_connection_are_answered_by_the_server(
    pool: ClientPool, peer: str, protocol: str
) -> None:
    client, tap = start(pool, peer, protocol, keepalive=0.3)
    probe = "ping" if protocol == "legacy" else "server/discover"
    wait_until(lambda: client._inspect()["keepalive"][1] >= 2, WAIT, "two probes answered")
    sent = {m["id"] for m in tap.sent_messages(probe, connection=1)}
    answered = {f.get("id") for f in tap.received_frames(1) if isinstance(f, dict) and "result" in f}
    assert len(sent & answered) >= 2
    assert client.status == "ready" and tap.connection == 1  # no reconnect: every probe answered
    if peer == "sdk":
        counted = server_stats(client)["status_probes"]
        assert counted.get(probe, 0) >= 2, counted


@pytest.mark.parametrize(("peer", "protocol"), STDIO_ERA_PEERS)
def test_a_server_frozen_with_sigstop_is_found_out_by_the_keepalive(pool: ClientPool, peer: str, protocol: str) -> None:
    client, tap = start(pool, peer, protocol, keepalive=0.5)
    watch = status_watch(client)
    pid = tap.pid
    assert pid is not None
    first = freeze_until_the_keepalive_tells(watch, pid)
    got = [first, *read_until_ready(watch)]
    assert_a_reconnect(got, "keepalive_timeout")
    assert tap.pid != pid
    wait_until(lambda: not process_exists(pid), WAIT, "the frozen server stopped")
    assert client.list_tools()


# -- over Streamable HTTP ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ts_http() -> Iterator[Any]:
    if missing_tools() is not None:
        pytest.skip(str(missing_tools()))
    with ts_http_peer("stateful") as started:
        yield started


def http_client(pool: ClientPool, url: str, protocol: str, **options: Any) -> tuple[mcp.Client, TapTransport]:
    tap = TapTransport(mcp.HttpTransport(url))
    client = pool.connect(tap, protocol=protocol, backoff=FAST, connect_timeout=WAIT, **options)
    assert client.era == ("legacy" if protocol == "legacy" else "modern")
    return client, tap


def assert_probes_answered(client: mcp.Client, tap: TapTransport, probe: str) -> None:
    wait_until(lambda: client._inspect()["keepalive"][1] >= 2, WAIT, "two probes answered")
    sent = {m["id"] for m in tap.sent_messages(probe)}
    answered = {f.get("id") for f in tap.received_frames() if isinstance(f, dict) and "result" in f}
    assert len(sent & answered) >= 2
    assert client.status == "ready" and tap.connection == 1


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
def test_keepalive_probes_over_http_are_answered_by_the_sdk_server(
    pool: ClientPool, peer_pool: Any, protocol: str
) -> None:
    peer = peer_pool.peer("http", "legacy" if protocol == "legacy" else "both")
    client, tap = http_client(pool, peer.url, protocol, keepalive=0.3)
    probe = "ping" if protocol == "legacy" else "server/discover"
    assert_probes_answered(client, tap, probe)
    assert server_stats(client)["status_probes"].get(probe, 0) >= 2


@no_ts
@pytest.mark.parametrize("protocol", ["legacy", "auto"])
def test_keepalive_probes_over_http_are_answered_by_the_typescript_server(
    pool: ClientPool, ts_http: Any, protocol: str
) -> None:
    client, tap = http_client(pool, ts_http.url, protocol, keepalive=0.3)
    assert_probes_answered(client, tap, "ping" if protocol == "legacy" else "server/discover")


@pytest.mark.parametrize("era", ["legacy", "both"])
def test_an_http_server_frozen_with_sigstop_is_found_out_and_followed_back(pool: ClientPool, era: str) -> None:
    protocol = "legacy" if era == "legacy" else "auto"
    with Peer("http", era).start() as peer:
        client, _ = http_client(pool, peer.url, protocol, keepalive=0.5, max_reconnect_attempts=PATIENT)
        watch = status_watch(client)
        pid = peer.pid
        assert pid is not None
        first = freeze_until_the_keepalive_tells(watch, pid)
        assert_a_reconnect([first, *read_until_ready(watch)], "keepalive_timeout")
        assert client.list_tools()


@pytest.mark.parametrize("era", ["legacy", "both"])
def test_status_across_a_restart_of_an_http_server_on_the_same_port(pool: ClientPool, era: str) -> None:
    protocol = "legacy" if era == "legacy" else "auto"
    with Peer("http", era).start() as peer:
        client, _ = http_client(pool, peer.url, protocol, max_reconnect_attempts=PATIENT)
        watch = status_watch(client)
        peer.kill()
        peer.restart()
        assert_a_reconnect(read_until_ready(watch), "transport_closed")
        assert client.list_tools()
