"""A resource watch and a catalog deliver without a proxy, and end like any handle when their
subscriber dies: a thread that registered itself is told of as it ends, an actor (or a thread
named by another) is polled; either way the URI is given back on the server."""

from __future__ import annotations

import threading
import time
from typing import Any

import pykka

import exmcp_actors as mcp
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
