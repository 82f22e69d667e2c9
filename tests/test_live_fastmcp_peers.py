"""The live picture of a server against fastmcp 4.1.6 (tests/peers/fastmcp_server.py), a server
written elsewhere, in both eras, across a kill and a restart.

What fastmcp does differently from the SDK peers: on 2025-11-25 it advertises ``listChanged``
for every list (and sends ``tools/list_changed`` when a tool asks it to); on 2026-07-28 it
advertises none, answers ``subscriptions/listen`` with -32601 and puts ``ttlMs: 0`` on every
result; it never offers ``resources/subscribe``. Its tools carry ``_meta``, ``outputSchema``
and an automatic ``title``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from tests.cli_helpers import run_cli
from tests.peers.fastmcp_peer import fastmcp_argv, fastmcp_http_peer, missing_tools
from tests.peers.launch import Peer
from tests.sdk_helpers import ClientPool, TapTransport, kill_pid
from tests.test_status_peers import assert_a_reconnect, read_until_ready, status_watch
from tests.waiting import wait_until

WAIT = 20.0
FAST = mcp.Backoff(initial=0.05, factor=2, maximum=0.5, jitter=0.1)
PATIENT: dict[str, Any] = {"backoff": FAST, "max_reconnect_attempts": 60, "connect_timeout": WAIT}
ERAS = [pytest.param("legacy", id="legacy"), pytest.param("auto", id="modern")]

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))


def stdio(pool: ClientPool, protocol: str, **options: Any) -> tuple[mcp.Client, TapTransport]:
    tap = TapTransport(mcp.StdioTransport(fastmcp_argv()))
    client = pool.connect(tap, protocol=protocol, **{**PATIENT, **options})
    assert client.era == ("legacy" if protocol == "legacy" else "modern")
    return client, tap


# -- resource watches ----------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ERAS)
def test_a_resource_watch_of_fastmcp_says_it_cannot_follow_changes_and_rereads_after_a_kill(
    pool: ClientPool, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    client, tap = stdio(pool, protocol)
    assert (client.server_capabilities or {})["resources"]["subscribe"] is False
    with caplog.at_level(logging.WARNING, logger="exmcp_actors.resource_watch"):
        watch = client.watch_resource("demo://a", timeout=WAIT)
    first = watch.get(timeout=WAIT)
    assert isinstance(first, mcp.ResourceChanged) and first.contents[0]["text"] == "demo://a v0"
    # fastmcp has no resources/subscribe (nor, on 2026-07-28, subscriptions/listen): the watch
    # says so, on the handle and in the log, instead of waiting silently for changes.
    assert watch.follows_changes is False
    said = [r.getMessage() for r in caplog.records if r.name == "exmcp_actors.resource_watch"]
    assert any("demo://a" in line and "cannot tell" in line for line in said), said
    assert not tap.sent_messages("resources/subscribe")

    client.call_tool("touch", {"uri": "demo://a"}, timeout=WAIT)
    reads = watch.reads
    pid = tap.pid
    assert pid is not None
    kill_pid(pid)
    # After the reconnect the resource is read again (the new process is back at v0: the
    # contents this handle already has, so nothing is delivered; the read is counted).
    wait_until(lambda: watch.reads > reads, WAIT, "a re-read after the reconnect")
    assert tap.pid != pid and watch.follows_changes is False
    client.call_tool("touch", {"uri": "demo://a"}, timeout=WAIT)
    client.disconnect()
    closed = watch.get(timeout=WAIT)
    assert isinstance(closed, mcp.Closed), closed


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_exmcp_watch_resource_says_when_fastmcp_cannot_tell_of_changes(era: str) -> None:
    done = run_cli("--resource", "demo://a", "--era", era, "--count", "1", "--", *fastmcp_argv(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["demo://a = demo://a v0"]
    notice = "exmcp-watch: python cannot tell of changes to demo://a"
    assert notice in done.stderr, done.stderr


# -- catalog diffs -------------------------------------------------------------------------------


def _names(items: list[dict[str, Any]]) -> set[str]:
    return {item["name"] for item in items}


def _next_diff(catalog: mcp.Catalog) -> tuple[Any, ...]:
    """The next tools CatalogChanged that changed something, as (added, removed, changed)."""
    while True:
        message = catalog.get(timeout=WAIT)
        diff = (message.added, message.removed, message.changed) if isinstance(message, mcp.CatalogChanged) else ()
        if message.kind == "tools" and any(diff):
            return diff


def test_a_legacy_fastmcp_catalog_says_what_a_run_time_tool_change_changed_across_a_kill(pool: ClientPool) -> None:
    client, tap = stdio(pool, "legacy")
    assert (client.server_capabilities or {})["tools"]["listChanged"] is True
    with client.catalog(timeout=WAIT) as catalog:
        client.call_tool("shape_tool", {"name": "x", "properties": ["a"]}, timeout=WAIT)
        assert _next_diff(catalog) == (("x",), (), {})
        # fastmcp's items carry _meta, outputSchema and a title it makes up: none of them is news.
        shape = {"name": "x", "properties": ["a", "b"], "title": "Shaped", "read_only": True}
        client.call_tool("shape_tool", shape, timeout=WAIT)
        assert _next_diff(catalog) == ((), (), {"x": ("annotations", "inputSchema", "title")})
        client.call_tool("drop_tool", {"name": "x"}, timeout=WAIT)
        assert _next_diff(catalog) == ((), ("x",), {})
        client.call_tool("shape_tool", {"name": "y", "properties": []}, timeout=WAIT)
        assert _next_diff(catalog) == (("y",), (), {})

        pid = tap.pid
        assert pid is not None
        kill_pid(pid)  # the respawned server never had y: the refetch after Reconnected says so
        assert _next_diff(catalog) == ((), ("y",), {})
        assert tap.pid != pid and "y" not in _names(catalog.tools)


def _diff_by_reading(catalog: mcp.Catalog) -> tuple[Any, ...]:
    """The next tools diff of a catalog with ``ttlMs: 0`` and no ``listChanged``: a read once
    stale is what refetches, so the list is read now and at each CatalogStale."""
    assert catalog.tools is not None
    while True:
        message = catalog.get(timeout=WAIT)
        if isinstance(message, mcp.CatalogStale):
            assert catalog.tools is not None
        elif message.kind == "tools" and any(diff := (message.added, message.removed, message.changed)):
            return diff


def test_a_2026_fastmcp_catalog_is_told_stale_and_a_read_says_what_changed_across_a_kill(pool: ClientPool) -> None:
    client, tap = stdio(pool, "auto")
    tools = (client.server_capabilities or {})["tools"]
    assert not tools.get("listChanged")  # and every result says ttlMs: 0
    with client.catalog(timeout=WAIT) as catalog:
        assert "echo" in _names(catalog.tools)
        first = catalog.get(timeout=WAIT)
        assert isinstance(first, mcp.CatalogStale), first  # stale at once, told once
        # fastmcp also says tools/list_changed on the call's own stream; 2026-07-28 has no
        # such notice outside a listen, so the stale list, read, is what shows the tool.
        client.call_tool("shape_tool", {"name": "x", "properties": ["a"]}, timeout=WAIT)
        assert _diff_by_reading(catalog) == (("x",), (), {})

        pid = tap.pid
        assert pid is not None
        kill_pid(pid)  # the respawned server never had x: the refetch after Reconnected, or a read
        assert _diff_by_reading(catalog) == ((), ("x",), {})
        assert tap.pid != pid and "x" not in _names(catalog.tools)


# -- keepalive and status ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def http_peer() -> Iterator[Peer]:
    with fastmcp_http_peer() as started:
        yield started


def _probes_answered(client: mcp.Client, tap: TapTransport, protocol: str) -> None:
    probe = "ping" if protocol == "legacy" else "server/discover"
    wait_until(lambda: client._inspect()["keepalive"][1] >= 2, WAIT, "two probes answered")
    sent = {m["id"] for m in tap.sent_messages(probe)}
    answered = {f.get("id") for f in tap.received_frames() if isinstance(f, dict) and "result" in f}
    assert len(sent & answered) >= 2
    assert client.status == "ready" and tap.connection == 1  # no reconnect: every probe answered


@pytest.mark.parametrize("protocol", ERAS)
def test_keepalive_probes_are_answered_by_fastmcp_over_stdio(pool: ClientPool, protocol: str) -> None:
    client, tap = stdio(pool, protocol, keepalive=0.3)
    _probes_answered(client, tap, protocol)


@pytest.mark.parametrize("protocol", ERAS)
def test_keepalive_probes_are_answered_by_fastmcp_over_http(pool: ClientPool, http_peer: Peer, protocol: str) -> None:
    tap = TapTransport(mcp.HttpTransport(http_peer.url))
    client = pool.connect(tap, protocol=protocol, keepalive=0.3, **PATIENT)
    assert client.era == ("legacy" if protocol == "legacy" else "modern")
    _probes_answered(client, tap, protocol)


@pytest.mark.parametrize("protocol", ERAS)
def test_status_across_a_kill_of_a_fastmcp_server_over_stdio(pool: ClientPool, protocol: str) -> None:
    client, tap = stdio(pool, protocol)
    watch = status_watch(client)
    pid = tap.pid
    assert pid is not None
    kill_pid(pid)
    assert_a_reconnect(read_until_ready(watch), "transport_closed")
    assert tap.pid != pid and "echo" in _names(client.list_tools())


def test_status_across_a_restart_of_a_legacy_fastmcp_http_server_on_the_same_port(pool: ClientPool) -> None:
    with fastmcp_http_peer() as peer:
        client = pool.connect(peer.url, protocol="legacy", **PATIENT)
        watch = status_watch(client)
        peer.kill()  # its session and GET stream end: the client hears it
        peer.start()
        assert_a_reconnect(read_until_ready(watch), "transport_closed")
        assert "echo" in _names(client.list_tools())


def test_a_keepalive_finds_a_stopped_2026_fastmcp_http_server_and_follows_it_back(pool: ClientPool) -> None:
    """A 2026-07-28 HTTP connection to fastmcp holds nothing open (no session, no listen): only
    a request finds the server gone, and the keepalive's probe is that request."""
    with fastmcp_http_peer() as peer:
        client = pool.connect(peer.url, protocol="auto", keepalive=0.3, **PATIENT)
        watch = status_watch(client)
        peer.kill()
        lost = watch.get(timeout=WAIT)
        assert isinstance(lost, mcp.Status) and lost.state == "reconnecting", lost
        assert lost.detail["reason"][0] == "keepalive_failed" and "refused" in lost.detail["reason"][1], lost
        peer.start()
        assert_a_reconnect([lost, *read_until_ready(watch)], "keepalive_failed")
        assert "echo" in _names(client.list_tools())
