"""Benchmark 4: wire-to-inbox latency at a steady 1,000 notifications per second.

The flood server paces updates at ``RATE`` per second and stamps each with
``params._meta.sentNs = time.monotonic_ns()`` just before writing it. The
reader subtracts that from its own ``time.monotonic_ns()`` when the update is
in the host's hands: after ``listener.get()`` (exmcp_actors), after
``recv()`` + ``json.loads`` (raw), in the ``message_handler`` (SDK client).
On Linux CLOCK_MONOTONIC is one system-wide clock, so the two processes'
readings are comparable. The first ``WARMUP`` samples of each run are dropped.

Goals, per transport: exmcp_actors' p50 within 1.3x the raw p50,
its p99 within 1.5x the raw p99, its CPU per message within 1.5x the raw
reader's. Over HTTP the library's listener is warmed up first (its GET stream
opens after ``connect()`` returns); the raw reader opens its stream in the
handshake. A third side, "raw + hand-off", is the raw reader handing each update to
a host thread through a ``SimpleQueue``: the floor of any design with its own reader
thread (two wake-ups per message), measured so the library's gap to raw can be split
into what that design costs and what the library adds.

Run alone: ``python -m benchmarks.bench_latency [--quick]``.
"""

from __future__ import annotations

import queue
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from .common import (
    URI,
    WAIT,
    RawClient,
    RawHttp,
    RawStdio,
    RawWebSocket,
    Row,
    flood_argv,
    listening_server,
    median,
    percentile,
    run_in_thread,
    say,
)

NAME = "latency"
RATE = 1_000.0
WARMUP = 100


class Run(NamedTuple):
    """One paced run: latencies (microseconds, in arrival order) and client CPU per message."""

    samples: list[float]
    cpu_us: float


def raw_latencies(client: RawClient, count: int) -> Run:
    try:
        client.handshake()
        client.request("resources/subscribe", {"uri": URI})
        request_id = client.call_flood_nowait(URI, count, rate=RATE, stamp=True)
        recv = client.recv
        now = time.monotonic_ns
        samples: list[float] = []
        cpu = time.process_time()
        while len(samples) < count:
            frame = recv()
            at = now()
            if frame.get("method") == "notifications/resources/updated":
                samples.append((at - frame["params"]["_meta"]["sentNs"]) / 1000)
        cpu = time.process_time() - cpu
        while not isinstance(client, RawHttp) and recv().get("id") != request_id:
            pass  # stdio, ws: the flood call's answer follows its frames (HTTP: it came on the POST)
        return Run(samples, cpu / count * 1e6)
    finally:
        client.close()


def handoff_latencies(client: RawClient, count: int) -> Run:
    """The least any design with its own reader thread costs: the raw reader hands each update
    to the host thread through a ``SimpleQueue`` (two wake-ups per message, as the library's
    reader thread and host thread). Timed where the host thread has it, as the library is."""
    handed: queue.SimpleQueue[Any] = queue.SimpleQueue()
    try:
        client.handshake()
        client.request("resources/subscribe", {"uri": URI})
        request_id = client.call_flood_nowait(URI, count, rate=RATE, stamp=True)
        recv = client.recv

        def read() -> None:
            seen = 0
            while seen < count:
                frame = recv()
                if frame.get("method") == "notifications/resources/updated":
                    seen += 1
                    handed.put(frame)
            while not isinstance(client, RawHttp) and recv().get("id") != request_id:
                pass  # stdio, ws: the flood call's answer follows its frames

        get, now = handed.get, time.monotonic_ns
        samples: list[float] = []
        cpu = time.process_time()
        reader, outcome = run_in_thread(read, "bench-handoff-reader")
        for _ in range(count):
            frame = get(timeout=WAIT)
            samples.append((now() - frame["params"]["_meta"]["sentNs"]) / 1000)
        cpu = time.process_time() - cpu
        reader.join(WAIT)
        if outcome and isinstance(outcome[0], BaseException):
            raise outcome[0]
        return Run(samples, cpu / count * 1e6)
    finally:
        client.close()


def lib_latencies(target: Any, count: int, *, warm: bool = False) -> Run:
    import exmcp_actors

    from .bench_throughput import warm_up_listener

    client = exmcp_actors.connect(target, protocol="legacy", reconnect=False, request_timeout=WAIT)
    try:
        listener = client.subscribe_notifications({"resourceSubscriptions": [URI]})
        if warm:  # HTTP: the standalone GET stream opens after connect() returns
            warm_up_listener(client, listener, URI)
        args = {"uri": URI, "count": count, "rate": RATE, "stamp": True}
        thread, outcome = run_in_thread(lambda: client.call_tool("flood", args, timeout=WAIT * 3), "bench-trigger")
        get = listener.get
        now = time.monotonic_ns
        samples: list[float] = []
        cpu = time.process_time()
        for _ in range(count):
            message = get(timeout=WAIT)
            at = now()
            samples.append((at - message.params["_meta"]["sentNs"]) / 1000)
        cpu = time.process_time() - cpu
        thread.join(WAIT)
        if outcome and isinstance(outcome[0], BaseException):
            raise outcome[0]
        return Run(samples, cpu / count * 1e6)
    finally:
        client.disconnect()


def summary(samples: list[float]) -> tuple[float, float, float]:
    """p50, p99 and max (microseconds) after the warm-up."""
    kept = sorted(samples[WARMUP:])
    return percentile(kept, 0.50), percentile(kept, 0.99), kept[-1]


def run(quick: bool = False) -> list[Row]:
    from .bench_throughput import quiet_sdk
    from .sdk_client import sdk_latencies

    if not sys.platform.startswith("linux"):
        raise RuntimeError("needs a system-wide CLOCK_MONOTONIC (Linux)")
    quiet_sdk()
    seconds = 1.5 if quick else 3.0
    n_rounds = 1 if quick else 5  # the p99 verdict rests on the median round: five steady it
    count = int(RATE * seconds)
    rows: list[Row] = []
    argv = flood_argv("stdio")
    with listening_server(flood_argv("ws")) as server, listening_server(flood_argv("http")) as http_server:
        url = server.url("ws")
        http_url = http_server.url("http", "/mcp")
        runners: dict[str, dict[str, Callable[[], Run]]] = {
            "stdio": {
                "raw": lambda: raw_latencies(RawStdio(argv), count),
                "handoff": lambda: handoff_latencies(RawStdio(argv), count),
                "lib": lambda: lib_latencies(argv, count),
                "sdk": lambda: Run(*sdk_latencies("stdio", argv, URI, count, RATE)),
            },
            "WebSocket": {
                "raw": lambda: raw_latencies(RawWebSocket(url), count),
                "lib": lambda: lib_latencies(url, count),
            },
            "HTTP": {
                "raw": lambda: raw_latencies(RawHttp(http_url), count),
                "handoff": lambda: handoff_latencies(RawHttp(http_url), count),
                "lib": lambda: lib_latencies(http_url, count, warm=True),
                "sdk": lambda: Run(*sdk_latencies("http", http_url, URI, count, RATE)),
            },
        }
        for transport, readers in runners.items():
            say(f"{NAME}: {transport}, {count:,} updates at {RATE:,.0f}/s x {n_rounds}")
            p50s: dict[str, list[float]] = {name: [] for name in readers}
            p99s: dict[str, list[float]] = {name: [] for name in readers}
            cpus: dict[str, list[float]] = {name: [] for name in readers}
            for _ in range(n_rounds):
                for name, reader in readers.items():
                    result = reader()
                    p50, p99, worst = summary(result.samples)
                    p50s[name].append(p50)
                    p99s[name].append(p99)
                    cpus[name].append(result.cpu_us)
                    say(
                        f"  {NAME}: {transport} {name}: p50 {p50:.0f} us, p99 {p99:.0f} us, max {worst:.0f} us, "
                        f"{result.cpu_us:.0f} us CPU/msg"
                    )
            rows += rows_for(transport, count - WARMUP, n_rounds, p50s, p99s, cpus)
    return rows


def goal(ours: bool, value: float, raw: float, times: float) -> tuple[str, bool | None]:
    """The goal column and verdict: at most ``times`` the raw reader's figure (the library's rows only)."""
    if not ours:
        return "", None
    return f"<= {times:g}x raw", value <= times * raw


def rows_for(
    transport: str,
    samples: int,
    n_rounds: int,
    p50s: dict[str, list[float]],
    p99s: dict[str, list[float]],
    cpus: dict[str, list[float]],
) -> list[Row]:
    """Median over rounds of each round's p50 and p99 (one stalled round cannot decide alone)."""

    def spread(values: list[float]) -> str:
        return f"rounds {min(values):,.0f}..{max(values):,.0f}" if len(values) > 1 else ""

    raw50, raw99 = median(p50s["raw"]), median(p99s["raw"])
    case = f"{transport}, {RATE:,.0f} msg/s, {samples:,} samples x {n_rounds}"
    rows = [
        Row(NAME, f"{case}: raw p50", raw50, "us", note=spread(p50s["raw"])),
        Row(NAME, f"{case}: raw p99", raw99, "us", note=spread(p99s["raw"])),
    ]
    labels = (("handoff", "raw + hand-off to a host thread"), ("lib", "exmcp_actors"), ("sdk", "SDK client"))
    for name, label in labels:
        if name not in p50s:
            continue
        p50, p99 = median(p50s[name]), median(p99s[name])
        cpu, raw_cpu = median(cpus[name]), median(cpus["raw"])
        ours = name == "lib"  # the goals are the library's only
        rows += [
            Row(
                NAME,
                f"{case}: {label} p50",
                p50,
                "us",
                "raw p50",
                raw50,
                *goal(ours, p50, raw50, 1.3),
                note=spread(p50s[name]),
            ),
            Row(
                NAME,
                f"{case}: {label} p99",
                p99,
                "us",
                "raw p99",
                raw99,
                *goal(ours, p99, raw99, 1.5),
                note=spread(p99s[name]),
            ),
            Row(
                NAME,
                f"{case}: {label} CPU",
                cpu,
                "us CPU/msg",
                "raw",
                raw_cpu,
                *goal(ours, cpu, raw_cpu, 1.5),
                note="lower is better",
            ),
        ]
    if "handoff" in p50s:
        rows += floor_rows(case, p50s, p99s, cpus)
    return rows


def floor_rows(
    case: str, p50s: dict[str, list[float]], p99s: dict[str, list[float]], cpus: dict[str, list[float]]
) -> list[Row]:
    """The library beside the hand-off floor: how much of its gap to raw any reader thread
    handing messages to a host thread pays anyway, and how much is its own."""
    label = "raw + hand-off"
    return [
        Row(
            NAME,
            f"{case}: exmcp_actors {what} vs the hand-off floor",
            median(ours["lib"]),
            unit,
            label,
            median(ours["handoff"]),
            note="lower is better",
        )
        for what, ours, unit in (("p50", p50s, "us"), ("p99", p99s, "us"), ("CPU", cpus, "us CPU/msg"))
    ]


def main() -> None:
    from .run import standalone

    standalone(run)


if __name__ == "__main__":
    main()
