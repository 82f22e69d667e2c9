"""Benchmark 3: does dispatch cost grow with the number of listeners?

Three clients on three flood-server processes (stdio) hold 10, 1,000 and
10,000 listeners on distinct URIs (one ``resources/subscribe`` each, all for
the calling thread); exactly one listener names the flooded URI. The server
floods that URI and the host reads the matching listener. Time per
notification (first to last ``get()``) is compared with the 10-listener
client; flood rounds are interleaved across the three clients so machine
noise hits them alike, and the median round is kept.

Goal: 10,000 listeners within 1.5x the time per notification with 10.

Run alone: ``python -m benchmarks.bench_dispatch [--quick]``.
"""

from __future__ import annotations

import time
from typing import Any

from .common import URI, WAIT, Row, flood_argv, flood_listener, median, read_flood, say, tool_json

NAME = "dispatch"
SIZES = (10, 1_000, 10_000)


def register(client: Any, total: int) -> Any:
    """``total - 1`` listeners on other URIs around one on the flooded URI; returns the matching one."""
    half = (total - 1) // 2
    for i in range(half):
        client.subscribe_notifications({"resourceSubscriptions": [f"file:///bench/other/{i}"]})
    matching = flood_listener(client, URI)  # max_pending above the flood: every update is delivered
    for i in range(half, total - 1):
        client.subscribe_notifications({"resourceSubscriptions": [f"file:///bench/other/{i}"]})
    return matching


def flood_round(client: Any, listener: Any, count: int) -> tuple[float, float]:
    """Wall and CPU microseconds per notification for ``count`` updates read from ``listener``."""
    watch = read_flood(client, listener, URI, count)
    return watch.wall / (count - 1) * 1e6, watch.cpu / (count - 1) * 1e6


def spread(values: list[float]) -> str:
    return f"rounds {min(values):.2f}..{max(values):.2f}" if len(values) > 1 else ""


def run(quick: bool = False) -> list[Row]:
    import exmcp_actors

    count = 20_000 if quick else 50_000
    n_rounds = 3 if quick else 9
    clients: dict[int, Any] = {}
    listeners: dict[int, Any] = {}
    registration: dict[int, float] = {}
    try:
        for size in SIZES:
            client = exmcp_actors.connect(flood_argv("stdio"), protocol="legacy", reconnect=False, request_timeout=WAIT)
            clients[size] = client
            started = time.perf_counter()
            listeners[size] = register(client, size)
            registration[size] = time.perf_counter() - started
            subscribed = tool_json(client.call_tool("stats"))["subscribe_calls"]
            if subscribed != size:
                raise RuntimeError(f"{size} listeners made {subscribed} resources/subscribe")
            say(f"{NAME}: {size:,} listeners registered in {registration[size]:.2f} s")
        times: dict[int, list[float]] = {size: [] for size in SIZES}
        cpus: dict[int, list[float]] = {size: [] for size in SIZES}
        for i in range(n_rounds):
            # Rotate the order each round: no size always goes first.
            for size in SIZES[i % len(SIZES) :] + SIZES[: i % len(SIZES)]:
                us, cpu = flood_round(clients[size], listeners[size], count)
                times[size].append(us)
                cpus[size].append(cpu)
                say(f"  {NAME}: round {i + 1}/{n_rounds} {size:,} listeners: {us:.2f} us/msg, {cpu:.2f} us CPU/msg")
    finally:
        for client in clients.values():
            client.disconnect(timeout=30)
    base, base_cpu = median(times[SIZES[0]]), median(cpus[SIZES[0]])
    case = "{:,} listeners, 1 matching, " + f"{count:,} msgs x {n_rounds} rounds"
    label = f"{SIZES[0]} listeners"
    rows = [Row(NAME, case.format(SIZES[0]), base, "us/msg", note=spread(times[SIZES[0]]))]
    for size in SIZES[1:]:
        # Paired rounds: the ratio is the median of the per-round ratios.
        ratio = median([t / b for t, b in zip(times[size], times[SIZES[0]], strict=True)])
        goal = "<= 1.5x the time with 10" if size == 10_000 else ""
        passed = ratio <= 1.5 if size == 10_000 else None
        value = median(times[size])
        rows.append(
            Row(NAME, case.format(size), value, "us/msg", label, base, goal, passed, ratio, spread(times[size]))
        )
    for size in SIZES[1:]:
        ratio = median([t / b for t, b in zip(cpus[size], cpus[SIZES[0]], strict=True)])
        rows.append(
            Row(
                NAME, case.format(size) + ": client CPU", median(cpus[size]), "us CPU/msg", label, base_cpu, ratio=ratio
            )
        )
    return rows


def main() -> None:
    from .run import standalone

    standalone(run)


if __name__ == "__main__":
    main()
