"""A resource watch and a catalog deliver without a proxy, and end like any handle when their
subscriber dies: a thread that registered itself is told of as it ends, an actor (or a thread
named by another) is polled; either way the URI is given back on the server."""

from __future__ import annotations

import threading
import time
from typing import Any

import pykka

import exmcp_actors as mcp
from exmcp_actors._util._thread_end import current_thread_end
from exmcp_actors.testing import FakeServer
from tests.waiting import WAIT, wait_until

URI = "file:///fake/readme.txt"


def test_a_resource_watch_ends_when_the_thread_that_made_it_ends() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        made = threading.Event()
        ended_at: list[float] = []

        def subscriber() -> None:
            watch = client.watch_resource(URI)  # subscriber=None: this thread
            watch.get(timeout=WAIT)
            made.set()
            ended_at.append(time.monotonic())

        thread = threading.Thread(target=subscriber)
        thread.start()
        assert made.wait(WAIT)
        thread.join(WAIT)
        wait_until(lambda: server.subscriptions() == [], WAIT, "the URI given back once the thread ended")
        assert time.monotonic() - ended_at[0] < WAIT / 2
        # The client goes on: a new watch of the URI subscribes it again.
        with client.watch_resource(URI) as again:
            assert again.get(timeout=WAIT)[0] == "ex_mcp_resource_changed"
            assert server.subscriptions() == [URI]


class _Sink(pykka.ThreadingActor):
    def __init__(self, got: threading.Event) -> None:
        super().__init__()
        self._got = got

    def on_receive(self, message: Any) -> None:
        self._got.set()


def test_a_resource_watch_of_an_actor_that_stops_ends_and_gives_the_uri_back() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        got = threading.Event()
        actor = _Sink.start(got)
        client.watch_resource(URI, subscriber=actor)
        assert got.wait(WAIT)  # its first contents delivered: nothing more is, unless the file changes
        assert server.subscriptions() == [URI]
        actor.stop()
        wait_until(lambda: server.subscriptions() == [], WAIT, "the URI given back once the actor stopped")


def test_a_catalog_closes_when_its_subscriber_thread_ends() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        made: list[Any] = []
        ready = threading.Event()

        def subscriber() -> None:
            made.append(client.catalog(timeout=WAIT))
            ready.set()

        thread = threading.Thread(target=subscriber)
        thread.start()
        assert ready.wait(WAIT)
        thread.join(WAIT)
        catalog = made[0]
        wait_until(lambda: catalog._closed, WAIT, "the catalog closed once its thread ended")
        walks = server.count("tools/list")
        server.list_changed("tools")
        # A closed catalog refetches nothing: a marker request shows the change was heard.
        client.ping()
        assert server.count("tools/list") == walks


class _Closings(pykka.ThreadingActor):
    """Sets ``closed`` once it gets a closing message."""

    def __init__(self, closed: threading.Event) -> None:
        super().__init__()
        self._closed = closed

    def on_receive(self, message: Any) -> None:
        if isinstance(message, mcp.Closed):
            self._closed.set()


def test_a_resource_watch_its_feed_ended_stops_watching_its_subscriber() -> None:
    """A watch ended from underneath (its watch overflowed) leaves no poll of its actor behind,
    and its close() afterwards has nothing left to undo."""
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        closed = threading.Event()
        actor = _Closings.start(closed)
        try:
            watch = client.watch_resource(URI, subscriber=actor, max_pending=1)
            assert client._inspect()["liveness"]["polled"] == 1
            feed = watch._feed
            assert feed is not None
            inner = feed._inner
            with feed._lock:  # the watch underneath cannot hand anything to its feed meanwhile
                for n in range(4):  # sub-resources, each its own signal: past twice the bound
                    server.updated(f"{URI}/{n}")
                wait_until(lambda: inner._bound.overflowed, WAIT, "the watch underneath overflowed")
            assert closed.wait(WAIT), "the watch's Closed never reached its actor"
            wait_until(
                lambda: client._inspect()["liveness"] == {"told": 0, "polled": 0, "polling": 0},
                WAIT,
                "the ended watch's subscriber no longer polled",
            )
            watch.close()
        finally:
            actor.stop()


def _disconnect_before_it_watches(module: Any, client: mcp.Client, monkeypatch: Any) -> None:
    """A handle made by ``module`` next watches its subscriber only once ``client`` is
    disconnected."""
    real = module.watch_subscriber

    def after_the_disconnect(handle: Any, resolved: Any, on_gone: Any) -> Any:
        client.disconnect()
        return real(handle, resolved, on_gone)

    monkeypatch.setattr(module, "watch_subscriber", after_the_disconnect)


def test_a_resource_watch_made_while_its_client_disconnects_leaves_nothing_in_its_thread(
    monkeypatch: Any,
) -> None:
    """The client's liveness watch closes with it: a watch that joins a feed just before the
    disconnect and watches its subscriber (this thread, which lives on) just after leaves
    nothing of the closed client in this thread's end."""
    from exmcp_actors._api import _resource_watch

    end = current_thread_end()
    assert end is not None
    before = end.pending()
    with FakeServer() as server:
        client = mcp.connect(server.transport())
        _disconnect_before_it_watches(_resource_watch, client, monkeypatch)
        watch = client.watch_resource(URI)
        assert list(watch)[-1][0] == "ex_mcp_notification_closed"
        assert client._shared.liveness.counts() == {"told": 0, "polled": 0, "polling": 0}
        assert end.pending() == before


def test_a_catalog_made_while_its_client_disconnects_leaves_nothing_in_its_thread(monkeypatch: Any) -> None:
    """A closed client's liveness watch takes no new watch: a catalog that watches its
    subscriber (this thread, which lives on) just after the disconnect leaves nothing of the
    closed client in this thread's end, nor a poll."""
    from exmcp_actors._api import _catalog

    end = current_thread_end()
    assert end is not None
    before = end.pending()
    with FakeServer() as server:
        client = mcp.connect(server.transport())
        _disconnect_before_it_watches(_catalog, client, monkeypatch)
        catalog = client.catalog(timeout=WAIT)
        assert client._shared.liveness.counts() == {"told": 0, "polled": 0, "polling": 0}
        assert end.pending() == before
        catalog.close()
