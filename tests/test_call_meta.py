"""A host's ``meta=`` on every call, and ``list_page`` for one page of a listing.

Against the official Python SDK 2.3.0 server (tests/peers/sdk_server.py), whose ``stats``
show each request's ``_meta`` as it arrived (``metas``); the wire shape, and what no SDK
server answers (``completion/complete``, resource templates), with a FakeServer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import FakeServer
from tests.sdk_helpers import (
    PEER_PAGE_SIZE,
    PEER_PROMPTS,
    PEER_RESOURCES,
    PEER_TOOLS,
    URI_A,
    ClientPool,
    shared_target,
    tool_text,
)

PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
MARK = "com.example/mark"


def peer_metas(client: mcp.Client, mark: str) -> list[dict[str, Any]]:
    """The ``{"method", "meta"}`` of each request the peer saw carrying ``mark``, in arrival order."""
    stats = json.loads(tool_text(client.call_tool("stats", timeout=10.0)))
    return [seen for seen in stats["metas"] if seen["meta"].get(MARK) == mark]


def pages(count: int) -> int:
    return -(-count // PEER_PAGE_SIZE)


# --------------------------------------------------------------------------- the SDK server


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_meta_on_every_call_reaches_the_sdk_server_on_each_request_and_page(
    era: str, peer_pool: Any, client_pool: ClientPool
) -> None:
    client = client_pool.connect(shared_target(peer_pool, "http", era).make_transport())
    assert client.era == era
    mark = uuid.uuid4().hex
    meta = {MARK: mark, "com.example/trace": {"span": 7}}
    client.call_tool("echo", {"text": "hi"}, meta=meta)
    client.read_resource(URI_A, meta=meta)
    client.get_prompt("greet", {"name": "Ada"}, meta=meta)
    assert [tool["name"] for tool in client.list_tools(meta=meta)] == PEER_TOOLS
    assert [prompt["name"] for prompt in client.list_prompts(meta=meta)] == PEER_PROMPTS
    assert [resource["uri"] for resource in client.list_resources(meta=meta)] == PEER_RESOURCES
    seen = peer_metas(client, mark)
    methods = [entry["method"] for entry in seen]
    assert methods == (
        ["tools/call", "resources/read", "prompts/get"]
        + ["tools/list"] * pages(len(PEER_TOOLS))
        + ["prompts/list"] * pages(len(PEER_PROMPTS))
        + ["resources/list"] * pages(len(PEER_RESOURCES))
    )
    for entry in seen:
        assert entry["meta"]["com.example/trace"] == {"span": 7}
        if era == "modern":  # merged with the library's envelope
            assert entry["meta"][PROTOCOL_VERSION] == "2026-07-28"
        else:
            assert not any(key.startswith("io.modelcontextprotocol/") for key in entry["meta"])


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_librarys_own_meta_keys_win_over_the_hosts(era: str, peer_pool: Any, client_pool: ClientPool) -> None:
    client = client_pool.connect(shared_target(peer_pool, "http", era).make_transport())
    mark = uuid.uuid4().hex
    forged = {MARK: mark, "progressToken": "mine", PROTOCOL_VERSION: "1999-01-01", CLIENT_INFO: {"name": "forged"}}
    client.call_tool("echo", {"text": "hi"}, progress=lambda params: None, meta=forged)
    client.call_tool("echo", {"text": "hi"}, meta={MARK: mark, "progressToken": "mine"})
    with_progress, without = (entry["meta"] for entry in peer_metas(client, mark))
    assert with_progress["progressToken"] != "mine"  # the token the library routes progress by
    assert without["progressToken"] == "mine"  # no progress= : the host's token goes as given
    if era == "modern":
        assert with_progress[PROTOCOL_VERSION] == "2026-07-28"
        assert with_progress[CLIENT_INFO]["name"] != "forged"
    else:  # never sent: a protocolVersion key would make a dual-era server take the request as 2026-07-28
        assert PROTOCOL_VERSION not in with_progress and CLIENT_INFO not in with_progress
    assert client.era == era


def test_list_page_on_a_legacy_sdk_server_has_no_cache_hints(peer_pool: Any, client_pool: ClientPool) -> None:
    client = client_pool.connect(shared_target(peer_pool, "http", "legacy").make_transport())
    last = client.list_page("resources", client.list_page("resources")["nextCursor"])
    assert [resource["uri"] for resource in last["resources"]] == PEER_RESOURCES[PEER_PAGE_SIZE:]
    assert "nextCursor" not in last and "ttlMs" not in last


# --------------------------------------------------------------------------- the wire, with a FakeServer


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_complete_and_every_page_of_the_resource_templates_carry_meta(era: str, client_pool: ClientPool) -> None:
    templates = [{"uriTemplate": f"file:///{n}/{{name}}", "name": f"t{n}"} for n in range(3)]

    def listing(params: dict[str, Any], ctx: Any) -> Any:
        start = int(params.get("cursor") or 0)
        page: dict[str, Any] = {"resourceTemplates": templates[start : start + 2]}
        if start + 2 < len(templates):
            page["nextCursor"] = str(start + 2)
        return page

    with FakeServer(era=era) as server:  # type: ignore[arg-type]
        server.on("resources/templates/list", listing)
        server.on("completion/complete", lambda params, ctx: {"completion": {"values": ["Ada"]}})
        client = client_pool.connect(server.transport())
        meta = {MARK: "m"}
        assert client.list_resource_templates(meta=meta) == templates
        ref = {"type": "ref/prompt", "name": "greet"}
        assert client.complete(ref, {"name": "name", "value": "A"}, meta=meta)["values"] == ["Ada"]
        assert client.list_page("resource_templates", "2", meta=meta)["resourceTemplates"] == templates[2:]
        sent = server.messages("resources/templates/list") + server.messages("completion/complete")
        assert [message["params"].get("cursor") for message in sent] == [None, "2", "2", None]
        for message in sent:
            assert message["params"]["_meta"][MARK] == "m"
            assert (PROTOCOL_VERSION in message["params"]["_meta"]) is (era == "modern")
        _, legacy_call = server.wait_for("completion/complete")
        if era == "legacy":  # exactly what the host gave, beside the call's own params
            assert legacy_call["params"] == {
                "ref": ref,
                "argument": {"name": "name", "value": "A"},
                "_meta": {MARK: "m"},
            }


def test_meta_is_copied_so_the_host_may_change_its_mapping_afterwards(legacy_server: FakeServer) -> None:
    with mcp.connect(legacy_server.transport(), protocol="legacy", request_timeout=5.0) as client:
        meta: dict[str, Any] = {MARK: "before"}
        client.call_tool("echo", {"text": "x"}, meta=meta)
        meta[MARK] = "after"
        assert meta == {MARK: "after"}
        _, call = legacy_server.wait_for("tools/call")
        assert call["params"]["_meta"] == {MARK: "before"}


@pytest.mark.parametrize("bad", [["a"], "k=v", {1: "x"}, 7])
def test_a_meta_that_is_no_mapping_with_string_keys_raises_type_error_naming_it(
    bad: Any, legacy_server: FakeServer
) -> None:
    with mcp.connect(legacy_server.transport(), protocol="legacy", request_timeout=5.0) as client:
        calls: list[Callable[[], Any]] = [
            lambda: client.call_tool("echo", meta=bad),
            lambda: client.read_resource("file:///a", meta=bad),
            lambda: client.get_prompt("greet", meta=bad),
            lambda: client.complete({"type": "ref/prompt", "name": "g"}, {"name": "n", "value": ""}, meta=bad),
            lambda: client.list_tools(meta=bad),
            lambda: client.list_prompts(meta=bad),
            lambda: client.list_resources(meta=bad),
            lambda: client.list_resource_templates(meta=bad),
            lambda: client.list_page("tools", meta=bad),
        ]
        for call in calls:
            with pytest.raises(TypeError, match=r"^meta must be a mapping with string keys"):
                call()
        assert legacy_server.count("tools/call") == legacy_server.count("tools/list") == 0


def test_list_page_refuses_an_unknown_kind_and_a_cursor_that_is_no_string(legacy_server: FakeServer) -> None:
    with mcp.connect(legacy_server.transport(), protocol="legacy", request_timeout=5.0) as client:
        with pytest.raises(ValueError, match=r"kind must be one of 'tools', 'prompts', 'resources', "):
            client.list_page("widgets")
        with pytest.raises(ValueError, match=r"'resource_templates', got 'widgets'"):
            client.list_page("widgets")
        with pytest.raises(ValueError, match=r"got 'resources/list'"):
            client.list_page("resources/list")
        with pytest.raises(TypeError, match=r"^cursor must be a string .* got int"):
            client.list_page("tools", 2)  # type: ignore[arg-type]
        assert legacy_server.count("tools/list") == 0
        assert client.list_page("tools") == {"tools": client.list_tools()}


@pytest.mark.parametrize("bad", [True, 1.5, None, {"id": 1}, ["t"]])
def test_a_meta_progress_token_that_is_no_string_or_integer_raises_type_error_and_sends_nothing(
    bad: Any, legacy_server: FakeServer
) -> None:
    # The spec: a progress token MUST be a string or an integer (the SDK client refuses it too).
    with mcp.connect(legacy_server.transport(), protocol="legacy", request_timeout=5.0) as client:
        calls: list[Callable[[], Any]] = [
            lambda: client.call_tool("echo", meta={"progressToken": bad}),
            lambda: client.call_tool("echo", progress=lambda params: None, meta={"progressToken": bad}),
            lambda: client.read_resource("file:///a", meta={"progressToken": bad}),
            lambda: client.list_tools(meta={"progressToken": bad}),
            lambda: client.list_page("tools", meta={"progressToken": bad}),
        ]
        for call in calls:
            with pytest.raises(TypeError, match=r"^meta's progressToken must be a string or an integer"):
                call()
        assert legacy_server.count("tools/call") == legacy_server.count("tools/list") == 0
        client.call_tool("echo", {"text": "x"}, meta={"progressToken": 7})
        _, call = legacy_server.wait_for("tools/call")
        assert call["params"]["_meta"] == {"progressToken": 7}
