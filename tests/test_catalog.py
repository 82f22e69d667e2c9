"""client.catalog(): against the real SDK peer (both eras, a reconnect) and the FakeServer (a burst)."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import FakeServer
from tests.sdk_helpers import FAST_BACKOFF, PEER_PROMPTS, PEER_RESOURCES, PEER_TOOLS, WAIT
from tests.waiting import wait_until


def _names(items: list[dict[str, Any]], key: str = "name") -> list[str]:
    return [item[key] for item in items]


def _changes(catalog: mcp.Catalog, n: int) -> list[mcp.CatalogChanged]:
    return [catalog.get(timeout=WAIT) for _ in range(n)]


@pytest.mark.parametrize("sdk_ws_peer", ["both", "legacy"], indirect=True)
def test_catalog_follows_list_changes_and_survives_a_reconnect(sdk_ws_peer: Any) -> None:
    patient = {"backoff": FAST_BACKOFF, "max_reconnect_attempts": 100}  # the peer restarts in seconds
    with mcp.connect(sdk_ws_peer.url, **patient) as client, client.catalog() as catalog:
        assert _names(catalog.tools) == PEER_TOOLS
        assert _names(catalog.prompts) == PEER_PROMPTS
        assert _names(catalog.resources, "uri") == PEER_RESOURCES
        client.call_tool("notify", {"kind": "prompts"})
        changed = catalog.get(timeout=WAIT)
        assert changed[0] == "ex_mcp_catalog_changed"
        assert changed.catalog is catalog and changed.kind == "prompts" and _names(changed.items) == PEER_PROMPTS
        assert catalog.refreshes["prompts"] == 1

        sdk_ws_peer.kill()
        sdk_ws_peer.start()
        # Legacy: refetched after Reconnected; modern: the resync snapshot, no refetch of our own.
        kinds = {message.kind for message in _changes(catalog, 3)}
        assert kinds == {"tools", "prompts", "resources"}
        assert _names(catalog.tools) == PEER_TOOLS
        if client.era == "modern":
            assert catalog.refreshes == {"tools": 0, "prompts": 1, "resources": 0}
        client.call_tool("notify", {"kind": "tools"})
        assert catalog.get(timeout=WAIT).kind == "tools"


def test_a_burst_costs_at_most_two_refetches_never_two_at_once() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        gate, held = threading.Event(), threading.Event()
        in_flight, most = [0], [0]
        lock = threading.Lock()
        lister = server.default_handler("tools/list")
        assert lister is not None

        @server.on("tools/list", concurrent=True)
        def slow_list(params: dict[str, Any], ctx: Any) -> Any:
            with lock:
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
            try:
                if server.count("tools/list") == 2:  # the first refetch waits for the burst
                    held.set()
                    ctx.wait(gate, timeout=WAIT)
                return lister(params, ctx)
            finally:
                with lock:
                    in_flight[0] -= 1

        with client.catalog() as catalog:
            server.list_changed("tools")
            assert held.wait(WAIT)
            server.set_items("tools", [{"name": "new", "inputSchema": {"type": "object"}}])
            for _ in range(20):
                server.list_changed("tools")
            # A queue's size: nothing to wait on but a poll.
            wait_until(lambda: catalog._events.qsize() >= 20, WAIT, "the 20 list changes queued on the catalog")
            gate.set()
            first, second = _changes(catalog, 2)
            assert (first.kind, second.kind) == ("tools", "tools")
            assert _names(second.items) == ["new"] == _names(catalog.tools)
            assert catalog.refreshes["tools"] == 2
            assert server.count("tools/list") == 3  # the first fetch, then two for 21 notifications
            assert most[0] == 1
            with pytest.raises(queue.Empty):
                catalog.get_nowait()


def test_put_subscriber_kinds_from_capabilities_and_close() -> None:
    capabilities = {"tools": {"listChanged": True}}
    with FakeServer(capabilities=capabilities) as server, mcp.connect(server.transport()) as client:
        box: queue.Queue[Any] = queue.Queue()
        catalog = client.catalog(subscriber=box)
        assert catalog.kinds == ("tools",) and catalog.prompts == [] and catalog.resources == []
        assert server.count("prompts/list") == 0
        server.list_changed("tools")
        assert box.get(timeout=WAIT).kind == "tools"
        with pytest.raises(RuntimeError):
            catalog.get(timeout=0.1)  # its messages go to the subscriber
        catalog.close()
        catalog.close()  # idempotent
        assert not catalog._worker.is_alive()


def test_inbox_ends_when_the_client_disconnects() -> None:
    with FakeServer() as server:
        client = mcp.connect(server.transport())
        catalog = client.catalog()
        client.disconnect()
        catalog._worker.join(WAIT)
        assert list(catalog) == []  # iteration ends: the inbox is finished


def test_unread_refreshes_leave_one_pending_message_per_kind() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client, client.catalog() as catalog:
        for n in range(1000):
            catalog._publish("tools", [{"name": f"t{n}"}])  # as the worker does after each refetch
            catalog._publish("prompts", [{"name": f"p{n}"}])
        assert catalog.pending() == 2
        latest: dict[str, Any] = {}
        for _ in range(2):
            message = catalog.get_nowait()
            latest[message.kind] = message.items
        assert latest == {"tools": [{"name": "t999"}], "prompts": [{"name": "p999"}]}
        with pytest.raises(queue.Empty):
            catalog.get_nowait()


def test_inbox_ends_on_disconnect_when_the_server_advertises_no_kinds() -> None:
    with FakeServer(capabilities={}) as server:
        client = mcp.connect(server.transport())
        catalog = client.catalog()
        assert catalog.kinds == ()
        client.disconnect()
        catalog._worker.join(WAIT)
        assert not catalog._worker.is_alive()
        assert list(catalog) == []
