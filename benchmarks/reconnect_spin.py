"""Reopenings per second of an SSE stream whose hostile server asks ``retry: 0`` and ends it at once.

    python -m benchmarks.reconnect_spin [--seconds S]

One raw HTTP server (``tests/raw_http.py``) on 127.0.0.1 per path, each for ``S`` seconds
(default 5) with the transport's default settings:

* ``get``: the standalone GET stream delivers one notification, then ends;
* ``resume``: a request's POST stream carries an event id and ends without the answer; each
  resumption (GET with ``Last-Event-ID``) delivers one notification, then ends;
* ``error``: GET streams alternate between a reset before any answer and a stream like ``get``.

Prints the reopenings counted, per second, and the CPU seconds the client process spent.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from raw_http import Exchange, RawHttp, legacy_basics

import exmcp_actors as mcp

NOTE = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


def _event(event_id: int) -> bytes:
    return f"retry: 0\nid: e{event_id}\ndata: {json.dumps(NOTE)}\n\n".encode()


class Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.n = 0

    def next(self) -> int:
        with self.lock:
            self.n += 1
            return self.n


def _serve(path: str, opened: Counter) -> RawHttp:
    def answer(exchange: Exchange) -> bool:
        if legacy_basics(exchange):
            return True
        # The standalone GET stream resumes with Last-Event-ID too: only "resume" tells them apart.
        resuming = "last-event-id" in exchange.headers
        if exchange.method == "GET" and (path != "resume" or resuming):
            n = opened.next()
            if path == "error" and n % 2:
                exchange.reset()
                return False
            exchange.whole("200 OK", _event(n), content_type="text/event-stream")
            return True
        if exchange.method == "GET":
            exchange.whole("405 Method Not Allowed")
            return True
        exchange.start_sse()  # a request's stream: an event id, then the end without the answer
        exchange.chunk(_event(0))
        exchange.end_chunks()
        return True

    return RawHttp(answer)


def measure(path: str, seconds: float) -> dict[str, Any]:
    opened = Counter()
    server = _serve(path, opened)
    client = mcp.connect(mcp.HttpTransport(server.url), protocol="legacy", reconnect=False)
    try:
        if path == "resume":
            threading.Thread(target=_request, args=(client,), daemon=True).start()
        cpu, started, start_count = time.process_time(), time.monotonic(), opened.n
        time.sleep(seconds)
        count, took = opened.n - start_count, time.monotonic() - started
        cpu = time.process_time() - cpu
    finally:
        client.disconnect()
        server.stop()
    return {"path": path, "reopened": count, "per_second": round(count / took, 1), "cpu_seconds": round(cpu, 2)}


def _request(client: mcp.Client) -> None:
    try:
        client.request("tools/list", timeout=600)
    except mcp.Error:
        pass  # the client was disconnected, or the resumptions gave up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    for path in ("get", "resume", "error"):
        print(json.dumps(measure(path, args.seconds)), flush=True)


if __name__ == "__main__":
    main()
