"""One host thread's commands reach the wire in the order it made them, whatever path each
takes; and a subscriber's ``put()`` that calls back into the client never waits for itself."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import FakeServer

WAIT = 5.0
ROUNDS = 200
ROOTS = [{"uri": "file:///one", "name": "one"}]


@pytest.fixture(params=["memory", "websocket"])
def server(request: pytest.FixtureRequest) -> Iterator[FakeServer]:
    with FakeServer(era="legacy") as fake:

        @fake.on("test/mark")
        def mark(params: dict[str, Any], ctx: Any) -> Any:
            return {}

        fake.transport_kind = request.param  # type: ignore[attr-defined]
        yield fake


def connect(server: FakeServer, **options: Any) -> mcp.Client:
    kind = server.transport_kind  # type: ignore[attr-defined]
    target: Any = server.transport() if kind == "memory" else server.serve_websocket()
    return mcp.connect(target, protocol="legacy", request_timeout=WAIT, **options)


def arrivals(server: FakeServer, methods: set[str]) -> list[dict[str, Any]]:
    """What the server received of ``methods``, in arrival order."""
    return [m for _, m in server.received if isinstance(m, dict) and m.get("method") in methods]


def test_roots_changed_reaches_the_server_before_the_next_request_of_the_same_thread(server: FakeServer) -> None:
    with connect(server, roots=ROOTS) as client:
        for n in range(ROUNDS):
            client.set_roots([{"uri": f"file:///r{n}", "name": f"r{n}"}])
            client.request("test/mark", {"n": n})
        seen = arrivals(server, {"notifications/roots/list_changed", "test/mark"})
    expected = []
    for n in range(ROUNDS):
        expected += ["notifications/roots/list_changed", ("test/mark", n)]
    assert [m["method"] if "id" not in m else (m["method"], m["params"]["n"]) for m in seen] == expected


def test_a_log_level_reaches_the_server_before_the_next_request_of_the_same_thread(server: FakeServer) -> None:
    levels = ["debug", "info", "warning", "error"]
    with connect(server) as client:
        for n in range(ROUNDS):
            client.set_logging_level(levels[n % 4])
            client.request("test/mark", {"n": n})
        seen = arrivals(server, {"logging/setLevel", "test/mark"})
    expected: list[Any] = []
    for n in range(ROUNDS):
        expected += [("logging/setLevel", levels[n % 4]), ("test/mark", n)]
    got = [(m["method"], m["params"].get("level", m["params"].get("n"))) for m in seen]
    assert got == expected


def test_subscribe_unsubscribe_and_a_request_of_one_thread_arrive_in_that_order(server: FakeServer) -> None:
    with connect(server) as client:
        for n in range(ROUNDS // 2):
            listener = client.subscribe_notifications({"resourceSubscriptions": [f"file:///u{n}"]})
            listener.unsubscribe()
            client.request("test/mark", {"n": n})
        seen = arrivals(server, {"resources/subscribe", "resources/unsubscribe", "test/mark"})
    expected: list[Any] = []
    for n in range(ROUNDS // 2):
        expected += [("resources/subscribe", f"file:///u{n}"), ("resources/unsubscribe", f"file:///u{n}"), n]
    got = [m["params"]["n"] if m["method"] == "test/mark" else (m["method"], m["params"]["uri"]) for m in seen]
    assert got == expected


def test_a_timed_out_request_is_cancelled_on_the_wire_before_the_next_request_of_the_same_thread(
    server: FakeServer,
) -> None:
    never = threading.Event()

    @server.on("test/slow", concurrent=True)
    def slow(params: dict[str, Any], ctx: Any) -> Any:
        ctx.wait(never)
        return {}

    with connect(server) as client:
        for n in range(20):
            with pytest.raises(mcp.RequestTimeout):
                client.request("test/slow", {"n": n}, timeout=0.02)
            client.request("test/mark", {"n": n})
        seen = arrivals(server, {"test/slow", "notifications/cancelled", "test/mark"})
        never.set()
    slow_ids = {m["params"]["n"]: m["id"] for m in seen if m["method"] == "test/slow"}
    expected: list[Any] = []
    for n in range(20):
        expected += [("test/slow", n), ("cancelled", slow_ids[n]), ("test/mark", n)]
    got = [
        ("cancelled", m["params"]["requestId"])
        if m["method"] == "notifications/cancelled"
        else (m["method"], m["params"]["n"])
        for m in seen
    ]
    assert got == expected


def test_each_of_several_threads_keeps_its_own_order_to_the_wire(server: FakeServer) -> None:
    threads_n, rounds = 4, 40
    errors: queue.SimpleQueue[BaseException] = queue.SimpleQueue()
    with connect(server) as client:

        def commands(t: int) -> None:
            try:
                for n in range(rounds):
                    uri = f"file:///t{t}/{n}"
                    listener = client.subscribe_notifications({"resourceSubscriptions": [uri]})
                    client.request("test/mark", {"t": t, "n": n, "step": "after-subscribe"})
                    listener.unsubscribe()
                    client.request("test/mark", {"t": t, "n": n, "step": "after-unsubscribe"})
            except BaseException as error:  # reported below, in the test's thread
                errors.put(error)

        workers = [threading.Thread(target=commands, args=(t,)) for t in range(threads_n)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(WAIT * 6)
        assert errors.empty(), errors.get()
        seen = arrivals(server, {"resources/subscribe", "resources/unsubscribe", "test/mark"})

    def owner(m: dict[str, Any]) -> int:
        if m["method"] == "test/mark":
            return int(m["params"]["t"])
        return int(m["params"]["uri"].split("/")[3][1:])

    for t in range(threads_n):
        mine = [m for m in seen if owner(m) == t]
        expected: list[Any] = []
        for n in range(rounds):
            uri = f"file:///t{t}/{n}"
            expected += [("resources/subscribe", uri), ("after-subscribe", n)]
            expected += [("resources/unsubscribe", uri), ("after-unsubscribe", n)]
        got = [
            (m["params"]["step"], m["params"]["n"]) if m["method"] == "test/mark" else (m["method"], m["params"]["uri"])
            for m in mine
        ]
        assert got == expected, f"thread {t}"


# -- a put() subscriber that calls back into the client -----------------------------------


class CallingBack:
    """A put() subscriber that calls into the client on its first message, from where put()
    runs, and records on which thread and whether the call came back."""

    def __init__(self, client: mcp.Client, what: str) -> None:
        self.client = client
        self.what = what
        self.listener: Any = None
        self.done: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.entered = threading.Event()
        self._called = False

    def put(self, message: Any) -> None:
        if self._called or message[0] != "ex_mcp_notification":
            return
        self._called = True
        self.entered.set()
        thread = threading.current_thread().name
        try:
            if self.what == "request":
                self.client.request("test/mark", {"from": "put"}, timeout=WAIT)
            elif self.what == "unsubscribe":
                self.listener.unsubscribe(timeout=WAIT)
            else:
                self.client.disconnect(timeout=WAIT)
        except BaseException as error:
            self.done.put((thread, error))
        else:
            self.done.put((thread, None))


def not_a_library_lock_holder(thread: str) -> bool:
    """put() runs on its subscriber's proxy thread, never on a reader or the client actor."""
    return "SubscriberProxy" in thread


@pytest.mark.parametrize("what", ["request", "unsubscribe", "disconnect"])
def test_a_put_subscriber_that_calls_back_into_the_client_never_waits_for_its_own_thread(
    server: FakeServer, what: str
) -> None:
    client = connect(server)
    try:
        subscriber = CallingBack(client, what)
        subscriber.listener = client.subscribe_notifications({"toolsListChanged": True}, subscriber=subscriber)
        server.list_changed("tools")
        thread, error = subscriber.done.get(timeout=WAIT * 2)
        assert error is None, error
        assert not_a_library_lock_holder(thread), thread
    finally:
        client.disconnect()


@pytest.mark.parametrize("what", ["request", "unsubscribe", "disconnect"])
def test_a_put_subscriber_whose_proxy_was_stopped_from_outside_is_called_on_its_successor(
    server: FakeServer, what: str
) -> None:
    """A delivery that finds the proxy stopped starts its successor instead of calling put()
    on the delivering thread, which may hold a lock of the library."""
    client = connect(server)
    try:
        subscriber = CallingBack(client, what)
        subscriber.listener = client.subscribe_notifications({"toolsListChanged": True}, subscriber=subscriber)
        slot = client._monitor.session.registry.slots[("put", id(subscriber))]
        stopped = slot.ref
        with client._monitor.lock:  # the actor cannot handle the proxy's stop report meanwhile
            stopped.stop(block=True, timeout=WAIT)
            server.list_changed("tools")  # the reader finds the proxy stopped and starts its successor
            assert subscriber.entered.wait(WAIT)  # put() runs there, while this thread holds the monitor
        thread, error = subscriber.done.get(timeout=WAIT * 2)
        assert error is None, error
        assert not_a_library_lock_holder(thread), thread
        if what != "disconnect":
            successor = client._monitor.session.registry.slots.get(("put", id(subscriber)))
            assert successor is None or successor.ref is not stopped
    finally:
        client.disconnect()
