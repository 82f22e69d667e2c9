"""The client's duties in the MCP specification's own text, for what a live picture of a server
uses (capabilities, resource updates, watches, keepalive), each checked against the frames the
client sends to a FakeServer. The spec passage is quoted where a test checks it."""

from __future__ import annotations

from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import NO_REPLY, FakeError, FakeServer
from tests.sdk_helpers import TapTransport
from tests.waiting import WAIT

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
    from exmcp_actors._protocol._filters import RESOURCE_UPDATED, normalize_filter, uri_within
    from exmcp_actors._protocol._index import ListenerIndex

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
# so (``notified``) instead of waiting for changes that cannot come.


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
            assert watch.notified is notified
            assert server.count("resources/subscribe") == (1 if notified and era == "legacy" else 0)


def test_a_modern_server_with_nothing_to_listen_to_tells_of_no_changes() -> None:
    with FakeServer(era="modern") as server:

        @server.on("subscriptions/listen")
        def nothing_to_listen_to(params: dict[str, Any], ctx: Any) -> Any:
            raise FakeError(-32601, "Method not found: subscriptions/listen")

        with mcp.connect(server.transport()) as client, client.watch_resource(URI) as watch:
            assert watch.get(timeout=WAIT).contents[0]["text"] == f"contents of {URI}"
            assert watch.notified is False


def test_a_legacy_server_that_stops_advertising_subscribe_leaves_a_watch_that_says_so() -> None:
    with FakeServer() as server:
        client = mcp.connect(server.transport(), backoff=mcp.Backoff(initial=0.01, maximum=0.05))
        try:
            watch = client.watch_resource(URI)
            assert watch.get(timeout=WAIT).contents[0]["text"] == f"contents of {URI}" and watch.notified
            server.capabilities = {"resources": {"listChanged": True}}
            server.set_resource_text(URI, "read after the reconnect")
            server.drop()
            assert watch.get(timeout=WAIT).contents[0]["text"] == "read after the reconnect"
            assert watch.notified is False
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
