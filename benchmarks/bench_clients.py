"""Benchmark 6: what a connected client costs, and how long connecting takes.

- Threads and RSS per client, for 1, 10 and 50 clients in one process, each
  on a modern WebSocket session (the SDK test peer, ``--era both``) with one
  watch (``subscriber`` = the calling thread). Beside it, the same number of
  plain websocket-client connections, each with its own reader thread (the
  least a blocking WebSocket client can run). Goals (the issue's): at most 3
  threads per client plus one per subscriber (the shared scheduler thread is
  counted too, spread over the clients), at most 1 MB RSS per client.
- Connect time: ``connect()`` until it returns a ready client, against the
  flood server over stdio (the process start included) and over Streamable
  HTTP, beside the SDK client (``stdio_client`` / ``streamable_http_client``
  + ``ClientSession.initialize()``), in interleaved rounds (median).

Run alone: ``python -m benchmarks.bench_clients [--quick]``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .bench_cost import usage, wait_until
from .common import SDK_SCRIPT, WAIT, Row, flood_argv, listening_server, median, say

NAME = "clients"
THREADS_GOAL = 3 + 1  # per client: 3, plus one per subscriber (one watch)
RSS_GOAL_MB = 1.0


def lib_clients(url: str, n: int) -> tuple[float, float]:
    """(threads, MB RSS) added per client by ``n`` modern WebSocket clients with one watch each."""
    import exmcp_actors

    rss0, threads0 = usage()
    clients: list[Any] = []
    try:
        for _ in range(n):
            client = exmcp_actors.connect(url, request_timeout=WAIT)
            client.watch({"toolsListChanged": True})
            clients.append(client)
        if clients[0].era != "modern":
            raise RuntimeError(f"the peer answered in the {clients[0].era} era, not modern")
        rss1, threads1 = usage()
    finally:
        for client in clients:
            client.disconnect()
    return (threads1 - threads0) / n, (rss1 - rss0) / n


def raw_clients(url: str, n: int) -> tuple[float, float]:
    """(threads, MB RSS) added per connection by ``n`` websocket-client connections with a reader each."""
    import websocket

    rss0, threads0 = usage()
    sockets: list[Any] = []
    readers: list[threading.Thread] = []

    def read(ws: Any) -> None:
        try:
            while ws.recv():
                pass
        except Exception:  # closed under it: the end
            pass

    try:
        for _ in range(n):
            ws = websocket.WebSocket()
            ws.connect(url, subprotocols=["mcp"], timeout=WAIT)
            ws.settimeout(None)
            sockets.append(ws)
            reader = threading.Thread(target=read, args=(ws,), name="bench-raw-ws-reader", daemon=True)
            reader.start()
            readers.append(reader)
        rss1, threads1 = usage()
    finally:
        for ws in sockets:
            ws.shutdown()
        for reader in readers:
            reader.join(WAIT)
    return (threads1 - threads0) / n, (rss1 - rss0) / n


def per_client(counts: list[int]) -> list[Row]:
    import sys

    argv = [sys.executable, str(SDK_SCRIPT), "--transport", "ws", "--era", "both"]
    rows: list[Row] = []
    with listening_server(argv) as server:
        url = server.url("ws")
        lib_clients(url, 1)  # warm: imports, first allocations, the scheduler's first start
        for n in counts:
            wait_until(lambda: threading.active_count() <= 2, 10.0)  # the last round's threads ended
            lib_threads, lib_mb = lib_clients(url, n)
            raw_threads, raw_mb = raw_clients(url, n)
            say(
                f"{NAME}: {n} clients: {lib_threads:.2f} threads and {lib_mb:.3f} MB each; "
                f"raw websocket-client: {raw_threads:.2f} threads and {raw_mb:.3f} MB each"
            )
            case = f"{n} modern WebSocket client(s), one watch each"
            rows += [
                Row(
                    NAME,
                    f"{case}: threads per client",
                    lib_threads,
                    "threads",
                    "raw websocket-client + reader thread",
                    raw_threads,
                    f"<= {THREADS_GOAL} (3 + 1 subscriber)",
                    lib_threads <= THREADS_GOAL,
                ),
                Row(
                    NAME,
                    f"{case}: RSS per client",
                    lib_mb,
                    "MB",
                    "raw websocket-client + reader thread",
                    raw_mb,
                    f"<= {RSS_GOAL_MB:g} MB",
                    lib_mb <= RSS_GOAL_MB,
                ),
            ]
    return rows


def lib_connect(target: Any) -> float:
    import exmcp_actors

    started = time.perf_counter()
    client = exmcp_actors.connect(target, protocol="legacy", reconnect=False, request_timeout=WAIT)
    seconds = time.perf_counter() - started
    client.disconnect()
    return seconds


def sdk_connect(kind: str, target: Any) -> float:
    import anyio

    from .sdk_client import Counter, sdk_session

    async def main() -> float:
        started = time.perf_counter()
        async with sdk_session(kind, target, Counter()):
            return time.perf_counter() - started

    return float(anyio.run(main))


def connect_times(n_rounds: int) -> list[Row]:
    from .bench_throughput import quiet_sdk

    quiet_sdk()
    rows: list[Row] = []
    argv = flood_argv("stdio")
    with listening_server(flood_argv("http")) as server:
        url = server.url("http", "/mcp")
        cases: dict[str, tuple[Callable[[], float], Callable[[], float]]] = {
            "stdio (process start included)": (lambda: lib_connect(argv), lambda: sdk_connect("stdio", argv)),
            "Streamable HTTP": (lambda: lib_connect(url), lambda: sdk_connect("http", url)),
        }
        for label, (lib, sdk) in cases.items():
            lib(), sdk()  # warm: imports, first connections
            libs: list[float] = []
            sdks: list[float] = []
            for _ in range(n_rounds):
                libs.append(lib() * 1000)
                sdks.append(sdk() * 1000)
            say(f"{NAME}: connect over {label}: exmcp_actors {median(libs):.1f} ms, SDK client {median(sdks):.1f} ms")
            rows.append(
                Row(
                    NAME,
                    f"connect over {label}, median of {n_rounds}",
                    median(libs),
                    "ms",
                    "SDK client",
                    median(sdks),
                    note="lower is better",
                )
            )
    return rows


def run(quick: bool = False) -> list[Row]:
    rows = per_client([1, 10] if quick else [1, 10, 50])
    rows += connect_times(3 if quick else 9)
    return rows


def main() -> None:
    from .run import standalone

    standalone(run)


if __name__ == "__main__":
    main()
