"""A catalog that honours the cache hints, against real servers: the official Python SDK 2.3.0
server (``--cache-ttl-ms``, which advertises ``listChanged``) and the TypeScript SDK v2 server
(``--catfresh-ttl-ms`` and ``--catfresh-quiet``: hints without ``listChanged``), both eras,
across a kill and restart of the server."""

from __future__ import annotations

import time
from typing import Any

import pytest

import exmcp_actors as mcp
from tests.peers.launch import Peer
from tests.peers.ts_peer import install, missing_tools, ts_argv
from tests.sdk_helpers import FAST_BACKOFF, PEER_TOOLS, TapTransport
from tests.waiting import wait_until

TIMEOUT = 20.0
PATIENT: dict[str, Any] = {"backoff": FAST_BACKOFF, "max_reconnect_attempts": 100, "connect_timeout": TIMEOUT}


def _names(items: list[dict[str, Any]]) -> set[str]:
    return {item["name"] for item in items}


def _walks(tap: TapTransport) -> int:
    return len([m for m in tap.sent_messages("tools/list") if "cursor" not in (m.get("params") or {})])


def _until(catalog: mcp.Catalog, kind: type) -> Any:
    """The next message of ``kind`` in the catalog's inbox (others are skipped)."""
    while True:
        message = catalog.get(timeout=TIMEOUT)
        if isinstance(message, kind):
            return message


@pytest.mark.peer_args("--cache-ttl-ms", "600000")
@pytest.mark.parametrize("sdk_ws_peer", ["both", "legacy"], indirect=True)
def test_the_sdk_servers_ttl_is_honoured_and_its_list_changed_invalidates_across_a_restart(sdk_ws_peer: Any) -> None:
    tap = TapTransport(mcp.WebSocketTransport(sdk_ws_peer.url))
    with mcp.connect(tap, **PATIENT) as client, client.catalog(timeout=TIMEOUT) as catalog:
        modern = client.era == "modern"
        for _ in range(20):
            assert _names(catalog.tools) == set(PEER_TOOLS)
        assert _walks(tap) == 1  # fresh for ten minutes: reads cost nothing
        catalog._fresh.clock = lambda: time.monotonic() + 3600  # an hour later
        assert _names(catalog.tools) == set(PEER_TOOLS)
        # Modern: stale, refetched through the kept pages (fresh in the cache: no request);
        # legacy: no hints, the list stays until a list_changed.
        assert _walks(tap) == 1 and catalog.refreshes["tools"] == (1 if modern else 0)
        catalog._fresh.clock = time.monotonic
        client.call_tool("notify", {"kind": "tools"})
        assert _until(catalog, mcp.CatalogChanged).kind == "tools"
        assert _walks(tap) == 2  # invalidated at once, fetched from the server

        sdk_ws_peer.kill()
        sdk_ws_peer.start()
        # Legacy: refetched after Reconnected; modern: the resync snapshot.
        assert {_until(catalog, mcp.CatalogChanged).kind for _ in range(3)} == {"tools", "prompts", "resources"}
        client.call_tool("notify", {"kind": "tools"}, timeout=TIMEOUT)
        assert _until(catalog, mcp.CatalogChanged).kind == "tools"
        walks = _walks(tap)
        for _ in range(20):
            assert _names(catalog.tools) == set(PEER_TOOLS)
        assert _walks(tap) == walks  # fresh again: reads cost nothing


def _ts_peer(*flags: str) -> Peer:
    install()
    return Peer("http", command=lambda port: [*ts_argv("http", port), *flags]).start()


@pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))
def test_a_ts_server_without_list_changed_is_told_stale_and_refetched_on_read_across_a_restart() -> None:
    peer = _ts_peer("--catfresh-ttl-ms", "1000", "--catfresh-quiet")
    try:
        with mcp.connect(peer.url, **PATIENT) as client, client.catalog(timeout=TIMEOUT) as catalog:
            assert client.era == "modern"
            assert not (client.server_capabilities or {})["tools"].get("listChanged")
            assert "echo" in _names(catalog.tools)
            assert _until(catalog, mcp.CatalogStale).kind == "tools"
            client.call_tool("catfresh_add", {"name": "fresh1"}, timeout=TIMEOUT)  # no one is told
            assert "fresh1" in _names(catalog.tools)  # the stale list, refetched on read
            changed = _until(catalog, mcp.CatalogChanged)
            assert changed.kind == "tools" and "fresh1" in _names(changed.items)

            peer.kill()
            peer.start()  # its runtime tools are gone
            wait_until(lambda: client.status == "ready", TIMEOUT, "the client ready after the restart")
            deadline = time.monotonic() + TIMEOUT
            while "fresh1" in _names(catalog.tools):  # a snapshot, or a read once stale
                assert time.monotonic() < deadline, "the catalog never saw the restarted server's list"
                _until(catalog, mcp.CatalogChanged | mcp.CatalogStale)  # type: ignore[arg-type]
            client.call_tool("catfresh_add", {"name": "fresh2"}, timeout=TIMEOUT)
            # The first notice may be of a walk from before the call: at most one more then.
            for _ in range(2):
                _until(catalog, mcp.CatalogStale)
                if "fresh2" in _names(catalog.tools):
                    break
            assert "fresh2" in _names(catalog.tools)
    finally:
        peer.stop()


@pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))
def test_a_legacy_ts_session_has_no_hints_and_a_host_refresh_fetches() -> None:
    peer = _ts_peer("--catfresh-ttl-ms", "1000", "--catfresh-quiet")
    try:
        with mcp.connect(peer.url, protocol="legacy", **PATIENT) as client, client.catalog(timeout=TIMEOUT) as catalog:
            assert "echo" in _names(catalog.tools)
            client.call_tool("catfresh_add", {"name": "later"}, timeout=TIMEOUT)
            catalog._fresh.clock = lambda: time.monotonic() + 3600
            assert "later" not in _names(catalog.tools)  # 2025 results carry no ttlMs: never stale
            catalog.refresh("tools", wait=True)
            assert "later" in _names(catalog.tools)
            assert "later" in _names(_until(catalog, mcp.CatalogChanged).items)
    finally:
        peer.stop()
