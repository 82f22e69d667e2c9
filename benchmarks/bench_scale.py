"""Benchmark 7: many servers per process: a host holding hundreds of watched sessions.

Two shapes, each measured for exmcp_actors and for the official SDK client:

- Streamable HTTP: ``N`` clients (200; ``--quick`` 20) to one local server
  process that serves every session;
- stdio: ``N`` clients (50; ``--quick`` 5), each to its own small server
  process.

The server is ``benchmarks/broadcast_server.py``, the official SDK's
low-level ``Server``: the server the SDK client is built for, the same code
for both transports, with ``resources/subscribe`` and updates as first-class
calls, and not this package's own code on either side of the comparison.
Every client subscribes to its one resource; ``SIGUSR1`` makes it send one
``notifications/resources/updated`` to every subscribed session (round ``K`` in
``params._meta``). A fresh HTTP server serves each side.

Each side runs in its own child process (``benchmarks/scale_sides.py``), so
the measurer's threads never count: exmcp_actors with one host thread per
client (``connect()``, ``watch()``, then blocked in ``get()``), the SDK with
``N`` ``ClientSession``\\ s on one asyncio loop. Measured from here:

- connect: all ``N`` at once, until every one is connected and subscribed
  (stdio: the ``N`` server processes' start included, most of it, so on a
  shared 2-core machine this wall time follows the load), and the client
  process's own CPU time over the same span (servers aside);
- RSS: the child's VmRSS (/proc/PID/status) once connected, minus the same
  before connecting (after a warm-up client came and went);
- threads: /proc/PID/task, the same two moments (exmcp_actors: the ``N``
  host threads are counted, they are the design);
- broadcast: from the trigger (``os.kill`` here, ``time.monotonic_ns()``,
  system-wide on Linux) to the moment the last client has the update (the
  child's clock), median of several broadcasts after a warm-up one that
  reached everyone (HTTP: every standalone GET stream is open by then), and
  the client process's CPU time from the trigger to the child's report
  (/proc/PID/task/*/schedstat, nanoseconds).

No goals: figures beside the SDK's.

Run alone: ``python -m benchmarks.bench_scale [--quick]``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .common import ROOT, WAIT, Row, listening_server, median, say, stop_process
from .scale_sides import CONNECT_WAIT, PREFIX

NAME = "scale"
BROADCAST_SCRIPT = ROOT / "benchmarks" / "broadcast_server.py"
SIDES = {"lib": "exmcp_actors", "sdk": "SDK client"}
#: A warm-up broadcast may miss clients whose stream is not open yet: this long, then try again.
WARM_WAIT = 2.0
WARM_ROUNDS = 10
#: A timed broadcast must reach every client within this.
ROUND_WAIT = 30.0
#: Between broadcasts: the last one's tail work is over.
GAP = 0.1


def broadcast_argv(kind: str) -> list[str]:
    return [sys.executable, str(BROADCAST_SCRIPT), "--transport", kind]


def usage(pid: int) -> tuple[float, int]:
    """(VmRSS in MB, thread count) of process ``pid``."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return rss_kb / 1024, len(os.listdir(f"/proc/{pid}/task"))


def run_ns(pid: int) -> int:
    """CPU time its live threads have run so far, nanoseconds (/proc/PID/task/*/schedstat): finer than
    /proc/PID/stat's clock ticks, for spans of milliseconds in which no thread ends."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError):
            continue  # the thread ended just now
    return total


def server_children(pid: int) -> list[int]:
    """The live broadcast servers below process ``pid`` (stdio: one per client)."""
    import psutil

    pids = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and str(BROADCAST_SCRIPT) in child.cmdline():
                pids.append(child.pid)
        except psutil.Error:
            continue
    return pids


class Side:
    """One measured side in its own process, driven a line at a time."""

    def __init__(self, side: str, kind: str, target: Any, n: int) -> None:
        argv = [sys.executable, "-m", "benchmarks.scale_sides", side, kind, json.dumps(target), str(n)]
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.pid = self.proc.pid
        self._lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, name="bench-scale-reader", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace")
            if line.startswith(PREFIX):
                self._lines.put(json.loads(line[len(PREFIX) :]))
        self._lines.put(None)

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()

    def expect(self, phase: str, timeout: float) -> dict[str, Any]:
        try:
            message = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"no {phase!r} from the child within {timeout:.0f}s") from None
        if message is None:
            raise RuntimeError(f"the child ended (rc={self.proc.wait(5)}) before {phase!r}")
        if message.get("phase") != phase:
            raise RuntimeError(f"expected {phase!r} from the child, got {message}")
        return message

    def close(self) -> None:
        try:
            self.send("stop")
            self.expect("stopped", WAIT)
            self.proc.wait(WAIT)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            say(f"{NAME}: the child did not stop cleanly: {exc!r}")
        finally:
            stop_process(self.proc)


@dataclass
class Measured:
    connect_s: float
    connect_cpu_s: float
    rss_mb: float
    threads: int
    last_ms: float
    first_ms: float
    #: Client CPU per timed broadcast, from the trigger to the round's report.
    broadcast_cpu_ms: float
    warm_rounds: int


@dataclass
class Broadcasts:
    last_ms: list[float]
    first_ms: list[float]
    cpu_ms: list[float]
    warm: int


def broadcasts(side: Side, pids: list[int], n: int, rounds: int) -> Broadcasts:
    """Trigger broadcasts until ``rounds`` timed ones reached all ``n`` clients."""
    out = Broadcasts([], [], [], 0)
    warmed = False
    k = 0
    while len(out.last_ms) < rounds:
        k += 1
        side.send(f"arm {k} {ROUND_WAIT if warmed else WARM_WAIT}")
        side.expect("armed", WAIT)
        cpu0 = run_ns(side.pid)
        t0 = time.monotonic_ns()
        for pid in pids:
            os.kill(pid, signal.SIGUSR1)
        report = side.expect("round", ROUND_WAIT + WAIT)
        cpu_ms = (run_ns(side.pid) - cpu0) / 1e6
        if report["got"] < n:
            if warmed:
                raise RuntimeError(f"broadcast {k} reached {report['got']} of {n} clients in {ROUND_WAIT:.0f}s")
            out.warm += 1
            if out.warm > WARM_ROUNDS:
                raise RuntimeError(f"{out.warm} warm-up broadcasts, none reached all {n} clients ({report['got']})")
        elif not warmed:
            warmed = True  # the first to reach everyone pays first-use costs: not timed
            out.warm += 1
        else:
            out.last_ms.append((report["last_ns"] - t0) / 1e6)
            out.first_ms.append((report["first_ns"] - t0) / 1e6)
            out.cpu_ms.append(cpu_ms)
        time.sleep(GAP)
    return out


@contextlib.contextmanager
def server_for(kind: str) -> Iterator[tuple[Any, int | None]]:
    """(what the clients connect to, the server's pid for http; None: one server per client)."""
    if kind == "stdio":
        yield broadcast_argv("stdio"), None
        return
    with listening_server(broadcast_argv("http")) as server:
        yield server.url("http", "/mcp"), server.proc.pid


def measure(side_name: str, kind: str, n: int, rounds: int) -> Measured:
    with server_for(kind) as (target, server_pid):
        side = Side(side_name, kind, target, n)
        try:
            side.expect("baseline", CONNECT_WAIT)
            rss0, threads0 = usage(side.pid)
            side.send("connect")
            connected = side.expect("connected", CONNECT_WAIT + WAIT)
            rss1, threads1 = usage(side.pid)
            pids = [server_pid] if server_pid is not None else server_children(side.pid)
            if server_pid is None and len(pids) != n:
                raise RuntimeError(f"{len(pids)} stdio servers running for {n} clients")
            got = broadcasts(side, pids, n, rounds)
        finally:
            side.close()
    return Measured(
        connected["seconds"],
        connected["cpu"],
        rss1 - rss0,
        threads1 - threads0,
        median(got.last_ms),
        median(got.first_ms),
        median(got.cpu_ms),
        got.warm,
    )


def rows_for(kind: str, n: int, ours: Measured, sdk: Measured, rounds: int) -> list[Row]:
    label = "Streamable HTTP to one server" if kind == "http" else "stdio, one server process each"
    case = f"{n} clients, {label}"
    start = " (server starts included)" if kind == "stdio" else ""

    def versus(what: str, unit: str, value: float, baseline: float, note: str = "") -> Row:
        """One figure of ours beside the SDK client's."""
        return Row(NAME, f"{case}: {what}", value, unit, "SDK client", baseline, note=note)

    return [
        versus(f"connect + subscribe all at once{start}", "s", ours.connect_s, sdk.connect_s),
        versus(
            "client CPU for connecting all",
            "s",
            ours.connect_cpu_s,
            sdk.connect_cpu_s,
            note="the client process alone, servers aside",
        ),
        versus("RSS added once connected", "MB", ours.rss_mb, sdk.rss_mb),
        versus("RSS per client", "KB", ours.rss_mb * 1024 / n, sdk.rss_mb * 1024 / n),
        versus(
            "threads added once connected",
            "threads",
            ours.threads,
            sdk.threads,
            note=f"exmcp_actors: {n} host threads in get() included",
        ),
        versus("library threads per client, host threads aside", "threads", (ours.threads - n) / n, sdk.threads / n),
        versus(
            f"one broadcast, trigger to the last client, median of {rounds}",
            "ms",
            ours.last_ms,
            sdk.last_ms,
            note="lower is better",
        ),
        versus("the same, to the first client", "ms", ours.first_ms, sdk.first_ms),
        versus(
            "client CPU per broadcast, median",
            "ms",
            ours.broadcast_cpu_ms,
            sdk.broadcast_cpu_ms,
            note="trigger to the round's report",
        ),
    ]


def run(quick: bool = False) -> list[Row]:
    sizes = {"http": 20, "stdio": 5} if quick else {"http": 200, "stdio": 50}
    rounds = 3 if quick else 7
    rows: list[Row] = []
    for kind, n in sizes.items():
        results: dict[str, Measured] = {}
        for side_name, label in SIDES.items():
            results[side_name] = got = measure(side_name, kind, n, rounds)
            say(
                f"{NAME}: {kind} x {n}, {label}: connect {got.connect_s:.2f} s ({got.connect_cpu_s:.2f} s CPU), "
                f"+{got.rss_mb:.1f} MB, +{got.threads} threads, broadcast last {got.last_ms:.1f} ms / first "
                f"{got.first_ms:.1f} ms, {got.broadcast_cpu_ms:.1f} ms CPU ({got.warm_rounds} warm-up)"
            )
        rows += rows_for(kind, n, results["lib"], results["sdk"], rounds)
    return rows


def main() -> None:
    from .run import standalone

    standalone(run)


if __name__ == "__main__":
    main()
