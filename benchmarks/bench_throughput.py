"""Benchmark 1: notifications per second from a flooding server to a host thread.

Three readers of the same stream, in the same run, rounds interleaved:

(a) raw: the transport library and ``json.loads``, nothing else (stdio:
    ``readline`` on the child's stdout; WebSocket: websocket-client ``recv()``;
    HTTP: an httpx streaming GET, split into SSE events on blank lines);
(b) the official MCP SDK client (mcp 2.3.0), counting in its
    ``message_handler`` (stdio and Streamable HTTP; it has no WebSocket);
(c) exmcp_actors: ``connect()``, ``subscribe_notifications`` on the URI
    (``max_pending`` above the flood, so none is coalesced: see
    ``common.FLOOD_MAX_PENDING``), ``listener.get()`` in the host thread.

Two producers. ``benchmarks/flood_server.py`` writes pre-serialised frames
(stdio, WebSocket, Streamable HTTP) millions of times per second, so the
readers are measured: the goals are judged there. The SDK server's own
``flood`` tool (``tests/peers/sdk_server.py``, stdio and HTTP) produces a few
thousand per second, so every reader measures that server: those rates are
"server-bound (info)", with no goal; only their client CPU per message still
separates the clients.

Each rate is timed from the first update received to the last one, so
start-up, handshake and the trigger are left out; the median round is kept.

Run alone: ``python -m benchmarks.bench_throughput [--quick]``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

from .common import (
    URI,
    WAIT,
    Flow,
    RawClient,
    RawHttp,
    RawStdio,
    RawWebSocket,
    Row,
    Stopwatch,
    flood_argv,
    flood_listener,
    listening_server,
    median,
    read_flood,
    say,
    sdk_argv,
)

NAME = "throughput"
SDK_URI = "file:///a.txt"  # a resource the SDK peer knows
#: Rates read from the SDK server measure that server, not the clients.
SERVER_BOUND = "server-bound (info)"


def quiet_sdk() -> None:
    """The SDK warns about resources/subscribe (gone in 2026-07-28) and unlisted tools: noise here."""
    warnings.simplefilter("ignore")
    logging.getLogger("mcp").setLevel(logging.ERROR)


def raw_rate(client: RawClient, uri: str, count: int, *, flood_server: bool) -> Flow:
    """(a) Read ``count`` updates with the bare transport reader + json.loads."""
    try:
        client.handshake()
        client.request("resources/subscribe", {"uri": uri})
        if flood_server:
            request_id = client.call_flood_nowait(uri, count)
        else:
            client._next_id += 1
            request_id = client._next_id
            client.send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "method": "tools/call",
                    "params": {"name": "flood", "arguments": {"uri": uri, "count": count}},
                }
            )
        recv = client.recv
        seen = 0
        watch = Stopwatch()
        while seen < count:
            frame = recv()
            if frame.get("method") == "notifications/resources/updated":
                seen += 1
                if seen == 1:
                    watch.start()
        watch.stop()
        while not isinstance(client, RawHttp):  # stdio, ws: the flood call's answer follows its frames
            frame = recv()
            if frame.get("id") == request_id:
                break
        return watch.result(count - 1)
    finally:
        client.close()


def lib_rate(target: Any, uri: str, count: int, *, warm: bool) -> Flow:
    """(c) exmcp_actors: a listener on ``uri``, ``count`` ``listener.get()`` calls in this thread."""
    import exmcp_actors

    client = exmcp_actors.connect(target, protocol="legacy", reconnect=False, request_timeout=WAIT)
    try:
        listener = flood_listener(client, uri)  # max_pending above the flood: every update is delivered
        if warm:
            warm_up_listener(client, listener, uri)
        watch = read_flood(client, listener, uri, count)
        return watch.result(count - 1)
    finally:
        client.disconnect()


def warm_up_listener(client: Any, listener: Any, uri: str) -> None:
    """HTTP: flood 1 until one arrives, so the standalone GET stream is surely open."""
    import queue

    for _ in range(100):
        client.call_tool("flood", {"uri": uri, "count": 1})
        try:
            listener.get(timeout=0.2)
            return
        except queue.Empty:
            continue
    raise RuntimeError("no notification arrived during warm-up")


class Results:
    """Rates and client CPU per message of every reader, round by round."""

    def __init__(self, names: list[str]) -> None:
        self.rates: dict[str, list[float]] = {name: [] for name in names}
        self.cpu: dict[str, list[float]] = {name: [] for name in names}


def rounds(count: int, runners: dict[str, Callable[[], Flow]]) -> Results:
    """Run every reader ``count`` times, interleaved."""
    results = Results(list(runners))
    for i in range(count):
        for name, runner in runners.items():
            flow = runner()
            results.rates[name].append(flow.rate)
            results.cpu[name].append(flow.cpu_us)
            say(f"  {NAME}: round {i + 1}/{count} {name}: {flow.rate:,.0f} msg/s, {flow.cpu_us:.1f} us CPU/msg")
    return results


def spread(values: list[float], digits: int = 0) -> str:
    return f"rounds {min(values):,.{digits}f}..{max(values):,.{digits}f}" if len(values) > 1 else ""


def paired(values: list[float], against: list[float]) -> float:
    """The median of the per-round ratios: paired rounds cancel most of the drift of a shared machine."""
    return median([a / b for a, b in zip(values, against, strict=True)])


def compare(
    bench_case: str,
    results: Results,
    name: str,
    against: str,
    label: str,
    goal: str = "",
    threshold: float | None = None,
    note: str = "",
) -> Row:
    """``name``'s rate beside ``against``'s: medians, and the median paired ratio."""
    values, base = results.rates[name], results.rates[against]
    ratio = paired(values, base)
    passed = None if threshold is None else ratio >= threshold
    note = ", ".join(x for x in (note, spread(values)) if x)
    return Row(NAME, bench_case, median(values), "msg/s", label, median(base), goal, passed, ratio, note)


def compare_cpu(bench_case: str, results: Results, name: str, against: str, label: str) -> Row:
    """Client CPU per message (all threads of this process), lower is better."""
    values, base = results.cpu[name], results.cpu[against]
    return Row(
        NAME,
        bench_case,
        median(values),
        "us CPU/msg",
        label,
        median(base),
        ratio=paired(values, base),
        note="lower is better",
    )


def flood_rows(case: str, raw_label: str, r: Results, n_sdk: int | None = None) -> list[Row]:
    """The rows and goals of one flood-server case: the raw reader alone, then the library
    against it (and against the SDK client, when ``n_sdk`` of its messages were measured)."""
    rows = [alone(f"{case}: {raw_label}", r, "raw")]
    if n_sdk is not None:
        rows.append(compare(f"{case}: SDK client ({n_sdk:,} of them)", r, "sdk", "raw", "raw"))
    rows.append(compare(f"{case}: exmcp_actors", r, "lib", "raw", "raw", ">= 0.6x raw", 0.6))
    if n_sdk is not None:
        rows.append(compare(f"{case}: exmcp_actors", r, "lib", "sdk", "SDK client", "> 1.0x SDK", 1.0))
    rows.append(compare_cpu(f"{case}: exmcp_actors client CPU", r, "lib", "raw", "raw"))
    if n_sdk is not None:
        rows.append(compare_cpu(f"{case}: exmcp_actors client CPU", r, "lib", "sdk", "SDK client"))
    return rows


def alone(bench_case: str, results: Results, name: str, note: str = "") -> Row:
    values = results.rates[name]
    return Row(NAME, bench_case, median(values), "msg/s", note=", ".join(x for x in (note, spread(values)) if x))


def run(quick: bool = False) -> list[Row]:
    from .sdk_client import sdk_flood_rate

    quiet_sdk()
    n_fast = 20_000 if quick else 100_000
    # The SDK client reads the same flood ~15x slower than the others: a shorter
    # stream keeps the run short and still gives it seconds of steady state.
    n_fast_sdk = 5_000 if quick else 20_000
    n_sdk = 500 if quick else 2_000
    n_rounds = 1 if quick else 5  # flood server: cheap rounds, the goal sits near its threshold
    n_sdk_rounds = 1 if quick else 3  # SDK server: each round starts a slow-starting server
    rows: list[Row] = []

    # -- flood server, stdio ------------------------------------------------------
    say(f"{NAME}: flood server over stdio, {n_fast:,} updates x {n_rounds}")
    argv = flood_argv("stdio")
    r = rounds(
        n_rounds,
        {
            "raw": lambda: raw_rate(RawStdio(argv), URI, n_fast, flood_server=True),
            "sdk": lambda: sdk_flood_rate("stdio", argv, URI, n_fast_sdk, warm=False),
            "lib": lambda: lib_rate(argv, URI, n_fast, warm=False),
        },
    )
    case = f"stdio, flood server, {n_fast:,} msgs x {n_rounds}"
    rows += flood_rows(case, "raw readline+json.loads", r, n_fast_sdk)

    # -- flood server, WebSocket -------------------------------------------------
    say(f"{NAME}: flood server over WebSocket, {n_fast:,} updates x {n_rounds}")
    with listening_server(flood_argv("ws")) as server:
        url = server.url("ws")
        r = rounds(
            n_rounds,
            {
                "raw": lambda: raw_rate(RawWebSocket(url), URI, n_fast, flood_server=True),
                "lib": lambda: lib_rate(url, URI, n_fast, warm=False),
            },
        )
    # No SDK rows: mcp 2.x has no WebSocket client.
    case = f"WebSocket, flood server, {n_fast:,} msgs x {n_rounds}"
    rows += flood_rows(case, "raw websocket-client recv+json.loads", r)

    # -- flood server, Streamable HTTP ---------------------------------------------
    say(f"{NAME}: flood server over Streamable HTTP, {n_fast:,} updates x {n_rounds}")
    with listening_server(flood_argv("http")) as server:
        url = server.url("http", "/mcp")
        r = rounds(
            n_rounds,
            {
                "raw": lambda: raw_rate(RawHttp(url), URI, n_fast, flood_server=True),
                "sdk": lambda: sdk_flood_rate("http", url, URI, n_fast_sdk, warm=False),
                "lib": lambda: lib_rate(url, URI, n_fast, warm=False),
            },
        )
    case = f"HTTP, flood server, {n_fast:,} msgs x {n_rounds}"
    rows += flood_rows(case, "raw httpx GET stream+SSE split+json.loads", r, n_fast_sdk)

    # -- SDK server, stdio: server-bound, no goal ----------------------------------
    say(f"{NAME}: SDK server flood tool over stdio, {n_sdk:,} updates x {n_sdk_rounds}")
    argv = sdk_argv("stdio")
    r = rounds(
        n_sdk_rounds,
        {
            "raw": lambda: raw_rate(RawStdio(argv), SDK_URI, n_sdk, flood_server=False),
            "sdk": lambda: sdk_flood_rate("stdio", argv, SDK_URI, n_sdk, warm=False),
            "lib": lambda: lib_rate(argv, SDK_URI, n_sdk, warm=False),
        },
    )
    case = f"stdio, SDK server, {n_sdk:,} msgs x {n_sdk_rounds}"
    rows += [
        alone(f"{case}: raw readline+json.loads", r, "raw", SERVER_BOUND),
        compare(f"{case}: SDK client", r, "sdk", "raw", "raw", note=SERVER_BOUND),
        compare(f"{case}: exmcp_actors", r, "lib", "raw", "raw", note=SERVER_BOUND),
        compare(f"{case}: exmcp_actors", r, "lib", "sdk", "SDK client", note=SERVER_BOUND),
        compare_cpu(f"{case}: exmcp_actors client CPU", r, "lib", "sdk", "SDK client"),
    ]

    # -- SDK server, Streamable HTTP: server-bound, no goal -------------------------
    say(f"{NAME}: SDK server flood tool over Streamable HTTP, {n_sdk:,} updates x {n_sdk_rounds}")
    with listening_server(sdk_argv("http")) as server:
        url = server.url("http", "/mcp")
        r = rounds(
            n_sdk_rounds,
            {
                "sdk": lambda: sdk_flood_rate("http", url, SDK_URI, n_sdk, warm=True),
                "lib": lambda: lib_rate(url, SDK_URI, n_sdk, warm=True),
            },
        )
    case = f"HTTP, SDK server, {n_sdk:,} msgs x {n_sdk_rounds}"
    rows += [
        alone(f"{case}: SDK client", r, "sdk", SERVER_BOUND),
        compare(f"{case}: exmcp_actors", r, "lib", "sdk", "SDK client", note=SERVER_BOUND),
        compare_cpu(f"{case}: exmcp_actors client CPU", r, "lib", "sdk", "SDK client"),
    ]
    return rows


def main() -> None:
    from .run import standalone

    standalone(run)


if __name__ == "__main__":
    main()
