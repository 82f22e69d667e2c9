"""Shared helpers for the tests that drive the library against the real SDK peer
(tests/test_client_sdk.py, tests/test_reconnect.py, tests/test_stress.py).

- :class:`Target`: one peer to connect to (stdio argv, or a running ws/http Peer), in one era.
- :class:`TapTransport`: wraps a real transport and records what the client sends
  and receives, so tests can check the wire (pagination, ``notifications/cancelled``,
  notifications the client must drop) without touching the library's internals.
  It can also swap the transport used by the *next* ``open`` (a stdio reconnect
  that spawns a different command line).
- ``server_stats``: the peer's ``stats`` tool, parsed.
- Leak probes: library threads, child processes, open file descriptors.

Waiting is always on events (conditions, queues, joins) with a timeout.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pykka
import pytest

import exmcp_actors as mcp
from exmcp_actors import Transport
from exmcp_actors._transport.stdio._watchdog import WATCHDOG
from tests.peers.launch import peer_argv
from tests.peers.ts_peer import missing_tools, ts_argv

try:  # an optional test dependency ("bench" extra); /proc is the fallback
    import psutil
except ImportError:  # pragma: no cover - depends on the environment
    psutil = None

#: Generous bound for any single wait; tests finish far sooner when things work.
WAIT = 10.0
#: Reconnect quickly in tests.
FAST_BACKOFF = mcp.Backoff(initial=0.05, factor=2, maximum=0.5, jitter=0.1)

URI_A = "file:///a.txt"
URI_B = "file:///b.txt"
URI_C = "file:///c.txt"

TOOLS_CHANGED = "notifications/tools/list_changed"
PROMPTS_CHANGED = "notifications/prompts/list_changed"
RESOURCES_CHANGED = "notifications/resources/list_changed"
RESOURCE_UPDATED = "notifications/resources/updated"

#: Names of every thread the library starts (its own threads and its pykka actors).
LIBRARY_THREAD_PREFIXES = ("exmcp-", "ClientActor", "SubscriberProxy", "RefcountWorker")

#: What the peer answers (tests/peers/sdk_server.py).
PEER_TOOLS = ["echo", "notify", "flood", "sleep", "stats", "close_listens", "configure"]
PEER_RESOURCES = [URI_A, URI_B, URI_C]
PEER_PROMPTS = ["greet", "summarize", "farewell"]
PEER_PAGE_SIZE = 2
PEER_INFO = {"name": "exmcp-test-peer", "version": "1.0.0"}


# --------------------------------------------------------------------------- wire tap


class _TapSink:
    """Records every frame and the loss, then forwards them to the client's sink."""

    def __init__(self, tap: TapTransport, sink: Any, connection: int) -> None:
        self._tap = tap
        self._sink = sink
        self._connection = connection

    def frames_received(self, frames: list[Any]) -> None:
        self._tap._record_received(self._connection, frames)
        self._sink.frames_received(frames)

    def transport_lost(self, reason: str) -> None:
        self._tap._record_lost(self._connection, reason)
        self._sink.transport_lost(reason)

    def peer_reading(self) -> None:
        self._sink.peer_reading()


class _TapInbox:
    """Messages for a put()-subscriber, recorded under the tap's condition."""

    def __init__(self, tap: TapTransport) -> None:
        self._tap = tap
        self.messages: list[Any] = []

    def put(self, message: Any) -> None:
        with self._tap._cond:
            self.messages.append(message)
            self._tap._cond.notify_all()


class TapTransport(Transport):
    """A transport that delegates to ``inner`` and records the traffic.

    ``sent`` / ``received`` hold ``(connection_number, message)`` pairs; the
    connection number counts successful ``open`` calls (1 for the first
    connection, 2 after the first reconnect, ...).
    """

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.max_frame_bytes = inner.max_frame_bytes
        self._cond = threading.Condition()
        self._next_inner: Transport | None = None
        self.sent: list[tuple[int, dict[str, Any]]] = []
        self.received: list[tuple[int, Any]] = []
        self.losses: list[tuple[int, str]] = []
        #: ``cancel_stream`` calls: (request id, whether closing the stream was the cancellation).
        self.stream_cancels: list[tuple[Any, bool]] = []
        self.open_attempts = 0
        self.open_failures = 0
        self.connection = 0

    # -- what the test controls ---------------------------------------------------------

    def subscriber(self) -> _TapInbox:
        """A ``put()`` subscriber whose messages wake :meth:`wait_for` like wire events do."""
        return _TapInbox(self)

    def use_next(self, inner: Transport) -> None:
        """The next ``open`` (a reconnect) uses ``inner`` instead of the current transport."""
        with self._cond:
            self._next_inner = inner

    @property
    def pid(self) -> int | None:
        """The child's pid for a stdio transport."""
        return getattr(self.inner, "pid", None)

    @property  # type: ignore[override]
    def reports_reading(self) -> bool:
        """As the wrapped transport: the probe's clock waits for a stdio child to read."""
        return self.inner.reports_reading

    # -- Transport ----------------------------------------------------------------------

    def open(self, sink: Any, *, timeout: float) -> None:
        with self._cond:
            self.open_attempts += 1
            replacement, self._next_inner = self._next_inner, None
        if replacement is not None:
            self.inner.close()
            self.inner = replacement
        number = self.connection + 1
        try:
            self.inner.open(_TapSink(self, sink, number), timeout=timeout)
        except BaseException:
            with self._cond:
                self.open_failures += 1
                self._cond.notify_all()
            raise
        with self._cond:
            self.connection = number
            self._cond.notify_all()

    def send(self, message: dict[str, Any]) -> None:
        self.inner.send(message)
        with self._cond:
            self.sent.append((self.connection, message))
            self._cond.notify_all()

    def cancel_stream(self, request_id: Any) -> bool:
        closed = self.inner.cancel_stream(request_id)
        with self._cond:
            self.stream_cancels.append((request_id, closed))
            self._cond.notify_all()
        return closed

    def server_capabilities(self, capabilities: dict[str, Any]) -> None:
        self.inner.server_capabilities(capabilities)

    def negotiated(self, protocol_version: str, era: str) -> None:
        self.inner.negotiated(protocol_version, era)

    def mirror_tool_arguments(self, headers_for: Callable[[str, Any], dict[str, str]]) -> bool:
        return self.inner.mirror_tool_arguments(headers_for)

    def auth_context(self) -> str:
        return self.inner.auth_context()

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> str:
        return f"tap({self.inner.describe()})"

    # -- recording ----------------------------------------------------------------------

    def _record_received(self, connection: int, frames: list[Any]) -> None:
        with self._cond:
            self.received.extend((connection, frame) for frame in frames)
            self._cond.notify_all()

    def _record_lost(self, connection: int, reason: str) -> None:
        with self._cond:
            self.losses.append((connection, reason))
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], Any], timeout: float = WAIT, what: str = "a condition") -> Any:
        """Wait until ``predicate()`` (called under the tap's lock) is truthy; return its value."""
        with self._cond:
            value = self._cond.wait_for(predicate, timeout)
        if not value:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        return value

    def sent_messages(self, method: str | None = None, connection: int | None = None) -> list[dict[str, Any]]:
        with self._cond:
            return [
                msg
                for conn, msg in self.sent
                if (method is None or msg.get("method") == method) and (connection is None or conn == connection)
            ]

    def received_frames(self, connection: int | None = None) -> list[Any]:
        with self._cond:
            return [frame for conn, frame in self.received if connection is None or conn == connection]

    def wait_sent(
        self,
        method: str,
        predicate: Callable[[dict[str, Any]], bool] = lambda m: True,
        timeout: float = WAIT,
        connection: int | None = None,
    ) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            for conn, msg in self.sent:
                if msg.get("method") == method and (connection is None or conn == connection) and predicate(msg):
                    return msg
            return None

        found: dict[str, Any] = self.wait_for(find, timeout, f"the client to send {method}")
        return found

    def wait_connection(self, number: int, timeout: float = WAIT) -> None:
        self.wait_for(lambda: self.connection >= number, timeout, f"connection #{number} to open")


# --------------------------------------------------------------------------- targets


@dataclass
class Target:
    """One SDK peer to connect to: a stdio argv (spawned by the client) or a running ws/http Peer."""

    kind: str  # "stdio" | "ws" | "http"
    era: str  # "legacy" | "modern"
    argv: list[str] | None = None
    peer: Any = None  # tests.peers.launch.Peer for ws/http

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.era}"

    def make_transport(self, argv: list[str] | None = None) -> Transport:
        if self.kind == "stdio":
            return mcp.StdioTransport(argv or self.argv)  # type: ignore[arg-type]
        if self.kind == "ws":
            return mcp.WebSocketTransport(self.peer.url)
        return mcp.HttpTransport(self.peer.url)

    def tap(self) -> TapTransport:
        return TapTransport(self.make_transport())


_FIXTURES = {
    ("stdio", "legacy"): "sdk_stdio_argv_legacy",
    ("stdio", "modern"): "sdk_stdio_argv",
    ("ws", "legacy"): "sdk_ws_peer_legacy",
    ("ws", "modern"): "sdk_ws_peer",
    ("http", "legacy"): "sdk_http_peer_legacy",
    ("http", "modern"): "sdk_http_peer",
}


def target_for(request: pytest.FixtureRequest, kind: str, era: str) -> Target:
    """Build a Target from the conftest peer fixtures (a modern target is a dual-era peer)."""
    value = request.getfixturevalue(_FIXTURES[(kind, era)])
    if kind == "stdio":
        return Target(kind, era, argv=list(value))
    return Target(kind, era, peer=value)


def shared_target(pool: Any, kind: str, era: str) -> Target:
    """A Target on the session's long-lived peers (conftest ``peer_pool``): for tests that neither
    kill nor configure it, and read only their own session's counters (``server_stats(mine=True)``)."""
    from tests.peers.launch import peer_argv

    peer_era = "legacy" if era == "legacy" else "both"
    if kind == "stdio":
        return Target(kind, era, argv=peer_argv("stdio", peer_era))
    return Target(kind, era, peer=pool.peer(kind, peer_era))


class ClientPool:
    """Connects clients and disconnects whatever is left at teardown."""

    def __init__(self) -> None:
        self.clients: list[mcp.Client] = []

    def connect(self, transport: Any, **kwargs: Any) -> mcp.Client:
        kwargs.setdefault("backoff", FAST_BACKOFF)
        client = mcp.connect(transport, **kwargs)
        self.clients.append(client)
        return client

    def close_all(self) -> None:
        for client in self.clients:
            client.disconnect()


def wait_listening(tap: TapTransport) -> None:
    """On a legacy HTTP connection, wait until its GET stream is open: until then the server
    drops what it sends outside an answer (so a notification asked for at once could be lost)."""
    link = getattr(tap.inner, "_link", None)
    assert link is not None, f"{tap.describe()} is no open HTTP connection"
    assert link.wait_get_stream(WAIT), "the GET stream did not open"


def once(timeout: float) -> dict[str, Any]:
    """``connect`` options for a client of a slow peer that is not reconnected: its connect and
    its probe each bounded by ``timeout``."""
    return {"reconnect": False, "connect_timeout": timeout, "probe_timeout": timeout}


# --------------------------------------------------------------------------- peer tools


def tool_text(result: dict[str, Any]) -> str:
    content = result["content"]
    assert content and content[0]["type"] == "text", result
    return str(content[0]["text"])


def server_stats(client: mcp.Client, *, mine: bool = False) -> dict[str, Any]:
    """The peer's counters (see ``PeerState.stats`` in tests/peers/sdk_server.py); with ``mine``,
    those of the client's own legacy session only (on a peer shared with other tests)."""
    arguments = {"mine": True} if mine else {}
    stats: dict[str, Any] = json.loads(tool_text(client.call_tool("stats", arguments, timeout=WAIT)))
    return stats


def live_sessions(stats: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {key: s for key, s in stats["sessions"].items() if not s["closed"]}


def only_live_session(stats: dict[str, Any]) -> dict[str, Any]:
    sessions = live_sessions(stats)
    assert len(sessions) == 1, f"expected exactly one live session, got {sessions}"
    return next(iter(sessions.values()))


def notify(
    client: mcp.Client, kind: str, uri: str | None = None, *, count: int = 1, unsubscribed_too: bool = False
) -> None:
    args: dict[str, Any] = {"kind": kind, "count": count}
    if uri is not None:
        args["uri"] = uri
    if unsubscribed_too:
        args["unsubscribed_too"] = True
    client.call_tool("notify", args, timeout=WAIT)


def configure(client: mcp.Client, **args: Any) -> None:
    client.call_tool("configure", args, timeout=WAIT)


def settle(client: mcp.Client) -> dict[str, Any]:
    """A barrier: returns once the client actor and then the refcount worker have
    handled everything queued before it, including the wire round trip of any
    ``resources/unsubscribe`` a removal queued. Returns the client's counters."""
    return client._inspect(timeout=WAIT)


# --------------------------------------------------------------------------- listener reads


def next_message(handle: Any, timeout: float = WAIT) -> Any:
    try:
        return handle.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"{handle!r} received nothing within {timeout}s") from None


def expect_notification(handle: Any, method: str, uri: str | None = None, timeout: float = WAIT) -> mcp.Notification:
    msg = next_message(handle, timeout)
    assert isinstance(msg, mcp.Notification), f"expected a {method} notification, got {msg!r}"
    assert msg.listener is handle and msg.method == method, msg
    if uri is not None:
        assert msg.params.get("uri") == uri, msg
    return msg


def expect_closed(handle: Any, timeout: float = WAIT) -> mcp.Closed:
    msg = next_message(handle, timeout)
    assert isinstance(msg, mcp.Closed), f"expected Closed, got {msg!r}"
    assert msg.listener is handle
    return msg


def assert_nothing_after_closed(handle: Any) -> None:
    """The inbox ends after the closing message: a get() raises Empty at once, iteration yields nothing."""
    with pytest.raises(queue.Empty):
        handle.get(timeout=0.05)
    assert list(handle) == []


# --------------------------------------------------------------------------- leak probes


#: The process-wide timer thread (``_scheduler``): no client's own; it ends once idle.
SHARED_THREADS = ("exmcp-scheduler",)


def library_threads() -> list[threading.Thread]:
    """Threads of the clients (the shared scheduler thread is none of theirs)."""
    return [
        t for t in threading.enumerate() if t.name.startswith(LIBRARY_THREAD_PREFIXES) and t.name not in SHARED_THREADS
    ]


def surviving_library_threads(timeout: float = 0.0) -> list[str]:
    """Library threads still alive after joining each for up to ``timeout`` seconds in total."""
    deadline = time.monotonic() + timeout
    for thread in library_threads():
        if thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in library_threads() if t.is_alive()]


def child_pids() -> set[int]:
    """Every descendant of this process, zombies included (an unreaped child is a leak too),
    but the stdio watchdog (one per process, started with the first stdio server)."""
    return _descendants() - {WATCHDOG.pid if WATCHDOG is not None else None}


def _descendants() -> set[int]:
    if psutil is not None:
        return {p.pid for p in psutil.Process().children(recursive=True)}
    me = os.getpid()
    children: set[int] = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                children.add(int(entry))
    return children


def process_exists(pid: int) -> bool:
    """True while ``pid`` exists, zombie or not."""
    if psutil is not None:
        return bool(psutil.pid_exists(pid))
    return os.path.exists(f"/proc/{pid}")


def open_fds(*, collect: bool = False) -> dict[int, str]:
    """This process's open file descriptors and what they point to.

    ``collect=True`` first collects garbage (an unreachable file object closes its
    fd only when collected): use it for a baseline, not for the check, so that a
    socket the library merely dropped without closing still counts as open.
    """
    if collect:
        gc.collect()
    fds: dict[int, str] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the fd listdir itself used, already closed
    return fds


def new_fds(before: dict[int, str], after: dict[int, str]) -> dict[int, str]:
    """File descriptors open in ``after`` that were not open (to the same thing) in ``before``,
    but the pipe to the stdio watchdog (one per process, opened with the first stdio server)."""
    watchdog = WATCHDOG.pipe if WATCHDOG is not None else None
    return {fd: what for fd, what in after.items() if before.get(fd) != what and fd != watchdog}


def library_actors() -> list[pykka.ActorRef[Any]]:
    return list(pykka.ActorRegistry.get_all())


def kill_pid(pid: int) -> None:
    """SIGKILL ``pid`` (an abrupt death: no close, no final answer)."""
    os.kill(pid, signal.SIGKILL)


def run_in_thread(
    fn: Callable[[], Any], name: str = "test-call"
) -> tuple[threading.Thread, queue.Queue[tuple[str, Any, float]]]:
    """Run ``fn`` in a thread; its outcome lands on the queue as ("ok"|"error", value, seconds)."""
    outcome: queue.Queue[tuple[str, Any, float]] = queue.Queue()

    def run() -> None:
        started = time.monotonic()
        try:
            value = fn()
        except BaseException as error:  # handed to the test
            outcome.put(("error", error, time.monotonic() - started))
        else:
            outcome.put(("ok", value, time.monotonic() - started))

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread, outcome


@dataclass
class Collected:
    """Messages a put()-subscriber received, for subscribers without an inbox."""

    items: queue.Queue[Any] = field(default_factory=queue.Queue)

    def put(self, item: Any) -> None:
        self.items.put(item)

    def __iter__(self) -> Iterator[Any]:
        while True:
            try:
                yield self.items.get_nowait()
            except queue.Empty:
                return


@contextlib.contextmanager
def every_log_record() -> Iterator[list[str]]:
    """Every record of every logger at DEBUG, rendered as a host's handler would (tracebacks too)."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Keep(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


_NO_TS = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))
#: (peer, protocol) for the stdio servers that speak both eras: the Python SDK server and the
#: TypeScript SDK v2 server; "auto" gets 2026-07-28 from both.
STDIO_ERA_PEERS = [
    pytest.param("sdk", "legacy", id="sdk-legacy"),
    pytest.param("sdk", "auto", id="sdk-modern"),
    pytest.param("ts", "legacy", id="ts-legacy", marks=_NO_TS),
    pytest.param("ts", "auto", id="ts-modern", marks=_NO_TS),
]


def stdio_era_argv(peer: str, protocol: str) -> list[str]:
    """The command of a :data:`STDIO_ERA_PEERS` server, speaking the era ``protocol`` asks for."""
    if peer == "ts":
        return ts_argv()
    return peer_argv("stdio", "legacy" if protocol == "legacy" else "both")
