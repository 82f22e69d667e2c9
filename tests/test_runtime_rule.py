"""The runtime's rule (``exmcp_actors._runtime``), attacked: per-thread wire order on every path a
host command takes, no host code under a lock of the library, stopping from anywhere, and the
follow-ups a delivery raises."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import pytest

import exmcp_actors as mcp
from exmcp_actors._runtime._monitor import SessionMonitor
from exmcp_actors.testing import NO_REPLY, FakeError, FakeServer

WAIT = 5.0
Era = Literal["legacy", "modern"]
A, B, SLOW = "file:///a", "file:///b", "file:///slow"


def legacy(server: FakeServer, kind: str = "memory", **options: Any) -> mcp.Client:
    target: Any = server.transport() if kind == "memory" else server.serve_websocket()
    return mcp.connect(target, protocol="legacy", request_timeout=WAIT, **options)


def modern(server: FakeServer, kind: str = "memory", **options: Any) -> mcp.Client:
    target: Any = server.transport() if kind == "memory" else server.serve_websocket()
    return mcp.connect(target, protocol="modern", request_timeout=WAIT, **options)


def arrivals(server: FakeServer, methods: set[str]) -> list[dict[str, Any]]:
    """What the server received of ``methods``, in arrival order."""
    return [m for _, m in server.received if isinstance(m, dict) and m.get("method") in methods]


def marks(server: FakeServer) -> None:
    @server.on("test/mark")
    def mark(params: dict[str, Any], ctx: Any) -> Any:
        return {}


def eventually(predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Poll ``predicate`` (every 10 ms, at most ``timeout`` seconds) for what no event marks."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        threading.Event().wait(0.01)


class Call:
    """Runs ``fn`` on a thread of its own; ``result()`` re-raises what it raised."""

    def __init__(self, fn: Callable[[], Any], name: str = "call") -> None:
        self._box: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, args=(fn,), name=f"test-{name}")
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._box.put((True, fn()))
        except BaseException as error:  # handed to result()
            self._box.put((False, error))

    def result(self, timeout: float = WAIT * 2) -> Any:
        ok, value = self._box.get(timeout=timeout)
        self.thread.join(timeout)
        if not ok:
            raise value
        return value


class Gate:
    """Holds the server's answer to ``resources/subscribe`` of each URI named until
    ``open(uri)``; a URI in ``refuse`` is then answered with an error."""

    def __init__(self, server: FakeServer, *uris: str) -> None:
        self._opened = {uri: threading.Event() for uri in uris}
        self.refuse: set[str] = set()
        default = server.default_handler("resources/subscribe")
        assert default is not None

        def subscribe(params: dict[str, Any], ctx: Any) -> Any:
            opened = self._opened.get(str(params.get("uri")))
            if opened is not None:
                ctx.wait(opened, WAIT * 2)
                if params["uri"] in self.refuse:
                    raise FakeError(-32602, "refused")
            return default(params, ctx)

        server.on("resources/subscribe", subscribe, concurrent=True)

    def open(self, *uris: str) -> None:
        for uri in uris or tuple(self._opened):
            self._opened[uri].set()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(era="legacy") as fake:
        marks(fake)
        yield fake


@pytest.fixture
def modern_server() -> Iterator[FakeServer]:
    with FakeServer(era="modern") as fake:
        marks(fake)
        yield fake


# -- claim 1: what one thread asks for reaches the wire in the order it asked ---------------


@pytest.mark.parametrize("kind", ["memory", "websocket"])
def test_a_listen_its_cancel_and_the_next_request_of_one_thread_reach_the_wire_in_that_order(
    modern_server: FakeServer, kind: str
) -> None:
    with modern(modern_server, kind) as client:
        for n in range(40):
            subscription = client.listen({"resourceSubscriptions": [f"file:///u{n}"]})
            subscription.cancel()
            client.request("test/mark", {"n": n})
        seen = arrivals(modern_server, {"subscriptions/listen", "notifications/cancelled", "test/mark"})
    listens = [m for m in seen if m["method"] == "subscriptions/listen"]
    listen_ids = {m["id"]: m["params"]["notifications"]["resourceSubscriptions"][0] for m in listens}
    got = []
    for m in seen:
        if m["method"] == "subscriptions/listen":
            got.append(("listen", m["params"]["notifications"]["resourceSubscriptions"][0]))
        elif m["method"] == "notifications/cancelled":
            got.append(("cancel", listen_ids[m["params"]["requestId"]]))
        else:
            got.append(("mark", m["params"]["n"]))
    expected = []
    for n in range(40):
        expected += [("listen", f"file:///u{n}"), ("cancel", f"file:///u{n}"), ("mark", n)]
    assert got == expected


@pytest.mark.parametrize("kind", ["memory", "websocket"])
def test_a_watch_its_removal_and_the_next_request_of_one_thread_reach_the_wire_in_that_order(
    server: FakeServer, kind: str
) -> None:
    with legacy(server, kind) as client:
        for n in range(40):
            watch = client.watch({"resourceSubscriptions": [f"file:///w{n}"]})
            watch.unsubscribe()
            client.request("test/mark", {"n": n})
        seen = arrivals(server, {"resources/subscribe", "resources/unsubscribe", "test/mark"})
    got = [
        ("mark", m["params"]["n"]) if m["method"] == "test/mark" else (m["method"], m["params"]["uri"]) for m in seen
    ]
    expected: list[Any] = []
    for n in range(40):
        uri = f"file:///w{n}"
        expected += [("resources/subscribe", uri), ("resources/unsubscribe", uri), ("mark", n)]
    assert got == expected


def test_an_unsubscribe_that_returns_has_its_resources_unsubscribe_on_the_wire_before_the_next_command(
    server: FakeServer,
) -> None:
    """The wire turn is taken by another thread's slow registration past the unsubscribe's
    timeout: the unsubscribe either finishes its wire part first or says it could not."""
    gate = Gate(server, SLOW)
    with legacy(server) as client:
        listener = client.subscribe_notifications({"resourceSubscriptions": [A]})
        main = threading.current_thread()
        slow = Call(lambda: client.subscribe_notifications({"resourceSubscriptions": [SLOW]}, subscriber=main))
        server.wait_for("resources/subscribe", uri=SLOW)
        try:
            listener.unsubscribe(timeout=0.3)
        except mcp.RequestTimeout:
            returned = False  # it said so: its release is done later, in the wire turn
        else:
            returned = True
        client.request("test/mark", {"n": 1})
        gate.open()
        slow.result()
        server.wait_for("resources/unsubscribe", uri=A)  # released either way
        seen = arrivals(server, {"resources/unsubscribe", "test/mark"})
        if returned:
            assert [m["method"] for m in seen][:2] == ["resources/unsubscribe", "test/mark"]
        assert client._inspect()["refcount"]["counts"] == {SLOW: 1}


def test_an_unsubscribe_whose_wire_turn_comes_in_time_is_on_the_wire_before_the_next_command(
    server: FakeServer,
) -> None:
    gate = Gate(server, SLOW)
    with legacy(server) as client:
        listener = client.subscribe_notifications({"resourceSubscriptions": [A]})
        main = threading.current_thread()
        slow = Call(lambda: client.subscribe_notifications({"resourceSubscriptions": [SLOW]}, subscriber=main))
        server.wait_for("resources/subscribe", uri=SLOW)

        def release_then_mark() -> None:
            listener.unsubscribe(timeout=WAIT)
            client.request("test/mark", {"n": 1})

        release = Call(release_then_mark)
        gate.open()
        slow.result()
        release.result()
        seen = arrivals(server, {"resources/unsubscribe", "test/mark"})
    assert [(m["method"], m["params"].get("uri")) for m in seen] == [("resources/unsubscribe", A), ("test/mark", None)]


def test_a_refused_registrations_rollback_is_on_the_wire_before_the_next_command_of_its_thread(
    server: FakeServer,
) -> None:
    """Another registration waits for the wire turn and holds it past the refused one's
    deadline: the rollback must not be left to run after the thread's next command."""
    gate = Gate(server, B, SLOW)
    gate.refuse.add(B)
    with legacy(server) as client:
        main = threading.current_thread()
        refused = Call(
            lambda: client.subscribe_notifications({"resourceSubscriptions": [A, B]}, subscriber=main, timeout=1.0)
        )
        server.wait_for("resources/subscribe", uri=B)
        other = Call(lambda: client.subscribe_notifications({"resourceSubscriptions": [SLOW]}, subscriber=main))
        gate.open(B)  # refused; the other takes the turn, and its SLOW is held past the deadline
        with pytest.raises(mcp.SubscribeFailed):
            refused.result()
        client.request("test/mark", {"n": 1})
        gate.open(SLOW)
        other.result()
        server.wait_for("resources/unsubscribe", uri=A)
        seen = arrivals(server, {"resources/unsubscribe", "test/mark"})
    assert [(m["method"], m["params"].get("uri")) for m in seen] == [("resources/unsubscribe", A), ("test/mark", None)]


class MonitorSpy:
    """Wraps a client's monitor: signals when a command of ``kind`` starts and ends entering it."""

    def __init__(self, monitor: SessionMonitor, kind: type) -> None:
        self._monitor = monitor
        self._kind = kind
        self.started = threading.Event()
        self.ended = threading.Event()

    def run(self, message: Any, timeout: float | None = None) -> Any:
        if type(message) is not self._kind:
            return self._monitor.run(message, timeout)
        self.started.set()
        try:
            return self._monitor.run(message, timeout)
        finally:
            self.ended.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._monitor, name)


def test_a_listen_not_acknowledged_in_time_is_cancelled_on_the_wire_even_if_the_session_is_busy_then(
    modern_server: FakeServer,
) -> None:
    from exmcp_actors._protocol._events import CancelSubscription

    modern_server.on("subscriptions/listen", lambda params, ctx: NO_REPLY)
    with modern(modern_server) as client:
        monitor = client._monitor
        spy = MonitorSpy(monitor, CancelSubscription)
        client._monitor = spy  # type: ignore[assignment]
        sink: queue.SimpleQueue[Any] = queue.SimpleQueue()  # a subscriber that never dies
        call = Call(lambda: client.listen({"toolsListChanged": True}, subscriber=sink, timeout=0.3))
        _, listen = modern_server.wait_for("subscriptions/listen")
        with monitor.lock:  # the session is busy as the listen's deadline passes
            assert spy.started.wait(WAIT)
            spy.ended.wait(0.5)  # a cancel that gives up this soon would leave the listen open
        with pytest.raises(mcp.RequestTimeout):
            call.result()
        modern_server.wait_for("notifications/cancelled", requestId=listen["id"])
        assert client._inspect()["subscriptions"] == 0
