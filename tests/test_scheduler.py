"""The process-wide scheduler: one timer thread for every client's timers,
heartbeats and liveness polls, started lazily and ended when idle."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import pytest

import exmcp_actors as mcp
from exmcp_actors._transport.websocket._connection import WebSocketTransport, _WsConnection
from exmcp_actors._util._scheduler import Scheduler, scheduler
from exmcp_actors.testing import FakeServer
from tests.waiting import wait_until

WAIT = 5.0


@pytest.fixture
def sched() -> Iterator[Scheduler]:
    s = Scheduler(name="exmcp-scheduler-test", idle_linger=0.05)
    yield s
    thread = s.thread
    if thread is not None:
        thread.join(WAIT)


def test_timers_fire_in_deadline_order_on_one_thread(sched: Scheduler) -> None:
    fired: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()

    def record(name: str) -> None:
        fired.put((name, threading.current_thread().name))

    sched.call_later(0.15, record, "late")
    sched.call_later(0.05, record, "early")
    sched.call_later(0.10, record, "middle")
    got = [fired.get(timeout=WAIT) for _ in range(3)]
    assert [name for name, _ in got] == ["early", "middle", "late"]
    assert {thread for _, thread in got} == {"exmcp-scheduler-test"}


def test_a_cancelled_timer_never_fires(sched: Scheduler) -> None:
    fired: queue.SimpleQueue[str] = queue.SimpleQueue()
    cancelled = sched.call_later(0.05, fired.put, "cancelled")
    sched.call_later(0.10, fired.put, "kept")
    cancelled.cancel()
    cancelled.cancel()  # twice is harmless
    assert fired.get(timeout=WAIT) == "kept"  # the marker: due after the cancelled one, on the same thread
    assert cancelled.done and sched.pending() == 0
    assert fired.empty()


def test_the_thread_starts_with_the_first_timer_and_ends_when_idle(sched: Scheduler) -> None:
    assert sched.thread is None  # nothing armed: no thread
    done = threading.Event()
    sched.call_later(0.01, done.set)
    thread = sched.thread
    assert thread is not None and thread.daemon
    assert done.wait(WAIT)
    thread.join(WAIT)
    assert not thread.is_alive() and sched.thread is None
    # ... and starts again with the next one.
    again = threading.Event()
    sched.call_later(0.0, again.set)
    assert again.wait(WAIT)


def test_a_failing_callback_is_logged_and_later_timers_still_fire(
    sched: Scheduler, caplog: pytest.LogCaptureFixture
) -> None:
    def boom() -> None:
        raise RuntimeError("boom")

    done = threading.Event()
    sched.call_later(0.0, boom)
    sched.call_later(0.05, done.set)
    assert done.wait(WAIT)
    assert "timer callback" in caplog.text and "boom" in caplog.text


def test_an_earlier_timer_armed_later_wakes_the_thread(sched: Scheduler) -> None:
    sched.call_later(30.0, lambda: None).cancel()
    far = sched.call_later(30.0, lambda: None)
    soon = threading.Event()
    started = time.monotonic()
    sched.call_later(0.02, soon.set)
    assert soon.wait(WAIT)
    assert time.monotonic() - started < 2.0
    far.cancel()


def library_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and not t.name.startswith("exmcp-fake")]


def test_a_modern_websocket_client_with_one_watch_runs_five_threads_and_shares_the_timer_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Client actor, refcount worker, reader, writer, plus the watch's subscriber proxy; the heartbeat,
    the liveness polls and the timers run on the one process-wide scheduler thread."""
    checks: list[str] = []
    check = _WsConnection._heartbeat_check

    def counted(self: _WsConnection, ping_at: float) -> None:
        checks.append(threading.current_thread().name)
        check(self, ping_at)

    monkeypatch.setattr(_WsConnection, "_heartbeat_check", counted)
    with FakeServer(era="modern") as server:
        url = server.serve_websocket()
        before = set(threading.enumerate())
        clients = [
            mcp.connect(WebSocketTransport(url, heartbeat_interval=0.02, heartbeat_timeout=0.5), request_timeout=WAIT)
            for _ in range(2)
        ]
        try:
            watches = [client.watch({"toolsListChanged": True}) for client in clients]
            new = library_threads(before)
            names = sorted(t.name for t in new)
            assert len([n for n in names if n == "exmcp-scheduler"]) <= 1, names
            per_client = [t for t in new if t.name != "exmcp-scheduler"]
            assert len(per_client) <= 2 * (4 + 1), names  # <= 5 per client including its one subscriber
            assert not [n for n in names if "heartbeat" in n or "liveness" in n or "timer" in n], names
            # The heartbeat works from the shared thread: pings go out and are answered, nobody is lost.
            wait_until(lambda: len(checks) >= 4, WAIT, "four liveness checks")
            assert set(checks) == {"exmcp-scheduler"}
            assert [c.status for c in clients] == ["ready", "ready"]
            assert [w.pending() for w in watches] == [0, 0]  # no closing message: still open
        finally:
            for client in clients:
                client.disconnect()
    thread = scheduler().thread
    if thread is not None:
        thread.join(WAIT)
    assert scheduler().pending() == 0  # every client's timers were cancelled with it


def test_the_liveness_watcher_polls_only_while_it_watches_someone() -> None:
    from exmcp_actors._runtime._subscriber_proxy import LivenessWatcher

    class Proxy:
        def __init__(self) -> None:
            self.told: queue.SimpleQueue[object] = queue.SimpleQueue()

        def tell(self, message: object) -> None:
            self.told.put(message)

    watcher = LivenessWatcher("test")
    assert not watcher._timer.armed  # nobody watched: no timer, no wake-up
    alive = threading.Event()
    alive.set()
    proxy = Proxy()
    watcher.watch("k", alive.is_set, proxy)  # type: ignore[arg-type]
    assert watcher._timer.armed
    alive.clear()  # the subscriber dies: the next poll stops its proxy, then polling ends
    assert type(proxy.told.get(timeout=WAIT)).__name__ == "SubscriberGone"
    wait_until(lambda: not watcher._timer.armed, WAIT, "the watcher's timer disarmed")
    watcher.close()
    watcher.watch("k2", lambda: True, proxy)  # type: ignore[arg-type]
    assert not watcher._timer.armed  # closed: arms nothing more
