"""Shared plumbing for the benchmarks: result rows, servers, raw clients, timing.

The raw baselines use no part of the client under test; only the child-process
helpers of ``exmcp_actors.testing`` (shared with the tests) come from the package.
"""

from __future__ import annotations

import atexit
import json
import os
import platform
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from exmcp_actors.testing._process import stop_process as stop_child
from exmcp_actors.testing._process import wait_for_listening

ROOT = Path(__file__).resolve().parent.parent
FLOOD_SCRIPT = ROOT / "benchmarks" / "flood_server.py"
SDK_SCRIPT = ROOT / "tests" / "peers" / "sdk_server.py"
UPDATED = "notifications/resources/updated"
URI = "file:///bench/flooded"
#: Generous bound on any single wait in the benchmarks.
WAIT = 60.0
READY_TIMEOUT = 20.0


# --------------------------------------------------------------------------- results


@dataclass
class Row:
    """One line of the results table: a figure beside its comparison.

    ``ratio`` is ``value / baseline`` unless given; ``higher_is_better`` only
    decides how the ratio reads (e.g. time per notification: lower is better).
    ``passed`` is None for figures without a goal.
    """

    bench: str
    case: str
    value: float
    unit: str
    baseline_label: str = ""
    baseline: float | None = None
    goal: str = ""
    passed: bool | None = None
    ratio: float | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if self.ratio is None and self.baseline:
            self.ratio = self.value / self.baseline

    @property
    def status(self) -> str:
        if self.passed is None:
            return "info"
        return "PASS" if self.passed else "MISS"


def fmt(value: float | None, unit: str = "") -> str:
    """A figure with a sensible precision and its unit."""
    if value is None:
        return "-"
    if abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".strip()


def table(rows: Sequence[Row]) -> str:
    """A Markdown table of ``rows``."""
    head = "| benchmark | case | result | compared with | baseline | ratio | goal | status |"
    lines = [head, "|---|---|---:|---|---:|---:|---|---|"]
    for r in rows:
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
        baseline = fmt(r.baseline, r.unit) if r.baseline is not None else "-"
        case = r.case + (f" ({r.note})" if r.note else "")
        lines.append(
            f"| {r.bench} | {case} | {fmt(r.value, r.unit)} | {r.baseline_label or '-'} | {baseline} | {ratio} "
            f"| {r.goal or '-'} | {r.status} |"
        )
    return "\n".join(lines)


def machine() -> str:
    """nproc, CPU model, Python and OS, for the record."""
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"nproc {os.cpu_count()}, {cpu}, Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.release()}"
    )


def load() -> str:
    """The 1-minute load average: on a shared machine, how much else was running."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of sorted values, nearest rank."""
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return float(sorted_values[index])


def say(text: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- processes

_LIVE: set[subprocess.Popen[bytes]] = set()
_LIVE_LOCK = threading.Lock()


def _track(proc: subprocess.Popen[bytes]) -> None:
    with _LIVE_LOCK:
        _LIVE.add(proc)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGTERM, wait, SIGKILL; close the pipes; forget it."""
    try:
        stop_child(proc, timeout)
    finally:
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        with _LIVE_LOCK:
            _LIVE.discard(proc)


@atexit.register
def _kill_leftovers() -> None:
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        stop_process(proc, timeout=2.0)


def flood_argv(transport: str, port: int | None = None) -> list[str]:
    """The flood server's command line (by path: any cwd works)."""
    argv = [sys.executable, str(FLOOD_SCRIPT), "--transport", transport]
    if port is not None:
        argv += ["--port", str(port)]
    return argv


def sdk_argv(transport: str, port: int | None = None) -> list[str]:
    """The SDK test peer's command line, legacy era only (listeners are legacy)."""
    argv = [sys.executable, str(SDK_SCRIPT), "--transport", transport, "--era", "legacy"]
    if port is not None:
        argv += ["--port", str(port)]
    return argv


@dataclass
class Listening:
    """A server process listening on 127.0.0.1."""

    proc: subprocess.Popen[bytes]
    port: int

    def url(self, scheme: str, path: str = "/") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"


@contextmanager
def listening_server(argv: list[str]) -> Iterator[Listening]:
    """Start a ``LISTENING <port>`` server (ws/http), yield it, stop it."""
    proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    _track(proc)
    try:
        port = wait_for_listening(proc, READY_TIMEOUT)
        if port is None:
            raise RuntimeError(f"{argv} did not print LISTENING within {READY_TIMEOUT}s (rc={proc.poll()})")
        yield Listening(proc, port)
    finally:
        stop_process(proc)


# --------------------------------------------------------------------------- raw clients

INITIALIZE_PARAMS = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "bench-raw", "version": "0"},
}


class RawClient:
    """The minimum MCP client: a send and a receive function, nothing else.

    ``recv()`` returns one decoded frame; subclasses bind it to the fastest
    plain way their transport library offers.
    """

    recv: Callable[[], Any]
    _next_id = 0

    def send(self, message: dict[str, Any]) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send a request and read frames until its answer (notifications are dropped)."""
        self._next_id += 1
        request_id = self._next_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        for _ in range(10_000_000):
            frame = self.recv()
            if isinstance(frame, dict) and frame.get("id") == request_id and "method" not in frame:
                if "error" in frame:
                    raise RuntimeError(f"{method}: {frame['error']}")
                return frame.get("result")
        raise RuntimeError(f"no answer to {method}")

    def handshake(self) -> None:
        self.request("initialize", INITIALIZE_PARAMS)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call_flood_nowait(self, uri: str, count: int, rate: float = 0, stamp: bool = False) -> int:
        """Send ``tools/call flood`` without waiting; returns its id (its answer follows the frames)."""
        self._next_id += 1
        self.send(
            {
                "jsonrpc": "2.0",
                "id": self._next_id,
                "method": "tools/call",
                "params": {"name": "flood", "arguments": {"uri": uri, "count": count, "rate": rate, "stamp": stamp}},
            }
        )
        return self._next_id

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class RawStdio(RawClient):
    """A child process read with ``readline`` + ``json.loads``."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        _track(self.proc)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self._stdin = self.proc.stdin
        readline = self.proc.stdout.readline
        loads = json.loads

        def recv() -> Any:
            line = readline()
            if not line:
                raise EOFError("the server closed its stdout")
            return loads(line)

        self.recv = recv
        self.readline = readline

    def send(self, message: dict[str, Any]) -> None:
        self._stdin.write(json.dumps(message).encode() + b"\n")
        self._stdin.flush()

    def close(self) -> None:
        stop_process(self.proc)


class RawWebSocket(RawClient):
    """websocket-client's ``recv()`` + ``json.loads`` (UTF-8 validation skipped, as the library does)."""

    def __init__(self, url: str) -> None:
        import websocket

        self.ws = websocket.create_connection(url, subprotocols=["mcp"], timeout=WAIT, skip_utf8_validation=True)
        ws_recv = self.ws.recv
        loads = json.loads
        self.recv = lambda: loads(ws_recv())
        self.raw_recv = ws_recv

    def send(self, message: dict[str, Any]) -> None:
        self.ws.send(json.dumps(message))

    def close(self) -> None:
        try:
            self.ws.close(timeout=1.0)
        except Exception:  # closing is best effort
            self.ws.abort()  # type: ignore[no-untyped-call]


class RawHttp(RawClient):
    """Legacy Streamable HTTP with plain httpx: requests POSTed (JSON answers),
    the standalone GET stream read with ``iter_bytes``, split into SSE events
    on blank lines, each ``data:`` line ``json.loads``-ed.

    ``recv()`` reads the GET stream only, which ``handshake()`` opens;
    ``request()`` and ``call_flood_nowait()`` get their answers on the POST.
    The SSE split assumes what the flood server writes: LF line ends and one
    ``data:`` line per event.
    """

    def __init__(self, url: str) -> None:
        import httpx

        self.url = url
        self.http = httpx.Client(timeout=WAIT)
        self.headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        self.stream: httpx.Response | None = None
        self.recv = self._not_open

    @staticmethod
    def _not_open() -> Any:
        raise RuntimeError("the GET stream is not open (call handshake first)")

    def post(self, message: dict[str, Any]) -> Any:
        """POST one message; the decoded JSON answer, or None (202)."""
        response = self.http.post(self.url, content=json.dumps(message).encode(), headers=self.headers)
        response.raise_for_status()
        session_id = response.headers.get("mcp-session-id")
        if session_id:
            self.headers["Mcp-Session-Id"] = session_id
        return response.json() if response.content else None

    def send(self, message: dict[str, Any]) -> None:
        self.post(message)

    def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        answer = self.post(message)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer.get("result")

    def handshake(self) -> None:
        super().handshake()
        self.stream = self.http.send(
            self.http.build_request("GET", self.url, headers={**self.headers, "Accept": "text/event-stream"}),
            stream=True,
        )
        self.stream.raise_for_status()
        chunks = self.stream.iter_bytes()
        pending: deque[Any] = deque()
        popleft, append = pending.popleft, pending.append
        loads = json.loads
        rest = b""

        def recv() -> Any:
            nonlocal rest
            while not pending:
                chunk = next(chunks, None)
                if chunk is None:
                    raise EOFError("the server ended the GET stream")
                *events, rest = (rest + chunk).split(b"\n\n")
                for event in events:
                    if event.startswith(b"data:"):
                        append(loads(event[5:]))
            return popleft()

        self.recv = recv

    def close(self) -> None:
        try:
            if "Mcp-Session-Id" in self.headers:
                self.http.delete(self.url, headers=self.headers, timeout=5.0)
        except Exception:  # ending the session is best effort
            pass
        finally:
            if self.stream is not None:
                self.stream.close()
            self.http.close()


# --------------------------------------------------------------------------- library helpers


def run_in_thread(target: Callable[[], Any], name: str) -> tuple[threading.Thread, list[Any]]:
    """Start ``target`` in a daemon thread; the list receives its result or exception."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(target())
        except BaseException as exc:  # handed to the caller
            out.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread, out


def tool_json(result: Any) -> Any:
    """The JSON text of a ``tools/call`` result (from any client) as a value."""
    if isinstance(result, dict):
        return json.loads(result["content"][0]["text"])
    return json.loads(result.content[0].text)


class Stopwatch:
    """Wall time and this process's CPU time (all threads) between ``start()`` and ``stop()``."""

    __slots__ = ("cpu", "cpu0", "wall", "wall0")

    def __init__(self) -> None:
        self.wall0 = self.cpu0 = self.wall = self.cpu = 0.0

    def start(self) -> None:
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()

    def stop(self) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall0, time.process_time() - self.cpu0

    def result(self, messages: int) -> Flow:
        """Messages per second, and client CPU microseconds per message."""
        return Flow(messages / self.wall, self.cpu / messages * 1e6)


class Flow(NamedTuple):
    """A throughput measurement."""

    rate: float
    #: CPU time this (client) process spent per message, all threads, microseconds.
    cpu_us: float


#: The ``max_pending`` of a listener that reads a whole flood: above any flood the benchmarks
#: send. At the default bound (10,000) a host thread that falls 10,000 behind (descheduled on a
#: busy machine) has the rest of a one-URI flood coalesced, as documented, so fewer than
#: ``count`` updates arrive and a count-based reader would wait in vain.
FLOOD_MAX_PENDING = 1_000_000


def flood_listener(client: Any, uri: str) -> Any:
    """An exmcp_actors listener on ``uri`` that is delivered every update of a flood."""
    return client.subscribe_notifications({"resourceSubscriptions": [uri]}, max_pending=FLOOD_MAX_PENDING)


def read_flood(client: Any, listener: Any, uri: str, count: int) -> Stopwatch:
    """Ask the server to flood ``count`` updates of ``uri`` and read them with ``listener.get()``
    in this thread; the stopwatch runs from the first update to the last.

    Raises:
        RuntimeError: fewer than ``count`` arrived (what came, the last message, the trigger's
            outcome and what waits in the listener say why: a closing message, a stalled server).
    """
    thread, outcome = run_in_thread(
        lambda: client.call_tool("flood", {"uri": uri, "count": count}, timeout=WAIT * 3), "bench-trigger"
    )
    get = listener.get
    arrived, last = 0, None  # for the report of a short flood
    try:
        last = get(timeout=WAIT)
        watch = Stopwatch()
        watch.start()
        for arrived in range(1, count):  # noqa: B007 - read by the report when a get() ends it early
            last = get(timeout=WAIT)
        watch.stop()
    except queue.Empty:
        raise RuntimeError(short_flood(listener, count, arrived, last, thread, outcome)) from None
    thread.join(WAIT)
    if outcome and isinstance(outcome[0], BaseException):
        raise outcome[0]
    return watch


def short_flood(listener: Any, count: int, got: int, last: Any, thread: threading.Thread, outcome: list[Any]) -> str:
    """Why a flood read came up short, in one line."""
    if thread.is_alive():
        trigger = "flood call still running"
    elif outcome and isinstance(outcome[0], BaseException):
        trigger = f"flood call failed: {outcome[0]!r}"
    else:
        trigger = f"flood call answered {outcome[0] if outcome else None!r}"[:200]
    return (
        f"flood read short: {got:,} of {count:,} updates arrived, then none within {WAIT:.0f} s or the listener "
        f"ended (last message {last!r:.200}; {listener.pending()} pending; {trigger})"
    )


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
