"""A catalog that honours the cache hints (``ttlMs``): served while fresh, refetched on read
when stale (only the stale pages), :class:`CatalogStale` once per expiry where the server does
not advertise ``listChanged``, ``refresh()`` with jitter, and the bounds a hostile server
meets. The hint edge cases and the timers with a FakeServer; the real peers further down."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors._api._catalog_fresh import MAX_JITTER, MIN_FRESH
from exmcp_actors._protocol._list_cache import MAX_TTL_MS
from exmcp_actors.testing import FakeServer
from tests.sdk_helpers import WAIT
from tests.waiting import wait_until

QUIET = {"tools": {}}  # tools without listChanged: the client relies on the ttl alone
TOOL = {"type": "object"}


def _tool(name: str) -> dict[str, Any]:
    return {"name": name, "inputSchema": TOOL}


def _names(items: list[dict[str, Any]]) -> list[str]:
    return [item["name"] for item in items]


def paged(server: FakeServer, pages: list[list[str]], ttls: list[Any]) -> None:
    """``tools/list`` in ``pages`` (cursors "1", "2", ...), page n with ``ttlMs`` ttls[n]."""

    def listing(params: dict[str, Any], ctx: Any) -> Any:
        at = int(params.get("cursor") or 0)
        result: dict[str, Any] = {"tools": [_tool(name) for name in pages[at]], "cacheScope": "public"}
        if ttls[at] is not None:
            result["ttlMs"] = ttls[at]
        if at + 1 < len(pages):
            result["nextCursor"] = str(at + 1)
        return result

    server.on("tools/list", listing)


def tools_changed(catalog: mcp.Catalog, server: FakeServer) -> None:
    """A modern server's tools/list_changed, on the catalog's listen."""
    server.event(catalog._source.subscription_id, "notifications/tools/list_changed")  # type: ignore[union-attr]


def cursors(server: FakeServer) -> list[Any]:
    return [(message.get("params") or {}).get("cursor") for message in server.messages("tools/list")]


def test_a_quiet_servers_expiry_is_told_once_and_a_read_refetches_only_the_stale_page() -> None:
    with FakeServer(era="modern", capabilities=QUIET) as server:
        pages = [["a"], ["b"]]
        paged(server, pages, [600_000, 1_000])
        with mcp.connect(server.transport()) as client, client.catalog() as catalog:
            assert _names(catalog.tools) == ["a", "b"]
            assert cursors(server) == [None, "1"]
            stale = catalog.get(timeout=WAIT)
            assert isinstance(stale, mcp.CatalogStale) and stale == ("ex_mcp_catalog_stale", catalog, "tools")
            assert cursors(server) == [None, "1"]  # told, not refetched: no polling
            pages[1] = ["c"]
            assert _names(catalog.tools) == ["a", "c"]  # the read refetched, on this thread
            assert cursors(server) == [None, "1", "1"]  # the fresh first page came from the kept ones
            changed = catalog.get(timeout=WAIT)
            assert isinstance(changed, mcp.CatalogChanged) and _names(changed.items) == ["a", "c"]
            assert catalog.refreshes["tools"] == 1
            # The next expiry is told once more, and nothing else came in between.
            assert isinstance(catalog.get(timeout=WAIT), mcp.CatalogStale)
            assert catalog.pending() == 0


def test_a_list_served_while_fresh_costs_no_request() -> None:
    with FakeServer(era="modern", capabilities=QUIET) as server:
        paged(server, [["a"]], [600_000])
        with mcp.connect(server.transport()) as client, client.catalog() as catalog:
            for _ in range(100):
                assert _names(catalog.tools) == ["a"]
            assert server.count("tools/list") == 1 and catalog.refreshes["tools"] == 0


def test_ttl_zero_costs_at_most_one_walk_per_second_however_often_the_host_reads() -> None:
    with FakeServer(era="modern", capabilities=QUIET) as server:
        paged(server, [["a"]], [0])
        with mcp.connect(server.transport()) as client, client.catalog() as catalog:
            started = time.monotonic()
            reads = 0
            while server.count("tools/list") < 2:  # reading until the floor lets one refetch through
                assert _names(catalog.tools) == ["a"]
                reads += 1
            assert time.monotonic() - started >= MIN_FRESH * 0.9
            assert reads > 10 and server.count("tools/list") == 2
            assert catalog.pending() == 0 or isinstance(catalog.get_nowait(), mcp.CatalogStale)


@pytest.mark.parametrize("ttl", [0, -5, "600000", True, 1.5, None, 10**30, [1]])
def test_hostile_ttls_stay_between_the_floor_and_a_day(ttl: Any) -> None:
    with FakeServer(era="modern", capabilities=QUIET) as server:
        paged(server, [["a"]], [ttl])
        with mcp.connect(server.transport()) as client, client.catalog() as catalog:
            span = catalog._fresh._span["tools"]
            assert MIN_FRESH * 0.9 <= span <= MAX_TTL_MS / 1000 + 1
            assert _names(catalog.tools) == ["a"]


def test_a_stale_list_with_list_changed_is_followed_by_notifications_alone_when_the_ttl_is_zero() -> None:
    with FakeServer(era="modern") as server:
        paged(server, [["a"]], [0])
        with mcp.connect(server.transport()) as client, client.catalog() as catalog:
            catalog._fresh.clock = lambda: time.monotonic() + 3600  # an hour later
            assert _names(catalog.tools) == ["a"] and server.count("tools/list") == 1
            tools_changed(catalog, server)  # invalidates at once
            assert catalog.get(timeout=WAIT).kind == "tools" and server.count("tools/list") == 2


def test_a_ttl_with_list_changed_is_honoured_and_a_list_changed_still_invalidates_at_once() -> None:
    with FakeServer(era="modern") as server:
        pages = [["a"]]
        paged(server, pages, [600_000])
        with mcp.connect(server.transport()) as client, client.catalog() as catalog:
            assert _names(catalog.tools) == ["a"] and server.count("tools/list") == 1
            pages[0] = ["b"]
            tools_changed(catalog, server)
            changed = catalog.get(timeout=WAIT)
            assert _names(changed.items) == ["b"] == _names(catalog.tools)
            catalog._fresh.clock = lambda: time.monotonic() + 3600  # past the ttl: stale
            before = server.count("tools/list")
            assert _names(catalog.tools) == ["b"]
            assert server.count("tools/list") == before  # refetched through the kept page
            with pytest.raises(queue.Empty):
                catalog.get_nowait()  # unchanged: nothing published, no stale notice either


def test_readers_at_once_share_one_refetch() -> None:
    with FakeServer(era="modern", capabilities=QUIET) as server:
        pages = [["a"]]
        paged(server, pages, [1_000])
        with mcp.connect(server.transport()) as client, client.catalog(timeout=WAIT) as catalog:
            assert isinstance(catalog.get(timeout=WAIT), mcp.CatalogStale)
            gate, entered = threading.Event(), threading.Event()
            walked = [0]

            @server.on("tools/list", concurrent=True)
            def slow(params: dict[str, Any], ctx: Any) -> Any:
                walked[0] += 1
                entered.set()
                ctx.wait(gate, timeout=WAIT)
                return {"tools": [_tool("z")], "ttlMs": 600_000}

            seen: list[list[str]] = []
            readers = [threading.Thread(target=lambda: seen.append(_names(catalog.tools))) for _ in range(5)]
            for reader in readers:
                reader.start()
            assert entered.wait(WAIT)
            gate.set()
            for reader in readers:
                reader.join(WAIT)
            assert walked[0] == 1 and seen == [["z"]] * 5


class Raising:
    def put(self, message: Any) -> None:
        raise RuntimeError("subscriber broke")


class Slow:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.got: queue.Queue[Any] = queue.Queue()

    def put(self, message: Any) -> None:
        self.got.put(message)
        self.release.wait(WAIT)


def test_a_raising_or_slow_subscriber_hurts_no_other() -> None:
    with FakeServer(era="modern", capabilities=QUIET) as server:
        paged(server, [["a"]], [1_000])
        with mcp.connect(server.transport()) as client:
            slow, box = Slow(), queue.Queue[Any]()
            catalogs = [client.catalog(subscriber=Raising()), client.catalog(subscriber=slow)]
            catalogs.append(client.catalog(subscriber=box))
            try:
                assert isinstance(slow.got.get(timeout=WAIT), mcp.CatalogStale)  # and it hangs in put()
                assert isinstance(box.get(timeout=WAIT), mcp.CatalogStale)
                assert all(_names(catalog.tools) == ["a"] for catalog in catalogs)  # readers unhurt
            finally:
                slow.release.set()
                for catalog in catalogs:
                    catalog.close()


def test_refresh_checks_its_arguments() -> None:
    with FakeServer(era="modern", capabilities=QUIET) as server:
        with mcp.connect(server.transport()) as client, client.catalog() as catalog:
            for bad in (3, [1], b"tools", {"tools": True}):
                with pytest.raises(TypeError, match="kinds"):
                    catalog.refresh(bad)
            with pytest.raises(ValueError, match="'tool'"):
                catalog.refresh(["tool"])
            with pytest.raises(TypeError, match="wait"):
                catalog.refresh(wait="yes")  # type: ignore[arg-type]
            catalog.refresh("prompts", wait=True)  # not advertised: nothing to do
            assert server.count("prompts/list") == 0


def test_refresh_fetches_after_a_bounded_jitter_without_blocking_or_blocking_when_asked() -> None:
    with FakeServer(era="modern", capabilities=QUIET) as server:
        pages = [["a"]]
        paged(server, pages, [600_000])
        with mcp.connect(server.transport()) as client, client.catalog() as catalog:
            assert all(0 <= catalog._fresh.jitter(("tools",)) <= MAX_JITTER for _ in range(100))
            pages[0] = ["b"]
            catalog.refresh()
            changed = catalog.get(timeout=WAIT)
            assert isinstance(changed, mcp.CatalogChanged) and _names(changed.items) == ["b"]
            assert server.count("tools/list") == 2
            catalog.refresh(["tools"])  # unchanged: fetched, nothing published
            wait_until(lambda: server.count("tools/list") == 3, WAIT, "the asked refetch")
            pages[0] = ["c"]
            catalog.refresh("tools", wait=True)
            assert server.count("tools/list") == 4 and _names(catalog.tools) == ["c"]
            assert _names(catalog.get(timeout=WAIT).items) == ["c"]


def test_a_waited_refresh_gives_up_within_the_timeout_while_the_worker_refetches() -> None:
    # The worker's own refetch holds the kind for as long as the server takes over it (each
    # page the client's request timeout): a waited refresh queued behind it for all that time.
    listing, release = threading.Event(), threading.Event()
    with FakeServer(era="modern", capabilities={"tools": {"listChanged": True}}) as server:

        @server.on("tools/list", concurrent=True)
        def slow(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
            if server.count("tools/list") == 2:  # the worker's refetch after the list_changed
                listing.set()
                ctx.wait(release, timeout=15)
            return {"tools": [_tool("a")]}

        with mcp.connect(server.transport(), request_timeout=15) as client, client.catalog(timeout=0.5) as catalog:
            tools_changed(catalog, server)
            assert listing.wait(WAIT)
            started = time.monotonic()
            with pytest.raises(mcp.RequestTimeout, match="tools"):
                catalog.refresh("tools", wait=True)
            took = time.monotonic() - started
            release.set()
            assert took < 0.5 + MAX_JITTER + 2.0, took


def test_unread_stale_notices_leave_one_pending_per_kind() -> None:
    with FakeServer(era="modern", capabilities=QUIET) as server:
        paged(server, [["a"]], [600_000])
        with mcp.connect(server.transport()) as client, client.catalog() as catalog:
            for _ in range(100):
                catalog._inbox.put(mcp.CatalogStale("ex_mcp_catalog_stale", catalog, "tools"))
            assert catalog.pending() == 1
            catalog._publish("tools", [_tool("b")])  # fetched after it went stale: the notice is taken back
            assert catalog.pending() == 1
            assert isinstance(catalog.get_nowait(), mcp.CatalogChanged)


def test_an_unread_stale_notice_never_lands_before_a_later_change_of_its_kind() -> None:
    """A catalog's inbox keeps the newest pending message per kind: what it keeps must still
    say the truth in order (stale, then refetched, then stale again reads as stale last)."""
    with FakeServer(era="modern", capabilities={"tools": {}, "prompts": {}}) as server:
        client = mcp.connect(server.transport())
        catalog = client.catalog()

        def stale(kind: str = "tools") -> mcp.CatalogStale:
            return mcp.CatalogStale("ex_mcp_catalog_stale", catalog, kind)

        def changed(name: str) -> mcp.CatalogChanged:
            return mcp.CatalogChanged("ex_mcp_catalog_changed", catalog, "tools", [_tool(name)], (name,), (), {})

        def read() -> list[tuple[str, str]]:
            out = []
            while True:
                try:
                    message = catalog.get_nowait()
                except queue.Empty:
                    return out
                out.append((message[0].rsplit("_", 1)[1], message.kind))

        # What the worker emits, in its order, while the host reads nothing.
        for message in (stale(), stale("prompts"), changed("a"), stale()):
            catalog._emit(message)
        assert read() == [("stale", "prompts"), ("changed", "tools"), ("stale", "tools")]
        for message in (changed("a"), stale(), changed("b")):
            catalog._emit(message)
        assert read() == [("changed", "tools")]  # refetched after it went stale: fresh
        assert catalog.pending() == 0
        client.disconnect()
