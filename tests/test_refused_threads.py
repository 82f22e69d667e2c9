"""When no thread may start: Python 3.12.0 and 3.12.1 start none from the interpreter's exit
hooks on, where clients are closed (later versions wait for the host's threads first), and an
exhausted system refuses one too. Whatever wanted a thread then does without it, and nothing
is lost in silence: a progress still reaches its callback, a server request is answered, the
timers go on, a blocking call still ends by its deadline, a hub still closes.

``Thread.start`` is refused here with ``monkeypatch``, so each case runs on every version;
``test_runtime_rule``'s exit test runs a real exit."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors._api import _call, _hub
from exmcp_actors._protocol._events import HostAnswered, RunHostHandler
from exmcp_actors._runtime._host_pool import HostRuntime, ProgressFeed, WorkerPool
from exmcp_actors._util._scheduler import Scheduler
from exmcp_actors.testing import NO_REPLY, FakeServer
from tests.waiting import WAIT


def _refuse(self: threading.Thread) -> None:
    raise RuntimeError("can't create new thread at interpreter shutdown")


@pytest.fixture
def refused(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No thread may start inside the ``with`` of this fixture's context."""
    with monkeypatch.context() as patch:
        patch.setattr(threading.Thread, "start", _refuse)
        yield


def test_a_progress_no_worker_may_take_reaches_its_callback_and_the_feed_drains(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its feed stayed "running": every later progress was dropped, and the call's end waited
    # the whole drain bound (5 s) for a drain that never came.
    seen: queue.SimpleQueue[Any] = queue.SimpleQueue()
    feed = ProgressFeed(seen.put, WorkerPool("callbacks", 2))
    with monkeypatch.context() as patch:
        patch.setattr(threading.Thread, "start", _refuse)
        feed.put({"progress": 1})
    feed.put({"progress": 2})
    assert feed.wait_drained(WAIT)
    assert [seen.get(timeout=WAIT)["progress"] for _ in range(2)] == [1, 2]


def test_a_server_request_no_worker_may_take_is_answered_with_an_error(refused: None) -> None:
    host = HostRuntime("refused", sampling=lambda params: {"role": "assistant"})
    told: queue.SimpleQueue[Any] = queue.SimpleQueue()
    host.run(RunHostHandler("sampling/createMessage", 7, {}, 1), told.put)
    answer = told.get(timeout=WAIT)
    assert answer == HostAnswered(7, 1, error="the client is closing")


def test_a_timer_armed_while_no_thread_may_start_fires_once_one_can(monkeypatch: pytest.MonkeyPatch) -> None:
    # The thread that never started was kept: no timer of the process fired again.
    timers = Scheduler("refused-scheduler")
    early = threading.Event()
    with monkeypatch.context() as patch:
        patch.setattr(threading.Thread, "start", _refuse)
        timers.call_later(0.01, early.set)  # no error: the host's call goes on
    later = threading.Event()
    timers.call_later(0.01, later.set)
    assert later.wait(WAIT) and early.wait(WAIT)


class _NeverFires:
    def cancel(self) -> None:
        pass


def test_a_blocking_call_ends_by_its_deadline_with_no_timer_to_tell_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeServer() as server:
        server.on("test/never", lambda params, ctx: NO_REPLY)
        with mcp.connect(server.transport()) as client:
            monkeypatch.setattr(_call, "call_later", lambda delay, callback, *args: _NeverFires())
            outcome: queue.SimpleQueue[BaseException] = queue.SimpleQueue()

            def request() -> None:
                try:
                    client.request("test/never", timeout=0.2)
                except BaseException as error:
                    outcome.put(error)

            threading.Thread(target=request, daemon=True).start()
            assert isinstance(outcome.get(timeout=WAIT), mcp.RequestTimeout)


def test_a_hub_no_thread_may_close_closes_its_clients_in_turn_and_its_watches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Hub.close() raised, and left its watches and catalogs open.
    with FakeServer() as one, FakeServer() as two:
        clients = {"one": mcp.connect(one.transport()), "two": mcp.connect(two.transport())}
        hub = _hub.Hub(clients, {}, {})
        watch = hub.watch({"toolsListChanged": True})
        started = time.monotonic()
        with monkeypatch.context() as patch:
            patch.setattr(threading.Thread, "start", _refuse)
            hub.close(timeout=WAIT)
        assert time.monotonic() - started < WAIT
        assert [client.status for client in clients.values()] == ["disconnected", "disconnected"]
        closing = [watch.get(timeout=WAIT) for _ in range(2)]
        assert {message.tag for message in closing} <= {"ex_mcp_notification_closed", "ex_mcp_subscription_closed"}


def test_a_progress_no_worker_may_take_waits_for_the_calls_end_not_the_thread_that_got_it(refused: None) -> None:
    # The thread that got it may hold the session's monitor, where no host code runs: the
    # callback runs on the thread that settles the call, as it waits for the feed to drain.
    threads: list[int] = []
    feed = ProgressFeed(lambda params: threads.append(threading.get_ident()), WorkerPool("callbacks", 2))
    feed.put({"progress": 1})
    assert threads == []  # not on the thread that got it
    assert feed.wait_drained(WAIT)  # this thread settles the call now
    assert threads == [threading.get_ident()]
