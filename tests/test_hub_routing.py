"""Hub.call_tool routing and HubCatalog.collisions: two real SDK peers (one legacy, one
2026-07-28) that share tool names and change their tools at run time; FakeServer for the bounds."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors._api._hub_collisions import MAX_TRACKED
from exmcp_actors._api._hub_routing import resolve_tool
from exmcp_actors.testing import FakeError, FakeServer
from tests.sdk_helpers import FAST_BACKOFF, PEER_PROMPTS, PEER_RESOURCES, PEER_TOOLS, WAIT, tool_text

RUNTIME = ["add_tool", "remove_tool"]


def _until_changed(catalog: mcp.HubCatalog, server: str) -> list[mcp.HubCollision]:
    """The HubCollisions that come before the next tools CatalogChanged of ``server`` (a
    refresh's collisions are delivered before its CatalogChanged)."""
    seen: list[mcp.HubCollision] = []
    while True:
        message = catalog.get(timeout=WAIT)
        if message[0] == "ex_mcp_hub_collision":
            seen.append(message)
        elif message.kind == "tools" and message.catalog.client.name == server:
            return seen


def _config(**argvs: list[str]) -> dict[str, Any]:
    return {"mcpServers": {name: {"command": argv[0], "args": argv[1:]} for name, argv in argvs.items()}}


@pytest.mark.peer_args("--runtime-tools")
def test_routing_and_collisions_follow_runtime_tool_changes(
    sdk_stdio_argv: list[str], sdk_stdio_argv_legacy: list[str]
) -> None:
    with mcp.Hub.from_config(_config(a=sdk_stdio_argv, b=sdk_stdio_argv_legacy), backoff=FAST_BACKOFF) as hub:
        assert (hub.clients["a"].era, hub.clients["b"].era) == ("modern", "legacy")
        # Nothing listed yet: each server's tools are listed once, then "server/tool" routes.
        assert json.loads(tool_text(hub.call_tool("a/stats", timeout=WAIT)))["era"] == "both"
        assert json.loads(tool_text(hub.call_tool("b/stats", timeout=WAIT)))["era"] == "legacy"
        assert tool_text(hub.call_tool("b/echo", {"text": "hi"})) == "hi"

        with pytest.raises(mcp.AmbiguousTool) as ambiguous:
            hub.call_tool("echo", {"text": "hi"})
        assert (ambiguous.value.servers, ambiguous.value.choices) == (["a", "b"], ["a/echo", "b/echo"])
        assert "name it as 'a/echo' or 'b/echo'" in str(ambiguous.value)
        assert isinstance(ambiguous.value, mcp.Error) and isinstance(ambiguous.value, ValueError)
        for unknown in ("nope", "c/echo", "a/nope", "a/"):
            with pytest.raises(mcp.UnknownTool) as missing:
                hub.call_tool(unknown)
            assert missing.value.servers == ["a", "b"] and missing.value.unlisted == []
            assert f"lists a tool {unknown!r} (servers searched: a, b)" in str(missing.value)

        with hub.catalog() as catalog:
            collisions = catalog.collisions
            assert collisions["tools"] == {name: ["a", "b"] for name in PEER_TOOLS + RUNTIME}
            assert collisions["prompts"] == {name: ["a", "b"] for name in PEER_PROMPTS}
            assert collisions["resources"] == {uri: ["a", "b"] for uri in PEER_RESOURCES}

            hub.clients["a"].call_tool("add_tool", {"name": "only_a"})
            assert _until_changed(catalog, "a") == []  # a unique name is no collision
            assert tool_text(hub.call_tool("only_a")) == "only_a"  # a bare unique name routes

            hub.clients["b"].call_tool("add_tool", {"name": "only_a"})
            assert _until_changed(catalog, "b") == [("ex_mcp_hub_collision", catalog, "tools", "only_a", ["a", "b"])]
            assert catalog.collisions["tools"]["only_a"] == ["a", "b"]
            with pytest.raises(mcp.AmbiguousTool, match="'a/only_a' or 'b/only_a'"):
                hub.call_tool("only_a")
            assert tool_text(hub.call_tool("b/only_a")) == "only_a"

            hub.clients["a"].call_tool("notify", {"kind": "tools"})  # a refresh that changes nothing
            assert _until_changed(catalog, "a") == []

            hub.clients["b"].call_tool("remove_tool", {"name": "only_a"})
            assert _until_changed(catalog, "b") == [("ex_mcp_hub_collision", catalog, "tools", "only_a", ["a"])]
            assert "only_a" not in catalog.collisions["tools"]
            assert tool_text(hub.call_tool("only_a")) == "only_a"
            with pytest.raises(mcp.UnknownTool):
                hub.call_tool("b/only_a")


def test_bad_names_are_refused_naming_the_argument() -> None:
    hub = mcp.Hub({}, {}, {})
    with pytest.raises(TypeError, match="name must be a string"):
        hub.call_tool(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name must not be empty"):
        hub.call_tool("")
    with pytest.raises(mcp.UnknownTool, match=r"servers searched: none connected"):
        hub.call_tool("echo")


def test_resolution_tries_every_split_before_the_bare_name() -> None:
    lists = {"a": {"b/x", "y"}, "a/b": {"x"}, "c": {"a/b/x", "y"}}
    servers = list(lists)

    def names_of(server: str) -> set[str]:
        return lists[server]

    with pytest.raises(mcp.AmbiguousTool) as same_spelling:
        resolve_tool("a/b/x", servers, names_of)  # two splits match; the bare name on c is not tried
    assert same_spelling.value.choices == ["a/b/x", "a/b/x"] and "hub.clients[server]" in str(same_spelling.value)
    assert resolve_tool("c/a/b/x", servers, names_of) == ("c", "a/b/x")
    with pytest.raises(mcp.AmbiguousTool, match="'a/y' or 'c/y'"):
        resolve_tool("y", servers, names_of)
    long_name = "/" * 100_000 + "y"  # splits past the longest server name are not tried
    with pytest.raises(mcp.UnknownTool):
        resolve_tool(long_name, servers, names_of)


def test_the_hub_passes_the_call_options_on_to_the_client() -> None:
    with FakeServer() as server:
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        server.set_items("tools", [{"name": "t", "inputSchema": {"type": "object"}, "outputSchema": schema}])
        server.on("tools/call", lambda params, ctx: {"content": [], "structuredContent": {"n": "not a number"}})
        config = {"mcpServers": {"only": {"url": server.serve_websocket()}}}
        with mcp.Hub.from_config(config, backoff=FAST_BACKOFF) as hub:
            with pytest.raises(mcp.InvalidToolResult):
                hub.call_tool("only/t")
            assert hub.call_tool("only/t", validate=False)["structuredContent"] == {"n": "not a number"}


def test_a_server_whose_tools_cannot_be_listed_is_left_out_and_said() -> None:
    with FakeServer() as good, FakeServer() as bad:
        good.set_items("tools", [{"name": "t", "inputSchema": {"type": "object"}}])

        def refuse(params: Any, ctx: Any) -> None:
            raise FakeError(-32603, "boom")

        bad.on("tools/list", refuse)
        config = {"mcpServers": {"good": {"url": good.serve_websocket()}, "bad": {"url": bad.serve_websocket()}}}
        with mcp.Hub.from_config(config, backoff=FAST_BACKOFF) as hub:
            assert hub.call_tool("t")["isError"] is False
            with pytest.raises(mcp.UnknownTool) as missing:
                hub.call_tool("u")
            assert missing.value.unlisted == ["bad"] and "could not be listed: bad" in str(missing.value)


def test_collisions_are_bounded_and_unread_messages_coalesce(caplog: pytest.LogCaptureFixture) -> None:
    with FakeServer(tools=[]) as a, FakeServer(tools=[]) as b:
        config = {"mcpServers": {"a": {"url": a.serve_websocket()}, "b": {"url": b.serve_websocket()}}}
        with mcp.Hub.from_config(config, backoff=FAST_BACKOFF) as hub:
            catalog = hub.catalog()
            assert catalog.collisions["tools"] == {} and catalog.pending() == 0
            first, second = catalog.catalogs["a"], catalog.catalogs["b"]
            shared = [{"name": "x"}]
            first._publish("tools", shared)  # as its worker does after each refetch
            second._publish("tools", shared)
            assert catalog.collisions["tools"] == {"x": ["a", "b"]}
            catalog.collisions["tools"]["x"].append("mine")  # a copy: the host may change it
            assert catalog.collisions["tools"] == {"x": ["a", "b"]}
            for _ in range(1000):  # x leaves b and comes back, nobody reading
                second._publish("tools", [])
                second._publish("tools", shared)
            # One per catalog and kind, one per kind and name: the latest of each.
            waiting = [catalog.get_nowait() for _ in range(catalog.pending())]
            assert [(m[0], m[1].client.name if m[0] == "ex_mcp_catalog_changed" else m.servers) for m in waiting] == [
                ("ex_mcp_catalog_changed", "a"),
                ("ex_mcp_hub_collision", ["a", "b"]),
                ("ex_mcp_catalog_changed", "b"),
            ]

            many = [{"name": f"t{n:05}"} for n in range(MAX_TRACKED + 5)]
            with caplog.at_level(logging.WARNING, logger="exmcp_actors.hub"):
                first._publish("tools", many)
                second._publish("tools", many)
            tracked = catalog.collisions["tools"]
            assert len(tracked) == MAX_TRACKED and sorted(tracked)[-1] == f"t{MAX_TRACKED - 1:05}"
            assert f"only the first {MAX_TRACKED} (sorted) are tracked" in caplog.text
            waiting = [catalog.get_nowait() for _ in range(catalog.pending())]
            assert sum(m[0] == "ex_mcp_hub_collision" for m in waiting) <= MAX_TRACKED + 1
