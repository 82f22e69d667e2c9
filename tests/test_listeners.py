"""Legacy notification listeners, against the BEHAVIOUR.md checklist.

Sections covered: Filter, Registration, Delivery and Lifecycle (legacy
listeners). Every test drives a real client (``mcp.connect``) against the
in-process :class:`~exmcp_actors.testing.FakeServer` over its memory
transport, which is where races and failures are injected.

Conventions:
- Nothing sleeps: tests wait on queues, events, ``server.wait_for(...)`` or
  a bounded condition poll (:func:`~tests.waiting.wait_until`).
- "Nothing more arrives" is asserted with a marker (:func:`assert_quiet`): the
  server sends a notification the listener takes, behind what must not arrive;
  messages to one subscriber keep wire order, so it must come next. Only where
  no path is left for a marker (the listener is closed) is a short wait kept
  (``QUIET``, :func:`assert_nothing_after_closed`).
- ``client._inspect()`` asks the client actor and then the refcount worker,
  so a call to it is also a sync point with everything told to them before.
"""

from __future__ import annotations

import functools
import itertools
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

import pykka
import pytest

import exmcp_actors as mcp
from exmcp_actors._protocol._events import Frames
from exmcp_actors._protocol._filters import NotificationFilter
from exmcp_actors._protocol._index import ListenerIndex
from exmcp_actors._runtime import _subscriber_proxy
from exmcp_actors._runtime._client_actor import ClientActor, InspectClient
from exmcp_actors._runtime._monitor import settle_all
from exmcp_actors.testing import NO_REPLY, SUBSCRIPTION_ID_KEY, FakeConnection, FakeError, FakeServer
from tests.waiting import assert_next_is_marker, wait_until

TIMEOUT = 5.0
#: Where no marker can travel (the listener is closed), how long "nothing more arrives" is watched.
QUIET = 0.2
BACKOFF = mcp.Backoff(initial=0.01, maximum=0.05)

A = "file:///a.txt"
B = "file:///b.txt"
C = "file:///c.txt"
D = "file:///d.txt"
SLOW = "file:///slow.txt"

UPDATED = "notifications/resources/updated"
TOOLS_CHANGED = "notifications/tools/list_changed"
PROMPTS_CHANGED = "notifications/prompts/list_changed"
RESOURCES_CHANGED = "notifications/resources/list_changed"

NOTIFICATION = "ex_mcp_notification"
RECONNECTED = "ex_mcp_notification_reconnected"
CLOSED: Final = "ex_mcp_notification_closed"

Getter = Callable[[float], Any]


# --------------------------------------------------------------------------- harness


class Harness:
    """Servers and clients of one test; everything is torn down in a safe order."""

    def __init__(self) -> None:
        self.servers: list[FakeServer] = []
        self.clients: list[mcp.Client] = []
        self.cleanups: list[Callable[[], None]] = []

    def server(self, **kwargs: Any) -> FakeServer:
        server = FakeServer(**kwargs)
        self.servers.append(server)
        return server

    def client(self, server: FakeServer, **kwargs: Any) -> mcp.Client:
        kwargs.setdefault("backoff", BACKOFF)
        client = mcp.connect(server.transport(), **kwargs)
        self.clients.append(client)
        return client

    def close(self) -> None:
        for cleanup in self.cleanups:
            cleanup()
        for server in self.servers:
            server.accept()  # releases hung opens, so disconnect() does not wait on them
        for client in self.clients:
            client.disconnect(timeout=TIMEOUT)
        for server in self.servers:
            server.close()


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness()
    try:
        yield h
    finally:
        h.close()


@pytest.fixture
def server(harness: Harness) -> FakeServer:
    return harness.server()


@pytest.fixture
def client(harness: Harness, server: FakeServer) -> mcp.Client:
    return harness.client(server)


class Collector(pykka.ThreadingActor):
    """A pykka actor subscriber: whatever it receives lands in ``inbox``."""

    def __init__(self, inbox: queue.Queue[Any]) -> None:
        super().__init__()
        self.inbox = inbox

    def on_receive(self, message: Any) -> None:
        self.inbox.put(message)


class Holder:
    """A thread that stays alive until :meth:`end`: a subscriber whose death the test controls."""

    def __init__(self, name: str = "subscriber") -> None:
        self._finish = threading.Event()
        self.thread = threading.Thread(target=self._finish.wait, args=(30.0,), name=name, daemon=True)
        self.thread.start()

    def end(self) -> None:
        self._finish.set()
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive()


class Gate:
    """Holds ``resources/subscribe`` for the URIs in ``held`` until :meth:`open`; fails those in ``failing``."""

    def __init__(self, server: FakeServer, held: tuple[str, ...] = (SLOW,), failing: tuple[str, ...] = ()) -> None:
        self.event = threading.Event()
        self.held = held
        self.failing = failing
        default = server.default_handler("resources/subscribe")
        assert default is not None

        def subscribe(params: dict[str, Any], ctx: FakeConnection) -> Any:
            uri = params.get("uri")
            if uri in self.failing:
                raise FakeError(-32000, f"refused by the test: {uri}")
            if uri in self.held:
                ctx.wait(self.event, timeout=10.0)
            return default(params, ctx)

        server.on("resources/subscribe", subscribe, concurrent=True)

    def open(self) -> None:
        self.event.set()


class Call:
    """Runs a blocking call on a thread; :meth:`result` re-raises what it raised."""

    def __init__(self, fn: Callable[[], Any], name: str = "registering") -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as error:  # handed back to the test thread
            self._error = error

    def result(self, timeout: float = TIMEOUT) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the call did not return in time"
        if self._error is not None:
            raise self._error
        return self._value


def getter(source: Any) -> Getter:
    """``get(timeout)`` for a Listener (its inbox) or a queue."""
    return lambda timeout: source.get(timeout=timeout)


_marks = itertools.count(1)


def marker_for(flt: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A notification a listener with filter ``flt`` takes: a list change of an enabled
    category, else an update of its first URI."""
    for category, method in (
        ("toolsListChanged", TOOLS_CHANGED),
        ("promptsListChanged", PROMPTS_CHANGED),
        ("resourcesListChanged", RESOURCES_CHANGED),
    ):
        if flt.get(category):
            return method, {}
    return UPDATED, {"uri": flt["resourceSubscriptions"][0]}


def assert_quiet(server: FakeServer, *sources: Any, marker: tuple[str, dict[str, Any]] | None = None) -> None:
    """Nothing more arrives at any of ``sources`` (listeners, or queues of put/actor subscribers).

    The server sends one marker now, behind everything it sent so far; messages to one
    subscriber keep wire order, so each source's next message must be that marker.
    ``marker`` is a notification each source takes exactly once (default: one the first
    source's listener takes).
    """
    method, params = marker if marker is not None else marker_for(sources[0].filter)
    mark = next(_marks)
    server.notify(method, {**params, "marker": mark})

    def is_marker(message: Any) -> bool:
        return isinstance(message, mcp.Notification) and message.params.get("marker") == mark

    for source in sources:
        assert_next_is_marker(getter(source), is_marker)


def assert_inboxes_stayed_empty(sources: list[Any]) -> None:
    """After a marker that travelled the same path: nothing landed in any listener inbox."""
    for source in sources:
        if isinstance(source, mcp.Listener):
            assert source.pending() == 0, source


def assert_nothing_after_closed(sources: list[Any]) -> None:
    """Nothing follows the Closed each source got. A closed listener's inbox is finished: it
    must be empty now. No marker can reach a queue whose listener is gone, so the queues are
    watched for QUIET seconds, all in one wait."""
    assert_inboxes_stayed_empty(sources)
    queues = [source for source in sources if not isinstance(source, mcp.Listener)]
    if queues:
        time.sleep(QUIET)  # no path is left for a marker: a bounded wait
        assert [q.qsize() for q in queues] == [0] * len(queues), [list(q.queue) for q in queues]


def expect_closed(source: Any, listener: mcp.Listener, check: Callable[[Any], bool]) -> Any:
    """The next message is the listener's one Closed (its reason passes ``check``); nothing follows."""
    message = getter(source)(TIMEOUT)
    assert isinstance(message, mcp.Closed), message
    assert message.tag == CLOSED
    assert message.listener is listener
    assert check(message.reason), message.reason
    return message.reason


def wire_ops(server: FakeServer, uri: str) -> list[str]:
    """``"subscribe"`` / ``"unsubscribe"`` for ``uri``, in the order the server received them."""
    ops = []
    for _, message in server.received:
        if not isinstance(message, dict):
            continue
        method = message.get("method")
        params = message.get("params") or {}
        if method in ("resources/subscribe", "resources/unsubscribe") and params.get("uri") == uri:
            ops.append(method.split("/", 1)[1])
    return ops


def wire_count(server: FakeServer) -> int:
    """How many messages the server received so far."""
    return len(server.received)


def actor_state(client: mcp.Client) -> dict[str, Any]:
    """The client actor's counters only (does not wait on the refcount worker, which may be busy)."""
    state: dict[str, Any] = client._ask(InspectClient(), TIMEOUT)
    return state


def counts(client: mcp.Client) -> dict[str, int]:
    """The refcount worker's count per URI (also a sync point with the worker)."""
    refcount: dict[str, Any] = client._inspect()["refcount"]
    result: dict[str, int] = refcount["counts"]
    return result


def assert_no_leak(client: mcp.Client, *, entries: int = 0, proxies: int | None = None) -> None:
    state = client._inspect()
    assert state["entries"] == entries, state
    assert state["indexed"] == entries, state
    if proxies is not None:
        assert state["proxies"] == proxies, state
    if entries == 0:
        assert state["refcount"]["empty"], state


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def publish(server: FakeServer, uri: str) -> bool:
    """A server that only sends updates for URIs the session subscribed (as real servers do)."""
    if uri not in server.subscriptions():
        return False
    server.updated(uri)
    return True


def reconnecting_client(harness: Harness, server: FakeServer) -> mcp.Client:
    """A client stuck in "reconnecting": the server hangs every new open until accept()."""
    client = harness.client(server)
    server.refuse(hang=True)
    server.drop()
    wait_until(lambda: client.status == "reconnecting", what="status reconnecting")
    return client


# --------------------------------------------------------------------------- Filter

BAD_FILTERS: list[tuple[str, Any, str]] = [
    ("none", None, "subscription_filter_required"),
    ("list", [("toolsListChanged", True)], "subscription_filter_required"),
    ("string", "toolsListChanged", "subscription_filter_required"),
    ("unknown-key", {"toolsListChanged": True, "bogus": True}, "unknown_subscription_filter"),
    ("misspelled-key", {"resourceSubscription": [A]}, "unknown_subscription_filter"),
    ("category-none", {"toolsListChanged": None}, "invalid_subscription_filter"),
    ("category-yes", {"promptsListChanged": "yes"}, "invalid_subscription_filter"),
    ("category-one", {"resourcesListChanged": 1}, "invalid_subscription_filter"),
    ("category-zero", {"toolsListChanged": 0, "resourceSubscriptions": [A]}, "invalid_subscription_filter"),
    ("uris-string", {"resourceSubscriptions": A}, "invalid_subscription_filter"),
    ("uris-none", {"resourceSubscriptions": None}, "invalid_subscription_filter"),
    ("uris-dict", {"resourceSubscriptions": {A: True}}, "invalid_subscription_filter"),
    ("uri-empty", {"resourceSubscriptions": [""]}, "invalid_resource_subscription"),
    ("uri-int", {"resourceSubscriptions": [A, 1]}, "invalid_resource_subscription"),
    ("uri-none", {"toolsListChanged": True, "resourceSubscriptions": [None]}, "invalid_resource_subscription"),
    ("tasks-string", {"toolsListChanged": True, "taskIds": "task-1"}, "invalid_subscription_filter"),
    ("tasks-int", {"toolsListChanged": True, "taskIds": [1]}, "invalid_task_subscription"),
    ("tasks-empty-id", {"toolsListChanged": True, "taskIds": [""]}, "invalid_task_subscription"),
    ("tasks-ok", {"toolsListChanged": True, "taskIds": ["task-1"]}, "task_subscriptions_require_mcp_2026_07_28"),
    ("tasks-empty-list", {"taskIds": []}, "task_subscriptions_require_mcp_2026_07_28"),
    ("empty", {}, "empty_subscription_filter"),
    (
        "all-false",
        {"toolsListChanged": False, "promptsListChanged": False, "resourcesListChanged": False},
        "empty_subscription_filter",
    ),
    ("no-uris", {"resourceSubscriptions": []}, "empty_subscription_filter"),
    ("false-and-no-uris", {"toolsListChanged": False, "resourceSubscriptions": []}, "empty_subscription_filter"),
]


@pytest.mark.parametrize(
    ("bad_filter", "reason"), [(f, r) for _, f, r in BAD_FILTERS], ids=[i for i, _, _ in BAD_FILTERS]
)
def test_a_malformed_filter_is_rejected_with_its_reason_and_nothing_is_sent(
    client: mcp.Client, server: FakeServer, bad_filter: Any, reason: str
) -> None:
    before = wire_count(server)
    with pytest.raises(mcp.FilterError) as caught:
        client.subscribe_notifications(bad_filter)
    assert caught.value.reason == reason
    assert isinstance(caught.value, mcp.Error)
    assert wire_count(server) == before
    assert_no_leak(client, proxies=0)


@pytest.mark.parametrize("state", ["ready", "reconnecting", "disconnected", "modern"])
def test_filter_errors_are_raised_before_anything_else_whatever_the_state_or_era(harness: Harness, state: str) -> None:
    server = harness.server(era="modern" if state == "modern" else "legacy")
    client = reconnecting_client(harness, server) if state == "reconnecting" else harness.client(server)
    if state == "disconnected":
        client.disconnect()
    assert client.status == {"modern": "ready"}.get(state, state)
    before = wire_count(server)
    for name, bad_filter, reason in BAD_FILTERS:
        if state == "modern" and name.startswith("tasks-") and reason.startswith("task_subscriptions_require"):
            # Well-formed taskIds on a modern peer: the legacy API is the mistake, not the filter.
            with pytest.raises(mcp.UseListen if name == "tasks-ok" else mcp.FilterError) as caught:
                client.subscribe_notifications(bad_filter, timeout=1.0)
            continue
        with pytest.raises(mcp.FilterError) as caught:
            client.subscribe_notifications(bad_filter, timeout=1.0)
        assert caught.value.reason == reason, name
    assert wire_count(server) == before
    if state in ("ready", "modern"):
        assert_no_leak(client, proxies=0)


def test_the_listener_filter_is_normalized_and_each_uri_is_subscribed_once(
    client: mcp.Client, server: FakeServer
) -> None:
    requested = {
        "toolsListChanged": True,
        "promptsListChanged": False,
        "resourcesListChanged": False,
        "resourceSubscriptions": [B, A, B, C, A],
    }
    listener = client.subscribe_notifications(requested)
    assert listener.filter == {"toolsListChanged": True, "resourceSubscriptions": [B, A, C]}
    assert requested["resourceSubscriptions"] == [B, A, B, C, A]  # the host's dict is left alone
    subscribed = [m["params"]["uri"] for m in server.messages("resources/subscribe")]
    assert subscribed == [B, A, C]
    assert counts(client) == {B: 1, A: 1, C: 1}
    listener.unsubscribe()
    for uri in (A, B, C):
        server.wait_for("resources/unsubscribe", uri=uri)
    assert_no_leak(client)
    assert [wire_ops(server, uri) for uri in (A, B, C)] == [["subscribe", "unsubscribe"]] * 3


def test_a_disabled_category_in_the_filter_is_not_delivered(client: mcp.Client, server: FakeServer) -> None:
    listener = client.subscribe_notifications(
        {"toolsListChanged": True, "promptsListChanged": False, "resourcesListChanged": False}
    )
    server.list_changed("prompts")
    server.list_changed("resources")
    server.list_changed("tools")  # the marker
    message = listener.get(timeout=TIMEOUT)
    assert (message.method, message.params) == (TOOLS_CHANGED, {})
    assert_quiet(server, listener)


# --------------------------------------------------------------------------- Registration


def test_registering_while_reconnecting_raises_not_connected(harness: Harness) -> None:
    server = harness.server()
    client = reconnecting_client(harness, server)
    before = wire_count(server)
    with pytest.raises(mcp.NotConnected) as caught:
        client.subscribe_notifications({"resourceSubscriptions": [A]})
    assert caught.value.reason == "not_connected"
    assert wire_count(server) == before
    server.accept()
    wait_until(lambda: client.status == "ready", what="reconnected")
    assert_no_leak(client, proxies=0)
    assert server.count("resources/subscribe") == 0


def test_registering_on_a_disconnected_client_raises_not_connected(client: mcp.Client, server: FakeServer) -> None:
    client.disconnect()
    with pytest.raises(mcp.NotConnected) as caught:
        client.subscribe_notifications({"toolsListChanged": True, "resourceSubscriptions": [A]})
    assert caught.value.reason == "not_connected"
    assert server.count("resources/subscribe") == 0


def test_registering_on_a_modern_peer_raises_use_listen_and_sends_nothing(harness: Harness) -> None:
    server = harness.server(era="modern")
    client = harness.client(server)
    assert client.era == "modern"
    before = wire_count(server)
    with pytest.raises(mcp.UseListen) as caught:
        client.subscribe_notifications({"toolsListChanged": True, "resourceSubscriptions": [A]})
    assert caught.value.reason == "use_listen"
    assert wire_count(server) == before
    assert_no_leak(client, proxies=0)


def _finished_thread() -> threading.Thread:
    thread = threading.Thread(target=lambda: None, name="finished")
    thread.start()
    thread.join()
    return thread


def _stopped_actor() -> pykka.ActorRef[Any]:
    ref = Collector.start(queue.Queue())
    ref.stop()
    return ref


@pytest.mark.parametrize(
    "flt",
    [{"toolsListChanged": True, "resourceSubscriptions": [A, B]}, {"toolsListChanged": True}],
    ids=["with-uris", "categories-only"],
)
@pytest.mark.parametrize(
    "make_subscriber",
    [_finished_thread, lambda: threading.Thread(target=lambda: None), _stopped_actor],
    ids=["finished-thread", "unstarted-thread", "stopped-actor"],
)
def test_a_dead_subscriber_is_rejected_before_any_resources_subscribe(
    client: mcp.Client, server: FakeServer, make_subscriber: Callable[[], Any], flt: dict[str, Any]
) -> None:
    subscriber = make_subscriber()
    with pytest.raises(mcp.SubscriberNotAlive) as caught:
        client.subscribe_notifications(flt, subscriber=subscriber)
    assert caught.value.reason == "subscriber_not_alive"
    assert server.count("resources/subscribe") == 0
    assert_no_leak(client, proxies=0)


def test_one_resources_subscribe_per_uri_is_shared_and_the_last_holder_unsubscribes(
    client: mcp.Client, server: FakeServer
) -> None:
    first = client.subscribe_notifications({"resourceSubscriptions": [A]})
    second = client.subscribe_notifications({"resourceSubscriptions": [A, B]})
    q: queue.Queue[Any] = queue.Queue()
    third = client.subscribe_notifications({"resourceSubscriptions": [B, A]}, subscriber=q)
    assert wire_ops(server, A) == ["subscribe"]
    assert wire_ops(server, B) == ["subscribe"]
    assert counts(client) == {A: 3, B: 2}

    first.unsubscribe()
    third.unsubscribe()
    assert counts(client) == {A: 1, B: 1}  # sync point: the worker handled both releases
    assert wire_ops(server, A) == ["subscribe"]
    assert wire_ops(server, B) == ["subscribe"]
    assert sorted(server.subscriptions()) == [A, B]

    second.unsubscribe()
    server.wait_for("resources/unsubscribe", uri=A)
    server.wait_for("resources/unsubscribe", uri=B)
    assert wire_ops(server, A) == ["subscribe", "unsubscribe"]
    assert wire_ops(server, B) == ["subscribe", "unsubscribe"]
    assert server.subscriptions() == []
    assert_no_leak(client, proxies=0)


def test_a_failed_resources_subscribe_fails_the_registration_and_rolls_back_only_its_own_uris(
    client: mcp.Client, server: FakeServer
) -> None:
    Gate(server, held=(), failing=(C,))
    holder = client.subscribe_notifications({"resourceSubscriptions": [B]})
    with pytest.raises(mcp.SubscribeFailed) as caught:
        client.subscribe_notifications({"resourceSubscriptions": [A, B, C, D]})
    error = caught.value
    assert error.reason == ("subscribe_failed", C, {"code": -32000, "message": f"refused by the test: {C}"})
    assert error.uri == C
    assert isinstance(error, mcp.Error)
    # A was subscribed by this call and is unsubscribed; B is shared and only decremented;
    # C failed; D comes after the failure and is never tried.
    assert wire_ops(server, A) == ["subscribe", "unsubscribe"]
    assert wire_ops(server, B) == ["subscribe"]
    assert wire_ops(server, C) == ["subscribe"]
    assert wire_ops(server, D) == []
    assert server.subscriptions() == [B]
    assert counts(client) == {B: 1}
    assert_no_leak(client, entries=1, proxies=1)

    # The holder of B is unaffected.
    server.updated(B)
    assert holder.get(timeout=TIMEOUT).params == {"uri": B}

    # The failure is not sticky: the next listener naming D and A goes to the wire again.
    later = client.subscribe_notifications({"resourceSubscriptions": [D, A]})
    assert wire_ops(server, D) == ["subscribe"]
    assert wire_ops(server, A) == ["subscribe", "unsubscribe", "subscribe"]
    later.unsubscribe()
    holder.unsubscribe()
    for uri in (A, B, D):
        server.wait_for("resources/unsubscribe", uri=uri)
    assert_no_leak(client)


def test_a_failure_on_the_first_uri_sends_nothing_else(client: mcp.Client, server: FakeServer) -> None:
    Gate(server, held=(), failing=(A,))
    with pytest.raises(mcp.SubscribeFailed) as caught:
        client.subscribe_notifications({"toolsListChanged": True, "resourceSubscriptions": [A, B]})
    assert caught.value.reason[:2] == ("subscribe_failed", A)
    assert wire_ops(server, A) == ["subscribe"]
    assert wire_ops(server, B) == []
    assert server.count("resources/unsubscribe") == 0
    assert_no_leak(client, proxies=0)
    # Nothing half-registered: the tools category was not left listening.
    other = client.subscribe_notifications({"toolsListChanged": True})
    server.list_changed("tools")
    assert other.get(timeout=TIMEOUT).listener is other


class CountedLock:
    """A lock that counts the threads waiting for it (the refcount worker's wire turn, watched)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        self.waiting = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        if not blocking:
            return False
        with self._count_lock:
            self.waiting += 1
        try:
            return self._lock.acquire(timeout=timeout)
        finally:
            with self._count_lock:
                self.waiting -= 1

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def test_wire_subscribes_and_unsubscribes_of_one_client_run_one_at_a_time(
    client: mcp.Client, server: FakeServer
) -> None:
    gate = Gate(server)
    # A registration that must subscribe takes the client's one wire turn (the refcount worker's
    # serial lock) on its own thread; so does a release.
    assert client._book is not None
    turn = client._book.serial = CountedLock()
    holder_c = client.subscribe_notifications({"resourceSubscriptions": [C]})
    main = threading.current_thread()  # the subscriber: Call threads end once the call returns
    slow = Call(lambda: client.subscribe_notifications({"resourceSubscriptions": [SLOW]}, subscriber=main), "slow")
    server.wait_for("resources/subscribe", uri=SLOW)
    other = Call(lambda: client.subscribe_notifications({"resourceSubscriptions": [B]}, subscriber=main), "other")
    wait_until(lambda: turn.waiting == 1, what="the other registration waits for the wire turn")
    release_c = Call(holder_c.unsubscribe, "release-c")  # its release queues behind the held subscribe
    wait_until(lambda: actor_state(client)["entries"] == 0, what="the C listener was removed")
    wait_until(lambda: turn.waiting == 2, what="its release waits for the wire turn on its own thread")
    # A marker request behind anything the client sent so far: once it is answered, the
    # server has received everything before it, and B's subscribe is not among it.
    client.request("ping", timeout=TIMEOUT)
    assert server.count("resources/subscribe", uri=B) == 0
    assert server.count("resources/unsubscribe", uri=C) == 0
    gate.open()
    slow_listener = slow.result()
    other_listener = other.result()
    release_c.result()
    server.wait_for("resources/unsubscribe", uri=C)
    assert wire_ops(server, B) == ["subscribe"]
    assert counts(client) == {SLOW: 1, B: 1}
    slow_listener.unsubscribe()
    other_listener.unsubscribe()
    server.wait_for("resources/unsubscribe", uri=SLOW)
    server.wait_for("resources/unsubscribe", uri=B)
    assert_no_leak(client)


def test_a_slow_resources_subscribe_blocks_only_its_caller_never_delivery(
    client: mcp.Client, server: FakeServer
) -> None:
    gate = Gate(server)
    watcher = client.subscribe_notifications({"toolsListChanged": True, "resourceSubscriptions": [A]})
    main = threading.current_thread()  # the subscriber: Call threads end once the call returns
    slow = Call(lambda: client.subscribe_notifications({"resourceSubscriptions": [SLOW]}, subscriber=main), "slow")
    server.wait_for("resources/subscribe", uri=SLOW)
    try:
        # The client actor is free: notifications flow, requests and new category listeners work.
        server.list_changed("tools")
        assert watcher.get(timeout=TIMEOUT).method == TOOLS_CHANGED
        server.updated(A)
        assert watcher.get(timeout=TIMEOUT).params == {"uri": A}
        client.ping(timeout=TIMEOUT)
        late = client.subscribe_notifications({"promptsListChanged": True}, timeout=TIMEOUT)
        server.list_changed("prompts")
        assert late.get(timeout=TIMEOUT).method == PROMPTS_CHANGED
        assert slow.thread.is_alive()  # ...while the slow registration is still waiting
    finally:
        gate.open()
    slow_listener = slow.result()
    server.updated(SLOW)
    assert slow_listener.get(timeout=TIMEOUT).params == {"uri": SLOW}


def test_a_subscriber_dying_during_acquisition_stops_it_before_the_next_uri(
    client: mcp.Client, server: FakeServer
) -> None:
    gate = Gate(server)
    subscriber = Holder()
    call = Call(
        lambda: client.subscribe_notifications({"resourceSubscriptions": [SLOW, B]}, subscriber=subscriber.thread)
    )
    server.wait_for("resources/subscribe", uri=SLOW)
    subscriber.end()
    gate.open()
    with pytest.raises(mcp.SubscriberNotAlive) as caught:
        call.result()
    assert caught.value.reason == "subscriber_not_alive"
    assert wire_ops(server, SLOW) == ["subscribe", "unsubscribe"]
    assert wire_ops(server, B) == []
    assert server.subscriptions() == []
    assert_no_leak(client, proxies=0)


def test_a_subscriber_whose_death_was_noticed_during_acquisition_fails_and_leaks_nothing(
    client: mcp.Client, server: FakeServer
) -> None:
    gate = Gate(server)
    subscriber = Holder()
    keeper = client.subscribe_notifications({"toolsListChanged": True})  # keeps one proxy around
    call = Call(lambda: client.subscribe_notifications({"resourceSubscriptions": [SLOW]}, subscriber=subscriber.thread))
    server.wait_for("resources/subscribe", uri=SLOW)
    subscriber.end()
    # The client has seen the death (its proxy is gone) before the subscribe answers.
    wait_until(lambda: actor_state(client)["proxies"] == 1, what="the dead subscriber's proxy stopped")
    gate.open()
    with pytest.raises(mcp.SubscriberNotAlive):
        call.result()
    server.wait_for("resources/unsubscribe", uri=SLOW)
    assert counts(client) == {}  # sync point: the worker's release is done
    assert wire_ops(server, SLOW) == ["subscribe", "unsubscribe"]
    assert server.subscriptions() == []
    assert_no_leak(client, entries=1, proxies=1)
    keeper.unsubscribe()
    assert_no_leak(client, proxies=0)


def test_a_subscriber_that_died_during_acquisition_fails_even_before_the_liveness_poll_notices(
    client: mcp.Client, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: activation must ask the subscriber itself, not only trust the polling watcher.
    # The poll interval is an implementation detail; stretching it makes the race window deterministic.
    monkeypatch.setattr(_subscriber_proxy, "LIVENESS_INTERVAL", 30.0)
    gate = Gate(server)
    subscriber = Holder()
    call = Call(lambda: client.subscribe_notifications({"resourceSubscriptions": [SLOW]}, subscriber=subscriber.thread))
    server.wait_for("resources/subscribe", uri=SLOW)
    subscriber.end()
    gate.open()
    with pytest.raises(mcp.SubscriberNotAlive):
        call.result()
    server.wait_for("resources/unsubscribe", uri=SLOW)
    assert_no_leak(client, proxies=0)


def test_a_registration_that_times_out_releases_its_uris_when_the_subscribe_finishes(
    client: mcp.Client, server: FakeServer
) -> None:
    gate = Gate(server)
    keeper = client.subscribe_notifications({"resourceSubscriptions": [B]})
    with pytest.raises(mcp.RequestTimeout) as caught:
        client.subscribe_notifications({"resourceSubscriptions": [B, SLOW]}, timeout=0.3)
    assert caught.value.reason == "timeout"
    gate.open()
    server.wait_for("resources/unsubscribe", uri=SLOW)
    assert wire_ops(server, SLOW) == ["subscribe", "unsubscribe"]
    assert wire_ops(server, B) == ["subscribe"]  # shared: only decremented
    assert counts(client) == {B: 1}
    assert_no_leak(client, entries=1, proxies=1)
    server.updated(B)
    assert keeper.get(timeout=TIMEOUT).params == {"uri": B}


def _assert_paired(server: FakeServer, uri: str, *, held: bool) -> None:
    ops = wire_ops(server, uri)
    expected = ["subscribe", "unsubscribe"] * (len(ops) // 2) + (["subscribe"] if len(ops) % 2 else [])
    assert ops == expected, (uri, ops)  # strictly alternating, so counts are paired at every point
    assert ops, uri
    assert ops[-1] == ("subscribe" if held else "unsubscribe"), (uri, ops)


@pytest.mark.parametrize("order", ["exit-first", "new-first", "racing"])
def test_a_subscriber_exit_racing_a_new_listener_leaves_the_uri_subscribed_for_it(
    client: mcp.Client, server: FakeServer, order: str
) -> None:
    uris = [f"file:///race/{order}/{i}.txt" for i in range(12 if order == "racing" else 3)]
    holders = [Holder(f"old-{i}") for i in range(len(uris))]
    for holder, uri in zip(holders, uris, strict=True):
        client.subscribe_notifications({"resourceSubscriptions": [uri]}, subscriber=holder.thread)
    main = threading.current_thread()
    new: list[mcp.Listener] = []
    for i, (holder, uri) in enumerate(zip(holders, uris, strict=True)):
        if order == "exit-first":
            holder.end()
            server.wait_for("resources/unsubscribe", uri=uri)
            new.append(client.subscribe_notifications({"resourceSubscriptions": [uri]}))
        elif order == "new-first":
            new.append(client.subscribe_notifications({"resourceSubscriptions": [uri]}))
            holder.end()
        else:
            ender = threading.Thread(target=holder.end, daemon=True)
            if i % 2:
                ender.start()
                new.append(client.subscribe_notifications({"resourceSubscriptions": [uri]}))
            else:
                new_call = Call(
                    functools.partial(client.subscribe_notifications, {"resourceSubscriptions": [uri]}, main)
                )
                ender.start()
                new.append(new_call.result())
            ender.join(TIMEOUT)
    wait_until(lambda: actor_state(client)["entries"] == len(uris), what="every old listener removed")
    assert counts(client) == dict.fromkeys(uris, 1)
    for uri in uris:
        _assert_paired(server, uri, held=True)
    assert sorted(server.subscriptions()) == sorted(uris)
    # Still delivered to the new listeners.
    for listener, uri in zip(new, uris, strict=True):
        server.updated(uri)
        assert listener.get(timeout=TIMEOUT).params == {"uri": uri}

    for listener in new:
        listener.unsubscribe()
    assert counts(client) == {}  # sync point with the worker
    for uri in uris:
        _assert_paired(server, uri, held=False)
    assert server.subscriptions() == []
    assert_no_leak(client, proxies=0)


# --------------------------------------------------------------------------- Delivery


def test_the_filter_is_authoritative_for_what_is_delivered(client: mcp.Client, server: FakeServer) -> None:
    q: queue.Queue[Any] = queue.Queue()
    listener = client.subscribe_notifications({"toolsListChanged": True, "resourceSubscriptions": [A]}, subscriber=q)
    # Another listener makes B a subscribed URI of this session: still not ours.
    client.subscribe_notifications({"resourceSubscriptions": [B]}, subscriber=queue.Queue())
    server.send_batch(
        [
            notification(UPDATED, {"uri": B}),  # unlisted (though subscribed by someone else)
            notification(UPDATED, {"uri": C}),  # unlisted and unsubscribed
            notification(UPDATED, {"uri": A + "-child"}),  # starts like A, but is not under it
            notification(UPDATED, {"uri": A + "/child"}),  # a sub-resource of A: ours, as the spec has it
            notification(UPDATED, {}),  # no uri
            notification(UPDATED),  # no params at all
            notification(UPDATED, {"uri": None}),
            notification(UPDATED, {"uri": 7}),
            notification(PROMPTS_CHANGED),  # category not enabled
            notification(RESOURCES_CHANGED),  # category not enabled
            notification(UPDATED, {"uri": A, "marker": 1}),
        ]
    )
    server.updated(C)
    server.list_changed("prompts")
    server.list_changed("tools")  # second marker
    child = q.get(timeout=TIMEOUT)
    first = q.get(timeout=TIMEOUT)
    second = q.get(timeout=TIMEOUT)
    assert (child.listener, child.method, child.params) == (listener, UPDATED, {"uri": A + "/child"})
    assert (first.listener, first.method, first.params) == (listener, UPDATED, {"uri": A, "marker": 1})
    assert (second.listener, second.method, second.params) == (listener, TOOLS_CHANGED, {})
    assert_quiet(server, q, marker=marker_for(listener.filter))


def test_a_category_only_listener_never_gets_resource_updates(client: mcp.Client, server: FakeServer) -> None:
    categories = client.subscribe_notifications(
        {"toolsListChanged": True, "promptsListChanged": True, "resourcesListChanged": True}
    )
    uris = client.subscribe_notifications({"resourceSubscriptions": [A]})
    server.updated(A)
    assert uris.get(timeout=TIMEOUT).params == {"uri": A}
    server.list_changed("resources")
    assert categories.get(timeout=TIMEOUT).method == RESOURCES_CHANGED
    assert_quiet(server, categories)
    assert_quiet(server, uris)


def test_a_subscriber_with_several_matching_listeners_gets_one_message_per_listener(
    client: mcp.Client, server: FakeServer
) -> None:
    q: queue.Queue[Any] = queue.Queue()
    only_a = client.subscribe_notifications({"resourceSubscriptions": [A]}, subscriber=q)
    a_and_tools = client.subscribe_notifications(
        {"toolsListChanged": True, "resourceSubscriptions": [A, B]}, subscriber=q
    )
    only_tools = client.subscribe_notifications({"toolsListChanged": True}, subscriber=q)
    server.updated(A)
    got = [q.get(timeout=TIMEOUT) for _ in range(2)]
    assert sorted(m.listener.id for m in got) == sorted([only_a.id, a_and_tools.id])
    assert all(m.params == {"uri": A} for m in got)
    server.list_changed("tools")
    got = [q.get(timeout=TIMEOUT) for _ in range(2)]
    assert sorted(m.listener.id for m in got) == sorted([a_and_tools.id, only_tools.id])
    server.updated(B)  # the marker: one listener only
    marker = q.get(timeout=TIMEOUT)
    assert (marker.listener, marker.params) == (a_and_tools, {"uri": B})
    assert_quiet(server, q, marker=(UPDATED, {"uri": B}))  # a_and_tools alone takes it


def test_several_listeners_of_one_thread_each_get_the_notification_in_their_own_inbox(
    client: mcp.Client, server: FakeServer
) -> None:
    first = client.subscribe_notifications({"resourceSubscriptions": [A]})
    second = client.subscribe_notifications({"resourceSubscriptions": [A], "toolsListChanged": True})
    server.updated(A)
    server.list_changed("tools")
    assert first.get(timeout=TIMEOUT).listener is first
    assert second.get(timeout=TIMEOUT).params == {"uri": A}
    assert second.get(timeout=TIMEOUT).method == TOOLS_CHANGED
    assert_quiet(server, first, second, marker=(UPDATED, {"uri": A}))  # one marker both take


@pytest.mark.parametrize("kind", ["queue", "actor", "thread"])
def test_messages_to_one_subscriber_keep_wire_order(client: mcp.Client, server: FakeServer, kind: str) -> None:
    sink: queue.Queue[Any] = queue.Queue()
    subscriber: Any
    if kind == "queue":
        subscriber = sink
    elif kind == "actor":
        subscriber = Collector.start(sink)
    else:
        subscriber = None
    flt: list[dict[str, Any]] = (
        [{"toolsListChanged": True, "resourceSubscriptions": [A, B, C]}]
        if kind == "thread"
        else [
            {"resourceSubscriptions": [A]},
            {"toolsListChanged": True, "resourceSubscriptions": [B]},
            {"resourceSubscriptions": [C]},
        ]
    )
    listeners = [client.subscribe_notifications(f, subscriber=subscriber) for f in flt]
    source: Any = listeners[0] if kind == "thread" else sink
    cycle = [(UPDATED, A), (UPDATED, B), (TOOLS_CHANGED, None), (UPDATED, C), (PROMPTS_CHANGED, None)]
    sent: list[tuple[str, int]] = []
    seq = 0

    def frame() -> dict[str, Any]:
        nonlocal seq
        method, uri = cycle[seq % len(cycle)]
        params: dict[str, Any] = {"seq": seq}
        if uri is not None:
            params["uri"] = uri
        if method != PROMPTS_CHANGED:
            sent.append((method, seq))
        seq += 1
        return notification(method, params)

    for _ in range(3):
        server.send_batch([frame() for _ in range(40)])
        for _ in range(10):
            server.send(frame())
    got = [getter(source)(TIMEOUT) for _ in range(len(sent))]
    assert [(m.method, m.params["seq"]) for m in got] == sent
    assert_quiet(server, source, marker=(UPDATED, {"uri": C}))  # one listener of the source takes C


def test_dispatch_cost_grows_with_matching_listeners_not_with_all_listeners(
    client: mcp.Client, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink: queue.Queue[Any] = queue.Queue()
    client.subscribe_notifications({"toolsListChanged": True, "resourceSubscriptions": [A]}, subscriber=sink)
    # Thousands of listeners that never match: other categories, other URIs.
    bystanders: queue.Queue[Any] = queue.Queue()
    for i in range(4000):
        client.subscribe_notifications(
            {"promptsListChanged": True} if i % 2 else {"resourcesListChanged": True}, subscriber=bystanders
        )
    for i in range(200):
        client.subscribe_notifications({"resourceSubscriptions": [f"file:///bystander/{i}"]}, subscriber=bystanders)

    # Count the work per notification instead of timing it: every notification is routed
    # through the index (which hands back only the listeners it reaches), and no listener
    # is tested one by one against its filter.
    looked_at = itertools.count()
    reached_sizes: list[int] = []
    real_enables, real_reached = NotificationFilter.enables, ListenerIndex.reached

    def counting_enables(self: NotificationFilter, method: str, params: Any) -> bool:
        next(looked_at)
        return real_enables(self, method, params)

    def counting_reached(self: ListenerIndex[Any], method: str, params: Any) -> Any:
        found = list(real_reached(self, method, params))
        reached_sizes.append(len(found))
        return found

    monkeypatch.setattr(NotificationFilter, "enables", counting_enables)
    monkeypatch.setattr(ListenerIndex, "reached", counting_reached)
    burst = 400
    server.send_batch([notification(TOOLS_CHANGED if i % 2 else UPDATED, {"uri": A, "i": i}) for i in range(burst)])
    for _ in range(burst):
        sink.get(timeout=TIMEOUT)
    assert reached_sizes == [1] * burst  # one matching listener each, none of the 4,200 bystanders
    assert next(looked_at) == 0
    assert bystanders.empty()


def test_a_notification_stamped_with_a_modern_subscription_id_never_reaches_a_legacy_listener(
    client: mcp.Client, server: FakeServer
) -> None:
    listener = client.subscribe_notifications(
        {"toolsListChanged": True, "promptsListChanged": True, "resourceSubscriptions": [A]}
    )
    stamp = {"_meta": {SUBSCRIPTION_ID_KEY: "listen-1"}}
    server.send_batch(
        [
            notification(TOOLS_CHANGED, stamp),
            notification(UPDATED, {"uri": A, **stamp}),
            notification(UPDATED, {"uri": A, "_meta": {SUBSCRIPTION_ID_KEY: 0}}),
        ]
    )
    server.notify(PROMPTS_CHANGED, {"_meta": {SUBSCRIPTION_ID_KEY: "listen-2", "other": 1}})
    server.notify(UPDATED, {"uri": A, "_meta": {"other": 1}})  # the marker: _meta without a stamp
    marker = listener.get(timeout=TIMEOUT)
    assert (marker.method, marker.params) == (UPDATED, {"uri": A, "_meta": {"other": 1}})
    assert_quiet(server, listener)


def test_direct_subscribe_and_unsubscribe_resource_are_not_refcounted_with_listeners(
    client: mcp.Client, server: FakeServer
) -> None:
    listener = client.subscribe_notifications({"resourceSubscriptions": [A]})
    client.subscribe_resource(A)
    client.subscribe_resource(A)
    assert wire_ops(server, A) == ["subscribe"] * 3  # direct calls always go to the wire
    assert counts(client) == {A: 1}  # ...and never touch the listeners' counts

    client.subscribe_resource(B)
    other = client.subscribe_notifications({"resourceSubscriptions": [B]})
    assert wire_ops(server, B) == ["subscribe", "subscribe"]  # the listener does not ride on the direct one
    other.unsubscribe()
    server.wait_for("resources/unsubscribe", uri=B)

    client.unsubscribe_resource(A)
    assert wire_ops(server, A) == ["subscribe"] * 3 + ["unsubscribe"]
    assert counts(client) == {A: 1}  # the listener still holds it
    listener.unsubscribe()
    assert counts(client) == {}  # sync point: the worker's release is on the wire
    assert wire_ops(server, A) == ["subscribe"] * 3 + ["unsubscribe"] * 2
    assert_no_leak(client)


def test_direct_subscribe_and_unsubscribe_resource_are_refused_on_a_modern_peer(harness: Harness) -> None:
    server = harness.server(era="modern")
    client = harness.client(server)
    before = wire_count(server)
    with pytest.raises(mcp.UseListen):
        client.subscribe_resource(A)
    with pytest.raises(mcp.UseListen):
        client.unsubscribe_resource(A)
    assert wire_count(server) == before


def test_an_explicit_unsubscribe_resource_silences_listeners_on_that_uri(
    client: mcp.Client, server: FakeServer
) -> None:
    listener = client.subscribe_notifications({"toolsListChanged": True, "resourceSubscriptions": [A, B]})
    assert publish(server, A)
    assert listener.get(timeout=TIMEOUT).params == {"uri": A}

    client.unsubscribe_resource(A)
    assert A not in server.subscriptions()
    assert not publish(server, A)  # the server no longer sends it...
    assert publish(server, B)  # ...B is unaffected
    server.list_changed("tools")  # the marker
    assert listener.get(timeout=TIMEOUT).params == {"uri": B}
    assert listener.get(timeout=TIMEOUT).method == TOOLS_CHANGED
    assert_quiet(server, listener)


# --------------------------------------------------------------------------- Lifecycle


@pytest.mark.parametrize("kind", ["thread", "default"])
def test_a_listener_is_removed_and_unsubscribed_within_a_second_when_its_thread_ends(
    client: mcp.Client, server: FakeServer, kind: str
) -> None:
    keeper = client.subscribe_notifications({"resourceSubscriptions": [B]})  # B stays named elsewhere
    registered = threading.Event()
    finish = threading.Event()
    made: list[mcp.Listener] = []

    def subscriber_body() -> None:
        made.append(client.subscribe_notifications({"toolsListChanged": True, "resourceSubscriptions": [A, B]}))
        made.append(client.subscribe_notifications({"resourceSubscriptions": [A]}))
        registered.set()
        finish.wait(TIMEOUT)

    if kind == "thread":
        holder = Holder()
        made.append(
            client.subscribe_notifications(
                {"toolsListChanged": True, "resourceSubscriptions": [A, B]}, subscriber=holder.thread
            )
        )
        made.append(client.subscribe_notifications({"resourceSubscriptions": [A]}, subscriber=holder.thread))
        thread = holder.thread
        end = holder.end
    else:
        thread = threading.Thread(target=subscriber_body, name="default-subscriber", daemon=True)
        thread.start()
        assert registered.wait(TIMEOUT)

        def end() -> None:
            finish.set()
            thread.join(TIMEOUT)

    listener, second = made  # two listeners of the same subscriber
    assert listener.subscriber is thread
    assert second.subscriber is thread
    assert counts(client) == {B: 2, A: 2}
    end()
    server.wait_for("resources/unsubscribe", 1.0, uri=A)  # no notification traffic needed
    assert counts(client) == {B: 1}
    assert wire_ops(server, A) == ["subscribe", "unsubscribe"]
    assert wire_ops(server, B) == ["subscribe"]
    assert_no_leak(client, entries=1, proxies=1)
    # They receive nothing any more; the keeper does (the marker). Their subscriber is gone, so
    # no marker can travel their path: they were removed before the server sent anything (the
    # sync point above), and once the keeper's marker is read their inboxes must be empty.
    server.list_changed("tools")
    server.updated(A)
    server.updated(B)
    assert keeper.get(timeout=TIMEOUT).params == {"uri": B}
    assert_inboxes_stayed_empty([listener, second])


def test_a_listener_is_removed_and_unsubscribed_within_a_second_when_its_actor_stops(
    client: mcp.Client, server: FakeServer
) -> None:
    sink: queue.Queue[Any] = queue.Queue()
    actor = Collector.start(sink)
    listener = client.subscribe_notifications(
        {"toolsListChanged": True, "resourceSubscriptions": [A]}, subscriber=actor
    )
    assert listener.subscriber is actor
    server.list_changed("tools")
    assert sink.get(timeout=TIMEOUT).listener is listener
    actor.stop()
    server.wait_for("resources/unsubscribe", 1.0, uri=A)
    assert_no_leak(client, proxies=0)


def test_a_put_subscriber_outlives_the_thread_that_registered_it(client: mcp.Client, server: FakeServer) -> None:
    sink: queue.Queue[Any] = queue.Queue()
    made: list[mcp.Listener] = []
    registrar = threading.Thread(
        target=lambda: made.append(client.subscribe_notifications({"resourceSubscriptions": [A]}, subscriber=sink))
    )
    registrar.start()
    registrar.join(TIMEOUT)
    # Sync point proving the liveness check ran after the registrar ended: a thread listener goes away.
    probe = Holder()
    client.subscribe_notifications({"resourceSubscriptions": [C]}, subscriber=probe.thread)
    probe.end()
    server.wait_for("resources/unsubscribe", uri=C)
    server.updated(A)
    assert sink.get(timeout=TIMEOUT).listener is made[0]
    assert server.count("resources/unsubscribe", uri=A) == 0


def test_unsubscribing_twice_raises_listener_not_found(client: mcp.Client, server: FakeServer) -> None:
    listener = client.subscribe_notifications({"resourceSubscriptions": [A]})
    client.unsubscribe_notifications(listener)
    server.wait_for("resources/unsubscribe", uri=A)
    with pytest.raises(mcp.ListenerNotFound) as caught:
        client.unsubscribe_notifications(listener)
    assert caught.value.reason == "not_found"
    with pytest.raises(mcp.ListenerNotFound):
        listener.unsubscribe()
    assert wire_ops(server, A) == ["subscribe", "unsubscribe"]
    # Unsubscribing stops delivery: the marker reaches only a second listener of the same
    # subscriber (this thread), so by the time it is read an update for A would be in the first.
    marker = client.subscribe_notifications({"toolsListChanged": True})
    server.updated(A)
    server.list_changed("tools")
    assert marker.get(timeout=TIMEOUT).method == TOOLS_CHANGED
    assert_inboxes_stayed_empty([listener])


def test_unsubscribing_a_listener_closed_by_the_client_raises_listener_not_found(harness: Harness) -> None:
    server = harness.server()
    client = harness.client(server)
    listener = client.subscribe_notifications({"resourceSubscriptions": [A]})
    server.set_era("modern")
    server.drop()
    expect_closed(listener, listener, lambda reason: reason == ("era_changed", "modern"))
    assert client.status == "ready"
    with pytest.raises(mcp.ListenerNotFound) as caught:
        client.unsubscribe_notifications(listener)
    assert caught.value.reason == "not_found"


def test_unsubscribing_after_the_context_manager_closed_it_raises_listener_not_found(
    client: mcp.Client, server: FakeServer
) -> None:
    with client.subscribe_notifications({"resourceSubscriptions": [A]}) as listener:
        assert isinstance(listener, mcp.Listener)
        server.updated(A)
        assert listener.get(timeout=TIMEOUT).params == {"uri": A}
    server.wait_for("resources/unsubscribe", uri=A)
    assert_no_leak(client, proxies=0)
    with pytest.raises(mcp.ListenerNotFound):
        listener.unsubscribe()
    listener.close()  # closing again is harmless


def test_unsubscribing_on_a_stopped_client_is_a_no_op(client: mcp.Client, server: FakeServer) -> None:
    listener = client.subscribe_notifications({"resourceSubscriptions": [A]})
    client.disconnect()
    client.unsubscribe_notifications(listener)  # neither raises
    client.unsubscribe_notifications(listener)
    listener.unsubscribe()
    assert server.count("resources/unsubscribe") == 0


def _listeners_of_every_kind(client: mcp.Client, flt: dict[str, Any]) -> tuple[list[mcp.Listener], list[Any], Holder]:
    """One listener per subscriber kind; returns them with the source to read each from."""
    holder = Holder()
    actor_sink: queue.Queue[Any] = queue.Queue()
    put_sink: queue.Queue[Any] = queue.Queue()
    default = client.subscribe_notifications(flt)
    thread = client.subscribe_notifications(flt, subscriber=holder.thread)
    actor = client.subscribe_notifications(flt, subscriber=Collector.start(actor_sink))
    put = client.subscribe_notifications(flt, subscriber=put_sink)
    second_default = client.subscribe_notifications(flt)
    return (
        [default, thread, actor, put, second_default],
        [default, thread, actor_sink, put_sink, second_default],
        holder,
    )


def test_disconnect_closes_every_listener_once_with_disconnected_and_sends_no_unsubscribe(
    client: mcp.Client, server: FakeServer
) -> None:
    listeners, sources, holder = _listeners_of_every_kind(
        client, {"toolsListChanged": True, "resourceSubscriptions": [A, B]}
    )
    server.list_changed("tools")
    for listener, source in zip(listeners, sources, strict=True):
        assert getter(source)(TIMEOUT).listener is listener  # delivered before the close
    client.disconnect()
    for listener, source in zip(listeners, sources, strict=True):
        expect_closed(source, listener, lambda reason: reason == "disconnected")
    assert server.count("resources/unsubscribe") == 0
    assert client.status == "disconnected"
    assert_nothing_after_closed(sources)
    holder.end()


def test_stopping_the_client_actor_closes_every_listener_with_shutdown(client: mcp.Client, server: FakeServer) -> None:
    listeners, sources, holder = _listeners_of_every_kind(client, {"resourceSubscriptions": [A]})
    client.actor_ref.stop()
    for listener, source in zip(listeners, sources, strict=True):
        expect_closed(
            source, listener, lambda reason: isinstance(reason, tuple) and len(reason) == 2 and reason[0] == "shutdown"
        )
    assert client.status == "disconnected"
    assert_nothing_after_closed(sources)
    holder.end()


def test_a_transport_closed_without_reconnect_closes_listeners_with_transport_closed(harness: Harness) -> None:
    server = harness.server()
    client = harness.client(server, reconnect=False)
    listeners, sources, holder = _listeners_of_every_kind(
        client, {"toolsListChanged": True, "resourceSubscriptions": [A]}
    )
    server.drop("peer went away")
    for listener, source in zip(listeners, sources, strict=True):
        expect_closed(source, listener, lambda reason: reason == ("transport_closed", "peer went away"))
    assert client.status == "disconnected"
    assert server.connections == 1
    assert_nothing_after_closed(sources)
    holder.end()


def test_giving_up_reconnecting_closes_listeners_with_reconnect_exhausted(harness: Harness) -> None:
    server = harness.server()
    client = harness.client(server, max_reconnect_attempts=2)
    listeners, sources, holder = _listeners_of_every_kind(client, {"resourceSubscriptions": [A]})
    server.refuse()
    server.drop()
    for listener, source in zip(listeners, sources, strict=True):
        expect_closed(
            source,
            listener,
            lambda reason: (
                isinstance(reason, tuple)
                and len(reason) == 2
                and reason[0] == "reconnect_exhausted"
                and reason[1] is not None
            ),
        )
    assert client.status == "disconnected"
    assert server.open_attempts == 1 + 2
    assert_nothing_after_closed(sources)
    holder.end()


def test_a_peer_that_turns_modern_after_a_reconnect_closes_listeners_with_era_changed(harness: Harness) -> None:
    server = harness.server()
    client = harness.client(server)
    listeners, sources, holder = _listeners_of_every_kind(
        client, {"toolsListChanged": True, "resourceSubscriptions": [A]}
    )
    server.set_era("modern")
    server.drop()
    for listener, source in zip(listeners, sources, strict=True):
        expect_closed(source, listener, lambda reason: reason == ("era_changed", "modern"))
    assert (client.status, client.era) == ("ready", "modern")
    assert server.count("resources/unsubscribe") == 0
    assert server.count("resources/subscribe", connection=2) == 0
    # Nothing after Closed, even if the (modern) server still pushes legacy-looking notifications.
    server.list_changed("tools")
    server.updated(A)
    with pytest.raises(mcp.UseListen):
        client.subscribe_notifications({"toolsListChanged": True})
    assert_nothing_after_closed(sources)
    holder.end()


def test_a_crashing_client_actor_closes_every_listener_with_crashed(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = harness.server()
    client = harness.client(server)
    listeners, sources, holder = _listeners_of_every_kind(client, {"toolsListChanged": True})
    original = ClientActor._handlers[Frames]

    def crashing(actor: ClientActor, message: Frames) -> Any:
        if any(isinstance(f, dict) and f.get("method") == "test/crash" for f in message.frames):
            raise RuntimeError("injected crash")
        return original(actor, message)

    monkeypatch.setitem(ClientActor._handlers, Frames, crashing)
    server.list_changed("tools")
    for listener, source in zip(listeners, sources, strict=True):
        assert getter(source)(TIMEOUT).listener is listener
    server.request("test/crash")  # a server request: the client actor handles it, not the reader
    for listener, source in zip(listeners, sources, strict=True):
        expect_closed(
            source,
            listener,
            lambda reason: isinstance(reason, tuple) and reason[0] == "crashed" and "injected crash" in str(reason[1]),
        )
    assert client.status == "disconnected"
    with pytest.raises(mcp.NotConnected):
        client.subscribe_notifications({"toolsListChanged": True})
    client.unsubscribe_notifications(listeners[0])  # a no-op on the dead client
    assert_nothing_after_closed(sources)
    holder.end()


# --------------------------------------------------------------------------- timeouts against a busy client actor


class ActorBlocker:
    """Parks the client actor inside its frame handler, holding the session monitor, when a
    ``test/block`` server request arrives (a request, so the reader thread hands it to the actor
    rather than delivering it): a session busy for longer than a host's timeout.

    Frames before the marker in the same batch are handled first; frames after it are handled
    once the actor holds the session, and only then are the callers they answer woken: a test
    can let a response through to a caller that then finds the session busy, deterministically
    (a response before the marker may be taken by the reader itself, racing the park).
    """

    METHOD = "test/block"

    def __init__(self, monkeypatch: pytest.MonkeyPatch, harness: Harness) -> None:
        self.release = threading.Event()
        self.blocked = threading.Event()
        harness.cleanups.append(self.release.set)  # never leave the actor parked after the test
        original = ClientActor._handlers[Frames]

        def handle(actor: ClientActor, message: Frames) -> Any:
            frames = list(message.frames)
            for index, frame in enumerate(frames):
                if isinstance(frame, dict) and frame.get("method") == self.METHOD:
                    actor.monitor.run(Frames(message.generation, frames[:index]))
                    monitor, settles = actor.monitor, []
                    with monitor.lock:  # every command waits for the session meanwhile
                        monitor._owner = threading.get_ident()
                        try:
                            actor.session.handle(Frames(message.generation, frames[index + 1 :]))
                            actor.shell.perform(actor.session, settles)
                        finally:
                            monitor._owner = None
                        self.blocked.set()
                        settle_all(settles)  # their callers wake to a busy session
                        self.release.wait(10.0)
                    # Exactly one call of the real handler per batch: it marks the batch handled.
                    return original(actor, Frames(message.generation, []))
            return original(actor, message)

        monkeypatch.setitem(ClientActor._handlers, Frames, handle)

    @classmethod
    def marker(cls) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": "test-block", "method": cls.METHOD}

    def block(self, server: FakeServer) -> None:
        server.send(self.marker())
        assert self.blocked.wait(TIMEOUT)


def test_a_registration_the_busy_client_actor_answers_too_late_leaks_nothing(
    harness: Harness, client: mcp.Client, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: a RegisterListener handled after the caller gave up must not leave a pending entry.
    blocker = ActorBlocker(monkeypatch, harness)
    blocker.block(server)
    sink: queue.Queue[Any] = queue.Queue()
    with pytest.raises(mcp.RequestTimeout):
        client.subscribe_notifications({"toolsListChanged": True}, subscriber=sink, timeout=0.2)
    blocker.release.set()
    assert_no_leak(client, proxies=0)


def test_a_registration_whose_activation_times_out_leaves_no_orphan_listener(
    harness: Harness, client: mcp.Client, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: an ActivateListener handled after the caller gave up must not revive the listener.
    blocker = ActorBlocker(monkeypatch, harness)

    def subscribe(params: dict[str, Any], ctx: FakeConnection) -> Any:
        # The blocking marker and the answer in one delivery: the caller gets its answer while
        # the client actor is parked, before its ActivateListener can be handled.
        default = server.default_handler("resources/subscribe")
        assert default is not None
        result = default(params, ctx)
        ctx.send_batch([ActorBlocker.marker(), {"jsonrpc": "2.0", "id": ctx.request_id, "result": result or {}}])
        return NO_REPLY

    server.on("resources/subscribe", subscribe)
    sink: queue.Queue[Any] = queue.Queue()
    with pytest.raises(mcp.RequestTimeout):
        client.subscribe_notifications(
            {"toolsListChanged": True, "resourceSubscriptions": [A]}, subscriber=sink, timeout=0.5
        )
    assert blocker.blocked.is_set()
    blocker.release.set()
    server.off("resources/subscribe")
    server.wait_for("resources/unsubscribe", uri=A)
    server.list_changed("tools")
    # The marker listener has the same subscriber: the tools change would reach the sink first.
    marker = client.subscribe_notifications({"promptsListChanged": True}, subscriber=sink)
    server.list_changed("prompts")
    assert_next_is_marker(getter(sink), lambda m: m.listener is marker and m.method == PROMPTS_CHANGED)
    assert_no_leak(client, entries=1, proxies=1)


def test_an_unsubscribe_the_busy_client_actor_handles_too_late_still_releases_the_uris(
    harness: Harness, client: mcp.Client, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: a RemoveHandle handled after the caller gave up must still release the URIs.
    listener = client.subscribe_notifications({"resourceSubscriptions": [A]})
    blocker = ActorBlocker(monkeypatch, harness)
    blocker.block(server)
    with pytest.raises(mcp.RequestTimeout):
        listener.unsubscribe(timeout=0.2)
    blocker.release.set()
    try:
        listener.unsubscribe()  # retrying is fine if the first attempt did not take effect
    except mcp.ListenerNotFound:
        pass  # ...and if it did, its URIs must be released anyway
    assert_no_leak(client, proxies=0)  # a sync point with the worker: any release is on the wire by now
    assert wire_ops(server, A) == ["subscribe", "unsubscribe"]


# --------------------------------------------------------------------------- the API surface


class ParkActor:
    """Holds the client actor in a handler of its own (not a frame handler) until released."""

    def __init__(self, release: threading.Event, parked: threading.Event) -> None:
        self.release = release
        self.parked = parked


def park_client_actor(harness: Harness, client: mcp.Client, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Park the client actor; returns the event that lets it go (set at teardown at the latest)."""

    def handle(actor: ClientActor, message: ParkActor) -> None:
        message.parked.set()
        message.release.wait(10.0)

    monkeypatch.setitem(ClientActor._handlers, ParkActor, handle)
    release, parked = threading.Event(), threading.Event()
    harness.cleanups.append(release.set)
    client._ref.tell(ParkActor(release, parked))
    assert parked.wait(TIMEOUT)
    return release


def test_plain_notifications_reach_every_kind_of_subscriber_while_the_client_actor_is_busy(
    harness: Harness, client: mcp.Client, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reader thread delivers plain notifications itself once the client is settled:
    # a busy client actor (or one more thread wake-up per message) is not in their way.
    listeners, sources, holder = _listeners_of_every_kind(client, {"toolsListChanged": True})
    release = park_client_actor(harness, client, monkeypatch)
    server.notify(TOOLS_CHANGED, {"n": 1})
    for listener, source in zip(listeners, sources, strict=True):
        message = getter(source)(TIMEOUT)
        assert message.listener is listener and message.params == {"n": 1}, message
    release.set()
    holder.end()


def test_frames_behind_one_the_client_actor_must_handle_wait_for_it_in_wire_order(
    harness: Harness, client: mcp.Client, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    listener = client.subscribe_notifications({"toolsListChanged": True})
    release = park_client_actor(harness, client, monkeypatch)
    ping = {"jsonrpc": "2.0", "id": "srv-ping", "method": "ping"}
    # n=1 is plain and goes first: the reader delivers it. The ping needs the actor, so it and
    # everything after it (in this read and in later ones) wait for the actor, in order.
    server.send_batch([notification(TOOLS_CHANGED, {"n": 1}), ping, notification(TOOLS_CHANGED, {"n": 2})])
    server.notify(TOOLS_CHANGED, {"n": 3})
    assert listener.get(timeout=TIMEOUT).params == {"n": 1}
    # Both later reads are queued on the parked actor, so the reader has handled them.
    wait_until(lambda: client._ref.actor_inbox.qsize() >= 2, what="two frame batches queued on the actor")
    assert listener.pending() == 0
    release.set()
    assert [listener.get(timeout=TIMEOUT).params for _ in range(2)] == [{"n": 2}, {"n": 3}]
    server.wait_for(lambda message: message == {"jsonrpc": "2.0", "id": "srv-ping", "result": {}})
    # Once the actor caught up, the reader delivers by itself again.
    release_again = park_client_actor(harness, client, monkeypatch)
    server.notify(TOOLS_CHANGED, {"n": 4})
    assert listener.get(timeout=TIMEOUT).params == {"n": 4}
    release_again.set()


def test_messages_match_the_tuple_patterns_and_attributes_of_the_api(harness: Harness) -> None:
    server = harness.server()
    client = harness.client(server)
    listener = client.subscribe_notifications({"toolsListChanged": True, "resourceSubscriptions": [A]})
    server.updated(A)
    server.list_changed("tools")

    for expected_method, expected_params in ((UPDATED, {"uri": A}), (TOOLS_CHANGED, {})):
        msg = listener.get(timeout=TIMEOUT)
        match msg:
            case ("ex_mcp_notification", ref, method, params):
                assert ref is listener
                assert (method, params) == (expected_method, expected_params)
            case _:
                pytest.fail(f"not a notification tuple: {msg!r}")
        match msg:
            case mcp.Notification(listener=ref, method=method, params=params):
                assert (ref, method, params) == (listener, expected_method, expected_params)
            case _:
                pytest.fail(f"not a Notification: {msg!r}")
        assert (msg.tag, msg[0]) == (NOTIFICATION, NOTIFICATION)
        assert len(msg) == 4

    server.drop()
    msg = listener.get(timeout=TIMEOUT)
    match msg:
        case ("ex_mcp_notification_reconnected", ref, {"resubscribed": ok, "failed": bad}):
            assert ref is listener
            assert (ok, bad) == ([A], [])
        case _:
            pytest.fail(f"not a reconnected tuple: {msg!r}")
    assert isinstance(msg, mcp.Reconnected)
    assert (msg.tag, msg.listener, msg.report) == (RECONNECTED, listener, {"resubscribed": [A], "failed": []})

    client.disconnect()
    msg = listener.get(timeout=TIMEOUT)
    match msg:
        case ("ex_mcp_notification_closed", ref, reason):
            assert (ref, reason) == (listener, "disconnected")
        case _:
            pytest.fail(f"not a closed tuple: {msg!r}")
    match msg:
        case mcp.Closed(reason="disconnected"):
            pass
        case _:
            pytest.fail(f"not a Closed: {msg!r}")
    assert (msg.tag, msg.listener, msg.reason) == (CLOSED, listener, "disconnected")


def test_a_listener_exposes_its_id_client_subscriber_and_normalized_filter(client: mcp.Client) -> None:
    sink: queue.Queue[Any] = queue.Queue()
    holder = Holder()
    actor = Collector.start(sink)
    default = client.subscribe_notifications({"toolsListChanged": True, "promptsListChanged": False})
    by_thread = client.subscribe_notifications({"resourceSubscriptions": [A, A]}, subscriber=holder.thread)
    by_actor = client.subscribe_notifications({"resourcesListChanged": True}, subscriber=actor)
    by_put = client.subscribe_notifications({"promptsListChanged": True, "resourceSubscriptions": [B]}, subscriber=sink)
    listeners = [default, by_thread, by_actor, by_put]
    assert all(isinstance(listener, mcp.Listener) for listener in listeners)
    assert len({listener.id for listener in listeners}) == 4
    assert all(listener.client is client for listener in listeners)
    assert default.subscriber is threading.current_thread()
    assert by_thread.subscriber is holder.thread
    assert by_actor.subscriber is actor
    assert by_put.subscriber is sink
    assert default.filter == {"toolsListChanged": True}
    assert by_thread.filter == {"resourceSubscriptions": [A]}
    assert by_actor.filter == {"resourcesListChanged": True}
    assert by_put.filter == {"promptsListChanged": True, "resourceSubscriptions": [B]}
    holder.end()


def test_each_subscriber_kind_receives_its_messages_where_the_api_says(client: mcp.Client, server: FakeServer) -> None:
    holder = Holder()
    actor_sink: queue.Queue[Any] = queue.Queue()
    put_sink: queue.Queue[Any] = queue.Queue()
    actor = Collector.start(actor_sink)
    default = client.subscribe_notifications({"toolsListChanged": True})
    by_thread = client.subscribe_notifications({"toolsListChanged": True}, subscriber=holder.thread)
    by_actor = client.subscribe_notifications({"toolsListChanged": True}, subscriber=actor)
    by_put = client.subscribe_notifications({"toolsListChanged": True}, subscriber=put_sink)
    server.list_changed("tools")
    assert default.get(timeout=TIMEOUT).listener is default  # the listener's own inbox
    assert by_thread.get(timeout=TIMEOUT).listener is by_thread  # the listener's inbox, too
    assert actor_sink.get(timeout=TIMEOUT).listener is by_actor  # the actor's on_receive
    assert put_sink.get(timeout=TIMEOUT).listener is by_put  # put()
    assert_quiet(server, default, by_thread, actor_sink, put_sink)
    holder.end()


def test_iterating_a_listener_ends_after_its_closed_message(client: mcp.Client, server: FakeServer) -> None:
    listener = client.subscribe_notifications({"toolsListChanged": True, "resourceSubscriptions": [A]})
    server.list_changed("tools")
    server.updated(A)
    listener_first = listener.get(timeout=TIMEOUT)
    assert listener_first.method == TOOLS_CHANGED
    server.updated(A)
    assert listener.get(timeout=TIMEOUT).method == UPDATED
    stopper = threading.Thread(target=client.disconnect, daemon=True)
    seen: list[Any] = []
    stopper.start()
    for msg in listener:  # would block forever if iteration did not end after Closed
        seen.append(msg)
    stopper.join(TIMEOUT)
    assert [m.tag for m in seen][-1] == CLOSED
    assert [m for m in seen if m.tag == CLOSED] == [mcp.Closed(CLOSED, listener, "disconnected")]
    assert list(listener) == []


def test_the_context_manager_unsubscribes_on_exit_even_on_error(client: mcp.Client, server: FakeServer) -> None:
    with pytest.raises(KeyError):
        with client.subscribe_notifications({"resourceSubscriptions": [A]}):
            raise KeyError("host error")
    server.wait_for("resources/unsubscribe", uri=A)
    assert_no_leak(client, proxies=0)


@pytest.mark.parametrize(
    "bad",
    [42, "thread", object(), threading.Event(), queue.Queue],
    ids=["int", "str", "object", "event", "queue-class"],
)
def test_a_bad_subscriber_raises_type_error_and_registers_nothing(
    client: mcp.Client, server: FakeServer, bad: Any
) -> None:
    before = wire_count(server)
    with pytest.raises(TypeError):
        client.subscribe_notifications({"toolsListChanged": True, "resourceSubscriptions": [A]}, subscriber=bad)
    assert wire_count(server) == before
    assert_no_leak(client, proxies=0)


@pytest.mark.parametrize(
    ("bad", "error"),
    [(0, ValueError), (-1, ValueError), ("5", TypeError), (True, TypeError), (None, TypeError)],
    ids=["zero", "negative", "str", "bool", "none"],
)
def test_a_bad_timeout_raises_value_or_type_error_naming_it_and_registers_nothing(
    client: mcp.Client, server: FakeServer, bad: Any, error: type[Exception]
) -> None:
    # ValueError for a bad value, TypeError for a bad type; either names the argument.
    before = wire_count(server)
    with pytest.raises(error, match=r"^timeout must be"):
        client.subscribe_notifications({"toolsListChanged": True, "resourceSubscriptions": [A]}, timeout=bad)
    assert wire_count(server) == before
    assert_no_leak(client, proxies=0)
    listener = client.subscribe_notifications({"toolsListChanged": True})
    with pytest.raises(error, match=r"^timeout must be"):
        client.unsubscribe_notifications(listener, timeout=bad)


def test_a_nan_timeout_raises_value_error_and_registers_nothing(client: mcp.Client, server: FakeServer) -> None:
    # Regression: NaN compares false with everything, so a `<= 0` check alone lets it through.
    before = wire_count(server)
    with pytest.raises(ValueError):
        client.subscribe_notifications({"toolsListChanged": True, "resourceSubscriptions": [A]}, timeout=math.nan)
    assert wire_count(server) == before
    assert_no_leak(client, proxies=0)


def test_an_infinite_timeout_either_works_or_raises_value_error_and_leaks_nothing(client: mcp.Client) -> None:
    # Regression: inf used to reach pykka after RegisterListener was queued (OverflowError, leaked entry).
    try:
        listener = client.subscribe_notifications({"toolsListChanged": True}, timeout=math.inf)
    except ValueError:
        pass
    else:
        listener.unsubscribe()
    assert_no_leak(client, proxies=0)


def test_unsubscribe_notifications_rejects_what_is_not_its_listener(harness: Harness, client: mcp.Client) -> None:
    other_client = harness.client(harness.server())
    foreign = other_client.subscribe_notifications({"toolsListChanged": True})
    with pytest.raises(TypeError):
        client.unsubscribe_notifications("listener-1")  # type: ignore[arg-type]
    with pytest.raises(mcp.ListenerNotFound, match="belongs to another client"):
        client.unsubscribe_notifications(foreign)
    foreign.unsubscribe()  # still registered on its own client
