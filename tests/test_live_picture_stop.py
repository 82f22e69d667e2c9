"""What disconnect() leaves of resource watches and catalogs: their threads ended, their closing
messages delivered, exactly once, whatever was in flight (a read, a stale refetch, a put())."""

from __future__ import annotations

import math
import queue
import threading
from typing import Any

import exmcp_actors as mcp
from exmcp_actors._util._scheduler import scheduler
from exmcp_actors.testing import NO_REPLY, FakeServer
from tests.waiting import WAIT, wait_until

URI = "file:///fake/readme.txt"
#: Rounds of a race the library must win every time (each a connect and a disconnect).
ROUNDS = 25


class Box:
    """A ``put()`` subscriber that keeps what it got."""

    def __init__(self) -> None:
        self.got: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.seen: list[Any] = []

    def put(self, message: Any) -> None:
        self.seen.append(message)
        self.got.put(message)


def _new_threads(before: set[threading.Thread]) -> list[str]:
    return sorted(
        thread.name
        for thread in threading.enumerate()
        if thread not in before and thread.is_alive() and thread.name.startswith(("exmcp-rwatch", "exmcp-catalog"))
    )


def test_disconnect_returns_once_watch_and_catalog_threads_ended_and_their_closings_landed() -> None:
    with FakeServer() as server:
        for _ in range(ROUNDS):
            before = set(threading.enumerate())
            client = mcp.connect(server.transport())
            catalog = client.catalog()
            watch = client.watch_resource(URI)
            box = Box()
            client.watch_resource(URI, box)
            assert watch.get(timeout=WAIT)[0] == "ex_mcp_resource_changed"
            assert box.got.get(timeout=WAIT)[0] == "ex_mcp_resource_changed"
            client.disconnect(timeout=WAIT)
            assert _new_threads(before) == []
            closing = watch.get_nowait()  # already there: no wait
            assert isinstance(closing, mcp.Closed) and closing.reason == "disconnected"
            assert [m.reason for m in box.seen if isinstance(m, mcp.Closed)] == ["disconnected"]
            assert catalog._inbox is not None and catalog._inbox.finished


def test_disconnect_during_a_held_read_ends_the_watch_once_and_leaves_no_thread() -> None:
    with FakeServer() as server:
        held, gate = threading.Event(), threading.Event()
        reader = server.default_handler("resources/read")
        assert reader is not None

        @server.on("resources/read", concurrent=True)
        def held_read(params: dict[str, Any], ctx: Any) -> Any:
            if server.count("resources/read") == 2:
                held.set()
                ctx.wait(gate, timeout=WAIT)
            return reader(params, ctx)

        before = set(threading.enumerate())
        client = mcp.connect(server.transport())
        box = Box()
        watch = client.watch_resource(URI)
        client.watch_resource(URI, box)
        assert watch.get(timeout=WAIT)[0] == "ex_mcp_resource_changed"
        server.updated(URI)
        assert held.wait(WAIT)
        client.disconnect(timeout=WAIT)
        gate.set()
        assert _new_threads(before) == []
        assert isinstance(watch.get_nowait(), mcp.Closed)
        assert list(watch) == []  # ended: nothing after its Closed
        assert [type(m).__name__ for m in box.seen if not isinstance(m, mcp.ResourceChanged)] == ["Closed"]


def test_disconnect_during_a_stale_refetch_serves_the_last_list_and_leaves_no_thread() -> None:
    with FakeServer(era="modern", capabilities={"tools": {}}) as server:
        held, gate = threading.Event(), threading.Event()
        walks = [0]

        @server.on("tools/list", concurrent=True)
        def listing(params: dict[str, Any], ctx: Any) -> Any:
            walks[0] += 1
            if walks[0] == 2:
                held.set()
                ctx.wait(gate, timeout=WAIT)
            return {"tools": [{"name": "a", "inputSchema": {"type": "object"}}]}  # no page kept

        before = set(threading.enumerate())
        client = mcp.connect(server.transport())
        catalog = client.catalog()
        catalog._fresh.clock = lambda: math.inf  # stale from now on: the next read refetches
        read: queue.SimpleQueue[Any] = queue.SimpleQueue()
        reading = threading.Thread(target=lambda: read.put(catalog.tools))
        reading.start()
        assert held.wait(WAIT)
        client.disconnect(timeout=WAIT)
        gate.set()
        assert [tool["name"] for tool in read.get(timeout=WAIT)] == ["a"]  # the last list
        reading.join(WAIT)
        assert _new_threads(before) == []
        assert catalog._inbox is not None and catalog._inbox.finished


def test_disconnect_with_a_keepalive_probe_unanswered_leaves_no_timer() -> None:
    with FakeServer() as server:
        server.on("ping", lambda params, ctx: NO_REPLY)
        client = mcp.connect(server.transport(), keepalive=0.2)
        watch = client.watch({"status": True, "toolsListChanged": True})
        server.wait_for("ping", timeout=WAIT)
        client.disconnect(timeout=WAIT)
        states = [m.state for m in watch if isinstance(m, mcp.Status)]
        assert states == ["ready", "closed"]
        wait_until(lambda: scheduler().pending() == 0, WAIT, "every timer of the client cancelled")


def test_a_watch_put_blocked_past_the_disconnect_timeout_gets_nothing_more_once_it_returns() -> None:
    with FakeServer() as server:
        entered, gate = threading.Event(), threading.Event()
        seen: list[Any] = []

        class Stuck:
            def put(self, message: Any) -> None:
                seen.append(message)
                if len(seen) == 1:
                    entered.set()
                    gate.wait(WAIT)

        client = mcp.connect(server.transport())
        watch = client.watch_resource(URI, Stuck())
        assert entered.wait(WAIT)
        client.disconnect(timeout=0.2)  # returns with the put() still blocked
        gate.set()
        assert watch._courier is not None
        watch._courier._thread.join(WAIT)
        assert [type(message).__name__ for message in seen] == ["ResourceChanged"]
