"""Where the wake-ups and the CPU go on the busy paths: not a benchmark row, it explains four.

Each case runs the library and its peer side by side and prints, per thread of
this process, voluntary context switches (each one a block, so a wake-up
after it) and CPU, divided by the unit (a message, a registration, a
delivery), read from ``/proc/self/task/*``. With ``--cprofile`` each thread of
the library's run (threads started after the profile is armed, and the main
thread) is profiled on its own CPU clock (``time.thread_time``: a blocked call
costs nothing) and the top functions by own CPU are printed per unit.

Cases: ``stdio`` and ``http`` (a steady 1,000 msg/s stream read with
``listener.get()`` vs a raw reader), ``register`` (wire subscribes on new URIs,
vs raw round trips and the SDK's ``subscribe_resource``), ``fanout`` (one
thread reading 1,000 listeners round-robin vs a raw reader feeding 1,000
``SimpleQueue``).

Run: ``python -m benchmarks.profile_busy CASE [--rounds N] [--cprofile]``.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .common import URI, WAIT, RawHttp, RawStdio, flood_argv, listening_server, run_in_thread

TICK = os.sysconf("SC_CLK_TCK")
RATE = 1_000.0


def tasks() -> dict[int, tuple[int, int, float]]:
    """tid -> (voluntary switches, involuntary switches, CPU seconds) of every thread of this process."""
    out: dict[int, tuple[int, int, float]] = {}
    for name in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
            with open(f"/proc/self/task/{name}/stat") as f:
                stat = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        cpu = (int(stat[11]) + int(stat[12])) / TICK
        out[int(name)] = (int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"]), cpu)
    return out


class Window:
    """Per-thread switches and CPU between ``start()`` and ``stop()``, with thread names kept."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.before: dict[int, tuple[int, int, float]] = {}
        self.after: dict[int, tuple[int, int, float]] = {}
        self.wall = self.cpu = 0.0

    def _name(self) -> None:
        for t in threading.enumerate():
            if t.native_id is not None:
                self.names.setdefault(t.native_id, t.name)

    def start(self) -> None:
        self._name()
        self.before = tasks()
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def stop(self) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu
        self.after = tasks()
        self._name()

    def report(self, label: str, units: int, unit: str) -> None:
        rows = []
        for tid, (vol, inv, cpu) in self.after.items():
            v0, i0, c0 = self.before.get(tid, (0, 0, 0.0))
            if vol - v0 or cpu - c0 > 0:
                rows.append((self.names.get(tid, str(tid)), (vol - v0) / units, (inv - i0) / units, (cpu - c0) / units))
        total = sum(r[1] for r in rows)
        load = os.getloadavg()[0]
        print(
            f"{label}: {units:,} x {unit} in {self.wall:.2f} s; CPU {self.cpu / units * 1e6:.1f} us/{unit}; "
            f"wake-ups {total:.2f}/{unit} (load {load:.2f})"
        )
        for name, vol, inv, cpu in sorted(rows, key=lambda r: -r[1]):
            print(f"    {name:32} wake-ups {vol:6.3f}/{unit}  preempted {inv:6.3f}  CPU {cpu * 1e6:7.1f} us")


class ThreadProfiles:
    """cProfile in every thread started while armed, and in the calling thread."""

    def __init__(self) -> None:
        self.profiles: dict[str, cProfile.Profile] = {}

    def _hook(self, *_: Any) -> None:
        sys.setprofile(None)
        profile = cProfile.Profile(time.thread_time)
        self.profiles[threading.current_thread().name] = profile
        profile.enable()

    @contextmanager
    def armed(self) -> Iterator[None]:
        main = cProfile.Profile(time.thread_time)
        self.profiles["(main)"] = main
        threading.setprofile(self._hook)
        main.enable()
        try:
            yield
        finally:
            main.disable()
            threading.setprofile(None)  # type: ignore[arg-type]

    def report(self, units: int, unit: str, top: int = 18) -> None:
        for name, profile in self.profiles.items():
            dump = os.environ.get("PROFILE_DUMP")
            if dump:  # a folder: one pstats file per thread, for ``python -m pstats``
                profile.dump_stats(os.path.join(dump, f"{name.strip('()')}.prof"))
            stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
            own = sum(v[2] for v in stats.values())
            if own / units < 2e-6:
                continue
            print(f"  cProfile {name}: thread CPU {own / units * 1e6:.1f} us/{unit} (inflated by profiling)")
            for (path, line, func), (_, calls, tt, _ct, _) in sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]:
                where = f"{os.path.basename(path)}:{line}({func})"
                print(f"      {tt / units * 1e6:6.2f} us  {calls / units:6.2f} calls  {where}")


# --------------------------------------------------------------------------- steady stream


def raw_stream(client: Any, count: int, window: Window) -> None:
    try:
        client.handshake()
        client.request("resources/subscribe", {"uri": URI})
        request_id = client.call_flood_nowait(URI, count + 1, rate=RATE, stamp=True)
        recv, seen = client.recv, 0
        while recv().get("method") != "notifications/resources/updated":
            pass
        window.start()
        while seen < count:
            if recv().get("method") == "notifications/resources/updated":
                seen += 1
        window.stop()
        while not isinstance(client, RawHttp) and recv().get("id") != request_id:
            pass
    finally:
        client.close()


def lib_stream(target: Any, count: int, window: Window, profiles: ThreadProfiles | None, warm: bool) -> None:
    from .bench_throughput import warm_up_listener

    with library_client(target, profiles) as client:
        listener = client.subscribe_notifications({"resourceSubscriptions": [URI]})
        if warm:
            warm_up_listener(client, listener, URI)
        args = {"uri": URI, "count": count + 1, "rate": RATE, "stamp": True}
        trigger, _ = run_in_thread(lambda: client.call_tool("flood", args, timeout=WAIT * 3), "bench-trigger")
        get = listener.get
        get(timeout=WAIT)
        window.start()
        for _ in range(count):
            get(timeout=WAIT)
        window.stop()
        trigger.join(WAIT)


@contextmanager
def library_client(target: Any, profiles: ThreadProfiles | None, disconnect_timeout: float = 5.0) -> Iterator[Any]:
    """A legacy exmcp_actors client of ``target``; ``profiles`` armed over its whole life when given."""
    import exmcp_actors

    with profiles.armed() if profiles else _nothing():
        client = exmcp_actors.connect(target, protocol="legacy", reconnect=False, request_timeout=WAIT)
        try:
            yield client
        finally:
            client.disconnect(timeout=disconnect_timeout)


def library_runs(profile: bool) -> list[tuple[str, ThreadProfiles | None]]:
    """The library's runs in one round: a plain one, then with ``--cprofile`` a profiled one."""
    return [("exmcp_actors", None)] + ([("exmcp_actors, profiled", ThreadProfiles())] if profile else [])


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def stream_case(transport: str, rounds: int, profile: bool) -> None:
    count = 3_000
    if transport == "stdio":
        argv = flood_argv("stdio")
        run_pair(rounds, profile, count, "message", lambda: RawStdio(argv), argv, warm=False)
        return
    with listening_server(flood_argv("http")) as server:
        url = server.url("http", "/mcp")
        run_pair(rounds, profile, count, "message", lambda: RawHttp(url), url, warm=True)


def run_pair(
    rounds: int, profile: bool, count: int, unit: str, raw: Callable[[], Any], target: Any, warm: bool
) -> None:
    for i in range(rounds):
        window = Window()
        raw_stream(raw(), count, window)
        window.report(f"round {i + 1} raw", count, unit)
        window = Window()
        lib_stream(target, count, window, None, warm)
        window.report(f"round {i + 1} exmcp_actors", count, unit)
    if profile:
        profiles = ThreadProfiles()
        lib_stream(target, count, Window(), profiles, warm)
        profiles.report(count, unit)


# --------------------------------------------------------------------------- registrations


def register_case(rounds: int, profile: bool) -> None:

    from .bench_cost import raw_subscribe_rate, sdk_subscribe_rate

    n = 1_000
    for i in range(rounds):
        window = Window()
        window.start()
        raw = raw_subscribe_rate(n)
        window.stop()
        print(f"round {i + 1} raw: {raw:,.0f}/s (the window includes the child's start)")
        window = Window()
        window.start()
        sdk = sdk_subscribe_rate(n)
        window.stop()
        window.report(f"round {i + 1} SDK subscribe_resource {sdk:,.0f}/s (includes start-up)", n, "registration")
        for label, profiles in library_runs(profile):
            with library_client(flood_argv("stdio"), profiles) as client:
                client.subscribe_notifications({"resourceSubscriptions": ["file:///bench/warm"]})
                window = Window()
                window.start()
                for j in range(n):
                    client.subscribe_notifications({"resourceSubscriptions": [f"file:///bench/reg/{i}/{j}"]})
                window.stop()
            window.report(f"round {i + 1} {label} {n / window.wall:,.0f}/s", n, "registration")
            if profiles:
                profiles.report(n, "registration")


# --------------------------------------------------------------------------- fan-out


def fanout_case(rounds: int, profile: bool) -> None:

    k, n = 1_000, 200
    for i in range(rounds):
        raw = RawStdio(flood_argv("stdio"))
        try:
            raw.handshake()
            raw.request("resources/subscribe", {"uri": URI})
            queues: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue() for _ in range(k)]
            puts = [q.put for q in queues]

            def read() -> None:
                seen = 0
                while seen < n:
                    message = raw.recv()  # noqa: B023 (joined inside the iteration)
                    if message.get("method") == "notifications/resources/updated":
                        seen += 1
                        for p in puts:  # noqa: B023
                            p(message)

            window = Window()
            window.start()  # before the flood: the reader thread's whole work is inside
            raw.call_flood_nowait(URI, n)
            reader, _ = run_in_thread(read, "raw-reader")
            for _ in range(n):
                for q in queues:
                    q.get(timeout=WAIT)
            reader.join(WAIT)
            window.stop()
        finally:
            raw.close()
        window.report(f"round {i + 1} raw {n * k / window.wall:,.0f} deliveries/s", n * k, "delivery")
        for label, profiles in library_runs(profile):
            with library_client(flood_argv("stdio"), profiles, disconnect_timeout=30) as client:
                listeners = [client.subscribe_notifications({"resourceSubscriptions": [URI]}) for _ in range(k)]
                gets = [lst.get for lst in listeners]
                args = {"uri": URI, "count": n}
                window = Window()
                window.start()
                trigger, _ = run_in_thread(
                    lambda: client.call_tool("flood", args, timeout=WAIT * 3),  # noqa: B023
                    "bench-trigger",
                )
                for _ in range(n):
                    for get in gets:
                        get(timeout=WAIT)
                trigger.join(WAIT)
                window.stop()
            window.report(f"round {i + 1} {label} {n * k / window.wall:,.0f} deliveries/s", n * k, "delivery")
            if profiles:
                profiles.report(n * k, "delivery")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=("stdio", "http", "register", "fanout"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cprofile", action="store_true")
    args = parser.parse_args()
    if args.case in ("stdio", "http"):
        stream_case(args.case, args.rounds, args.cprofile)
    elif args.case == "register":
        register_case(args.rounds, args.cprofile)
    else:
        fanout_case(args.rounds, args.cprofile)


if __name__ == "__main__":
    main()
