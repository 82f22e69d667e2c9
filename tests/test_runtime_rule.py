"""The runtime's rule (``exmcp_actors._runtime``), attacked: per-thread wire order on every path a
host command takes, no host code under a lock of the library, stopping from anywhere, and the
follow-ups a delivery raises."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, Literal

import pytest

import exmcp_actors as mcp
from exmcp_actors._runtime._monitor import SessionMonitor
from exmcp_actors.testing import NO_REPLY, FakeError, FakeServer
from tests.waiting import wait_until

WAIT = 5.0
#: Rounds of each one-thread order test: what the helper sends and what the test expects.
ROUNDS = 40
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


def open_close_and_mark(client: mcp.Client, open_close: Callable[[int], None], rounds: int = ROUNDS) -> None:
    """From this thread, ``rounds`` times: open a handle and close it, then a marked request."""
    for n in range(rounds):
        open_close(n)
        client.request("test/mark", {"n": n})


def marks(server: FakeServer) -> None:
    @server.on("test/mark")
    def mark(params: dict[str, Any], ctx: Any) -> Any:
        return {}


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
        open_close_and_mark(client, lambda n: client.listen({"resourceSubscriptions": [f"file:///u{n}"]}).cancel())
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
    for n in range(ROUNDS):
        expected += [("listen", f"file:///u{n}"), ("cancel", f"file:///u{n}"), ("mark", n)]
    assert got == expected


@pytest.mark.parametrize("kind", ["memory", "websocket"])
def test_a_watch_its_removal_and_the_next_request_of_one_thread_reach_the_wire_in_that_order(
    server: FakeServer, kind: str
) -> None:
    with legacy(server, kind) as client:
        open_close_and_mark(client, lambda n: client.watch({"resourceSubscriptions": [f"file:///w{n}"]}).unsubscribe())
        seen = arrivals(server, {"resources/subscribe", "resources/unsubscribe", "test/mark"})
    got = [
        ("mark", m["params"]["n"]) if m["method"] == "test/mark" else (m["method"], m["params"]["uri"]) for m in seen
    ]
    expected: list[Any] = []
    for n in range(ROUNDS):
        uri = f"file:///w{n}"
        expected += [("resources/subscribe", uri), ("resources/unsubscribe", uri), ("mark", n)]
    assert got == expected


@pytest.mark.parametrize("kind", ["memory", "websocket"])
def test_a_modern_log_level_rides_in_the_very_next_request_of_the_same_thread(
    modern_server: FakeServer, kind: str
) -> None:
    levels = ["debug", "info", "warning", "error"]
    with modern(modern_server, kind) as client:
        for n in range(ROUNDS):
            client.set_logging_level(levels[n % 4])
            client.request("test/mark", {"n": n})
        seen = arrivals(modern_server, {"test/mark"})
    got = [(m["params"]["n"], m["params"]["_meta"]["io.modelcontextprotocol/logLevel"]) for m in seen]
    assert got == [(n, levels[n % 4]) for n in range(ROUNDS)]


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


def test_roots_a_timed_out_request_and_the_next_request_reach_a_streamable_http_server_in_order() -> None:
    from tests.http_fakes import FakeMcp, serving

    fake = FakeMcp(probe_status=404)  # a legacy server
    with serving(fake) as http, mcp.connect(http.url, protocol="legacy", roots=ROOTS, request_timeout=WAIT) as client:
        for n in range(10):
            client.set_roots([{"uri": f"file:///r{n}", "name": f"r{n}"}])
            with pytest.raises(mcp.RequestTimeout):
                client.request("test/slow", {"n": n}, timeout=0.05)
            client.request("test/json", {"n": n})
        fake.release()
        with fake._cond:
            bodies = [post.body for post in fake.posts if isinstance(post.body, dict)]
    slow_ids = {body["id"]: body["params"]["n"] for body in bodies if body.get("method") == "test/slow"}
    got: list[Any] = []
    for body in bodies:
        method = body.get("method")
        if method == "notifications/roots/list_changed":
            got.append("roots")
        elif method == "notifications/cancelled":
            got.append(("cancel", slow_ids[body["params"]["requestId"]]))
        elif method in ("test/slow", "test/json"):
            got.append((method, body["params"]["n"]))
    expected: list[Any] = []
    for n in range(10):
        expected += ["roots", ("test/slow", n), ("cancel", n), ("test/json", n)]
    assert got == expected


# -- claim 2: host code never runs under a lock of the library, so it may call back --------

FAST = mcp.Backoff(initial=0.01, maximum=0.05, jitter=0.0)
ROOTS = [{"uri": "file:///root", "name": "root"}]


def library_locks_held(client: mcp.Client) -> list[str]:
    """The library's locks the calling thread holds (those that know their owner)."""
    held = []
    if client._monitor.held_here:
        held.append("session monitor")
    lane: Any = client._monitor.session.registry.index  # the session indexes through the lane
    if lane._lock._is_owned():
        held.append("delivery lane")
    return held


def callback_commands(modern_era: bool) -> dict[str, Callable[[Any], Any]]:
    """What a host's callback may do with the client it is called from (``cb``: CallingBack)."""
    sink: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def register(cb: Any) -> Any:
        flt = {"promptsListChanged": True}
        handle = cb.client.listen(flt, subscriber=sink) if modern_era else cb.client.subscribe_notifications(flt, sink)
        handle.close()

    return {
        "request": lambda cb: cb.client.request("test/mark", {"from": "callback"}, timeout=WAIT),
        "end its handle": lambda cb: cb.handle.close(),
        "set_roots": lambda cb: cb.client.set_roots([{"uri": "file:///other", "name": "other"}]),
        "set_logging_level": lambda cb: cb.client.set_logging_level("info", timeout=WAIT),
        "register": register,
        "disconnect": lambda cb: cb.client.disconnect(timeout=WAIT),
    }


class CallingBack:
    """A put() subscriber that runs ``command`` on the first message ``fires(message)`` accepts,
    from inside put(), and records the thread, the library locks it held and the outcome."""

    def __init__(self, client: mcp.Client, fires: Callable[[Any], bool], command: Callable[[Any], Any]) -> None:
        self.client = client
        self.handle: Any = None
        self._fires = fires
        self._command = command
        self._fired = False
        self.outcome: queue.SimpleQueue[tuple[str, list[str], BaseException | None]] = queue.SimpleQueue()

    def put(self, message: Any) -> None:
        if self._fired or not self._fires(message):
            return
        self._fired = True
        held = library_locks_held(self.client)
        try:
            self._command(self)
        except BaseException as error:  # checked by the test
            self.outcome.put((threading.current_thread().name, held, error))
        else:
            self.outcome.put((threading.current_thread().name, held, None))

    def check(self, *, closing: bool = False) -> None:
        """It ran, on the subscriber's proxy, with no library lock held, and it worked (or, on
        a closing client, said the client is not connected): nothing waited for itself."""
        thread, held, error = self.outcome.get(timeout=WAIT * 2)
        assert held == [], held
        assert "SubscriberProxy" in thread or "catalog" in thread, thread
        if closing and isinstance(error, mcp.NotConnected):
            return
        assert error is None, repr(error)


def tag_is(*tags: str) -> Callable[[Any], bool]:
    return lambda message: message[0] in tags


@pytest.mark.parametrize("what", list(callback_commands(False)))
def test_a_put_called_with_a_reconnected_may_call_back_into_the_client(server: FakeServer, what: str) -> None:
    client = legacy(server, roots=ROOTS, backoff=FAST)
    try:
        cb = CallingBack(client, tag_is("ex_mcp_notification_reconnected"), callback_commands(False)[what])
        cb.handle = client.subscribe_notifications({"resourceSubscriptions": [A]}, subscriber=cb)
        server.drop()
        cb.check()
    finally:
        client.disconnect()


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("what", list(callback_commands(False)))
def test_a_put_called_with_its_closing_message_at_disconnect_may_call_back_into_the_client(era: Era, what: str) -> None:
    with FakeServer(era=era) as fake:
        marks(fake)
        client = (modern if era == "modern" else legacy)(fake, roots=ROOTS)
        cb = CallingBack(
            client,
            tag_is("ex_mcp_notification_closed", "ex_mcp_subscription_closed"),
            callback_commands(era == "modern")[what],
        )
        flt = {"toolsListChanged": True}
        cb.handle = client.listen(flt, subscriber=cb) if era == "modern" else client.subscribe_notifications(flt, cb)
        client.disconnect()
        cb.check(closing=True)


@pytest.mark.parametrize("what", list(callback_commands(False)))
def test_a_put_called_from_the_readers_lane_may_call_back_into_the_client(server: FakeServer, what: str) -> None:
    client = legacy(server, roots=ROOTS)
    try:
        cb = CallingBack(client, tag_is("ex_mcp_notification"), callback_commands(False)[what])
        cb.handle = client.subscribe_notifications({"toolsListChanged": True}, subscriber=cb)
        server.list_changed("tools")
        cb.check()
    finally:
        client.disconnect()


@pytest.mark.parametrize("what", list(callback_commands(True)))
def test_a_put_called_with_a_subscription_event_may_call_back_into_the_client(
    modern_server: FakeServer, what: str
) -> None:
    client = modern(modern_server, roots=ROOTS)
    try:
        cb = CallingBack(client, tag_is("ex_mcp_subscription"), callback_commands(True)[what])
        cb.handle = client.listen({"toolsListChanged": True}, subscriber=cb)
        modern_server.event(cb.handle.subscription_id, "notifications/tools/list_changed")
        cb.check()
    finally:
        client.disconnect()


class Blocking(CallingBack):
    """A CallingBack whose first put() waits until released, so what follows piles up."""

    def __init__(self, client: mcp.Client, fires: Callable[[Any], bool], command: Callable[[Any], Any]) -> None:
        super().__init__(client, fires, command)
        self.release = threading.Event()
        self.blocked = threading.Event()
        self._first = True

    def put(self, message: Any) -> None:
        if self._first:
            self._first = False
            self.blocked.set()
            self.release.wait(WAIT * 2)
        super().put(message)


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("what", ["request", "end its handle", "register", "disconnect"])
def test_a_put_called_with_its_overflow_closing_message_may_call_back_into_the_client(era: Era, what: str) -> None:
    with FakeServer(era=era) as fake:
        marks(fake)
        client = (modern if era == "modern" else legacy)(fake)
        try:
            closing = ("ex_mcp_notification_closed", "ex_mcp_subscription_closed")
            cb = Blocking(
                client, lambda m: m[0] in closing and m[2][0] == "overflow", callback_commands(era == "modern")[what]
            )
            flt = {"logMessages": True}
            cb.handle = (
                client.listen(flt, subscriber=cb, max_pending=2)
                if era == "modern"
                else client.subscribe_notifications(flt, cb, max_pending=2)
            )
            log = {"level": "info", "data": "x"}  # (2026-07-28 sends logs unstamped)
            fake.notify("notifications/message", log)
            assert cb.blocked.wait(WAIT)
            for _ in range(4):  # not change signals: past the bound they close the handle
                fake.notify("notifications/message", log)
            wait_until(lambda: client._inspect()["entries"] == 0, what="the overflowed handle removed")
            cb.release.set()
            cb.check()
        finally:
            client.disconnect()


@pytest.mark.parametrize("what", ["request", "end its handle", "register", "disconnect"])
def test_a_catalog_subscriber_may_call_back_into_the_client_and_its_catalog(server: FakeServer, what: str) -> None:
    client = legacy(server)
    try:
        cb = CallingBack(client, tag_is("ex_mcp_catalog_changed"), callback_commands(False)[what])
        cb.handle = client.catalog(subscriber=cb)
        server.list_changed("tools")
        cb.check()
        cb.handle.close()
    finally:
        client.disconnect()


@pytest.mark.parametrize("what", ["request", "end its handle", "register", "disconnect"])
def test_a_hub_watch_subscriber_may_call_back_into_the_client(server: FakeServer, what: str) -> None:
    with mcp.Hub.from_config({"mcpServers": {"a": {"url": server.serve_websocket()}}}) as hub:
        marks(server)
        client = hub.clients["a"]
        cb = CallingBack(client, tag_is("ex_mcp_notification"), callback_commands(client.era == "modern")[what])
        group = hub.watch({"toolsListChanged": True}, subscriber=cb)
        cb.handle = group.handles["a"]
        server.list_changed("tools")
        cb.check()


def host_callback_outcomes() -> tuple[queue.SimpleQueue[Any], Callable[[mcp.Client, str], None]]:
    """Where a handler or progress callback records what calling back gave."""
    outcomes: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def call_back(client: mcp.Client, what: str) -> None:
        held = library_locks_held(client)
        try:
            callback_commands(client.era == "modern")[what](type("Cb", (), {"client": client, "handle": None})())
        except BaseException as error:  # checked by the test
            outcomes.put((threading.current_thread().name, held, error))
        else:
            outcomes.put((threading.current_thread().name, held, None))

    return outcomes, call_back


def check_host_callback(outcomes: queue.SimpleQueue[Any], *, closing_ok: bool) -> None:
    thread, held, error = outcomes.get(timeout=WAIT * 2)
    assert held == [], held
    assert thread.startswith(("exmcp-host-", "exmcp-callbacks-")), thread
    if closing_ok and isinstance(error, mcp.NotConnected):
        return
    assert error is None, repr(error)


@pytest.mark.parametrize("what", ["request", "set_roots", "register", "disconnect"])
def test_a_sampling_handler_may_call_back_into_the_client(server: FakeServer, what: str) -> None:
    outcomes, call_back = host_callback_outcomes()
    holder: list[mcp.Client] = []

    def sampling(params: dict[str, Any]) -> dict[str, Any]:
        call_back(holder[0], what)
        return {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"}

    client = legacy(server, roots=ROOTS, sampling=sampling)
    holder.append(client)
    try:
        request_id = server.request("sampling/createMessage", {"messages": [], "maxTokens": 1})
        check_host_callback(outcomes, closing_ok=False)
        if what != "disconnect":
            assert "result" in server.wait_response(request_id)
    finally:
        client.disconnect()


@pytest.mark.parametrize("what", ["request", "set_roots", "register", "disconnect"])
def test_a_progress_callback_may_call_back_into_the_client(server: FakeServer, what: str) -> None:
    outcomes, call_back = host_callback_outcomes()
    called_back = threading.Event()

    @server.on("tools/call", concurrent=True)
    def call_tool(params: dict[str, Any], ctx: Any) -> Any:
        token = params["_meta"]["progressToken"]
        ctx.notify("notifications/progress", {"progressToken": token, "progress": 1})
        ctx.wait(called_back, WAIT)
        return {"content": []}

    client = legacy(server, roots=ROOTS)
    try:

        def progress(params: dict[str, Any]) -> None:
            call_back(client, what)
            called_back.set()

        if what == "disconnect":
            with pytest.raises(mcp.NotConnected):
                client.call_tool("x", progress=progress, timeout=WAIT)
        else:
            client.call_tool("x", progress=progress, timeout=WAIT)
        check_host_callback(outcomes, closing_ok=False)
    finally:
        client.disconnect()


def test_a_notification_the_reader_routes_to_a_proxy_not_started_yet_is_delivered_and_loses_nothing_after_it(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registration indexes its listener before it starts its subscriber's proxy (both on
    the registering thread, under the monitor): a reader delivering in between must neither
    lose that notification nor the frames after it in the same read."""
    from exmcp_actors._protocol._events import StartProxy
    from exmcp_actors._runtime import _effects, _lane

    taken = threading.Event()
    take = _lane.DeliveryLane.take

    def take_and_mark(self: Any, *args: Any) -> None:
        try:
            take(self, *args)
        finally:
            taken.set()

    start_proxy = _effects.PERFORMERS[StartProxy]

    def start_proxy_after_a_delivery(shell: Any, session: Any, effect: Any) -> None:
        taken.clear()
        ping = {"jsonrpc": "2.0", "id": "in-the-window", "method": "ping"}
        server.send_batch([{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}, ping])
        assert taken.wait(WAIT)  # the reader has had its go at the batch
        start_proxy(shell, session, effect)

    with legacy(server) as client:
        monkeypatch.setattr(_lane.DeliveryLane, "take", take_and_mark)
        monkeypatch.setitem(_effects.PERFORMERS, StartProxy, start_proxy_after_a_delivery)
        sink: queue.SimpleQueue[Any] = queue.SimpleQueue()
        listener = client.subscribe_notifications({"toolsListChanged": True}, subscriber=sink)
        monkeypatch.setitem(_effects.PERFORMERS, StartProxy, start_proxy)
        assert sink.get(timeout=WAIT)[1] is listener
        assert server.wait_response("in-the-window")["result"] == {}  # the frame after it, answered
        server.list_changed("tools")
        assert sink.get(timeout=WAIT)[1] is listener
        assert live_proxies() == 1  # started once, by whoever came first


def live_proxies() -> int:
    """Subscriber proxy actors alive in the process."""
    import pykka

    from exmcp_actors._runtime._subscriber_proxy import SubscriberProxy

    return sum(1 for ref in pykka.ActorRegistry.get_by_class(SubscriberProxy) if ref.is_alive())


# -- claim 4: stopping, from anywhere, ends every blocked caller ----------------------------


def after_stop_commands(client: mcp.Client) -> dict[str, Callable[[], Any]]:
    sink: queue.SimpleQueue[Any] = queue.SimpleQueue()
    return {
        "request": lambda: client.request("test/mark"),
        "set_logging_level": lambda: client.set_logging_level("info"),
        "set_roots": lambda: client.set_roots(ROOTS),
        "subscribe_notifications": lambda: client.subscribe_notifications({"toolsListChanged": True}, sink),
        "subscribe a uri": lambda: client.subscribe_notifications({"resourceSubscriptions": [A]}, sink),
        "listen": lambda: client.listen({"toolsListChanged": True}, sink),
        "watch": lambda: client.watch({"toolsListChanged": True}, sink),
        "catalog": lambda: client.catalog(sink),
    }


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("what", list(after_stop_commands(None)))  # type: ignore[arg-type]
def test_a_command_after_the_client_stopped_raises_not_connected(era: Era, what: str) -> None:
    with FakeServer(era=era) as fake:
        client = (modern if era == "modern" else legacy)(fake, roots=ROOTS)
        client.disconnect()
        before = len(fake.received)
        with pytest.raises(mcp.NotConnected):
            after_stop_commands(client)[what]()
        assert fake.received[before:] == []


def blocked_callers(client: mcp.Client, server: FakeServer, gate: Gate) -> list[Call]:
    """Host threads blocked in the client: a request, a registration, a log level (legacy) or a
    listen (modern), each waiting for an answer the server holds."""
    server.on("test/never", lambda params, ctx: NO_REPLY)
    sink: queue.SimpleQueue[Any] = queue.SimpleQueue()
    calls = [Call(lambda: client.request("test/never", timeout=WAIT * 4), "request")]
    if client.era == "modern":
        server.on("subscriptions/listen", lambda params, ctx: NO_REPLY)
        calls.append(Call(lambda: client.listen({"toolsListChanged": True}, sink, timeout=WAIT * 4), "listen"))
        server.wait_for("subscriptions/listen")
    else:
        server.on("logging/setLevel", lambda params, ctx: NO_REPLY)
        calls.append(Call(lambda: client.subscribe_notifications({"resourceSubscriptions": [SLOW]}, sink, WAIT * 4)))
        calls.append(Call(lambda: client.set_logging_level("debug", timeout=WAIT * 4), "log-level"))
        server.wait_for("resources/subscribe", uri=SLOW)
        server.wait_for("logging/setLevel")
    server.wait_for("test/never")
    return calls


def assert_every_caller_ends_with_not_connected(calls: list[Call]) -> None:
    """Each ends at once with NotConnected; a registration whose subscribe was in flight says
    that subscribe failed for that reason (its documented error)."""
    for call in calls:
        with pytest.raises((mcp.NotConnected, mcp.SubscribeFailed)) as raised:
            call.result(WAIT)
        if isinstance(raised.value, mcp.SubscribeFailed):
            assert raised.value.reason[2] in ("not_connected", "connection_lost"), raised.value.reason


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_several_threads_disconnecting_at_once_end_every_blocked_caller(era: Era) -> None:
    with FakeServer(era=era) as fake:
        gate = Gate(fake, SLOW)
        client = (modern if era == "modern" else legacy)(fake)
        calls = blocked_callers(client, fake, gate)
        go = threading.Barrier(4)

        def close() -> None:
            go.wait(WAIT)
            client.disconnect(timeout=WAIT)

        closers = [Call(close, f"closer-{n}") for n in range(4)]
        for closer in closers:
            closer.result()
        assert client.status == "disconnected"
        assert_every_caller_ends_with_not_connected(calls)
        gate.open()


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_server_that_dies_mid_command_ends_every_blocked_caller(era: Era) -> None:
    with FakeServer(era=era) as fake:
        gate = Gate(fake, SLOW)
        client = (modern if era == "modern" else legacy)(fake, reconnect=False)
        calls = blocked_callers(client, fake, gate)
        fake.drop()
        assert_every_caller_ends_with_not_connected(calls)
        assert client.actor_ref.actor_stopped.wait(WAIT)
        gate.open()
        client.disconnect()


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_disconnect_from_inside_a_put_ends_the_callers_blocked_meanwhile(era: Era) -> None:
    with FakeServer(era=era) as fake:
        gate = Gate(fake, SLOW)
        client = (modern if era == "modern" else legacy)(fake)
        cb = CallingBack(
            client, tag_is("ex_mcp_notification", "ex_mcp_subscription"), callback_commands(False)["disconnect"]
        )
        flt = {"promptsListChanged": True}
        cb.handle = client.listen(flt, cb) if era == "modern" else client.subscribe_notifications(flt, cb)
        calls = blocked_callers(client, fake, gate)
        if era == "modern":
            fake.event(cb.handle.subscription_id, "notifications/prompts/list_changed")
        else:
            fake.list_changed("prompts")
        cb.check()
        assert_every_caller_ends_with_not_connected(calls)
        gate.open()


class DisconnectsOnClosing:
    """A put() subscriber that disconnects its client on its closing message, timing it."""

    def __init__(self, client: mcp.Client) -> None:
        self.client = client
        self.took: queue.SimpleQueue[float] = queue.SimpleQueue()

    def put(self, message: Any) -> None:
        if message[0] == "ex_mcp_notification_closed":
            started = time.monotonic()
            self.client.disconnect(timeout=WAIT * 2)
            self.took.put(time.monotonic() - started)


def test_put_subscribers_that_all_disconnect_on_their_closing_message_do_not_wait_for_each_other(
    server: FakeServer,
) -> None:
    client = legacy(server)
    subscribers = [DisconnectsOnClosing(client) for _ in range(3)]
    for subscriber in subscribers:
        client.subscribe_notifications({"toolsListChanged": True}, subscriber=subscriber)
    started = time.monotonic()
    client.disconnect(timeout=WAIT * 2)
    assert time.monotonic() - started < WAIT  # not the whole timeout: nobody waited for a waiter
    for subscriber in subscribers:
        # Done already: the host's own disconnect() (not a proxy's) waited for every put().
        assert subscriber.took.get_nowait() < WAIT


def test_at_interpreter_exit_a_put_subscriber_busy_with_a_message_still_gets_its_closing_message(
    server: FakeServer,
) -> None:
    from exmcp_actors._api._shutdown import close_all

    client = legacy(server)
    gate = threading.Event()
    got: queue.SimpleQueue[str] = queue.SimpleQueue()

    class Slow:
        def put(self, message: Any) -> None:
            got.put(message[0])
            if message[0] == "ex_mcp_notification":
                gate.wait(WAIT)

    client.subscribe_notifications({"toolsListChanged": True}, subscriber=Slow())
    server.list_changed("tools")
    assert got.get(timeout=WAIT) == "ex_mcp_notification"  # its put() is busy now
    exit_hook = Call(lambda: close_all(WAIT), "exit-hook")
    assert client._shared.finished.wait(WAIT)  # closed: its closing message waits behind that put()
    gate.set()
    assert got.get(timeout=WAIT) == "ex_mcp_notification_closed"
    exit_hook.result()


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_interpreter_exit_ends_callers_a_put_calling_back_and_the_process_at_once(era: Era) -> None:
    root = Path(__file__).resolve().parents[1]
    host = subprocess.run(
        [sys.executable, str(root / "tests" / "hosts" / "exit_calling_back.py"), era],
        check=False,
        capture_output=True,
        text=True,
        timeout=WAIT * 4,  # each wait in the host is 30 s or more: none of them may be waited out
        env={**os.environ, "PYTHONPATH": str(root)},
        cwd=root,
    )
    assert host.returncode == 0, host.stderr
    lines = host.stdout.splitlines()
    assert lines[0] == "exiting", host.stdout
    assert sorted(lines[1:]) == [
        "iteration: ended",
        "put disconnect: returned",
        "put request: NotConnected",
        "request: NotConnected",
    ], host.stdout


# -- claim 5: follow-ups and re-entry ----------------------------------------------------


class StubSession:
    """Records what it handles and whether the monitor was held meanwhile."""

    name = "stub"

    def __init__(self) -> None:
        self.monitor: SessionMonitor | None = None
        self.handled: list[tuple[Any, bool]] = []
        self.raised_in_delivery: list[Any] = []

    def handle(self, message: Any) -> Any:
        assert self.monitor is not None
        self.handled.append((message, self.monitor.lock.locked() and self.monitor.held_here))
        return message


def stub_monitor(deliver: Callable[[SessionMonitor], None]) -> tuple[SessionMonitor, StubSession, list[Any]]:
    """A monitor whose perform step runs ``deliver`` once (as a flush would), and whose client
    actor is a list."""
    session = StubSession()
    told: list[Any] = []
    delivered = [False]

    def perform(_: Any, settles: list[Any]) -> None:
        if not delivered[0]:
            delivered[0] = True
            deliver(monitor)

    monitor = SessionMonitor(session, perform)  # type: ignore[arg-type]
    monitor.attach(told.append)
    session.monitor = monitor
    return monitor, session, told


def test_an_input_raised_inside_a_delivery_runs_before_the_thread_lets_go_of_the_monitor() -> None:
    monitor, session, told = stub_monitor(lambda m: m.defer("overflowed"))
    assert monitor.run("command", timeout=WAIT) == "command"
    assert session.handled == [("command", True), ("overflowed", True)]
    assert told == []
    assert not monitor.lock.locked()


def test_an_input_raised_where_the_monitor_is_not_held_goes_to_the_client_actor() -> None:
    monitor, session, told = stub_monitor(lambda m: None)
    reader = Call(lambda: monitor.defer("overflowed on a reader"), "reader")
    reader.result()
    assert told == ["overflowed on a reader"]
    assert session.handled == []


def test_a_thread_that_holds_the_monitor_and_asks_for_it_again_gets_reentered_not_a_hang() -> None:
    from exmcp_actors._runtime._monitor import Reentered

    outcome: list[BaseException] = []

    def reenter(m: SessionMonitor) -> None:
        try:
            m.run("again", timeout=WAIT)
        except BaseException as error:  # checked below
            outcome.append(error)
        assert m.try_answer({"id": 1, "result": {}}, []) is False  # a reader's shortcut never waits either

    monitor, session, _ = stub_monitor(reenter)
    monitor.run("command", timeout=WAIT)
    assert len(outcome) == 1 and isinstance(outcome[0], Reentered)
    assert [message for message, _ in session.handled] == ["command"]
    assert not monitor.lock.locked()


# -- claim 6: all of it at once ----------------------------------------------------------

STRESS_THREADS = 3
#: Rounds each thread gets through (rounds a reconnect got in the way of are tried again).
STRESS_ROUNDS = 25
#: At most this many rounds a thread tries.
STRESS_MAX_ROUNDS = 200
#: The server drops the connection once every thread got through this many rounds.
STRESS_DROPS = (5, 12, 19)
#: Notifications the server floods (at least: it goes on until every drop was made), in bursts.
STRESS_FLOOD = 1500
STRESS_BURST = 50
NOTIFICATION = "ex_mcp_notification"


class Recording:
    """A put() subscriber that keeps everything (one per persistent handle, so order is per handle)."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def put(self, item: Any) -> None:
        self.items.append(item)


class RaisingAfter(Recording):
    """A put() subscriber that raises from its third message on (the client removes it)."""

    def put(self, item: Any) -> None:
        if len(self.items) >= 2:
            raise RuntimeError("this subscriber is broken")
        super().put(item)


class StressThread:
    """Thread ``t``'s rounds: a registration, a request, a removal, a request that times out
    (cancelled on the wire), a request. What it issued is recorded in order; a round in which
    a command raised (a reconnect was in the way) is left out of the order check."""

    def __init__(self, client: mcp.Client, t: int) -> None:
        self.client = client
        self.t = t
        self.issued: list[tuple[int, str]] = []
        self.failed: set[int] = set()
        self.done = 0
        self.call = Call(self._run, f"stress-{t}")

    def _run(self) -> None:
        sink = Recording()
        t, client = self.t, self.client
        for s in range(STRESS_MAX_ROUNDS):
            if self.done == STRESS_ROUNDS:
                return
            wait_until(lambda: client.status == "ready", what="the client ready again")
            uri = f"file:///t{t}/s{s}"
            self.issued += [(s, step) for step in ("subscribe", "mark-a", "unsubscribe", "slow", "cancel", "mark-b")]
            try:
                listener = client.subscribe_notifications({"resourceSubscriptions": [uri]}, sink, WAIT)
                client.request("test/mark", {"t": t, "s": s, "step": "mark-a"})
                listener.unsubscribe(timeout=WAIT)
                try:
                    client.request("test/slow", {"t": t, "s": s}, timeout=0.02)
                except mcp.RequestTimeout:
                    pass  # the point: its cancellation goes first
                else:
                    raise AssertionError("test/slow is never answered")
                client.request("test/mark", {"t": t, "s": s, "step": "mark-b"})
            except (mcp.NotConnected, mcp.RequestTimeout, mcp.SubscribeFailed):
                self.failed.add(s)
            else:
                self.done += 1


def wire_steps(server: FakeServer, t: int) -> list[tuple[int, str]]:
    """Thread ``t``'s commands as the server received them (a resubscription after a
    reconnect repeats a URI: only its first subscribe is the host's)."""
    received = [m for _, m in server.received if isinstance(m, dict) and "method" in m]
    slow_ids = {m["id"]: m["params"]["s"] for m in received if m["method"] == "test/slow" and m["params"]["t"] == t}
    steps: list[tuple[int, str]] = []
    subscribed: set[str] = set()
    prefix = f"file:///t{t}/s"
    for m in received:
        method, params = m["method"], m.get("params") or {}
        if method in ("test/mark", "test/slow") and params.get("t") == t:
            steps.append((params["s"], params.get("step", "slow")))
        elif method == "notifications/cancelled" and params.get("requestId") in slow_ids:
            steps.append((slow_ids[params["requestId"]], "cancel"))
        elif method in ("resources/subscribe", "resources/unsubscribe") and params["uri"].startswith(prefix):
            if method == "resources/subscribe" and params["uri"] in subscribed:
                continue
            subscribed.add(params["uri"])
            steps.append((int(params["uri"][len(prefix) :]), method.split("/")[1]))
    return steps


def closing_count(items: list[Any]) -> int:
    return sum(1 for item in items if item[0] in ("ex_mcp_notification_closed", "ex_mcp_subscription_closed"))


def assert_in_wire_order_with_one_closing_message_last(items: list[Any], *, closed: bool) -> None:
    seqs = [item[3]["seq"] for item in items if item[0] == "ex_mcp_notification"]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), "out of wire order"
    assert closing_count(items) == (1 if closed else 0), items[-3:]
    if closed:
        assert items[-1][0] == "ex_mcp_notification_closed", items[-1]


def burst_done(client: mcp.Client, witness: Recording, seq: int) -> bool:
    """``witness`` got ``seq``, or a drop lost it."""
    got = any(item[0] == NOTIFICATION and item[3]["seq"] == seq for item in witness.items[-STRESS_BURST:])
    return got or client.status != "ready"


def flood(server: FakeServer, client: mcp.Client, threads: list[StressThread], witness: Recording) -> int:
    """Notify with a rising ``seq`` and drop the connection at each threshold of the threads'
    progress (or once they are all done); returns how many connections were opened. Every
    burst waits until ``witness`` got its last seq (or a drop lost it), so answers to the
    threads' requests never queue behind an unbounded flood."""
    connections, drops = 1, list(STRESS_DROPS)
    seq = 0
    while (seq < STRESS_FLOOD or drops) and seq < STRESS_FLOOD * 10:
        progress = min(thread.done if thread.call.thread.is_alive() else STRESS_ROUNDS for thread in threads)
        if drops and progress >= drops[0]:
            drops.pop(0)
            server.drop()
            connections += 1
            server.wait_connections(connections, WAIT)
            wait_until(lambda: client.status == "ready", what="the client reconnected")
        try:
            for _ in range(STRESS_BURST):
                server.notify("notifications/tools/list_changed", {"seq": seq})
                seq += 1
        except RuntimeError:
            seq += 1
            continue  # the connection ended under it: that seq is lost, nothing else
        last = seq - 1
        wait_until(partial(burst_done, client, witness, last), what="the burst delivered")
    return connections


@pytest.mark.parametrize("kind", ["memory", "websocket"])
def test_threads_commands_a_flood_reconnects_and_dying_subscribers_keep_every_order(kind: str) -> None:
    with FakeServer(era="legacy") as fake:
        marks(fake)
        fake.on("test/slow", lambda params, ctx: NO_REPLY)
        client = legacy(fake, kind, backoff=FAST, max_reconnect_attempts=50)
        try:
            persistent = [Recording() for _ in range(3)]
            for recording in persistent:
                client.subscribe_notifications({"toolsListChanged": True}, subscriber=recording)
            by_inbox = client.subscribe_notifications({"toolsListChanged": True}, subscriber=threading.main_thread())
            broken = RaisingAfter()
            client.subscribe_notifications({"toolsListChanged": True}, subscriber=broken)
            threads = [StressThread(client, t) for t in range(STRESS_THREADS)]
            mortal = Call(lambda: client.subscribe_notifications({"toolsListChanged": True}), "mortal")  # ends at once
            assert flood(fake, client, threads, persistent[0]) == 1 + len(STRESS_DROPS)
            mortal.result()
            for thread in threads:
                thread.call.result(WAIT * 6)
        finally:
            client.disconnect()
        for thread in threads:
            assert thread.done == STRESS_ROUNDS, f"thread {thread.t}: {len(thread.failed)} rounds failed"
            kept = [step for step in thread.issued if step[0] not in thread.failed]
            on_wire = [step for step in wire_steps(fake, thread.t) if step[0] not in thread.failed]
            assert on_wire == kept, f"thread {thread.t}"
        for recording in persistent:
            assert_in_wire_order_with_one_closing_message_last(recording.items, closed=True)
        inbox = []
        while True:
            try:
                inbox.append(by_inbox.get(timeout=0))
            except queue.Empty:
                break
        assert_in_wire_order_with_one_closing_message_last(inbox, closed=True)
        assert len(broken.items) == 2 and closing_count(broken.items) == 0
