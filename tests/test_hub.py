"""mcp.Hub: an mcpServers config connected in parallel, against real SDK peers and one failing server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors._api._config import load_config
from exmcp_actors.testing import FakeServer
from tests.helpers_transport import refusing_port
from tests.sdk_helpers import FAST_BACKOFF, PEER_TOOLS, WAIT


def test_hub_connects_watches_and_merges_with_a_failing_server(
    sdk_stdio_argv_legacy: list[str], shared_http_peer: Any, tmp_path: Path
) -> None:
    with refusing_port() as down:
        _hub_scenario(sdk_stdio_argv_legacy, shared_http_peer, tmp_path, down)


def _hub_scenario(sdk_stdio_argv_legacy: list[str], shared_http_peer: Any, tmp_path: Path, down: int) -> None:
    config = {
        "mcpServers": {
            "local": {"command": sdk_stdio_argv_legacy[0], "args": sdk_stdio_argv_legacy[1:], "cwd": str(tmp_path)},
            "remote": {"url": shared_http_peer.url, "headers": {"X-Test": "1"}},
            "down": {"url": f"http://127.0.0.1:{down}/mcp"},
        }
    }
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(config))
    with mcp.Hub.from_config(path, backoff=FAST_BACKOFF) as hub:  # a cold SDK child may take seconds
        assert sorted(hub.clients) == ["local", "remote"]
        assert {name: client.name for name, client in hub.clients.items()} == {"local": "local", "remote": "remote"}
        assert list(hub.errors) == ["down"] and isinstance(hub.errors["down"], mcp.ConnectError)
        assert hub.clients["local"].era == "legacy" and hub.clients["remote"].era == "modern"

        with hub.watch({"toolsListChanged": True}) as watch:
            assert sorted(watch.handles) == ["local", "remote"] and watch.errors == {}
            for client in hub.clients.values():
                client.call_tool("notify", {"kind": "tools"})
            messages = [watch.get(timeout=WAIT) for _ in range(2)]
            assert sorted(m[1].client.name for m in messages) == ["local", "remote"]
            assert {m.method for m in messages} == {"notifications/tools/list_changed"}

        catalog = hub.catalog()
        assert [t["name"] for t in catalog.tools] == PEER_TOOLS * 2
        assert [t["server"] for t in catalog.tools] == ["local"] * len(PEER_TOOLS) + ["remote"] * len(PEER_TOOLS)
        hub.clients["remote"].call_tool("notify", {"kind": "resources"})
        changed = catalog.get(timeout=WAIT)
        assert (changed.kind, changed.catalog.client.name) == ("resources", "remote")
    assert all(client.status == "disconnected" for client in hub.clients.values())
    assert list(catalog) == []  # closed with the hub


def test_a_failing_watch_is_reported_per_server() -> None:
    with FakeServer() as server:
        config = {"mcpServers": {"a": {"url": server.serve_websocket()}}}
        hub = mcp.Hub.from_config(config, backoff=FAST_BACKOFF)
        with hub:
            watch = hub.watch({"resourceSubscriptions": ["file:///a.txt"]})
            assert list(watch.handles) == ["a"]
            hub.clients["a"].disconnect()
            failed = hub.watch({"toolsListChanged": True})
            assert failed.handles == {} and isinstance(failed.errors["a"], mcp.NotConnected)


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({}, 'no "mcpServers"'),
        ({"mcpServers": {}}, "names no server"),
        ({"mcpServers": {"x": []}}, "server 'x': its entry must be an object"),
        ({"mcpServers": {"x": {"command": "a", "url": "http://h"}}}, 'exactly one of "command"'),
        ({"mcpServers": {"x": {"command": "a", "args": "b c"}}}, '"args" must be a list of strings'),
        ({"mcpServers": {"x": {"command": "a", "env": {"K": 1}}}}, '"env" must be an object of strings'),
        ({"mcpServers": {"x": {"url": "ftp://h"}}}, "must start with ws://"),
        ({"mcpServers": {"x": {"url": "http://h/sse", "type": "sse"}}}, "HTTP+SSE transport is not supported"),
        ({"mcpServers": {"x": {"url": "http://h", "type": "carrier-pigeon"}}}, "unknown type"),
    ],
)
def test_bad_configs_are_refused_with_a_sentence(config: dict[str, Any], words: str) -> None:
    with pytest.raises(mcp.ConfigError, match=None) as raised:
        mcp.Hub.from_config(config)
    assert words in str(raised.value)


def test_a_bad_config_file_raises_config_error_saying_what_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(mcp.ConfigError, match="is not valid JSON"):
        load_config(bad)
    with pytest.raises(mcp.ConfigError, match="cannot read the config file"):
        load_config(tmp_path / "missing.json")
    with pytest.raises(TypeError):
        load_config(42)  # type: ignore[arg-type]


def test_spec_describes_without_secrets() -> None:
    specs = load_config(
        {
            "mcpServers": {
                "a": {"url": "https://user:pw@h.example/mcp?token=s3cret", "headers": {"Authorization": "Bearer x"}},
                "b": {"command": "/usr/bin/server", "args": ["--password", "hunter2"], "env": {"KEY": "v"}},
            }
        }
    )
    assert specs["a"].describe() == "https://h.example/mcp?token=..."
    assert specs["b"].describe() == "server"


def test_per_server_connect_options_are_refused_up_front() -> None:
    config = {"mcpServers": {"a": {"command": "never-started"}}}
    with pytest.raises(ValueError, match="cannot take cwd, name") as caught:
        mcp.Hub.from_config(config, name="x", cwd="/")
    assert "each server entry" in str(caught.value)


def test_unread_hub_inboxes_stay_bounded() -> None:
    with FakeServer() as server:
        config = {"mcpServers": {"a": {"url": server.serve_websocket()}}}
        with mcp.Hub.from_config(config, backoff=FAST_BACKOFF) as hub:
            catalog = hub.catalog()
            inner = catalog.catalogs["a"]
            for n in range(1000):
                inner._publish("tools", [{"name": f"t{n}"}])  # as its worker does after each refetch
            assert catalog.pending() == 1
            assert catalog.get_nowait().items == [{"name": "t999"}]

            watch = hub.watch({"toolsListChanged": True}, max_pending=5)
            with hub.clients["a"].watch({"toolsListChanged": True}) as probe:
                for _ in range(1000):
                    server.list_changed("tools")
                for _ in range(1000):
                    probe.get(timeout=WAIT)  # every notification has reached the client
            assert watch.pending() <= 5 + 1  # the bound, plus one per signal key past it (_bound.py)
            assert {m.method for m in [watch.get_nowait() for _ in range(watch.pending())]} == {
                "notifications/tools/list_changed"
            }
