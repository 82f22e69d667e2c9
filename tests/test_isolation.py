"""Subscribers are isolated from each other and from the library.

- A subscriber whose ``put()`` raises is removed (its URIs released, its handle ended), logged
  once, never called again; every other listener still gets every message; the client lives.
- After ``unsubscribe()``, ``cancel()`` or ``disconnect()`` returns, nothing new starts being
  delivered to the subscriber; a ``put()`` blocked forever holds up none of them.
- A handle whose subscriber thread died ends.
- Misuse gets the library's exceptions, printed as sentences, shown as ``exmcp_actors.X``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import FakeServer
from tests.sdk_helpers import URI_A, URI_B, WAIT, library_threads, server_stats
from tests.waiting import wait_until

UPDATES = 9_000
#: How many messages the raising subscriber accepts before it raises.
FAILS_AT = 10


class Counting:
    """A put() subscriber that counts what it got."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def put(self, item: Any) -> None:
        self.items.append(item)

    def updates(self) -> int:
        return sum(1 for item in self.items if item[0] == "ex_mcp_notification")


class CountOnly:
    """A put() subscriber that keeps nothing but a count."""

    def __init__(self) -> None:
        self.count = 0

    def put(self, item: Any) -> None:
        self.count += 1


class Raising(Counting):
    """A put() subscriber whose put() raises from its FAILS_AT-th call on."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def put(self, item: Any) -> None:
        self.calls += 1
        if self.calls >= FAILS_AT:
            raise RuntimeError("the host's put() is broken")
        super().put(item)


class Gate:
    """A put() subscriber that blocks in put() until released; counts the puts that started."""

    def __init__(self, *, block_from: int = 1) -> None:
        self.started = 0
        self.block_from = block_from
        self.release = threading.Event()
        self.blocked = threading.Event()
        self.items: list[Any] = []

    def put(self, item: Any) -> None:
        self.started += 1
        if self.started >= self.block_from:
            self.blocked.set()
            self.release.wait(WAIT * 3)
        self.items.append(item)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    yield fake
    fake.accept()
    fake.close()


@pytest.fixture
def client(server: FakeServer) -> Iterator[mcp.Client]:
    c = mcp.connect(server.transport())
    yield c
    c.disconnect(timeout=WAIT)


def _failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "raised from put()" in r.getMessage()]


def _check_isolation(
    client: mcp.Client,
    send: Callable[[int], None],
    caplog: pytest.LogCaptureFixture,
    wire_unsubscribed: Callable[[], bool],
) -> None:
    """One raising subscriber among others: it is removed, logged once, never called again;
    the others get all UPDATES; its own URI (B) is unsubscribed, the shared one (A) kept."""
    flt = {"resourceSubscriptions": [URI_A]}
    good = [Counting() for _ in range(3)]
    listeners = [client.subscribe_notifications(flt, subscriber=sink) for sink in good[:2]]
    bad = Raising()
    bad_listener = client.subscribe_notifications({"resourceSubscriptions": [URI_A, URI_B]}, subscriber=bad)
    listeners.append(client.subscribe_notifications(flt, subscriber=good[2]))
    by_thread = client.subscribe_notifications(flt)  # an inbox behind the raising one
    send(UPDATES)
    for sink in good:
        wait_until(lambda sink=sink: sink.updates() == UPDATES, what="every update reaching each good subscriber")
    got = 0
    while got < UPDATES:
        assert by_thread.get(timeout=WAIT)[0] == "ex_mcp_notification"
        got += 1
    wait_until(wire_unsubscribed, what="resources/unsubscribe of the raising listener's own URI")
    assert bad.calls == FAILS_AT, "put() was called again after it raised"
    assert len(_failures(caplog)) == 1
    assert _failures(caplog)[0].exc_info is not None, "the failure is logged with the exception"
    assert client.status == "ready"
    refcount = client._inspect()["refcount"]
    assert refcount["counts"] == {URI_A: 4}, refcount
    with pytest.raises(mcp.ListenerNotFound):
        bad_listener.unsubscribe()
    for listener in [*listeners, by_thread]:
        listener.unsubscribe()


def test_a_raising_put_subscriber_is_removed_and_the_others_get_everything_fake(
    client: mcp.Client, server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    def send(n: int) -> None:
        server.send_batch(
            [{"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": URI_A}}] * n
        )

    _check_isolation(client, send, caplog, lambda: server.count("resources/unsubscribe", uri=URI_B) == 1)


def test_a_raising_put_subscriber_is_removed_and_the_others_get_everything_sdk_stdio(
    sdk_stdio_argv_legacy: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    with mcp.connect(sdk_stdio_argv_legacy) as client:

        def send(n: int) -> None:
            client.call_tool("notify", {"kind": "resource_updated", "uri": URI_A, "count": n}, timeout=60)

        def unsubscribed() -> bool:
            return URI_B not in server_stats(client)["subscribed"]

        _check_isolation(client, send, caplog, unsubscribed)


def test_a_raising_actor_free_client_never_dies_and_a_new_put_subscriber_works(
    client: mcp.Client, server: FakeServer
) -> None:
    bad = Raising()
    bad.calls = FAILS_AT  # raises at once
    client.subscribe_notifications({"toolsListChanged": True}, subscriber=bad)
    server.list_changed("tools")
    wait_until(lambda: client._inspect()["entries"] == 0, what="the raising listener's removal")
    fresh = Counting()
    client.subscribe_notifications({"toolsListChanged": True}, subscriber=fresh)
    server.list_changed("tools")
    wait_until(lambda: fresh.updates() == 1, what="delivery to a new subscriber")
    assert bad.calls == FAILS_AT + 1


def test_a_handle_whose_subscriber_thread_died_ends(client: mcp.Client, server: FakeServer) -> None:
    made: queue.Queue[mcp.Listener] = queue.Queue()
    go = threading.Event()

    def owner() -> None:
        made.put(client.subscribe_notifications({"toolsListChanged": True}))
        go.wait(WAIT)

    thread = threading.Thread(target=owner)
    thread.start()
    listener = made.get(timeout=WAIT)
    server.list_changed("tools")
    wait_until(lambda: listener.pending() == 1, what="the notification in the inbox")
    go.set()
    thread.join(WAIT)
    # Iteration yields what arrived before the death, then stops (it used to block forever).
    seen: queue.Queue[list[Any]] = queue.Queue()
    reader = threading.Thread(target=lambda: seen.put(list(listener)), daemon=True)
    reader.start()
    messages = seen.get(timeout=WAIT)
    assert [m.method for m in messages] == ["notifications/tools/list_changed"]
    with pytest.raises(queue.Empty):
        listener.get(timeout=WAIT)
    client.disconnect(timeout=WAIT)
    with pytest.raises(queue.Empty):
        listener.get(timeout=0.01)


def test_no_new_delivery_starts_after_unsubscribe_returns(client: mcp.Client, server: FakeServer) -> None:
    gate = Gate()
    listener = client.subscribe_notifications({"toolsListChanged": True}, subscriber=gate)
    server.send_batch([{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}] * 1_000)
    assert gate.blocked.wait(WAIT)
    listener.unsubscribe(timeout=1.0)  # returns although put() is blocked
    gate.release.set()
    wait_until(lambda: client._inspect()["proxies"] == 0, what="the proxy's end")
    assert gate.started == 1, f"{gate.started - 1} deliveries started after unsubscribe() returned"


def test_no_new_delivery_starts_after_cancel_returns_but_its_closing_message(harness_modern: Any) -> None:
    server, client = harness_modern
    gate = Gate()
    subscription = client.listen({"toolsListChanged": True}, subscriber=gate)
    for _ in range(300):
        server.event(subscription.subscription_id, "notifications/tools/list_changed")
    assert gate.blocked.wait(WAIT)
    subscription.cancel(timeout=1.0)
    gate.release.set()
    wait_until(lambda: any(item[0] == "ex_mcp_subscription_closed" for item in gate.items), what="the closing message")
    assert [item[0] for item in gate.items] == ["ex_mcp_subscription", "ex_mcp_subscription_closed"]


@pytest.fixture
def harness_modern() -> Iterator[tuple[FakeServer, mcp.Client]]:
    server = FakeServer(era="modern")
    client = mcp.connect(server.transport())
    yield server, client
    client.disconnect(timeout=WAIT)
    server.close()


def test_a_put_blocked_forever_holds_up_neither_unsubscribe_nor_disconnect(server: FakeServer) -> None:
    before = {t for t in library_threads() if t.is_alive()}
    client = mcp.connect(server.transport())
    gate, other_gate = Gate(), Gate(block_from=10**9)
    stuck = client.subscribe_notifications({"toolsListChanged": True}, subscriber=gate)
    other = client.subscribe_notifications({"toolsListChanged": True}, subscriber=other_gate)
    server.send_batch([{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}] * 500)
    assert gate.blocked.wait(WAIT)
    started = time.monotonic()
    stuck.unsubscribe(timeout=0.5)
    assert time.monotonic() - started < 0.5
    wait_until(lambda: other_gate.started == 500, what="the other subscriber's deliveries")
    started = time.monotonic()
    client.disconnect(timeout=0.5)
    assert time.monotonic() - started < 0.5 + 1.0  # its timeout, plus scheduling slack on a slow machine
    assert other_gate.items[-1] == ("ex_mcp_notification_closed", other, "disconnected")
    gate.release.set()
    wait_until(lambda: {t for t in library_threads() if t.is_alive()} <= before, what="the library's threads ending")
    assert gate.started == 1, "the backlog was delivered after it was released"


def test_a_put_blocked_at_disconnect_gets_no_backlog_and_no_closing_message_later(server: FakeServer) -> None:
    client = mcp.connect(server.transport())
    gate = Gate()
    client.subscribe_notifications({"toolsListChanged": True}, subscriber=gate)
    server.send_batch([{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}] * 100)
    assert gate.blocked.wait(WAIT)
    client.disconnect(timeout=0.3)
    gate.release.set()
    wait_until(lambda: not any(t.name.startswith("SubscriberProxy") for t in library_threads()), what="proxy end")
    assert gate.started == 1, "deliveries started after disconnect() returned"


# -- misuse ------------------------------------------------------------------------------


def test_a_watch_of_another_client_raises_listener_not_found(client: mcp.Client, server: FakeServer) -> None:
    other_server = FakeServer()
    other = mcp.connect(other_server.transport())
    try:
        watch = other.watch({"toolsListChanged": True})
        with pytest.raises(mcp.ListenerNotFound, match="belongs to another client"):
            client.unsubscribe_notifications(watch)  # type: ignore[arg-type]
        with pytest.raises(mcp.ListenerNotFound):
            client._remove_handle(watch, timeout=1.0)
        watch.unsubscribe()
    finally:
        other.disconnect(timeout=WAIT)
        other_server.close()


def test_a_subscription_of_another_client_raises_listener_not_found(harness_modern: Any) -> None:
    server, client = harness_modern
    other = mcp.connect(server.transport())
    try:
        subscription = other.listen({"toolsListChanged": True})
        with pytest.raises(mcp.ListenerNotFound, match="belongs to another client"):
            client._cancel_subscription(subscription, timeout=1.0)
        subscription.cancel()
    finally:
        other.disconnect(timeout=WAIT)


def test_task_ids_on_the_legacy_api_of_a_modern_connection_raise_use_listen(harness_modern: Any) -> None:
    _, client = harness_modern
    with pytest.raises(mcp.UseListen, match="use listen"):
        client.subscribe_notifications({"taskIds": ["task-1"]})
    with pytest.raises(mcp.FilterError):  # a malformed one is still the filter's fault
        client.subscribe_notifications({"taskIds": [1]})


@pytest.mark.parametrize("bad", ["1", None, True, [1]], ids=["str", "none", "bool", "list"])
def test_a_wrong_typed_timeout_raises_type_error_naming_it(client: mcp.Client, bad: Any) -> None:
    if bad is not None:  # None: the client's default request timeout
        with pytest.raises(TypeError, match=r"^timeout must be a number"):
            client.request("ping", timeout=bad)
    with pytest.raises(TypeError, match=r"^timeout must be a number"):
        client.disconnect(timeout=bad)
    listener = client.subscribe_notifications({"toolsListChanged": True})
    if bad is not None:
        with pytest.raises(TypeError, match=r"^timeout must be a number"):
            listener.get(timeout=bad)
    with pytest.raises(TypeError, match=r"^connect_timeout must be a number"):
        mcp.connect("ws://127.0.0.1:1", connect_timeout=bad)
    with pytest.raises(ValueError, match=r"^timeout must be a positive"):
        client.request("ping", timeout=-1)


def test_every_public_exception_prints_as_a_sentence_and_shows_as_exmcp_actors() -> None:
    classes = [getattr(mcp, name) for name in mcp.__all__]
    errors = [c for c in classes if isinstance(c, type) and issubclass(c, mcp.Error)]
    assert len(errors) >= 10
    for cls in errors:
        assert cls.__module__ == "exmcp_actors", cls
        if cls in (
            mcp.SubscribeFailed,
            mcp.RequestError,
            mcp.ExchangeFailed,
            mcp.OutcomeUnknown,
            mcp.UrlElicitationRequired,
        ):
            continue  # their arguments make their sentence (checked below)
        error = cls()
        text = str(error)
        assert " " in text and text[0].islower() and text != str(error.reason), (cls, text)
        assert error.reason == cls.reason
        assert repr(error).startswith(cls.__name__)
    assert str(mcp.SubscriberNotAlive()) == "the subscriber (thread or actor) has already ended"
    failed = mcp.SubscribeFailed(URI_A, {"code": -32602, "message": "no"})
    assert str(failed).startswith("resources/subscribe failed for")
    assert str(mcp.RequestError(-32601, "Method not found")).startswith("the server answered with JSON-RPC error")
    dropped = mcp.ExchangeFailed("HTTP 503 Service Unavailable", status=503)
    assert str(dropped) == "the transport failed the request: HTTP 503 Service Unavailable"
    assert dropped.reason == ("transport_error", 503, "HTTP 503 Service Unavailable")
    lost = mcp.OutcomeUnknown("the response stream dropped before the answer", request="tools/call 'deploy'")
    assert str(lost) == (
        "tools/call 'deploy' may or may not have run on the server: the response stream dropped before the answer"
    )
    assert lost.reason == ("transport_error", None, "the response stream dropped before the answer")
    assert f"{mcp.SubscriberNotAlive.__module__}.{mcp.SubscriberNotAlive.__qualname__}" == (
        "exmcp_actors.SubscriberNotAlive"
    )


# -- max_pending -------------------------------------------------------------------------

SIGNALS = 15_000


def _updated(uri: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}


def test_an_unread_inbox_of_signals_stays_bounded_and_keeps_the_latest_signal_per_uri(
    client: mcp.Client, server: FakeServer
) -> None:
    uris = [URI_A, URI_B]
    flt = {"resourceSubscriptions": uris, "toolsListChanged": True}
    stalled = client.subscribe_notifications(flt, max_pending=1_000)
    counter = Counting()  # reads everything at once: tells when the client has handled it all
    client.subscribe_notifications(flt, subscriber=counter)
    tools = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    wave = [_updated(URI_A), _updated(URI_B), tools] * 500
    for _ in range(SIGNALS // len(wave)):
        server.send_batch(wave)
    wait_until(lambda: counter.updates() == SIGNALS // len(wave) * len(wave), what="the client handling every signal")
    # At most the bound, plus one signal per key queued at the bound; nothing closed it.
    assert 1_000 <= stalled.pending() <= 1_000 + 3
    messages = [stalled.get(timeout=WAIT) for _ in range(stalled.pending())]
    assert all(message[0] == "ex_mcp_notification" for message in messages)
    tail = {(m.method, m.params.get("uri")) for m in messages[-3:]}
    assert tail == {(m["method"], m.get("params", {}).get("uri")) for m in wave[:3]}, "the latest signals were lost"
    assert client._inspect()["entries"] == 2
    server.send_batch([tools])  # still delivered to: it was never closed
    assert stalled.get(timeout=WAIT).method == "notifications/tools/list_changed"


def test_bytes_per_pending_message_and_an_unread_inbox_stops_growing_at_its_bound(
    client: mcp.Client, server: FakeServer
) -> None:
    import json
    import tracemalloc

    from exmcp_actors._delivery._bound import DEFAULT_MAX_PENDING, Bound
    from exmcp_actors._delivery._inbox import Inbox, land

    # End to end: the inbox holds the bound and one signal queued at it, whatever comes after.
    bound = 1_000
    stalled = client.subscribe_notifications({"resourceSubscriptions": [URI_A]}, max_pending=bound)
    counter = CountOnly()
    client.subscribe_notifications({"resourceSubscriptions": [URI_A]}, subscriber=counter)
    for _ in range(3):
        server.send_batch([_updated(URI_A)] * bound)
    wait_until(lambda: counter.count == 3 * bound, what="every message handled")
    assert stalled.pending() == bound + 1

    # The memory of one inbox, as the client fills it (a decoded frame in a Notification tuple).
    handle = object()
    wire = json.dumps(_updated(URI_A))
    inbox = Inbox(Bound(DEFAULT_MAX_PENDING, lambda: None))

    def fill(n: int) -> None:
        for _ in range(n // 100):
            land(
                inbox,
                [
                    mcp.Notification("ex_mcp_notification", handle, m["method"], m["params"])
                    for m in (json.loads(wire) for _ in range(100))
                ],
            )

    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fill(DEFAULT_MAX_PENDING)
        full = tracemalloc.get_traced_memory()[0]
        fill(2 * DEFAULT_MAX_PENDING)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    per_message = (full - base) / DEFAULT_MAX_PENDING
    growth = after - full
    print(f"pending message: {per_message:.0f} bytes; {2 * DEFAULT_MAX_PENDING} more past the bound: {growth} bytes")
    assert len(inbox) == DEFAULT_MAX_PENDING + 1
    assert per_message < 2_000
    assert growth < 100 * per_message, "an unread inbox kept growing past its bound"  # unbounded: 20,000x


def test_a_non_signal_past_the_bound_closes_a_put_listener_with_overflow_and_releases_its_uris(
    client: mcp.Client, server: FakeServer
) -> None:
    gate = Gate()
    listener = client.subscribe_notifications(
        {"toolsListChanged": True, "resourceSubscriptions": [URI_A]}, subscriber=gate, max_pending=3
    )
    tools = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    server.send_batch([tools])
    assert gate.blocked.wait(WAIT)
    server.send_batch([tools] * 10)  # 3 wait, one more (a key queued at the bound), the rest coalesced
    server.drop()  # the reconnect's Reconnected is no change signal: past the bound, it overflows
    wait_until(lambda: server.count("resources/unsubscribe", uri=URI_A) == 1, what="the release of its URI")
    assert client._inspect()["entries"] == 0
    gate.release.set()
    wait_until(lambda: gate.items and gate.items[-1][0] == "ex_mcp_notification_closed", what="the closing message")
    assert gate.items[-1] == ("ex_mcp_notification_closed", listener, ("overflow", 3))
    assert [item[0] for item in gate.items[:-1]] == ["ex_mcp_notification"] * 5
    with pytest.raises(mcp.ListenerNotFound):
        listener.unsubscribe()


def test_made_up_uris_past_twice_the_bound_close_a_subscription_with_overflow(harness_modern: Any) -> None:
    server, client = harness_modern
    base = "file:///dir"
    subscription = client.listen({"resourceSubscriptions": [base]}, max_pending=50)
    for i in range(200):  # sub-resources: each a new key, as a hostile server could make up
        server.event(subscription.subscription_id, "notifications/resources/updated", {"uri": f"{base}/{i}"})
    wait_until(lambda: not server.open_listens(), what="the subscription's end on the wire")
    messages = list(subscription)
    assert messages[-1] == ("ex_mcp_subscription_closed", subscription, ("overflow", 50))
    assert len(messages) == 100 + 1
    assert client._inspect()["entries"] == 0


@pytest.mark.parametrize("bad", [0, -5], ids=["zero", "negative"])
def test_a_bad_max_pending_raises_value_error(client: mcp.Client, bad: int) -> None:
    with pytest.raises(ValueError, match=r"^max_pending must be at least 1"):
        client.subscribe_notifications({"toolsListChanged": True}, max_pending=bad)


def test_a_wrong_typed_max_pending_raises_type_error(client: mcp.Client) -> None:
    with pytest.raises(TypeError, match=r"^max_pending must be an int"):
        client.watch({"toolsListChanged": True}, max_pending="10")  # type: ignore[arg-type]
    assert client._inspect()["entries"] == 0
