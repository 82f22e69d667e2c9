"""Benchmark 2: one notification stream fanned out to 1,000 listeners.

Three shapes, each against a raw baseline of the same shape (the flood
server's stdio stream read with ``readline`` + ``json.loads`` by one reader
thread that hands every message to the consumers through standard queues):

- ``1 thread x 1,000 listeners``: one subscriber thread holds 1,000 listeners
  on the URI and reads them round-robin (raw: 1,000 ``SimpleQueue``);
- ``1,000 listeners -> 1 queue.Queue``: ``subscriber=queue.Queue()`` shared by
  all listeners, one host thread drains it (raw: the reader puts each message
  1,000 times into one ``queue.Queue``);
- ``1,000 threads x 1 listener``: 1,000 subscriber threads, each with its own
  listener (raw: one ``SimpleQueue`` per thread).

For the first shape a third side, "raw, a message tuple per handle", reads each queue
through a Python-level getter that returns the handle's own message tuple, as the
library's ``get()`` does: the floor of any per-handle API in Python, measured so the gap
to raw splits into what such an API costs and what the library adds.

Deliveries per second = notifications x listeners / (first delivery to last);
per-delivery cost is its inverse.

Run alone: ``python -m benchmarks.bench_fanout [--quick]``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from exmcp_actors._protocol._messages import NOTIFICATION, Notification

from .common import URI, WAIT, RawStdio, Row, flood_argv, run_in_thread, say

_new_tuple = tuple.__new__

NAME = "fan-out"
SHAPES = ("thread", "queue", "threads")
LABELS = {
    "thread": "1 thread x {k:,} listeners",
    "queue": "{k:,} listeners -> 1 queue.Queue",
    "threads": "{k:,} threads x 1 listener",
}


class Clock:
    """First and last delivery times across threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.first = float("inf")
        self.last = 0.0
        self.delivered = 0

    def record(self, first: float, last: float, delivered: int) -> None:
        with self.lock:
            self.first = min(self.first, first)
            self.last = max(self.last, last)
            self.delivered += delivered

    def rate(self) -> float:
        return self.delivered / (self.last - self.first)


def consume_round_robin(gets: list[Any], n: int, clock: Clock) -> None:
    """Read ``n`` messages from each getter in turn (one subscriber thread, many listeners)."""
    gets[0](timeout=WAIT)
    first = time.perf_counter()
    for getter in gets[1:]:
        getter(timeout=WAIT)
    for _ in range(n - 1):
        for getter in gets:
            getter(timeout=WAIT)
    clock.record(first, time.perf_counter(), n * len(gets))


def consume_one(getter: Any, n: int, clock: Clock) -> None:
    """Read ``n`` messages from one getter."""
    getter(timeout=WAIT)
    first = time.perf_counter()
    for _ in range(n - 1):
        getter(timeout=WAIT)
    clock.record(first, time.perf_counter(), n)


def start_consumers(k: int, n: int, clock: Clock, make_getter: Any) -> list[threading.Thread]:
    """``k`` threads; each waits for its getter (``make_getter(i, thread)``) and then consumes."""
    threads: list[threading.Thread] = []
    handed: list[Any] = [None] * k
    ready = [threading.Event() for _ in range(k)]

    def body(i: int) -> None:
        if ready[i].wait(WAIT) and handed[i] is not None:
            consume_one(handed[i], n, clock)

    for i in range(k):
        thread = threading.Thread(target=body, args=(i,), name=f"bench-sub-{i}", daemon=True)
        thread.start()
        threads.append(thread)
    for i, thread in enumerate(threads):
        handed[i] = make_getter(i, thread)
        ready[i].set()
    return threads


def join_all(threads: list[threading.Thread], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = sum(t.is_alive() for t in threads)
    if alive:
        raise RuntimeError(f"{alive} consumer threads did not finish within {timeout}s")


def lib_fanout(shape: str, k: int, n: int) -> float:
    """exmcp_actors: ``k`` listeners on one URI, ``n`` notifications; deliveries per second."""
    import exmcp_actors

    flt = {"resourceSubscriptions": [URI]}
    clock = Clock()
    client = exmcp_actors.connect(flood_argv("stdio"), protocol="legacy", reconnect=False, request_timeout=WAIT)
    threads: list[threading.Thread] = []
    consumer: Callable[[], None] | None
    try:
        if shape == "thread":
            listeners = [client.subscribe_notifications(flt) for _ in range(k)]
            consumer = lambda: consume_round_robin([lst.get for lst in listeners], n, clock)  # noqa: E731
        elif shape == "queue":
            shared: queue.Queue[Any] = queue.Queue()
            for _ in range(k):
                client.subscribe_notifications(flt, subscriber=shared)
            consumer = lambda: consume_one(shared.get, n * k, clock)  # noqa: E731
        else:
            threads = start_consumers(
                k, n, clock, lambda i, thread: client.subscribe_notifications(flt, subscriber=thread).get
            )
            consumer = None
        trigger, outcome = run_in_thread(
            lambda: client.call_tool("flood", {"uri": URI, "count": n}, timeout=WAIT * 3), "bench-trigger"
        )
        if consumer is not None:
            consumer()
        join_all(threads, WAIT * 3)
        trigger.join(WAIT)
        if outcome and isinstance(outcome[0], BaseException):
            raise outcome[0]
        return clock.rate()
    finally:
        client.disconnect(timeout=30)


class HandleGetter:
    """The least a handle's ``get`` can do: take from its queue and return the message as a
    tuple of its own (tag, handle, method, params), as every subscriber of the library gets."""

    __slots__ = ("handle", "queue")

    def __init__(self, source: queue.SimpleQueue[Any], handle: int) -> None:
        self.queue = source
        self.handle = handle

    def get(self, timeout: float | None = None) -> Any:
        frame = self.queue.get(True, timeout)
        return _new_tuple(Notification, (NOTIFICATION, self.handle, frame.method, frame.params))


class Shared:
    """What the per-handle floor's reader queues: one object per notification, for every handle."""

    __slots__ = ("method", "params")

    def __init__(self, frame: dict[str, Any]) -> None:
        self.method = frame["method"]
        self.params = frame["params"]


def raw_fanout(shape: str, k: int, n: int, *, per_handle: bool = False) -> float:
    """The same shape without the library: a reader thread feeding standard queues
    (``per_handle``: each read through a :class:`HandleGetter`, the floor of a per-handle API)."""
    raw = RawStdio(flood_argv("stdio"))
    clock = Clock()
    threads: list[threading.Thread] = []
    try:
        raw.handshake()
        raw.request("resources/subscribe", {"uri": URI})
        if shape == "queue":
            shared: queue.Queue[Any] = queue.Queue()
            put = shared.put

            def fan(message: Any) -> None:
                for _ in range(k):
                    put(message)

            consumer: Any = lambda: consume_one(shared.get, n * k, clock)  # noqa: E731
        else:
            queues: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue() for _ in range(k)]
            puts = [q.put for q in queues]

            def fan(message: Any) -> None:
                for p in puts:
                    p(message)

            if shape == "thread":
                gets = [HandleGetter(q, i).get if per_handle else q.get for i, q in enumerate(queues)]
                consumer = lambda: consume_round_robin(gets, n, clock)  # noqa: E731
            else:
                threads = start_consumers(k, n, clock, lambda i, thread: queues[i].get)
                consumer = None

        def read() -> None:
            recv = raw.recv
            seen = 0
            while seen < n:
                message = recv()
                if message.get("method") == "notifications/resources/updated":
                    seen += 1
                    fan(Shared(message) if per_handle else message)

        raw.call_flood_nowait(URI, n)
        reader, outcome = run_in_thread(read, "bench-raw-reader")
        if consumer is not None:
            consumer()
        join_all(threads, WAIT * 3)
        reader.join(WAIT)
        if outcome and isinstance(outcome[0], BaseException):
            raise outcome[0]
        return clock.rate()
    finally:
        raw.close()


def run(quick: bool = False) -> list[Row]:
    k = 1_000
    n_for = {"thread": 200, "queue": 200, "threads": 50} if quick else {"thread": 1_000, "queue": 1_000, "threads": 200}
    rows: list[Row] = []
    for shape in SHAPES:
        n = n_for[shape]
        label = LABELS[shape].format(k=k)
        say(f"{NAME}: {label}, {n:,} notifications")
        raw = raw_fanout(shape, k, n)
        say(f"  raw: {raw:,.0f} deliveries/s")
        lib = lib_fanout(shape, k, n)
        say(f"  exmcp_actors: {lib:,.0f} deliveries/s")
        case = f"{label}, {n:,} notifications"
        rows.append(Row(NAME, f"{case}: deliveries/s", lib, "/s", "raw, same shape", raw))
        per, per_raw = 1e6 / lib, 1e6 / raw
        note = "lower is better"
        # The goal is for one thread holding every listener; the other shapes are info.
        goal, passed = ("<= 3x raw", per <= 3 * per_raw) if shape == "thread" else ("", None)
        rows.append(
            Row(NAME, f"{case}: cost per delivery", per, "us", "raw, same shape", per_raw, goal, passed, note=note)
        )
        if shape == "thread":
            floor = raw_fanout(shape, k, n, per_handle=True)
            say(f"  raw, a message tuple per handle: {floor:,.0f} deliveries/s")
            per_floor = 1e6 / floor
            label = "raw, a message tuple per handle"
            rows.append(
                Row(NAME, f"{case}: {label}, cost per delivery", per_floor, "us", "raw, same shape", per_raw, note=note)
            )
            rows.append(Row(NAME, f"{case}: cost per delivery vs {label}", per, "us", label, per_floor, note=note))
    return rows


def main() -> None:
    from .run import standalone

    standalone(run)


if __name__ == "__main__":
    main()
