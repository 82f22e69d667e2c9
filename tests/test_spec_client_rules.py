"""The client's duties in the MCP specification's own text, for what a live picture of a server
uses (capabilities, resource updates, watches, keepalive), each checked against the frames the
client sends to a FakeServer. The spec passage is quoted where a test checks it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import NO_REPLY, FakeError, FakeServer
from tests.sdk_helpers import TapTransport
from tests.waiting import WAIT, wait_until

URI = "file:///fake/dir"
NOT_ADVERTISED = ("capability_not_advertised", "resources.subscribe")


# -- 2025-11-25 basic/lifecycle, Operation: "Both parties MUST: ... Only use capabilities that
# were successfully negotiated"; resources/subscribe belongs to the `subscribe` capability.


@pytest.mark.parametrize(
    "capabilities",
    [{"resources": {"listChanged": True}}, {"resources": {"subscribe": False}}, {"tools": {}}],
    ids=["resources-without-subscribe", "subscribe-false", "no-resources"],
)
@pytest.mark.parametrize("how", ["watch", "subscribe_notifications"])
def test_a_legacy_server_that_does_not_advertise_subscribe_is_never_sent_resources_subscribe(
    capabilities: dict[str, Any], how: str
) -> None:
    with FakeServer(capabilities=capabilities) as server, mcp.connect(server.transport()) as client:
        with pytest.raises(mcp.SubscribeFailed) as caught:
            getattr(client, how)({"resourceSubscriptions": [URI]})
        assert caught.value.uri == URI and caught.value.cause == NOT_ADVERTISED
        client.ping()  # a marker: anything the watch sent is on the wire before its answer
        assert server.count("resources/subscribe") == 0


def test_a_server_that_stops_advertising_subscribe_is_not_resubscribed_and_the_reconnect_says_so() -> None:
    with FakeServer() as server:
        client = mcp.connect(server.transport(), backoff=mcp.Backoff(initial=0.01, maximum=0.05))
        try:
            watch = client.watch({"resourceSubscriptions": [URI]})
            server.wait_for("resources/subscribe", uri=URI)
            server.capabilities = {"resources": {"listChanged": True}}
            server.drop()
            reconnected = watch.get(timeout=WAIT)
            assert isinstance(reconnected, mcp.Reconnected)
            assert reconnected.report == {"resubscribed": [], "failed": [(URI, NOT_ADVERTISED)]}
            assert server.count("resources/subscribe", connection=2) == 0
        finally:
            client.disconnect()


# -- 2025-11-25 schema, ResourceUpdatedNotificationParams.uri: "The URI of the resource that has
# been updated. This might be a sub-resource of the one that the client actually subscribed to."
# (2026-07-28 says the same; a modern watch already takes a sub-resource as its own change.)


def test_a_legacy_update_of_a_sub_resource_reaches_the_watch_of_its_parent_and_no_other() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        parent = client.watch({"resourceSubscriptions": [URI]})
        sibling = client.watch({"resourceSubscriptions": [URI + "-other", URI + "/a.txt"]})
        server.updated(URI + "/a.txt")
        got = parent.get(timeout=WAIT)
        assert isinstance(got, mcp.Notification) and got.params == {"uri": URI + "/a.txt"}
        assert sibling.get(timeout=WAIT).params == {"uri": URI + "/a.txt"}  # its own URI: once
        server.updated(URI + "-other")  # a name that merely starts like the parent's: not under it
        server.updated(URI)  # the marker
        assert parent.get(timeout=WAIT).params == {"uri": URI}
        assert sibling.get(timeout=WAIT).params == {"uri": URI + "-other"}
        assert parent.pending() == 0 and sibling.pending() == 0


def test_a_legacy_resource_watch_reads_again_when_a_sub_resource_changes() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        with client.watch_resource(URI) as watch:
            assert watch.get(timeout=WAIT).contents[0]["text"] == f"contents of {URI}"
            server.wait_for("resources/subscribe", uri=URI)
            server.set_resource_text(URI, "a file below it changed")
            server.updated(URI + "/a.txt")
            assert watch.get(timeout=WAIT).contents[0]["text"] == "a file below it changed"


def test_the_legacy_index_takes_a_sub_resource_exactly_as_the_modern_filter_does() -> None:
    from exmcp_actors._protocol._filters import RESOURCE_UPDATED, normalize_filter
    from exmcp_actors._protocol._index import ListenerIndex
    from exmcp_actors._protocol._uris import uri_within

    bases = ["file:///", "file:///d", "file:///d/", "file:///d//", "file:///dx", "x:a/b", "/", "urn:x"]
    uris = ["file:///d", "file:///d/", "file:///d/e", "file:///d//e", "file:///dx/e", "file:///de", "x:a/b/c", "/r"]
    index: ListenerIndex[str] = ListenerIndex()
    for number, base in enumerate(bases):
        index.add(number, normalize_filter({"resourceSubscriptions": [base]}), base)
    for uri in uris:
        reached = list(index.reached(RESOURCE_UPDATED, {"uri": uri}))
        assert reached == [base for base in bases if uri_within(uri, (base,))], uri  # in registration order
    for number in range(len(bases)):
        index.remove(number)
    assert all(not list(index.reached(RESOURCE_UPDATED, {"uri": uri})) for uri in uris)
    assert index._by_base == {} and index._base_lengths == {}


# -- 2026-07-28 basic/patterns/subscriptions, Acknowledgment: "The client SHOULD check the
# acknowledged filter against what it requested and handle any unsupported types gracefully."
# A resource watch on a server that will not tell of changes still gets the contents; it says
# so (``follows_changes``) instead of waiting for changes that cannot come.


def _refuse_resource_subscriptions(server: FakeServer) -> None:
    def listen(params: dict[str, Any], ctx: Any) -> Any:
        asked = dict(params["notifications"])
        asked.pop("resourceSubscriptions", None)  # as a server without resources.subscribe acks
        ctx.acknowledge(asked)
        return NO_REPLY

    server.on("subscriptions/listen", listen)


@pytest.mark.parametrize(
    ("era", "capabilities", "refuse", "notified"),
    [
        ("legacy", None, False, True),
        ("legacy", {"resources": {"listChanged": True}}, False, False),
        ("modern", None, False, True),
        ("modern", {"resources": {}}, True, False),
    ],
    ids=["legacy-subscribe", "legacy-no-subscribe", "modern-acked", "modern-not-acked"],
)
def test_a_resource_watch_says_whether_the_server_will_tell_of_changes(
    era: str, capabilities: dict[str, Any] | None, refuse: bool, notified: bool
) -> None:
    with FakeServer(era=era, capabilities=capabilities) as server:  # type: ignore[arg-type]
        if refuse:
            _refuse_resource_subscriptions(server)
        with mcp.connect(server.transport()) as client, client.watch_resource(URI) as watch:
            assert watch.get(timeout=WAIT).contents[0]["text"] == f"contents of {URI}"
            assert watch.follows_changes is notified
            assert server.count("resources/subscribe") == (1 if notified and era == "legacy" else 0)


def test_a_modern_server_with_nothing_to_listen_to_tells_of_no_changes() -> None:
    with FakeServer(era="modern") as server:

        @server.on("subscriptions/listen")
        def nothing_to_listen_to(params: dict[str, Any], ctx: Any) -> Any:
            raise FakeError(-32601, "Method not found: subscriptions/listen")

        with mcp.connect(server.transport()) as client, client.watch_resource(URI) as watch:
            assert watch.get(timeout=WAIT).contents[0]["text"] == f"contents of {URI}"
            assert watch.follows_changes is False


def test_a_legacy_server_that_stops_advertising_subscribe_leaves_a_watch_that_says_so() -> None:
    with FakeServer() as server:
        client = mcp.connect(server.transport(), backoff=mcp.Backoff(initial=0.01, maximum=0.05))
        try:
            watch = client.watch_resource(URI)
            assert watch.get(timeout=WAIT).contents[0]["text"] == f"contents of {URI}" and watch.follows_changes
            server.capabilities = {"resources": {"listChanged": True}}
            server.set_resource_text(URI, "read after the reconnect")
            server.drop()
            assert watch.get(timeout=WAIT).contents[0]["text"] == "read after the reconnect"
            assert watch.follows_changes is False
        finally:
            client.disconnect()


# -- 2026-07-28 server/utilities/caching, Cache Scope: "private": "Cached responses MAY be reused
# for the same authorization context. Caches MUST NOT be shared across authorization contexts
# (e.g. a different access token requires a different cache)." A watch's kept read is such a cache.


class _Principal(TapTransport):
    """A transport whose credentials the test switches (another access token)."""

    who = "alice"

    def auth_context(self) -> str:
        return self.who


@pytest.mark.parametrize(("scope", "reads_for_bob"), [("private", 2), ("public", 1), (None, 2)])
def test_a_kept_read_is_served_to_another_authorization_context_only_when_public(
    scope: str | None, reads_for_bob: int
) -> None:
    with FakeServer(era="modern") as server:
        reader = server.default_handler("resources/read")
        assert reader is not None
        hints = {"ttlMs": 600_000, **({"cacheScope": scope} if scope else {})}
        server.on("resources/read", lambda params, ctx: {**reader(params, ctx), **hints})
        principal = _Principal(server.transport())
        with mcp.connect(principal) as client, client.watch_resource(URI) as alice:
            assert alice.get(timeout=WAIT).contents[0]["text"] == f"contents of {URI}"
            with client.watch_resource(URI) as again:  # the same context: the kept read
                assert again.get(timeout=WAIT).contents[0]["text"] == f"contents of {URI}"
            assert server.count("resources/read") == 1
            principal.who = "bob"
            with client.watch_resource(URI) as bob:
                assert bob.get(timeout=WAIT).contents[0]["text"] == f"contents of {URI}"
            assert server.count("resources/read") == reads_for_bob


# -- 2026-07-28 basic/patterns/subscriptions, Cancellation: the client ends a subscription by
# closing its stream (HTTP) or by sending notifications/cancelled naming the subscriptions/listen
# (stdio); "On stdio, if the connection is terminated and then re-established, the client MUST
# re-send subscriptions/listen". Legacy: resources/unsubscribe follows a resources/subscribe.


@pytest.mark.parametrize("http_like", [False, True], ids=["stdio-like", "http-like"])
def test_closing_the_last_modern_resource_watch_cancels_its_listen_as_the_transport_asks(http_like: bool) -> None:
    with FakeServer(era="modern") as server, mcp.connect(server.transport(stream_cancel=http_like)) as client:
        watch = client.watch_resource(URI)
        assert watch.get(timeout=WAIT).contents[0]["text"] == f"contents of {URI}"
        listen_id = server.wait_for("subscriptions/listen")[1]["id"]
        watch.close()
        if http_like:
            wait_until(lambda: server.stream_cancels == [(1, listen_id)], WAIT, "the listen's stream closed")
        else:
            cancelled = server.wait_for("notifications/cancelled")[1]["params"]
            assert cancelled["requestId"] == listen_id
        client.list_tools()  # a marker behind anything else the close sent
        assert server.count("notifications/cancelled") == (0 if http_like else 1)


def test_a_modern_resource_watch_listens_again_after_the_connection_is_re_established_and_reads_again() -> None:
    with FakeServer(era="modern") as server:
        client = mcp.connect(server.transport(), backoff=mcp.Backoff(initial=0.01, maximum=0.05))
        try:
            watch = client.watch_resource(URI)
            assert watch.get(timeout=WAIT).contents[0]["text"] == f"contents of {URI}"
            server.set_resource_text(URI, "changed while the connection was down")
            server.drop()
            assert watch.get(timeout=WAIT).contents[0]["text"] == "changed while the connection was down"
            relisten = server.wait_for("subscriptions/listen", connection=2)[1]
            assert relisten["params"]["notifications"] == {"resourceSubscriptions": [URI]}
            first = server.messages("subscriptions/listen", connection=1)[0]
            assert relisten["id"] != first["id"]  # a new request id, as a re-issued request needs
            assert watch.follows_changes
        finally:
            client.disconnect()


# -- 2026-07-28 server/utilities/pagination: "Clients MUST treat cursors as opaque tokens ... an
# empty string is a valid cursor and thus MUST NOT be treated as the end of results"; "Treat a
# missing nextCursor as the end of results". Caching: "When a cached page expires, the client
# SHOULD re-fetch that page using its cursor"; "If a cursor becomes invalid ... discard all cached
# pages and re-fetch from the beginning" (that last one: test_list_cache's
# test_a_kept_page_whose_cursor_went_stale_restarts_the_walk_from_the_server).


def test_a_catalog_walks_and_refetches_stale_pages_with_exactly_the_cursors_the_server_gave() -> None:
    def tool(name: str) -> dict[str, Any]:
        return {"name": name, "inputSchema": {"type": "object"}}

    with FakeServer(era="modern", capabilities={"tools": {}}) as server:
        # cursor -> (names, nextCursor, ttlMs); the empty string and odd characters are cursors too
        pages: dict[Any, tuple[list[str], Any, int]] = {
            None: (["a"], "", 600_000),
            "": (["b"], " /+= é", 1_000),
            " /+= é": (["c"], None, 600_000),
        }

        @server.on("tools/list")
        def listing(params: dict[str, Any], ctx: Any) -> Any:
            cursor = params.get("cursor")
            if cursor not in pages:
                raise FakeError(-32602, "Invalid cursor")
            names, next_cursor, ttl = pages[cursor]
            result: dict[str, Any] = {"tools": [tool(n) for n in names], "ttlMs": ttl, "cacheScope": "public"}
            if next_cursor is not None:
                result["nextCursor"] = next_cursor
            return result

        def sent() -> list[Any]:
            return [(m.get("params") or {}).get("cursor", "absent") for m in server.messages("tools/list")]

        with mcp.connect(server.transport()) as client, client.catalog() as catalog:
            assert [t["name"] for t in catalog.tools] == ["a", "b", "c"]
            assert sent() == ["absent", "", " /+= é"]
            # The second page goes stale (the catalog says so: no listChanged); a read refetches
            # it with its own cursor, and it now ends the list.
            pages[""] = (["b2"], None, 600_000)
            assert isinstance(catalog.get(timeout=WAIT), mcp.CatalogStale)
            assert [t["name"] for t in catalog.tools] == ["a", "b2"]
            assert sent()[3:] == [""]  # the kept first page, then exactly the stale page's cursor


# -- Keepalive. 2025-11-25 basic/utilities/ping: either party may ping, "The receiver MUST respond
# promptly with an empty response"; if no response comes "within a reasonable timeout period,
# the sender MAY: consider the connection stale, terminate the connection, attempt reconnection".
# 2026-07-28 removed ping: the probe is a server/discover. basic/index: a request id "MUST NOT
# have been previously used by the requestor within the same session".


def test_a_servers_ping_is_answered_with_an_empty_result() -> None:
    with FakeServer() as server, mcp.connect(server.transport()):
        assert server.wait_response(server.request("ping"), WAIT)["result"] == {}


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_an_unanswered_probe_terminates_its_connection_and_every_request_id_is_new(era: str) -> None:
    probe = "ping" if era == "legacy" else "server/discover"
    with FakeServer(era=era) as server:  # type: ignore[arg-type]
        default = server.default_handler(probe)
        assert default is not None

        muted = threading.Event()  # once connected: a 2026-07-28 handshake is a server/discover too

        @server.on(probe)
        def muted_on_the_first(params: Any, ctx: Any) -> Any:
            return NO_REPLY if ctx.number == 1 and muted.is_set() else default(params, ctx)

        client = mcp.connect(server.transport(), keepalive=0.2, backoff=mcp.Backoff(initial=0.01, maximum=0.05))
        try:
            client.list_tools()
            muted.set()
            server.wait_connections(2)
            assert server.connection(1).wait_closed(WAIT) and server.connection(1).closed_by == "client"
            server.wait_for(probe, connection=2)
            ids = [message["id"] for _, message in server.received if "id" in message]
            assert len(ids) == len(set(ids))  # across both connections: no id used twice
            # One probe at a time on the silent connection, never a second (the handshake's aside).
            assert server.count(probe, connection=1) == (1 if era == "legacy" else 2)
        finally:
            client.disconnect()


# -- 2026-07-28 server/utilities/caching, Cache Key: "Results produced by retrying a request
# through the multi round-trip requests mechanism ... MUST NOT be cached, as they depend on inputs
# that are not part of the cache key."


def test_a_read_that_needed_input_is_not_kept_for_the_next_watch_however_long_its_ttl() -> None:
    with FakeServer(era="modern") as server:
        reader = server.default_handler("resources/read")
        assert reader is not None

        @server.on("resources/read")
        def read_with_roots(params: dict[str, Any], ctx: Any) -> Any:
            if "inputResponses" not in params:
                return {"resultType": "input_required", "inputRequests": {"where": {"method": "roots/list"}}}
            return {**reader(params, ctx), "ttlMs": 600_000, "cacheScope": "public"}

        with mcp.connect(server.transport(), roots=[{"uri": "file:///w"}]) as client:
            with client.watch_resource(URI) as first:
                assert first.get(timeout=WAIT).contents[0]["text"] == f"contents of {URI}"
                assert server.count("resources/read") == 2  # the round that asked, and the retry
                with client.watch_resource(URI) as second:
                    assert second.get(timeout=WAIT).contents[0]["text"] == f"contents of {URI}"
                assert server.count("resources/read") == 4  # read again: nothing was kept
