"""Fewer thread hand-offs: requests sent from the host's thread, answers settled by the reader,
registrations run on the registering thread through the session monitor, small stdio writes on
the caller's thread. Each shortcut keeps what it replaces: order, bounds, and what the actor alone may do."""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors._delivery._inbox import Inbox
from exmcp_actors._protocol import _events as ev
from exmcp_actors._protocol._filters import normalize_filter
from exmcp_actors._protocol._index import ListenerIndex
from exmcp_actors._protocol._messages import NOTIFICATION
from exmcp_actors._runtime._lane import DeliveryLane
from exmcp_actors._transport._framing import QueueWriter
from exmcp_actors._transport.stdio._pipes import pipe_write_now
from exmcp_actors._util._reply import Reply
from exmcp_actors.testing import FakeServer
from tests.test_protocol_session import legacy

WAIT = 5.0
A = "file:///a.txt"
UPDATED = "notifications/resources/updated"


# -- Reply: the answer slot of one request --------------------------------------------------


def test_a_reply_gives_its_result_to_every_waiter_before_and_after_it_is_set() -> None:
    reply = Reply()
    results: queue.SimpleQueue[Any] = queue.SimpleQueue()
    waiters = [threading.Thread(target=lambda: results.put(reply.result(WAIT))) for _ in range(3)]
    for waiter in waiters:
        waiter.start()
    assert not reply.done()
    reply.set_result({"ok": 1})
    for waiter in waiters:
        waiter.join(WAIT)
    assert [results.get(timeout=WAIT) for _ in waiters] == [{"ok": 1}] * 3
    assert reply.done() and reply.result(0) == {"ok": 1}


def test_a_reply_raises_its_exception_times_out_and_is_set_only_once() -> None:
    with pytest.raises(FutureTimeout):
        Reply().result(0.01)
    reply = Reply()
    reply.set_exception(mcp.NotConnected("gone"))
    with pytest.raises(mcp.NotConnected, match="gone"):
        reply.result(None)
    with pytest.raises(InvalidStateError):
        reply.set_result(1)


# -- the session's side: which answers a reader may settle ------------------------------------


def test_the_session_lets_a_reader_settle_only_a_host_requests_answer() -> None:
    driver = legacy()
    request_id, future = driver.request("tools/list")
    session = driver.session
    assert not session.answer_now({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    assert not session.answer_now({"jsonrpc": "2.0", "id": "nobody-asked", "result": {}})
    assert not session.answer_now({"jsonrpc": "2.0", "id": [1], "result": {}})  # a bad id: the actor logs it
    assert session.answer_now({"jsonrpc": "2.0", "id": request_id, "result": {"tools": []}})
    [settle] = driver.take()
    assert isinstance(settle, ev.Settle) and settle.future is future and settle.result == {"tools": []}


# -- the lane: an answer is settled in wire order, or everything from it is forwarded ---------


class LaneRig:
    """A lane open for generation 1 with one listener on A (its own inbox)."""

    def __init__(self, answers: bool) -> None:
        self.lane = DeliveryLane(ListenerIndex())
        self.answered: list[Any] = []
        self.forwarded: list[list[Any]] = []
        self.inbox = Inbox()

        def answer(frame: Any, settles: list[Any]) -> bool:
            self.answered.append((frame, len(self.inbox)))  # what had landed when it was settled
            return answers

        self.lane.answer = answer
        entry = type("Entry", (), {"route": self.inbox, "handle": "h"})()
        self.lane.add("h", normalize_filter({"resourceSubscriptions": [A]}), entry)
        self.lane.open_for(1)

    def take(self, frames: list[Any]) -> None:
        self.lane.take(1, frames, self.forwarded.append)


def updated(n: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": UPDATED, "params": {"uri": A, "n": n}}


def test_the_reader_settles_an_answer_after_what_came_before_it_and_delivers_what_follows() -> None:
    rig = LaneRig(answers=True)
    answer = {"jsonrpc": "2.0", "id": 7, "result": {}}
    rig.take([updated(1), answer, updated(2)])
    assert rig.answered == [(answer, 1)]  # the notification before it had landed first
    assert rig.forwarded == []
    assert [rig.inbox.get(0)[3]["n"] for _ in range(2)] == [1, 2]
    assert len(rig.inbox) == 0


def test_an_answer_the_reader_cannot_settle_goes_to_the_actor_with_everything_after_it() -> None:
    rig = LaneRig(answers=False)
    answer = {"jsonrpc": "2.0", "id": 7, "result": {}}
    rig.take([updated(1), answer, updated(2)])
    assert rig.forwarded == [[answer, updated(2)]]
    assert rig.inbox.get(0)[0] == NOTIFICATION and len(rig.inbox) == 0
    rig.take([updated(3)])  # the actor has not handled the batch: this one queues behind it
    assert rig.forwarded == [[answer, updated(2)], [updated(3)]]


# -- the session monitor ---------------------------------------------------------------------


def test_a_reader_never_waits_for_the_session_monitor_it_forwards_instead(legacy_client: mcp.Client) -> None:
    monitor = legacy_client._monitor
    settles: list[Any] = []
    with monitor.lock:  # another thread running an input
        assert not monitor.try_answer({"jsonrpc": "2.0", "id": 1, "result": {}}, settles)
    assert settles == []
    assert legacy_client.request("ping") == {}


def test_requests_from_many_threads_at_once_each_get_their_own_answer(
    legacy_client: mcp.Client, legacy_server: FakeServer
) -> None:
    @legacy_server.on("tools/call", concurrent=True)
    def echo(params: dict[str, Any], ctx: Any) -> Any:
        return {"content": [], "structuredContent": params["arguments"]}

    got: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def caller(i: int) -> None:
        for j in range(25):
            result = legacy_client.call_tool("echo", {"i": i, "j": j})
            got.put(result["structuredContent"] == {"i": i, "j": j})

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 4)
    assert [got.get(timeout=WAIT) for _ in range(200)] == [True] * 200


def test_a_registration_whose_subscriber_has_no_proxy_yet_starts_it_on_the_registering_thread(
    legacy_client: mcp.Client, legacy_server: FakeServer
) -> None:
    """The proxy exists before the registration returns, so nothing can be delivered before it."""
    sink: queue.Queue[Any] = queue.Queue()
    first = legacy_client.subscribe_notifications({"toolsListChanged": True}, subscriber=sink)
    slot = legacy_client._monitor.session.registry.slots[("put", id(sink))]
    assert slot.ref is not None and slot.ref.is_alive()
    second = legacy_client.subscribe_notifications({"resourceSubscriptions": [A]}, subscriber=sink)
    assert legacy_client._monitor.session.registry.slots[("put", id(sink))].ref is slot.ref  # one per subscriber
    legacy_server.list_changed("tools")
    legacy_server.updated(A)
    assert sink.get(timeout=WAIT).listener is first
    assert sink.get(timeout=WAIT).listener is second


def test_a_registration_interrupted_while_its_subscribe_is_in_flight_leaves_no_server_subscription(
    legacy_client: mcp.Client, legacy_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker takes over the subscribe the host stopped waiting for: once the server answers,
    it unsubscribes, since nobody holds the URI."""
    gate = threading.Event()

    @legacy_server.on("resources/subscribe", concurrent=True)
    def slow_subscribe(params: dict[str, Any], ctx: Any) -> Any:
        ctx.wait(gate)
        return {}

    host = threading.current_thread()
    wait_for_reply = Reply.result

    def interrupted(self: Reply, timeout: float | None = None) -> Any:
        if threading.current_thread() is host:
            raise KeyboardInterrupt  # Ctrl-C while the host waits for the answer
        return wait_for_reply(self, timeout)

    monkeypatch.setattr(Reply, "result", interrupted)
    with pytest.raises(KeyboardInterrupt):
        legacy_client.subscribe_notifications({"resourceSubscriptions": [A]})
    monkeypatch.setattr(Reply, "result", wait_for_reply)
    legacy_server.wait_for("resources/subscribe", uri=A)
    gate.set()
    legacy_server.wait_for("resources/unsubscribe", uri=A)
    assert legacy_client._inspect()["refcount"]["empty"]
    assert legacy_client._inspect()["entries"] == 0


# -- small writes on the caller's thread ------------------------------------------------------


def test_writes_on_the_callers_thread_and_the_writer_thread_keep_the_order_of_put() -> None:
    """A pipe nobody reads for a while: ``put`` writes what fits at once, queues the rest
    behind anything waiting, and the reader gets every byte in the order it was put."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, True)
    sizes = [10, 3000, 70_000, 1, 4096, 5000, 200] * 60  # some over an atomic pipe write
    lines = [bytes([65 + i % 26]) * (size - 1) + b"\n" for i, size in enumerate(sizes)]
    expected = b"".join(lines)

    def write_batch(batch: list[bytes]) -> None:
        view = memoryview(b"".join(batch))
        while view:
            view = view[os.write(write_fd, view) :]

    writer = QueueWriter("test-writer", write_batch, on_error=lambda exc: None, write_now=pipe_write_now(write_fd))
    writer.start()
    for line in lines:  # the pipe fills long before the end: later puts must queue
        writer.put(line)
    received = bytearray()
    while len(received) < len(expected):
        received += os.read(read_fd, 65536)
    writer.stop()
    writer.thread.join(WAIT)
    os.close(read_fd)
    os.close(write_fd)
    assert bytes(received) == expected


def test_a_performer_that_raises_is_logged_as_our_bug_and_what_follows_still_runs(
    legacy_server: FakeServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from exmcp_actors._runtime import _effects

    client = mcp.connect(legacy_server.transport(), protocol="legacy", request_timeout=WAIT, roots=[])
    try:
        real_send = _effects.PERFORMERS[ev.Send]

        def send(shell: Any, session: Any, effect: ev.Send) -> None:
            if effect.message.get("method") == "notifications/roots/list_changed":
                raise RuntimeError("injected performer bug")
            real_send(shell, session, effect)

        monkeypatch.setitem(_effects.PERFORMERS, ev.Send, send)
        client.set_roots([{"uri": "file:///x", "name": "x"}])  # its notice trips the bug
        assert client.request("ping") == {}  # the monitor was let go, and the next command runs
        assert any("internal error performing Send" in r.getMessage() for r in caplog.records)
        assert client.status == "ready"
    finally:
        client.disconnect()
