"""A 2026-07-28 server with nothing to listen to, against the FakeServer: it advertises no change
notifications and answers ``subscriptions/listen`` with -32601, which the specification allows.
A watch or a catalog of it connects, fetches and has nothing to push, across reconnects too;
an explicit ``listen()`` still raises. (fastmcp does the same: tests/test_peers_fastmcp.py.)"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import FakeConnection, FakeError, FakeServer

TIMEOUT = 5.0
FAST = mcp.Backoff(initial=0.01, factor=1, maximum=0.01, jitter=0)
TOOLS = [{"name": "now", "inputSchema": {"type": "object"}}]


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(era="modern") as fake:
        fake.capabilities = {"tools": {}}  # like mcp-server-time: tools, and no listChanged

        def no_listen(params: dict[str, Any], ctx: FakeConnection) -> Any:
            raise FakeError(-32601, "Method not found")

        fake.on("subscriptions/listen", no_listen)
        fake.set_items("tools", TOOLS)
        yield fake


def test_a_watch_of_a_server_with_nothing_to_listen_to_connects_and_hears_nothing(server: FakeServer) -> None:
    with mcp.connect(server.transport(), backoff=FAST) as client:
        watch = client.watch({"toolsListChanged": True}, timeout=TIMEOUT)
        assert watch.acknowledged_filter == {} and watch.subscription_id is None
        with pytest.raises(queue.Empty):
            watch.get_nowait()
        assert client._inspect()["subscriptions"] == 0  # no stream is held for it
        server.drop()  # a reconnect asks again, and reports like any watch
        message = watch.get(timeout=TIMEOUT)
        assert message == ("ex_mcp_notification_reconnected", watch, {"resubscribed": [], "failed": []})
        assert server.count("subscriptions/listen") == 2 and client.status == "ready"
        watch.unsubscribe()
        assert server.count("notifications/cancelled") == 0  # there was nothing to cancel


def test_a_catalog_of_a_server_with_nothing_to_listen_to_fetches_its_lists(server: FakeServer) -> None:
    with mcp.connect(server.transport()) as client:
        with client.catalog(timeout=TIMEOUT) as catalog:
            assert catalog.kinds == ("tools",) and catalog.tools == TOOLS
        with pytest.raises(mcp.RequestError) as refused:
            client.listen({"toolsListChanged": True}, timeout=TIMEOUT)
        assert refused.value.code == -32601


def test_a_listen_refused_otherwise_still_fails_a_watch(server: FakeServer) -> None:
    def refuse(params: dict[str, Any], ctx: FakeConnection) -> Any:
        raise FakeError(-32603, "out of subscriptions")

    server.on("subscriptions/listen", refuse)
    with mcp.connect(server.transport()) as client, pytest.raises(mcp.RequestError, match="out of subscriptions"):
        client.watch({"toolsListChanged": True}, timeout=TIMEOUT)
