"""One process-wide timer thread, shared by every client.

Request and stage deadlines (``ArmTimer``), WebSocket heartbeats and the
subscribers' liveness polls used to run one thread each, per client. They all
do a few microseconds of work now and then, so they share this scheduler: a
daemon thread, ``exmcp-scheduler``, started by the first timer and ended once
no timer has been armed for :data:`IDLE_LINGER` seconds (it starts again with
the next one). Callbacks run on that thread, so they must be short and must
not block: tell an actor, set an event, shut a socket down.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ._threads import start_daemon

logger = logging.getLogger("exmcp_actors")

#: Seconds the thread stays after its last timer, so short gaps do not restart it.
IDLE_LINGER = 0.5


class TimerHandle:
    """One armed timer; :meth:`cancel` makes sure it does not fire (if it has not yet)."""

    __slots__ = ("_args", "_callback", "_scheduler", "cancelled", "when")

    def __init__(self, scheduler: Scheduler, when: float, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._scheduler = scheduler
        self.when = when
        self._callback: Callable[..., Any] | None = callback
        self._args = args
        self.cancelled = False

    @property
    def done(self) -> bool:
        """Fired or cancelled."""
        return self._callback is None

    def cancel(self) -> None:
        """Drop the timer. Harmless when it fired or was cancelled already."""
        self._scheduler._cancel(self)

    def _take(self) -> tuple[Callable[..., Any], tuple[Any, ...]] | None:
        """The callback, once; None when cancelled (called under the scheduler's lock)."""
        callback = self._callback
        if callback is None:
            return None
        self._callback = None
        return callback, self._args


class Scheduler:
    """A heap of deadlines served by one lazily started daemon thread."""

    def __init__(self, name: str = "exmcp-scheduler", idle_linger: float = IDLE_LINGER) -> None:
        self._name = name
        self._idle_linger = idle_linger
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()
        self._live = 0
        self._thread: threading.Thread | None = None

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        """Run ``callback(*args)`` on the scheduler thread in ``delay`` seconds."""
        when = time.monotonic() + max(0.0, delay)
        handle = TimerHandle(self, when, callback, args)
        with self._cond:
            first = not self._heap or when < self._heap[0][0]
            heapq.heappush(self._heap, (when, next(self._seq), handle))
            self._live += 1
            if self._thread is None:
                # None may start (see start_daemon): the timer waits for the next call_later
                # that can start one, and a host's blocking wait has a bound of its own.
                self._thread = start_daemon(self._run, self._name)
                if self._thread is None:
                    logger.info("no timer thread may start now: a timer armed fires once one can")
            elif first:
                self._cond.notify()  # only an earlier deadline changes what the thread waits for
        return handle

    def _cancel(self, handle: TimerHandle) -> None:
        with self._cond:
            if handle._take() is None:
                return
            handle.cancelled = True
            self._live -= 1
            if self._live == 0:
                self._heap.clear()  # only cancelled entries are left
                self._cond.notify()  # so the thread starts lingering now

    @property
    def thread(self) -> threading.Thread | None:
        """The scheduler thread, while it runs (for tests and diagnostics)."""
        return self._thread

    def pending(self) -> int:
        """How many timers are armed and not yet fired or cancelled."""
        with self._cond:
            return self._live

    def _next_due(self) -> tuple[Callable[..., Any], tuple[Any, ...]] | None:
        """Under the lock: wait for the next due timer; None when idle long enough to stop."""
        heap = self._heap
        idle_since: float | None = None
        while True:
            now = time.monotonic()
            while heap and heap[0][0] <= now:
                _, _, handle = heapq.heappop(heap)
                job = handle._take()
                if job is not None:
                    self._live -= 1
                    return job
            if heap:
                idle_since = None
                self._cond.wait(heap[0][0] - now)
                continue
            if idle_since is None:
                idle_since = now
            elif now - idle_since >= self._idle_linger:
                self._thread = None  # under the lock: the next call_later starts a new thread
                return None
            self._cond.wait(self._idle_linger - (now - idle_since))

    def _run(self) -> None:
        while True:
            with self._cond:
                job = self._next_due()
            if job is None:
                return
            callback, args = job
            try:
                callback(*args)
            except Exception:  # one failing callback must not stop everyone's timers
                logger.exception("timer callback %r failed", callback)


class TimerSlot:
    """At most one armed timer of one owner (a heartbeat, a poll), and a switch that ends it.

    Its own small lock, so a callback never waits on the owner's other locks.
    """

    __slots__ = ("_lock", "_off", "_timer")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._timer: TimerHandle | None = None
        self._off = False

    @property
    def armed(self) -> bool:
        """A timer is armed (maybe due right now)."""
        timer = self._timer
        return timer is not None and not timer.done

    def arm(self, delay: float, callback: Callable[..., Any], *args: Any) -> None:
        """Arm the next timer, replacing the last one; nothing once :meth:`stop` was called."""
        with self._lock:
            if not self._off:
                self._timer = _SCHEDULER.call_later(delay, callback, *args)

    def stop(self) -> None:
        """Cancel the armed timer and arm nothing more."""
        with self._lock:
            self._off = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()


_SCHEDULER = Scheduler()


def scheduler() -> Scheduler:
    """The process-wide scheduler."""
    return _SCHEDULER


def call_later(delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
    """Run ``callback(*args)`` on the shared scheduler thread in ``delay`` seconds."""
    return _SCHEDULER.call_later(delay, callback, *args)
