"""CatalogChanged's diff against real servers, in both eras where they speak both, and across a
kill and restart (the refetch, or the resync snapshot, is diffed against what was known before
the drop): the Python SDK peer (ws, runtime tools), the TypeScript SDK v2 peer (stdio and
Streamable HTTP, ``catdiff_reshape``: inputSchema, outputSchema, annotations, title), the npm
server-everything (legacy, session resources), a hub of two."""

from __future__ import annotations

import json
from typing import Any

import pytest

import exmcp_actors as mcp
from tests.peers.everything import everything_argv
from tests.peers.everything import missing_tools as everything_missing
from tests.peers.launch import Peer
from tests.peers.ts_peer import missing_tools as ts_missing
from tests.peers.ts_peer import ts_argv, ts_http_peer
from tests.sdk_helpers import FAST_BACKOFF, WAIT, TapTransport, kill_pid

PATIENT: dict[str, Any] = {"backoff": FAST_BACKOFF, "max_reconnect_attempts": 100}
#: Generous: a respawned node peer on a loaded 2-core machine.
SLOW = 30.0
STRING = {"type": "string"}


def _next_diff(catalog: Any, kind: str = "tools", server: str | None = None, timeout: float = WAIT) -> Any:
    """The next CatalogChanged of ``kind`` (and ``server``) that changed something: refreshes
    that change nothing (a server may say list_changed twice) are passed over."""
    while True:
        message = catalog.get(timeout=timeout)
        if not isinstance(message, mcp.CatalogChanged) or message.kind != kind:
            continue
        if server is not None and message.catalog.client.name != server:
            continue
        if message.added or message.removed or message.changed:
            return message


def _diff(message: Any) -> tuple[Any, ...]:
    return message.added, message.removed, message.changed


@pytest.mark.peer_args("--runtime-tools")
@pytest.mark.parametrize("sdk_ws_peer", ["both", "legacy"], indirect=True)
def test_sdk_peer_added_reshaped_then_lost_across_a_restart(sdk_ws_peer: Any) -> None:
    with mcp.connect(sdk_ws_peer.url, **PATIENT) as client, client.catalog() as catalog:
        client.call_tool("add_tool", {"name": "catdiff_new"})
        assert _diff(_next_diff(catalog)) == (("catdiff_new",), (), {})
        client.call_tool("add_tool", {"name": "catdiff_new", "catdiff_properties": {"x": STRING}})
        reshaped = _next_diff(catalog)
        assert _diff(reshaped) == ((), (), {"catdiff_new": ("inputSchema",)})
        assert reshaped.items[-1]["inputSchema"]["properties"] == {"x": STRING}

        sdk_ws_peer.kill()
        sdk_ws_peer.start()
        # Legacy: refetched after Reconnected; modern: the resync snapshot. Either way against
        # what the catalog knew before the drop: the restarted server lacks the added tool.
        assert _diff(_next_diff(catalog, timeout=SLOW)) == ((), ("catdiff_new",), {})
        assert "catdiff_new" not in {tool["name"] for tool in catalog.tools}
        client.call_tool("add_tool", {"name": "catdiff_again"})
        assert _next_diff(catalog).added == ("catdiff_again",)


@pytest.mark.skipif(ts_missing() is not None, reason=str(ts_missing()))
@pytest.mark.parametrize("protocol", ["auto", "legacy"])
def test_ts_peer_added_reshaped_then_lost_across_a_kill(protocol: str) -> None:
    tap = TapTransport(mcp.StdioTransport(ts_argv()))
    with mcp.connect(tap, protocol=protocol, connect_timeout=SLOW, **PATIENT) as client:
        assert client.era == ("modern" if protocol == "auto" else "legacy")
        with client.catalog(timeout=SLOW) as catalog:
            client.call_tool("catdiff_reshape", {"name": "catdiff_x", "properties": ["a"]})
            assert _diff(_next_diff(catalog)) == (("catdiff_x",), (), {})
            client.call_tool("catdiff_reshape", {"name": "catdiff_x", "properties": ["a", "b"]})
            assert _diff(_next_diff(catalog)) == ((), (), {"catdiff_x": ("inputSchema",)})

            pid = tap.pid
            assert pid is not None
            kill_pid(pid)  # the client starts a fresh server process, which never had catdiff_x
            assert _diff(_next_diff(catalog, timeout=SLOW)) == ((), ("catdiff_x",), {})
            assert tap.pid != pid


@pytest.mark.skipif(everything_missing() is not None, reason=str(everything_missing()))
def test_server_everything_session_resources_are_added_then_lost_across_a_kill() -> None:
    tap = TapTransport(mcp.StdioTransport(everything_argv()))
    with mcp.connect(tap, protocol="legacy", connect_timeout=SLOW, **PATIENT) as client:
        with client.catalog(timeout=SLOW) as catalog:
            args = {"name": "catdiff.gz", "data": "data:text/plain;base64,aGVsbG8=", "outputType": "resourceLink"}
            client.call_tool("gzip-file-as-resource", args, timeout=SLOW)
            uri = "demo://resource/session/catdiff.gz"
            assert _diff(_next_diff(catalog, "resources")) == ((uri,), (), {})
            pid = tap.pid
            assert pid is not None
            kill_pid(pid)
            assert _diff(_next_diff(catalog, "resources", timeout=SLOW)) == ((), (uri,), {})


def _config(**argvs: list[str]) -> dict[str, Any]:
    return {"mcpServers": {name: {"command": argv[0], "args": argv[1:]} for name, argv in argvs.items()}}


@pytest.mark.peer_args("--runtime-tools")
def test_a_hub_catalog_carries_each_servers_diff(sdk_stdio_argv: list[str], sdk_stdio_argv_legacy: list[str]) -> None:
    config = _config(a=sdk_stdio_argv, b=sdk_stdio_argv_legacy)
    with mcp.Hub.from_config(config, backoff=FAST_BACKOFF) as hub, hub.catalog() as catalog:
        assert (hub.clients["a"].era, hub.clients["b"].era) == ("modern", "legacy")
        hub.clients["a"].call_tool("add_tool", {"name": "catdiff_a"})
        changed = _next_diff(catalog, server="a")
        assert _diff(changed) == (("catdiff_a",), (), {}) and changed.catalog is catalog.catalogs["a"]
        hub.clients["b"].call_tool("add_tool", {"name": "catdiff_a", "catdiff_properties": {"y": STRING}})
        assert _next_diff(catalog, server="b").added == ("catdiff_a",)
        hub.clients["b"].call_tool("add_tool", {"name": "catdiff_a", "catdiff_properties": {"z": STRING}})
        assert _diff(_next_diff(catalog, server="b")) == ((), (), {"catdiff_a": ("inputSchema",)})
        merged = {(tool["server"], tool["name"]): tool for tool in catalog.tools}
        assert json.dumps(merged["b", "catdiff_a"]["inputSchema"]["properties"]) == '{"z": {"type": "string"}}'
        assert merged["a", "catdiff_a"]["inputSchema"]["properties"] == {}


def _ts_client(transport: str, protocol: str, peer: Peer | None) -> tuple[mcp.Client, Any]:
    if transport == "stdio":
        tap = TapTransport(mcp.StdioTransport(ts_argv()))
        return mcp.connect(tap, protocol=protocol, connect_timeout=SLOW, **PATIENT), tap
    assert peer is not None
    return mcp.connect(peer.url, protocol=protocol, connect_timeout=SLOW, **PATIENT), peer


@pytest.mark.skipif(ts_missing() is not None, reason=str(ts_missing()))
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("protocol", ["auto", "legacy"])
def test_ts_peer_diffs_name_the_output_schema_annotations_and_title_across_a_kill(
    transport: str, protocol: str
) -> None:
    # HTTP: the SDK's documented stateful composition for 2025 traffic (sessions, a GET stream).
    peer = ts_http_peer("stateful") if transport == "http" else None
    try:
        client, target = _ts_client(transport, protocol, peer)
        with client, client.catalog(timeout=SLOW) as catalog:
            assert client.era == ("modern" if protocol == "auto" else "legacy")
            shape: dict[str, Any] = {"name": "catdiff_o", "properties": ["a"]}
            client.call_tool("catdiff_reshape", shape)
            assert _diff(_next_diff(catalog)) == (("catdiff_o",), (), {})
            client.call_tool("catdiff_reshape", {**shape, "output": ["r"]})
            assert _diff(_next_diff(catalog)) == ((), (), {"catdiff_o": ("outputSchema",)})
            client.call_tool("catdiff_reshape", {**shape, "output": ["r"], "readOnly": True})
            assert _diff(_next_diff(catalog)) == ((), (), {"catdiff_o": ("annotations",)})
            client.call_tool("catdiff_reshape", {**shape, "output": ["r", "s"], "readOnly": False, "title": "O"})
            reshaped = _next_diff(catalog)
            assert _diff(reshaped) == ((), (), {"catdiff_o": ("annotations", "outputSchema", "title")})
            (item,) = [tool for tool in reshaped.items if tool["name"] == "catdiff_o"]
            assert item["annotations"] == {"readOnlyHint": False} and item["title"] == "O"

            if isinstance(target, TapTransport):
                assert target.pid is not None
                kill_pid(target.pid)  # a fresh process, which never had catdiff_o
            else:
                target.kill()
                target.start()
            assert _diff(_next_diff(catalog, timeout=SLOW)) == ((), ("catdiff_o",), {})
    finally:
        if peer is not None:
            peer.stop()
