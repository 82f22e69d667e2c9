"""Benchmark 7: what idle clients cost: wake-ups and CPU per second.

A host spends most of its life idle: clients connected, each holding a watch,
host threads blocked in ``get()``, nothing on the wire. Each measured side runs
in a child process of its own (so the measurer's threads never count), connects
N clients (1, 4 and 16) and idles:

- exmcp_actors: N ``connect()``-ed clients; per client one host thread calls
  ``watch({"resourceSubscriptions": [uri]})`` (``subscriber=None``: the thread
  itself) and then blocks in ``get()`` (iterating the watch).
- the official SDK client (mcp 2.3.0): N ``ClientSession``-s on one event
  loop, each with one ``subscribe_resource(uri)``, idle on that loop.

The peer is the flood server, which pushes nothing unasked: over Streamable
HTTP one server process for every child, over stdio one server process per
client. Servers are other processes, so they never count. The child's main
thread waits on its stdin (its end is the child's signal to disconnect and
exit) and counts in the thread figure. The children of one transport (both
sides, every N) run at the same time and share one window: an idle process
does not disturb another's counts (the SDK child's zero shows it).

Once every child prints ``ready`` the parent waits 1 s to settle and then reads,
over a window (quick: 3 s, and stdio for 4 clients only; full: 10 s), from
``/proc/CHILD/task/*``:

- wake-ups per second: ``voluntary_ctxt_switches + nonvoluntary_ctxt_switches``
  summed over the child's threads (a thread that ends inside the window takes
  its switches with it; the row notes any thread that came or went). The
  involuntary share (preemptions) grows with the machine's load and is noted;
  the voluntary ones are the process's own sleeps;
- CPU per second: the threads' ``schedstat`` run time (nanoseconds). The
  ``utime + stime`` of ``/proc/CHILD/stat`` counts in clock ticks (10 ms at
  100 Hz), too coarse for a 0.5 ms/s goal over a few seconds; it is noted
  beside each CPU row;
- threads: ``len(/proc/CHILD/task)`` at the end of the window.

Goals (the library): <= 1 wake-up per second per process whatever N, <= 0.5 ms
CPU per second; the SDK client measured in the same run is the comparison.

Run alone: ``python -m benchmarks.bench_idle [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import READY_TIMEOUT, ROOT, URI, WAIT, Row, flood_argv, listening_server, say, stop_process

NAME = "idle"
WAKEUPS_GOAL = 1.0
CPU_GOAL_MS = 0.5
SETTLE = 1.0
READY = "ready"
SIDES = {"lib": "exmcp_actors", "sdk": "SDK client"}

# --------------------------------------------------------------------------- the measured child


def child_uris(n: int) -> list[str]:
    return [f"{URI}/idle/{i}" for i in range(n)]


def child_lib(target: Any, n: int) -> None:
    """N clients, one host thread each holding a watch and blocked in ``get()``; then idle."""
    import queue

    import exmcp_actors

    clients = [exmcp_actors.connect(target, protocol="legacy", request_timeout=WAIT) for _ in range(n)]
    registered: queue.Queue[BaseException | None] = queue.Queue()

    def host(client: Any, uri: str) -> None:
        try:
            watch = client.watch({"resourceSubscriptions": [uri]}, timeout=WAIT)
        except BaseException as exc:  # handed to the main thread
            registered.put(exc)
            return
        registered.put(None)
        for _ in watch:  # blocked in get() until the watch closes
            pass

    hosts = [
        threading.Thread(target=host, args=(client, uri), name=f"bench-idle-host-{i}", daemon=True)
        for i, (client, uri) in enumerate(zip(clients, child_uris(n), strict=True))
    ]
    for thread in hosts:
        thread.start()
    for _ in hosts:
        error = registered.get(timeout=WAIT)
        if error is not None:
            raise error
    print(READY, flush=True)
    sys.stdin.buffer.read()  # idle until the parent closes our stdin
    for client in clients:
        client.disconnect(timeout=WAIT)
    for thread in hosts:
        thread.join(WAIT)


def child_sdk(transport: str, target: Any, n: int) -> None:
    """N SDK sessions on one event loop, one resources/subscribe each; then idle on that loop."""
    import anyio
    import anyio.to_thread

    from .bench_throughput import quiet_sdk
    from .sdk_client import Counter, sdk_session

    quiet_sdk()

    async def main() -> None:
        async with AsyncExitStack() as stack:
            for uri in child_uris(n):
                session = await stack.enter_async_context(sdk_session(transport, target, Counter()))
                with anyio.fail_after(WAIT):
                    await session.subscribe_resource(uri)
            print(READY, flush=True)
            await anyio.to_thread.run_sync(sys.stdin.buffer.read)  # idle until stdin closes

    anyio.run(main)


def child_main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description="bench_idle's measured child (run by the benchmark)")
    parser.add_argument("--child", choices=list(SIDES), required=True)
    parser.add_argument("--transport", choices=["http", "stdio"], required=True)
    parser.add_argument("--clients", type=int, required=True)
    parser.add_argument("--target", required=True, help="http: the URL; stdio: the server argv as JSON")
    args = parser.parse_args(argv)
    target = args.target if args.transport == "http" else json.loads(args.target)
    if args.child == "lib":
        child_lib(target, args.clients)
    else:
        child_sdk(args.transport, target, args.clients)


# --------------------------------------------------------------------------- the measurer


@dataclass
class Snapshot:
    """Per-thread context switches (all, and the involuntary ones) and run time (ns) of a
    process, and its stat CPU ticks."""

    switches: dict[int, int]
    involuntary: dict[int, int]
    run_ns: dict[int, int]
    ticks: int
    at: float


def context_switches(status: Path) -> tuple[int, int]:
    """(voluntary, involuntary) context switches from a ``/proc/.../status`` file."""
    found = dict.fromkeys(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"), 0)
    with open(status, encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in found:
                found[key] = int(value)
    return found["voluntary_ctxt_switches"], found["nonvoluntary_ctxt_switches"]


def snapshot(pid: int) -> Snapshot:
    """One look at ``/proc/pid``; a thread that ends while it is read is skipped."""
    switches: dict[int, int] = {}
    involuntary: dict[int, int] = {}
    run_ns: dict[int, int] = {}
    task = Path(f"/proc/{pid}/task")
    for entry in task.iterdir():
        tid = int(entry.name)
        try:
            voluntary, forced = context_switches(entry / "status")
            run_ns[tid] = int((entry / "schedstat").read_text(encoding="ascii").split()[0])
        except (OSError, ValueError):
            continue
        switches[tid], involuntary[tid] = voluntary + forced, forced
    # Fields after the command name's closing parenthesis: utime and stime are the 14th and
    # 15th of the whole line, the 12th and 13th after it.
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    return Snapshot(switches, involuntary, run_ns, int(fields[11]) + int(fields[12]), time.monotonic())


def per_thread_delta(before: dict[int, int], after: dict[int, int]) -> int:
    """What the threads alive at the end added (a thread new in the window counts from zero)."""
    return sum(value - before.get(tid, 0) for tid, value in after.items())


@dataclass
class Idle:
    """One idle window of one child."""

    wakeups: float
    involuntary: float
    cpu_ms: float
    stat_cpu_ms: float
    threads: int
    churn: int

    @classmethod
    def between(cls, a: Snapshot, b: Snapshot) -> Idle:
        seconds = b.at - a.at
        tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
        return cls(
            wakeups=per_thread_delta(a.switches, b.switches) / seconds,
            involuntary=per_thread_delta(a.involuntary, b.involuntary) / seconds,
            cpu_ms=per_thread_delta(a.run_ns, b.run_ns) / 1e6 / seconds,
            stat_cpu_ms=(b.ticks - a.ticks) * tick_ms / seconds,
            threads=len(b.switches),
            churn=len(a.switches.keys() ^ b.switches.keys()),
        )


def wait_ready(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Read the child's stdout until its ``ready`` line (bounded)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
            raise RuntimeError(f"the idle child was not ready within {timeout:.0f}s")
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the idle child ended before it was ready (rc={proc.wait(WAIT)})")
        if line.decode("utf-8", "replace").strip() == READY:
            return


def start_child(side: str, transport: str, target: Any, n: int) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "benchmarks.bench_idle", "--child", side, "--transport", transport]
    argv += ["--clients", str(n), "--target", target if isinstance(target, str) else json.dumps(target)]
    return subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def end_child(proc: subprocess.Popen[bytes], what: str) -> None:
    """Close the child's stdin (it disconnects its clients and exits) and check its exit."""
    assert proc.stdin is not None
    proc.stdin.close()
    rc = proc.wait(WAIT)
    if rc != 0:
        raise RuntimeError(f"the idle child ({what}) exited with {rc}")


def measure_together(transport: str, target: Any, counts: Sequence[int], window: float) -> dict[tuple[str, int], Idle]:
    """Every child of a transport (both sides, every count) at once: all connect, settle, and
    then one idle window is read for each.

    An idle process does not disturb another's counts (the SDK child's zero shows it), every
    figure sees the same machine, and the benchmark takes two windows, not one per child.
    """
    procs = {(side, n): start_child(side, transport, target, n) for n in counts for side in SIDES}
    try:
        for proc in procs.values():
            wait_ready(proc, READY_TIMEOUT + WAIT)
        time.sleep(SETTLE)
        before = {key: snapshot(proc.pid) for key, proc in procs.items()}
        time.sleep(window)
        idle = {key: Idle.between(before[key], snapshot(proc.pid)) for key, proc in procs.items()}
        for (side, n), proc in procs.items():
            end_child(proc, f"{SIDES[side]}, {transport}, {n} clients")
        return idle
    finally:
        for proc in procs.values():
            stop_process(proc)


def rows_for(transport: str, n: int, lib: Idle, sdk: Idle) -> list[Row]:
    case = f"{transport}: {n} idle client(s), a watch each, host threads in get()"
    switches = f"involuntary: {lib.involuntary:.1f} vs {sdk.involuntary:.1f}/s"
    if lib.churn:
        switches += f"; {lib.churn} thread(s) came or went in the window"
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    stat = f"/proc stat: {lib.stat_cpu_ms:.1f} vs {sdk.stat_cpu_ms:.1f} ms/s, in {tick_ms:.0f} ms ticks"
    return [
        Row(
            NAME,
            f"{case}: wake-ups per second",
            lib.wakeups,
            "/s",
            "SDK client, one event loop",
            sdk.wakeups,
            f"<= {WAKEUPS_GOAL:g}/s per process",
            lib.wakeups <= WAKEUPS_GOAL,
            note=switches,
        ),
        Row(
            NAME,
            f"{case}: CPU per second",
            lib.cpu_ms,
            "ms/s",
            "SDK client, one event loop",
            sdk.cpu_ms,
            f"<= {CPU_GOAL_MS:g} ms/s",
            lib.cpu_ms <= CPU_GOAL_MS,
            note=stat,
        ),
        Row(
            NAME,
            f"{case}: threads in the process",
            lib.threads,
            "threads",
            "SDK client, one event loop",
            sdk.threads,
            note="the child's main thread, waiting on stdin, included",
        ),
    ]


def measure_transport(transport: str, target: Any, counts: Sequence[int], window: float) -> list[Row]:
    idle = measure_together(transport, target, counts, window)
    rows: list[Row] = []
    for n in counts:
        lib, sdk = idle["lib", n], idle["sdk", n]
        say(
            f"{NAME}: {transport}, {n} client(s): exmcp_actors {lib.wakeups:.1f} wake-ups/s, {lib.cpu_ms:.2f} ms/s "
            f"CPU, {lib.threads} threads; SDK client {sdk.wakeups:.1f} wake-ups/s, {sdk.cpu_ms:.2f} ms/s CPU, "
            f"{sdk.threads} threads"
        )
        rows += rows_for(transport, n, lib, sdk)
    return rows


def run(quick: bool = False) -> list[Row]:
    window = 3.0 if quick else 10.0
    counts = [1, 4, 16]
    say(f"{NAME}: {window:g} s windows after {SETTLE:g} s to settle, for {counts} clients")
    with listening_server(flood_argv("http")) as server:
        rows = measure_transport("http", server.url("http", "/mcp"), counts, window)
    # stdio starts a server per client: a quick run keeps to 4 clients there.
    rows += measure_transport("stdio", flood_argv("stdio"), [4] if quick else counts, window)
    return rows


def main() -> None:
    if "--child" in sys.argv[1:]:
        child_main(sys.argv[1:])
        return
    from .run import standalone

    standalone(run)


if __name__ == "__main__":
    main()
