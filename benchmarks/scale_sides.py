"""The two measured sides of the scale benchmark, each in its own process (see bench_scale).

Run by the parent as::

    python -m benchmarks.scale_sides lib|sdk http|stdio TARGET_JSON N

``TARGET_JSON`` is the server's URL (http) or argv (stdio, one server process
per client). ``lib`` runs ``N`` exmcp_actors clients, each on its own host
thread: ``connect()``, ``watch()`` of the broadcast resource, then ``get()``
in a loop. ``sdk`` runs ``N`` official SDK ``ClientSession``\\ s on one asyncio
loop, each with ``subscribe_resource`` and a ``message_handler``. Both note the
``time.monotonic_ns()`` at which each client receives the update of the round
being timed (``params._meta.round``).

The parent drives it over stdin (one command a line) and reads ``SCALE {json}``
lines on stdout:

- at start the side connects one warm-up client (imports, first allocations)
  and disconnects it, waits until its thread count is back, and says
  ``{"phase": "baseline"}``: the parent reads /proc/PID now;
- ``connect``: all ``N`` connect at once; ``{"phase": "connected", "seconds": s,
  "cpu": s}`` (wall and this process's CPU time) once every one is connected
  and subscribed (or ``{"phase": "error", ...}``);
- ``arm K WAIT``: count the updates of round ``K`` (``{"phase": "armed"}``),
  then, after the parent's trigger, ``{"phase": "round", "got": g, "first_ns": ...,
  "last_ns": ...}`` once all ``N`` have it or ``WAIT`` seconds passed;
- ``stop``: disconnect everything, ``{"phase": "stopped"}``, exit.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from .common import UPDATED, WAIT

PREFIX = "SCALE "
RESOURCE = "file:///bench/broadcast"
#: Bound on connecting every client at once (50 stdio servers starting on 2 cores take a while).
CONNECT_WAIT = 300.0


def tell(**fields: Any) -> None:
    sys.stdout.write(PREFIX + json.dumps(fields) + "\n")
    sys.stdout.flush()


def task_count() -> int:
    return len(os.listdir("/proc/self/task"))


def round_of(meta: Any) -> Any:
    """``_meta.round`` from a params dict's ``_meta`` or an SDK model's ``meta``."""
    if isinstance(meta, dict):
        return meta.get("round")
    value = getattr(meta, "round", None)
    if value is None and hasattr(meta, "model_extra"):
        value = (meta.model_extra or {}).get("round")
    return value


class Rounds:
    """When each client received the update of the round being timed."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._lock = threading.Lock()
        self._round: Any = None
        self._times: dict[int, int] = {}
        self._on_done: Callable[[], None] = lambda: None

    def arm(self, k: int, on_done: Callable[[], None]) -> None:
        with self._lock:
            self._round, self._times, self._on_done = k, {}, on_done

    def seen(self, k: Any, client: int) -> None:
        """Client number ``client`` has the update of round ``k`` now (a second copy is not counted)."""
        now = time.monotonic_ns()
        with self._lock:
            if k != self._round or client in self._times:
                return
            self._times[client] = now
            done = len(self._times) == self.n
        if done:
            self._on_done()

    def report(self) -> dict[str, Any]:
        with self._lock:
            times = sorted(self._times.values())
        return {"got": len(times), "first_ns": times[0] if times else None, "last_ns": times[-1] if times else None}


def settle(threads: int) -> None:
    """Wait (bounded) until the warm-up's threads are gone, then collect."""
    deadline = time.monotonic() + 10.0
    while task_count() > threads and time.monotonic() < deadline:
        time.sleep(0.02)
    gc.collect()


# --------------------------------------------------------------------------- exmcp_actors


def lib_side(target: Any, n: int) -> int:
    import exmcp_actors

    flt = {"resourceSubscriptions": [RESOURCE]}

    def open_client() -> Any:
        return exmcp_actors.connect(
            target, protocol="legacy", reconnect=False, request_timeout=WAIT, connect_timeout=CONNECT_WAIT
        )

    threads0 = task_count()
    warm = open_client()
    warm.watch(flt, timeout=WAIT)
    warm.disconnect(timeout=WAIT)
    settle(threads0)
    tell(phase="baseline")
    if sys.stdin.readline().strip() != "connect":
        return 2
    rounds = Rounds(n)
    clients: list[Any] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    all_ready = threading.Event()
    ready = 0

    def host(i: int) -> None:
        nonlocal ready
        try:
            client = open_client()
            with lock:
                clients.append(client)
            watch = client.watch(flt, timeout=CONNECT_WAIT)  # this thread is the subscriber
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            all_ready.set()
            return
        with lock:
            ready += 1
            if ready == n:
                all_ready.set()
        get, seen = watch.get, rounds.seen
        while True:
            message = get()
            if isinstance(message, exmcp_actors.Closed):
                return
            if isinstance(message, exmcp_actors.Notification) and message.method == UPDATED:
                seen(round_of(message.params.get("_meta")), i)

    hosts = [threading.Thread(target=host, args=(i,), name=f"bench-host-{i}", daemon=True) for i in range(n)]
    started, cpu0 = time.perf_counter(), time.process_time()
    for thread in hosts:
        thread.start()
    all_ready.wait(CONNECT_WAIT)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu0
    try:
        if errors or ready < n:
            tell(phase="error", error=repr(errors[0]) if errors else f"{ready} of {n} ready")
            return 1
        gc.collect()
        tell(phase="connected", seconds=seconds, cpu=cpu)
        for line in sys.stdin:
            words = line.split()
            if words and words[0] == "arm":
                done = threading.Event()
                rounds.arm(int(words[1]), done.set)
                tell(phase="armed")
                done.wait(float(words[2]))
                tell(phase="round", **rounds.report())
            elif words == ["stop"]:
                break
    finally:
        for client in list(clients):
            client.disconnect(timeout=10.0)
        for thread in hosts:
            thread.join(10.0)
    tell(phase="stopped")
    return 0


# --------------------------------------------------------------------------- official SDK


async def sdk_side(kind: str, target: Any, n: int) -> int:
    import asyncio

    import anyio
    from mcp.client.session import ClientSession

    from .bench_throughput import quiet_sdk

    quiet_sdk()
    rounds = Rounds(n)

    @asynccontextmanager
    async def session(i: int) -> AsyncIterator[Any]:
        async def handler(message: Any) -> None:
            if getattr(message, "method", None) == UPDATED:
                rounds.seen(round_of(getattr(message.params, "meta", None)), i)

        if kind == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            transport = stdio_client(StdioServerParameters(command=target[0], args=list(target[1:])))
        else:
            from mcp.client.streamable_http import streamable_http_client

            transport = streamable_http_client(target)
        async with transport as streams, ClientSession(streams[0], streams[1], message_handler=handler) as s:
            with anyio.fail_after(CONNECT_WAIT):
                await s.initialize()
                await s.subscribe_resource(RESOURCE)
            yield s

    # Commands come through the loop (no reader thread to count).
    reader = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def command() -> list[str]:
        return (await reader.readline()).decode().split()

    threads0 = task_count()
    async with session(-1):
        pass
    settle(threads0)
    tell(phase="baseline")
    if await command() != ["connect"]:
        return 2
    stop = anyio.Event()
    all_ready = anyio.Event()
    errors: list[BaseException] = []
    ready = 0

    async def one(i: int) -> None:
        nonlocal ready
        try:
            async with session(i):
                ready += 1
                if ready == n:
                    all_ready.set()
                await stop.wait()
        except Exception as exc:  # reported below
            errors.append(exc)
            all_ready.set()

    async with anyio.create_task_group() as tg:
        started, cpu0 = time.perf_counter(), time.process_time()
        for i in range(n):
            tg.start_soon(one, i)
        with anyio.move_on_after(CONNECT_WAIT):
            await all_ready.wait()
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu0
        if errors or ready < n:
            tell(phase="error", error=repr(errors[0]) if errors else f"{ready} of {n} ready")
            stop.set()
            return 1
        gc.collect()
        tell(phase="connected", seconds=seconds, cpu=cpu)
        while words := await command():
            if words[0] == "arm":
                done = anyio.Event()
                rounds.arm(int(words[1]), done.set)
                tell(phase="armed")
                with anyio.move_on_after(float(words[2])):
                    await done.wait()
                tell(phase="round", **rounds.report())
            elif words == ["stop"]:
                break
        stop.set()
    tell(phase="stopped")
    return 0


def main(argv: list[str]) -> int:
    side, kind, target, n = argv[0], argv[1], json.loads(argv[2]), int(argv[3])
    if side == "lib":
        return lib_side(target, n)
    import anyio

    return int(anyio.run(sdk_side, kind, target, n))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
