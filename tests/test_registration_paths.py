"""Registration shortcuts: a listener on a URI that is already held, and the removal
of one holder among several, need no wire call and so no wait on the refcount worker, which
keeps serializing every call that does go to the wire."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import FakeServer

WAIT = 5.0
A = "file:///a.txt"
B = "file:///b.txt"
UPDATED = "notifications/resources/updated"


class BusyWorker:
    """Holds the refcount worker in a ``resources/subscribe`` for B until released."""

    def __init__(self, server: FakeServer, client: mcp.Client) -> None:
        self.gate = threading.Event()
        self.errors: queue.SimpleQueue[BaseException] = queue.SimpleQueue()
        self.listener: mcp.Listener | None = None

        @server.on("resources/subscribe", concurrent=True)
        def slow_subscribe(params: dict[str, Any], ctx: Any) -> Any:
            if params["uri"] == B:
                ctx.wait(self.gate)
            return {}

        def register() -> None:
            try:
                self.listener = client.subscribe_notifications({"resourceSubscriptions": [B]}, subscriber=queue.Queue())
            except BaseException as error:
                self.errors.put(error)

        self.thread = threading.Thread(target=register, name="test-busy-worker")
        self.thread.start()
        server.wait_for("resources/subscribe", uri=B)  # the worker is on the wire now

    def release(self) -> mcp.Listener:
        self.gate.set()
        self.thread.join(WAIT)
        assert self.errors.empty() and self.listener is not None
        return self.listener


def test_a_registration_on_a_held_uri_neither_goes_to_the_wire_nor_waits_for_the_worker(
    legacy_server: FakeServer, legacy_client: mcp.Client
) -> None:
    first = legacy_client.subscribe_notifications({"resourceSubscriptions": [A]})
    busy = BusyWorker(legacy_server, legacy_client)
    try:
        # The worker is stuck on B's subscribe: before the shortcut this waited behind it and timed out.
        second = legacy_client.subscribe_notifications({"resourceSubscriptions": [A]}, timeout=1.0)
        legacy_server.updated(A)
        assert second.get(timeout=WAIT).method == UPDATED
        assert first.get(timeout=WAIT).method == UPDATED
        assert legacy_server.count("resources/subscribe", uri=A) == 1
        # Removing one holder of two: no unsubscribe, no wait on the worker either.
        legacy_client.unsubscribe_notifications(second, timeout=1.0)
    finally:
        held_b = busy.release()
    assert legacy_client._inspect()["refcount"]["counts"] == {A: 1, B: 1}
    assert legacy_server.count("resources/unsubscribe") == 0
    legacy_client.unsubscribe_notifications(first)
    legacy_client.unsubscribe_notifications(held_b)
    assert legacy_server.count("resources/unsubscribe", uri=A) == 1
    assert legacy_client._inspect()["refcount"]["empty"]


def test_a_registration_naming_a_held_and_a_new_uri_still_queues_behind_the_worker(
    legacy_server: FakeServer, legacy_client: mcp.Client
) -> None:
    legacy_client.subscribe_notifications({"resourceSubscriptions": [A]})
    busy = BusyWorker(legacy_server, legacy_client)
    try:
        with pytest.raises(mcp.RequestTimeout):  # B is not held yet: this one needs the worker
            legacy_client.subscribe_notifications({"resourceSubscriptions": [A, B]}, timeout=0.3)
    finally:
        busy.release()
    # The timed-out registration left nothing behind once the worker got to it.
    marker = legacy_client.subscribe_notifications({"resourceSubscriptions": [A]})
    assert legacy_client._inspect()["refcount"]["counts"] == {A: 2, B: 1}
    assert marker is not None


def test_a_failed_registration_on_a_held_uri_gives_its_count_back(
    legacy_server: FakeServer, legacy_client: mcp.Client
) -> None:
    first = legacy_client.subscribe_notifications({"resourceSubscriptions": [A]})
    dead = threading.Thread(target=lambda: None, name="test-dead-subscriber")
    dead.start()
    dead.join()
    with pytest.raises(mcp.SubscriberNotAlive):
        legacy_client.subscribe_notifications({"resourceSubscriptions": [A]}, subscriber=dead)
    legacy_client.unsubscribe_notifications(first)
    legacy_server.wait_for("resources/unsubscribe", uri=A)  # the failed one held nothing back
    assert legacy_client._inspect()["refcount"]["empty"]
