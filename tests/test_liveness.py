"""An idle client costs nothing: subscriber deaths told by the thread's end, timers gone once
they can only find their work done, and the refcount worker's thread only once it has work.

A subscriber thread that registers itself (``subscriber=None``) is told of by its end (a
finalizer in its thread-local storage), so watching it arms no timer; what cannot be told of
that way (a thread named by another thread, an actor, a thread Python did not start) is
polled, and only while it is watched.
"""

from __future__ import annotations

import _thread
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

import pykka
import pytest

import exmcp_actors as mcp
from exmcp_actors._runtime._subscriber_proxy import LivenessWatcher, SubscriberGone
from exmcp_actors._util._thread_end import ThreadEnd, current_thread_end
from exmcp_actors.testing import FakeServer
from tests.child_python import run_python
from tests.waiting import wait_until

WAIT = 5.0
A = "file:///a.txt"
B = "file:///b.txt"


def state(client: mcp.Client) -> dict[str, Any]:
    return client._inspect()


class Proxy:
    """Stands for a proxy's ActorRef: keeps what it is told."""

    def __init__(self) -> None:
        self.told: queue.SimpleQueue[object] = queue.SimpleQueue()

    def tell(self, message: object) -> None:
        self.told.put(message)


def in_a_thread(body: Callable[[], Any]) -> Any:
    """Run ``body`` in a thread that ends once it returns; its result."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(body()))
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive()
    return out[0]


class Parked:
    """A thread that runs ``body`` and then stays until :meth:`end`."""

    def __init__(self, body: Callable[[], Any]) -> None:
        self._body = body
        self._go = threading.Event()
        self._done = threading.Event()
        self.result: Any = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self._done.wait(WAIT)

    def _run(self) -> None:
        self.result = self._body()
        self._done.set()
        self._go.wait(60)

    def end(self) -> None:
        self._go.set()
        self.thread.join(WAIT)
        assert not self.thread.is_alive()


# -- ThreadEnd ---------------------------------------------------------------------------


def test_a_thread_end_runs_its_callbacks_as_its_thread_ends_in_that_thread() -> None:
    ran_in: queue.SimpleQueue[int] = queue.SimpleQueue()
    started = threading.Event()
    finish = threading.Event()

    def body() -> None:
        end = current_thread_end()
        assert end is not None and end is current_thread_end()  # one per thread
        assert end.on_end(lambda: ran_in.put(_thread.get_ident())) is not None
        started.set()
        finish.wait(WAIT)

    thread = threading.Thread(target=body)
    thread.start()
    assert started.wait(WAIT)
    assert ran_in.empty()  # nothing while it runs
    ident = thread.ident
    finish.set()
    assert ran_in.get(timeout=WAIT) == ident
    thread.join(WAIT)


def test_a_cancelled_callback_does_not_run_and_a_late_one_is_refused() -> None:
    ran: list[str] = []

    def body() -> ThreadEnd:
        end = current_thread_end()
        assert end is not None
        token = end.on_end(lambda: ran.append("cancelled"))
        assert token is not None
        end.on_end(lambda: ran.append("kept"))
        end.cancel(token)
        assert end.pending() == 1
        return end

    end = in_a_thread(body)
    wait_until(lambda: end.ended, WAIT, "the thread's end")
    assert ran == ["kept"]
    assert end.on_end(lambda: ran.append("late")) is None  # ended: the caller acts itself
    assert ran == ["kept"]


def test_a_thread_python_did_not_start_has_no_end_to_tell_of() -> None:
    answers: queue.SimpleQueue[object] = queue.SimpleQueue()
    _thread.start_new_thread(lambda: answers.put(current_thread_end()), ())
    assert answers.get(timeout=WAIT) is None


def test_a_failing_thread_end_callback_does_not_keep_the_others_from_running_nor_leave_a_dummy_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reported: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
    monkeypatch.setattr(sys, "unraisablehook", lambda args: reported.put(args.exc_value))
    ran = threading.Event()

    def failing() -> None:
        raise RuntimeError("a callback's bug")

    def body() -> int:
        end = current_thread_end()
        assert end is not None
        end.on_end(failing)
        end.on_end(ran.set)
        return threading.get_ident()

    ident = in_a_thread(body)
    assert ran.wait(WAIT)
    # Another object's finalizer may report meanwhile (the suite's other threads): ours comes.
    errors = iter(lambda: reported.get(timeout=WAIT), None)
    assert any(isinstance(e, RuntimeError) and str(e) == "a callback's bug" for e in errors)
    # No dummy thread made for the ended thread (another test may leave dummies of its own).
    assert not isinstance(threading._active.get(ident), threading._DummyThread)  # type: ignore[attr-defined]


#: A subscriber thread watched for its end while another thread is caught holding the
#: watcher's lock (a poll, a watch) when the process exits or forks: that thread is gone, or
#: frozen, for good. Then ``run``.
_HELD_AT_EXIT_OR_FORK = """
import os, sys, threading, time, warnings
from exmcp_actors._runtime._subscriber_proxy import LivenessWatcher
from exmcp_actors._util._thread_end import current_thread_end

class Proxy:
    def tell(self, message):
        pass

watcher = LivenessWatcher("test")
watched, held = threading.Event(), threading.Event()

def subscriber():
    global end
    end = current_thread_end()
    watcher.watch("k", lambda: True, Proxy(), end)
    watched.set()
    threading.Event().wait()

def holder():
    with (watcher._lock if HOLD == "watcher" else end._lock):
        held.set()
        threading.Event().wait()

threading.Thread(target=subscriber, daemon=True).start()
assert watched.wait(5)
threading.Thread(target=holder, daemon=True).start()
assert held.wait(5)
"""


@pytest.mark.parametrize("hold", ["watcher", "thread end"])
def test_a_daemon_subscriber_thread_cleared_at_interpreter_exit_runs_no_callback_so_the_exit_does_not_hang(
    hold: str,
) -> None:
    done = run_python("-c", f"HOLD = {hold!r}\n" + _HELD_AT_EXIT_OR_FORK + "print('exiting')", timeout=30)
    assert (done.returncode, done.stdout.strip()) == (0, "exiting"), done.stderr


@pytest.mark.parametrize("hold", ["watcher", "thread end"])
def test_a_forked_child_runs_no_callback_its_parent_registered_so_the_fork_does_not_hang(hold: str) -> None:
    fork = """
warnings.simplefilter("ignore")  # forking a threaded process is the point
pid = os.fork()
if pid == 0:
    os._exit(0)
deadline = time.monotonic() + 5
while not os.waitpid(pid, os.WNOHANG)[0]:
    if time.monotonic() > deadline:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        print("the child hung in fork()")
        os._exit(1)
    time.sleep(0.01)
print("the child exited")
os._exit(0)
"""
    done = run_python("-c", f"HOLD = {hold!r}\n" + _HELD_AT_EXIT_OR_FORK + fork, timeout=30)
    assert done.stdout.strip() == "the child exited", (done.stdout, done.stderr)


def test_a_forked_child_still_runs_what_it_registered_itself_on_a_thread_it_inherited() -> None:
    script = """
import os, threading, warnings
from exmcp_actors._util._thread_end import current_thread_end
warnings.simplefilter("ignore")
r, w = os.pipe()

def forker():
    end = current_thread_end()
    end.on_end(lambda: os.write(w, b"parent's "))
    if os.fork() == 0:
        end.on_end(lambda: os.write(w, b"child's "))
        return  # this thread ends in the child: only the child's callback runs
    os.wait()

thread = threading.Thread(target=forker)
thread.start()
thread.join()
os.close(w)
print(os.read(r, 100).decode().strip())
"""
    done = run_python("-c", script, timeout=30)
    assert done.returncode == 0, done.stderr
    ran = done.stdout.split()  # what ran in either process, in whichever order
    assert sorted(ran) == ["child's", "parent's"], done.stdout


# -- LivenessWatcher ---------------------------------------------------------------------


def test_a_told_subscriber_arms_no_timer_and_its_end_stops_its_proxy() -> None:
    watcher = LivenessWatcher("test")
    proxy = Proxy()
    parked = Parked(current_thread_end)
    watcher.watch("k", parked.thread.is_alive, proxy, parked.result)  # type: ignore[arg-type]
    assert watcher.counts() == {"told": 1, "polled": 0, "polling": 0}
    parked.end()
    assert isinstance(proxy.told.get(timeout=WAIT), SubscriberGone)
    assert watcher.counts() == {"told": 0, "polled": 0, "polling": 0}
    watcher.close()


def test_a_subscriber_whose_thread_ended_before_the_watch_began_is_stopped_at_once() -> None:
    watcher = LivenessWatcher("test")
    proxy = Proxy()
    end = in_a_thread(current_thread_end)
    wait_until(lambda: end.ended, WAIT, "the thread's end")
    watcher.watch("k", lambda: False, proxy, end)  # type: ignore[arg-type]
    assert isinstance(proxy.told.get(timeout=WAIT), SubscriberGone)
    assert watcher.counts() == {"told": 0, "polled": 0, "polling": 0}


def test_an_unwatched_or_closed_watch_leaves_nothing_in_a_thread_that_lives_on() -> None:
    watcher = LivenessWatcher("test")
    parked = Parked(current_thread_end)
    end: ThreadEnd = parked.result
    watcher.watch("a", parked.thread.is_alive, Proxy(), end)  # type: ignore[arg-type]
    watcher.watch("b", parked.thread.is_alive, Proxy(), end)  # type: ignore[arg-type]
    watcher.watch("b", parked.thread.is_alive, Proxy(), end)  # type: ignore[arg-type]  # a successor proxy
    assert end.pending() == 2
    watcher.unwatch("a")
    assert end.pending() == 1
    watcher.close()
    assert end.pending() == 0
    parked.end()


def test_a_late_callback_of_an_ended_watch_does_not_forget_the_watch_that_took_its_key() -> None:
    # The key is the thread's id(): once a thread is gone another may get it. An ending thread
    # that took its callbacks just before its watch was dropped runs them after that.
    watcher = LivenessWatcher("test")
    first, second = Parked(current_thread_end), Parked(current_thread_end)
    watcher.watch("k", first.thread.is_alive, Proxy(), first.result)  # type: ignore[arg-type]
    late = next(callback for _, callback in first.result._callbacks.values())
    watcher.watch("k", second.thread.is_alive, Proxy(), second.result)  # type: ignore[arg-type]
    late()
    assert watcher.counts()["told"] == 1
    watcher.close()
    assert second.result.pending() == 0  # nothing of a closed client left in a thread that lives on
    first.end()
    second.end()


def test_what_cannot_tell_is_polled_only_while_it_is_watched() -> None:
    watcher = LivenessWatcher("test")
    alive = threading.Event()
    alive.set()
    proxy = Proxy()
    watcher.watch("k", alive.is_set, proxy)  # type: ignore[arg-type]
    assert watcher.counts() == {"told": 0, "polled": 1, "polling": 1}
    alive.clear()
    assert isinstance(proxy.told.get(timeout=WAIT), SubscriberGone)
    wait_until(lambda: watcher.counts()["polling"] == 0, WAIT, "polling to end")
    watcher.close()


# -- a client ----------------------------------------------------------------------------


def test_a_thread_that_watches_for_itself_is_told_of_not_polled_and_its_end_removes_its_listener(
    legacy_client: mcp.Client, legacy_server: FakeServer
) -> None:
    parked = Parked(lambda: legacy_client.subscribe_notifications({"resourceSubscriptions": [A]}))
    assert state(legacy_client)["liveness"] == {"told": 1, "polled": 0, "polling": 0}
    parked.end()
    legacy_server.wait_for("resources/unsubscribe", uri=A)  # the release of a dead subscriber
    wait_until(lambda: state(legacy_client)["entries"] == 0, WAIT, "the dead subscriber's listener removed")
    assert state(legacy_client)["liveness"] == {"told": 0, "polled": 0, "polling": 0}


def test_a_thread_named_by_another_thread_is_polled_and_its_death_still_noticed(
    legacy_client: mcp.Client, legacy_server: FakeServer
) -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, args=(60,), daemon=True)
    other.start()
    legacy_client.subscribe_notifications({"resourceSubscriptions": [B]}, subscriber=other)
    assert state(legacy_client)["liveness"] == {"told": 0, "polled": 1, "polling": 1}
    stop.set()
    other.join(WAIT)
    legacy_server.wait_for("resources/unsubscribe", uri=B)
    wait_until(lambda: state(legacy_client)["liveness"]["polling"] == 0, WAIT, "polling to end with the last polled")


def test_an_actor_subscriber_is_polled_and_its_stop_removes_its_listener(legacy_client: mcp.Client) -> None:
    class Sink(pykka.ThreadingActor):
        pass

    ref = Sink.start()
    legacy_client.subscribe_notifications({"resourceSubscriptions": [A]}, subscriber=ref)
    assert state(legacy_client)["liveness"]["polled"] == 1
    ref.stop()
    wait_until(lambda: state(legacy_client)["entries"] == 0, WAIT, "the stopped actor's listener removed")


def test_a_settled_client_holding_a_watch_has_no_timer_armed(legacy_client: mcp.Client) -> None:
    watch = legacy_client.watch({"resourceSubscriptions": [A]})
    found = state(legacy_client)
    assert found["timers"] == 0, found  # the stage and probe deadlines went with the settle
    assert found["liveness"]["polling"] == 0
    watch.unsubscribe()


def test_the_refcount_worker_starts_only_with_its_first_work_and_then_does_it(
    legacy_client: mcp.Client, legacy_server: FakeServer
) -> None:
    listener = legacy_client.subscribe_notifications({"resourceSubscriptions": [A]})
    assert legacy_client._worker is not None and legacy_client._worker.started is None  # the host subscribed itself
    listener.unsubscribe()
    assert legacy_client._worker.started is None  # and unsubscribed itself
    parked = Parked(lambda: legacy_client.subscribe_notifications({"resourceSubscriptions": [B]}))
    parked.end()  # a dead subscriber's release is the worker's
    legacy_server.wait_for("resources/unsubscribe", uri=B)
    assert legacy_client._worker.started is not None
    wait_until(lambda: state(legacy_client)["refcount"]["empty"], WAIT, "the release done")


def test_a_client_whose_worker_never_started_disconnects_at_once(legacy_server: FakeServer) -> None:
    client = mcp.connect(legacy_server.transport(), reconnect=False)
    worker = client._worker
    assert worker is not None
    client.disconnect(timeout=WAIT)
    assert worker.started is None and worker.actor_stopped.is_set()
    with pytest.raises(pykka.ActorDeadError):
        worker.tell(object())  # stopped: never started after that
