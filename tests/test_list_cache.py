"""Cache hints on list results (MCP 2026-07-28, SEP-2549): ``ttlMs`` and ``cacheScope``.

A list page is reused while fresh (``list_*(cache=False)`` opts out), the matching
``notifications/*/list_changed`` evicts it, a ``private`` page is served only within the
authorization context that fetched it, and memory stays bounded. Against the official
Python SDK 2.3.0 server (``--cache-ttl-ms``), whose client keeps a cursor-less page the same
way; the authorization contexts with a FakeServer and a transport whose credentials change.
The walk over the pages, fed what a hostile server may send, with a FakeServer. One page
(``list_page``) is kept and served as a walk's; a listing with ``meta=`` always goes to the server.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import exmcp_actors as mcp
from exmcp_actors._auth import BearerAuth
from exmcp_actors._protocol._list_cache import MAX_TTL_MS, ListCache, cache_hints
from exmcp_actors.testing import FakeError, FakeServer
from tests.peers.launch import Peer, peer_argv
from tests.sdk_helpers import (
    PEER_PAGE_SIZE,
    PEER_PROMPTS,
    PEER_RESOURCES,
    PEER_TOOLS,
    TOOLS_CHANGED,
    ClientPool,
    TapTransport,
    expect_notification,
    notify,
)
from tests.waiting import wait_until

TEN_MINUTES = "600000"
MARK = "com.example/mark"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def walks(tap: TapTransport, method: str = "tools/list") -> int:
    """How many listings started (first pages sent)."""
    return len([m for m in tap.sent_messages(method) if "cursor" not in (m.get("params") or {})])


@pytest.fixture(scope="module")
def hinted_peer() -> Iterator[Peer]:
    with Peer("http", "both", ("--cache-ttl-ms", TEN_MINUTES)).start() as peer:
        yield peer


@pytest.mark.parametrize("kind", ["http", "stdio"])
def test_two_list_tools_inside_a_ten_minute_ttl_make_one_wire_walk(
    kind: str, hinted_peer: Peer, client_pool: ClientPool
) -> None:
    inner: mcp.Transport
    if kind == "http":
        inner = mcp.HttpTransport(hinted_peer.url)
    else:
        inner = mcp.StdioTransport(peer_argv("stdio", "both", extra_args=("--cache-ttl-ms", TEN_MINUTES)))
    tap = TapTransport(inner)
    client = client_pool.connect(tap)
    first = client.list_tools()
    pages = len(tap.sent_messages("tools/list"))
    assert pages >= 2  # the peer pages by two: every page is kept
    assert client.list_tools() == first
    assert len(tap.sent_messages("tools/list")) == pages
    first[0]["name"] = "changed by the host"  # each caller gets its own copy
    assert client.list_tools()[0]["name"] != "changed by the host"
    assert len(tap.sent_messages("tools/list")) == pages
    client.list_prompts()
    client.list_prompts()
    assert walks(tap, "prompts/list") == 1


def test_cache_false_fetches_every_page_again(hinted_peer: Peer, client_pool: ClientPool) -> None:
    tap = TapTransport(mcp.HttpTransport(hinted_peer.url))
    client = client_pool.connect(tap)
    client.list_resources()
    client.list_resources(cache=False)
    client.list_resources()
    assert walks(tap, "resources/list") == 2


def test_a_list_changed_evicts_the_kept_pages_before_anyone_hears_it(
    hinted_peer: Peer, client_pool: ClientPool
) -> None:
    tap = TapTransport(mcp.HttpTransport(hinted_peer.url))
    client = client_pool.connect(tap)
    watch = client.watch({"toolsListChanged": True})
    client.list_tools()
    notify(client, "tools")
    expect_notification(watch, TOOLS_CHANGED)
    client.list_tools()  # prompted by the notification: from the server
    assert walks(tap) == 2
    client.list_tools()
    assert walks(tap) == 2


def test_the_raw_page_shows_its_hints(hinted_peer: Peer, client_pool: ClientPool) -> None:
    client = client_pool.connect(mcp.HttpTransport(hinted_peer.url))
    page = client.request("tools/list")
    assert page["ttlMs"] == int(TEN_MINUTES) and page["cacheScope"] == "public"
    # What a one-page listing returns, kept or fetched: the server's result, hints included.
    kept = client.list_page("tools")
    assert kept["ttlMs"] == int(TEN_MINUTES) and kept["cacheScope"] == "public" and kept["tools"] == page["tools"]
    assert client.list_page("tools") == kept


def test_a_listing_with_meta_is_never_answered_from_pages_kept_without_it(
    hinted_peer: Peer, client_pool: ClientPool
) -> None:
    tap = TapTransport(mcp.HttpTransport(hinted_peer.url))
    client = client_pool.connect(tap)
    listed = client.list_tools()
    kept_walk = len(tap.sent_messages("tools/list"))
    mark = uuid.uuid4().hex
    assert client.list_tools(meta={MARK: mark}) == listed
    walked = tap.sent_messages("tools/list")[kept_walk:]
    assert len(walked) == kept_walk == -(-len(PEER_TOOLS) // PEER_PAGE_SIZE)
    assert all(message["params"]["_meta"][MARK] == mark for message in walked)
    assert client.list_tools() == listed  # the pages kept before are still served
    assert client.list_page("tools")["tools"] == listed[:PEER_PAGE_SIZE]
    assert len(tap.sent_messages("tools/list")) == 2 * kept_walk


def test_list_page_returns_one_raw_page_and_its_cursor_leads_to_the_next(
    hinted_peer: Peer, client_pool: ClientPool
) -> None:
    tap = TapTransport(mcp.HttpTransport(hinted_peer.url))
    client = client_pool.connect(tap)
    first = client.list_page("tools")
    assert len(first["tools"]) == PEER_PAGE_SIZE
    assert first["ttlMs"] == int(TEN_MINUTES) and first["cacheScope"] == "public"
    names = [tool["name"] for tool in first["tools"]]
    cursor = first.get("nextCursor")
    while cursor is not None:
        page = client.list_page("tools", cursor)
        names += [tool["name"] for tool in page["tools"]]
        cursor = page.get("nextCursor")
    assert names == PEER_TOOLS == [tool["name"] for tool in client.list_tools()]
    prompts = client.list_page("prompts", cache=False)
    assert [prompt["name"] for prompt in prompts["prompts"]] == PEER_PROMPTS[:PEER_PAGE_SIZE]
    assert isinstance(prompts["nextCursor"], str)
    mark = uuid.uuid4().hex
    resources = client.list_page("resources", meta={MARK: mark})
    assert [resource["uri"] for resource in resources["resources"]] == PEER_RESOURCES[:PEER_PAGE_SIZE]
    assert [message["params"]["_meta"][MARK] for message in tap.sent_messages("resources/list")] == [mark]


def test_results_without_a_ttl_are_not_kept(client_pool: ClientPool) -> None:
    # The SDK server's default hints: ttlMs 0, stale at once.
    with Peer("http", "both").start() as peer:
        tap = TapTransport(mcp.HttpTransport(peer.url))
        client = client_pool.connect(tap)
        assert client.request("tools/list")["ttlMs"] == 0
        client.list_tools()
        client.list_tools()
        assert walks(tap) == 3
        client.disconnect()


def test_legacy_results_are_never_kept(client_pool: ClientPool) -> None:
    with Peer("http", "legacy", ("--cache-ttl-ms", TEN_MINUTES)).start() as peer:
        tap = TapTransport(mcp.HttpTransport(peer.url))
        client = client_pool.connect(tap)
        assert client.era == "legacy"
        client.list_tools()
        client.list_tools()
        assert walks(tap) == 2
        client.disconnect()


# -- authorization contexts -------------------------------------------------------------------


class Principal(TapTransport):
    """A transport whose credentials the test switches (a new access token, another user)."""

    who = "alice"

    def auth_context(self) -> str:
        return self.who


def hinted_fake(scope: str) -> FakeServer:
    server = FakeServer(era="modern")
    listing = server.default_handler("tools/list")
    assert listing is not None

    def with_hints(params: dict[str, Any], ctx: Any) -> Any:
        return {**listing(params, ctx), "ttlMs": 600_000, "cacheScope": scope}

    server.on("tools/list", with_hints)
    return server


def test_a_private_page_is_never_served_to_another_authorization_context(client_pool: ClientPool) -> None:
    with hinted_fake("private") as server:
        principal = Principal(server.transport())
        client = client_pool.connect(principal)
        client.list_tools()
        client.list_tools()
        assert server.count("tools/list") == 1
        principal.who = "bob"
        client.list_tools()
        assert server.count("tools/list") == 2
        principal.who = "alice"
        client.list_tools()  # alice's page is still hers
        assert server.count("tools/list") == 2


def test_a_public_page_is_served_across_authorization_contexts(client_pool: ClientPool) -> None:
    with hinted_fake("public") as server:
        principal = Principal(server.transport())
        client = client_pool.connect(principal)
        client.list_tools()
        principal.who = "bob"
        client.list_tools()
        assert server.count("tools/list") == 1


def test_a_reconnect_forgets_the_kept_pages(client_pool: ClientPool) -> None:
    with hinted_fake("public") as server:
        client = client_pool.connect(server.transport(), backoff=mcp.Backoff(initial=0.01, maximum=0.05))
        client.list_tools()
        server.drop()
        server.wait_connections(2)
        wait_until(lambda: client.status == "ready", what="the client to be ready again")
        before = server.count("tools/list")
        client.list_tools()
        assert server.count("tools/list") == before + 1


def test_a_kept_page_whose_cursor_went_stale_restarts_the_walk_from_the_server(client_pool: ClientPool) -> None:
    # The spec: a cursor that became invalid means the kept pages go, and the walk starts over.
    with FakeServer(era="modern") as server:
        version = [1]

        def listing(params: dict[str, Any], ctx: Any) -> Any:
            v, cursor = version[0], params.get("cursor")
            if cursor is None:
                first = [{"name": f"a{v}", "inputSchema": {"type": "object"}}]
                return {"tools": first, "nextCursor": f"v{v}", "ttlMs": 600_000, "cacheScope": "public"}
            if cursor != f"v{v}":
                raise FakeError(-32602, f"Invalid cursor: {cursor}")
            return {"tools": [{"name": f"b{v}", "inputSchema": {"type": "object"}}], "ttlMs": 0}

        server.on("tools/list", listing)
        client = client_pool.connect(server.transport())
        assert [tool["name"] for tool in client.list_tools()] == ["a1", "b1"]
        version[0] = 2
        assert [tool["name"] for tool in client.list_tools()] == ["a2", "b2"]
        assert server.count("tools/list") == 2 + 3  # page 2 (refused), then pages 1 and 2 afresh

        def refuse(params: dict[str, Any], ctx: Any) -> Any:
            raise FakeError(-32602, "bad params")

        server.on("tools/list", refuse)
        with pytest.raises(mcp.RequestError):
            client.list_tools(cache=False)  # nothing kept was involved: no second walk
        assert server.count("tools/list") == 6


def _at_depth(frames: int, call: Any) -> Any:
    """``call()`` from ``frames`` Python frames further down the stack (a host's own stack)."""
    return call() if frames == 0 else _at_depth(frames - 1, call)


def test_a_page_nested_as_deep_as_the_reader_takes_is_listed_and_kept_from_a_deep_caller(
    client_pool: ClientPool,
) -> None:
    # The reader decodes a frame near the top of its own stack; the host keeps and copies the
    # page from wherever it called list_tools: a page it cannot copy there is simply not kept.
    schema: dict[str, Any] = {"type": "object"}
    node = schema
    for _ in range(470):  # 940 levels of JSON: within what the reader decodes
        node["properties"] = {"a": {"type": "object"}}
        node = node["properties"]["a"]
    with FakeServer(era="modern") as server:
        tools = [{"name": "deep", "inputSchema": schema}]
        server.on("tools/list", lambda params, ctx: {"tools": tools, "ttlMs": 600_000, "cacheScope": "public"})
        client = client_pool.connect(server.transport())

        def names(tools: list[dict[str, Any]]) -> list[str]:
            return [tool["name"] for tool in tools]

        assert names(client.list_tools()) == ["deep"]  # kept
        assert names(_at_depth(150, client.list_tools)) == ["deep"]  # the kept copy is too deep to decode here
        assert names(_at_depth(150, client.list_tools)) == ["deep"]  # too deep to keep from here
        before = server.count("tools/list")
        assert names(client.list_tools()) == names(client.list_tools()) == ["deep"]
        assert server.count("tools/list") <= before + 1  # kept again (where it could not be before)


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("cursor", [{"page": 2}, ["page", 2]], ids=["object", "array"])
def test_a_next_cursor_that_is_no_string_fails_the_walk_as_the_servers_fault(
    era: str, cursor: Any, client_pool: ClientPool
) -> None:
    with FakeServer(era=era) as server:
        server.on("tools/list", lambda params, ctx: {"tools": [], "nextCursor": cursor, "ttlMs": 600_000})
        client = client_pool.connect(server.transport())
        with pytest.raises(mcp.ProtocolError, match="nextCursor"):
            client.list_tools()


def test_the_http_authorization_context_is_the_token_last_sent() -> None:
    class Tokens:
        token = "token-1"

        def bearer(self, server: str) -> str:
            return self.token

    tokens = Tokens()
    auth = BearerAuth(tokens, "http://127.0.0.1:9/mcp")  # type: ignore[arg-type]

    def send_once() -> str:
        flow = auth.auth_flow(httpx.Request("POST", "http://127.0.0.1:9/mcp"))
        request = next(flow)
        with pytest.raises(StopIteration):
            flow.send(httpx.Response(200))
        assert request.headers["Authorization"] == f"Bearer {tokens.token}"
        return auth.sent

    first = send_once()
    assert first and "token-1" not in first
    assert send_once() == first
    tokens.token = "token-2"
    assert send_once() not in ("", first)
    transport = mcp.HttpTransport("http://127.0.0.1:9/mcp")
    assert transport.auth_context() == ""


# -- the cache itself (sans-IO) ---------------------------------------------------------------


def test_hints_outside_the_spec_count_as_stale_at_once_and_the_ttl_is_capped() -> None:
    assert cache_hints({"ttlMs": 5, "cacheScope": "public"}) == (5, "public")
    assert cache_hints({"ttlMs": 5}) == (5, "private")
    for bad in (None, -1, 0, "600", True, float("nan")):
        assert cache_hints({"ttlMs": bad, "cacheScope": "public"})[0] == 0
    assert cache_hints({"ttlMs": 10**12})[0] == MAX_TTL_MS


def test_a_page_goes_stale_when_its_ttl_runs_out() -> None:
    clock = Clock()
    cache = ListCache(clock=clock)
    ticket = cache.ticket("tools/list", None, context="", generation=1)
    assert cache.store(ticket, b"{}", 1000, "public", context="", generation=1)
    clock.now += 0.999
    assert cache.lookup("tools/list", None, context="", generation=1) == b"{}"
    clock.now += 0.001
    assert cache.lookup("tools/list", None, context="", generation=1) is None
    assert len(cache) == 0


def test_a_fetch_that_raced_a_list_changed_stores_nothing() -> None:
    cache = ListCache()
    ticket = cache.ticket("tools/list", None, context="", generation=1)
    cache.heard("notifications/tools/list_changed")
    assert not cache.store(ticket, b"{}", 60_000, "public", context="", generation=1)
    resources = cache.ticket("resources/templates/list", None, context="", generation=1)
    cache.heard("notifications/resources/list_changed")  # templates list the same resources
    assert not cache.store(resources, b"{}", 60_000, "public", context="", generation=1)
    # Nor one begun on another connection, or under other credentials.
    ticket = cache.ticket("prompts/list", None, context="a", generation=1)
    assert not cache.store(ticket, b"{}", 60_000, "public", context="a", generation=2)
    ticket = cache.ticket("prompts/list", None, context="a", generation=2)
    assert not cache.store(ticket, b"{}", 60_000, "private", context="b", generation=2)


def test_the_cache_is_bounded_in_pages_and_bytes() -> None:
    cache = ListCache(max_entries=3, max_bytes=100)
    for n in range(5):
        ticket = cache.ticket("tools/list", f"c{n}", context="", generation=1)
        cache.store(ticket, b"x" * 10, 60_000, "public", context="", generation=1)
    assert len(cache) == 3 and cache.size == 30
    assert cache.lookup("tools/list", "c0", context="", generation=1) is None  # the oldest went first
    assert cache.lookup("tools/list", "c4", context="", generation=1) == b"x" * 10
    big = cache.ticket("tools/list", "big", context="", generation=1)
    assert not cache.store(big, b"y" * 101, 60_000, "public", context="", generation=1)
    most = cache.ticket("tools/list", "most", context="", generation=1)
    assert cache.store(most, b"z" * 95, 60_000, "public", context="", generation=1)
    assert cache.size <= 100 and len(cache) == 1


def test_the_cursors_pages_are_kept_under_count_against_the_byte_bound() -> None:
    # A server may hand out huge cursors on pages it does not let be kept, and tiny pages that
    # are kept under them: the cursors are held as long as those pages are.
    cache = ListCache(max_bytes=1_000)
    for n in range(10):
        ticket = cache.ticket("tools/list", f"{n}:" + "c" * 500, context="", generation=1)
        cache.store(ticket, b"{}", 60_000, "public", context="", generation=1)
    assert len(cache) == 1 and cache.size == 2  # two cursors of 502 bytes are past the bound
    huge = cache.ticket("tools/list", "c" * 1_000, context="", generation=1)
    assert not cache.store(huge, b"{}", 60_000, "public", context="", generation=1)


def test_a_fetch_under_one_scope_replaces_the_page_kept_under_the_other() -> None:
    cache = ListCache()
    ticket = cache.ticket("tools/list", None, context="a", generation=1)
    cache.store(ticket, b"private", 60_000, "private", context="a", generation=1)
    ticket = cache.ticket("tools/list", None, context="a", generation=1)
    cache.store(ticket, b"public", 60_000, "public", context="a", generation=1)
    assert cache.lookup("tools/list", None, context="a", generation=1) == b"public"
    assert len(cache) == 1
    ticket = cache.ticket("tools/list", None, context="a", generation=1)
    assert not cache.store(ticket, json.dumps({}).encode(), 0, "public", context="a", generation=1)
    assert len(cache) == 0  # a fresh page with ttlMs 0 supersedes the kept one
