"""The client's duties in the MCP specification's own text, for what a live picture of a server
uses (capabilities, resource updates, watches, keepalive), each checked against the frames the
client sends to a FakeServer. The spec passage is quoted where a test checks it."""

from __future__ import annotations

from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import FakeServer
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
