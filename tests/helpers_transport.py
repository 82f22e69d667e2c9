"""Test helpers for the transport tests: a recording sink, child scripts, raw peers.

Everything waits on ``threading`` primitives with timeouts, never on sleeps.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import socket
import struct
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Self

from websockets.sync.server import Server, ServerConnection, serve
from websockets.typing import Subprotocol

from exmcp_actors._transport._base import Frame, InvalidFrame, RequestFailed

#: Generous bound for anything that should happen "soon".
WAIT = 10.0


class RecordingSink:
    """A FrameSink that records batches and losses, and lets tests wait for them.

    The one recording sink of the transport, HTTP and FakeServer tests.

    Args:
        hold_first_batch: if set, the first ``frames_received`` call blocks
            until :attr:`release` is set, so a test can let frames pile up.
        timeout: how long the ``wait_*`` methods wait by default.
    """

    def __init__(self, *, hold_first_batch: bool = False, timeout: float = WAIT) -> None:
        self._cond = threading.Condition()
        self._timeout = timeout
        self.batches: list[list[Frame]] = []
        self.lost: list[str] = []
        self.lost_event = threading.Event()
        self.first_batch_arrived = threading.Event()
        self.release = threading.Event()
        if not hold_first_batch:
            self.release.set()
        #: The threads that called the sink.
        self.threads: set[str] = set()
        #: ``time.monotonic()`` when the transport said the peer reads its input (None: not yet).
        self.reading_at: float | None = None

    # FrameSink
    def frames_received(self, frames: list[Frame]) -> None:
        """Record one batch."""
        self.threads.add(threading.current_thread().name)
        if not self.first_batch_arrived.is_set():
            self.first_batch_arrived.set()
            self.release.wait(WAIT)
        with self._cond:
            self.batches.append(list(frames))
            self._cond.notify_all()

    def transport_lost(self, reason: str) -> None:
        """Record one loss."""
        self.threads.add(threading.current_thread().name)
        with self._cond:
            self.lost.append(reason)
            self._cond.notify_all()
        self.lost_event.set()

    def peer_reading(self) -> None:
        """Record when the peer began reading."""
        with self._cond:
            self.reading_at = time.monotonic()
            self._cond.notify_all()

    # For tests
    @property
    def frames(self) -> list[Frame]:
        """All frames so far, in order."""
        with self._cond:
            return [frame for batch in self.batches for frame in batch]

    def notifications(self, method: str) -> list[dict[str, Any]]:
        """The frames so far that are ``method`` notifications."""
        return [f for f in self.frames if isinstance(f, dict) and f.get("method") == method]

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Whether ``predicate`` (checked whenever the sink is called) held in time."""
        with self._cond:
            return self._cond.wait_for(predicate, self._timeout if timeout is None else timeout)

    def wait_frames(self, count: int, timeout: float | None = None) -> list[Frame]:
        """Wait until at least ``count`` frames arrived; return all of them."""
        ok = self.wait_until(lambda: sum(map(len, self.batches)) >= count, timeout)
        frames = self.frames
        assert ok, f"expected {count} frames, got {len(frames)}: {frames[:5]!r}"
        return frames

    def wait_batches(self, count: int, timeout: float | None = None) -> list[list[Frame]]:
        """Wait until at least ``count`` batches arrived; return all of them."""
        assert self.wait_until(lambda: len(self.batches) >= count, timeout), self.batches
        with self._cond:
            return list(self.batches)

    def wait_frame(self, match: Callable[[Any], bool], timeout: float | None = None) -> Any:
        """The first recorded frame matching ``match``; AssertionError after ``timeout``."""
        found: list[Any] = []

        def check() -> bool:
            found[:] = [f for batch in self.batches for f in batch if match(f)][:1]
            return bool(found)

        assert self.wait_until(check, timeout), f"no matching frame; got {self.frames!r}"
        return found[0]

    def wait_response(self, request_id: Any, timeout: float | None = None) -> dict[str, Any]:
        """The response (a result or an error, not a request) for ``request_id``."""
        return self.wait_frame(  # type: ignore[no-any-return]
            lambda f: (
                isinstance(f, dict)
                and f.get("id") == request_id
                and "method" not in f
                and ("result" in f or "error" in f)
            ),
            timeout,
        )

    def about(self, request_id: Any) -> list[Frame]:
        """Every frame so far with the id ``request_id``: its answer, or its failure."""
        return [
            f
            for f in self.frames
            if (isinstance(f, dict) and f.get("id") == request_id)
            or (isinstance(f, RequestFailed) and f.id == request_id)
        ]

    def wait_failure(self, request_id: Any, timeout: float | None = None) -> RequestFailed:
        """The transport's failure of the request ``request_id`` (no answer will come)."""
        return self.wait_frame(lambda f: isinstance(f, RequestFailed) and f.id == request_id, timeout)  # type: ignore[no-any-return]

    def wait_method(self, method: str, timeout: float | None = None) -> dict[str, Any]:
        """The first frame whose method is ``method``."""
        return self.wait_frame(lambda f: isinstance(f, dict) and f.get("method") == method, timeout)  # type: ignore[no-any-return]

    def wait_lost(self, timeout: float | None = None) -> str:
        """Wait for the loss and return its reason."""
        assert self.lost_event.wait(self._timeout if timeout is None else timeout), "transport_lost was not called"
        return self.lost[0]


def send_from_four_threads_and_check_order(transport: Any, sink: RecordingSink) -> None:
    """Four threads send 250 messages each through an echoing peer: all 1,000 come back,
    and each thread's messages keep their order."""

    def sender(k: int) -> None:
        for i in range(250):
            transport.send({"k": k, "i": i})

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)

    frames = sink.wait_frames(1000)
    for k in range(4):
        assert [f["i"] for f in frames if f["k"] == k] == list(range(250))


class LogWaiter(logging.Handler):
    """A logging handler that lets a test wait for a record containing some text."""

    def __init__(self, logger_name: str, text: str) -> None:
        super().__init__(logging.DEBUG)
        self.text = text
        self.seen = threading.Event()
        self.records: list[logging.LogRecord] = []
        self._logger = logging.getLogger(logger_name)

    def emit(self, record: logging.LogRecord) -> None:
        """Remember the record; set :attr:`seen` on a match."""
        self.records.append(record)
        if self.text in record.getMessage():
            self.seen.set()

    def __enter__(self) -> Self:
        self._logger.addHandler(self)
        self._old_level = self._logger.level
        self._logger.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._old_level)

    def wait(self, timeout: float = WAIT) -> logging.LogRecord:
        """Wait for the matching record and return it."""
        assert self.seen.wait(timeout), f"no log record containing {self.text!r}"
        return next(r for r in self.records if self.text in r.getMessage())


def invalid(frames: list[Frame]) -> list[InvalidFrame]:
    """The InvalidFrames among ``frames``."""
    return [f for f in frames if isinstance(f, InvalidFrame)]


def exmcp_threads() -> list[threading.Thread]:
    """Live threads started by the stdio and WebSocket transports."""
    prefixes = ("exmcp-stdio-", "exmcp-ws-")
    return [t for t in threading.enumerate() if t.name.startswith(prefixes)]


def join_exmcp_threads(timeout: float = WAIT) -> list[str]:
    """Wait for transport threads to end by themselves; return those still alive."""
    deadline = time.monotonic() + timeout
    for thread in exmcp_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in exmcp_threads()]


# -- stdio children ------------------------------------------------------------


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A local port that refuses connections for as long as the block runs: bound and never
    listening, so no other test (another xdist worker) can take it meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def py(script: str) -> list[str]:
    """argv running ``script`` with this Python."""
    return [sys.executable, "-c", textwrap.dedent(script)]


#: Echoes each stdin line; "exit N" exits with code N; "pid" answers its pid.
ECHO = py(
    """
    import json, os, sys
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("method") == "exit":
            sys.exit(msg["params"]["code"])
        if msg.get("method") == "pid":
            msg = {"pid": os.getpid()}
        if msg.get("method") == "stderr":
            sys.stderr.write(msg["params"]["text"] + "\\n")
            sys.stderr.flush()
            continue
        sys.stdout.write(json.dumps(msg) + "\\n")
        sys.stdout.flush()
    """
)


def burst(count: int) -> list[str]:
    """A child that writes ``count`` lines in one write, then waits for stdin EOF."""
    return py(
        f"""
        import sys
        lines = b"".join(b'{{"n":%d}}\\n' % i for i in range({count}))
        sys.stdout.buffer.write(lines)
        sys.stdout.flush()
        sys.stdin.read()
        """
    )


def writes(*chunks: bytes, then_exit: int | None = None) -> list[str]:
    """A child that writes each chunk separately (flushed), then waits or exits."""
    ending = f"sys.exit({then_exit})" if then_exit is not None else "sys.stdin.read()"
    return py(
        f"""
        import sys
        for chunk in {list(chunks)!r}:
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        {ending}
        """
    )


#: Ignores SIGTERM, says so on stdout, then sleeps on stdin.
IGNORES_SIGTERM = py(
    """
    import signal, sys
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.stdout.write('{"ready":true}\\n')
    sys.stdout.flush()
    while True:
        signal.pause()
    """
)

#: Never reads stdin: the pipe fills up.
NEVER_READS = py(
    """
    import sys, time
    sys.stdout.write('{"ready":true}\\n')
    sys.stdout.flush()
    while True:
        time.sleep(3600)
    """
)


# -- WebSocket peers -------------------------------------------------------------


@contextlib.contextmanager
def ws_server(
    handler: Callable[[ServerConnection], None],
    *,
    subprotocols: list[str] | None = None,
    ping_interval: float | None = None,
) -> Iterator[tuple[str, Server]]:
    """Run a ``websockets`` sync server on a free port; yield (url, server)."""
    server = serve(
        handler,
        "127.0.0.1",
        0,
        subprotocols=[Subprotocol(p) for p in subprotocols or ["mcp"]],
        compression=None,
        ping_interval=ping_interval,
        max_size=None,
    )
    thread = threading.Thread(target=server.serve_forever, name="test-ws-server", daemon=True)
    thread.start()
    try:
        port = server.socket.getsockname()[1]
        yield f"ws://127.0.0.1:{port}/mcp", server
    finally:
        server.shutdown()
        thread.join(WAIT)


def echo_handler(conn: ServerConnection) -> None:
    """Echo every message back until the client leaves."""
    for message in conn:
        conn.send(message)


_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def read_http_head(conn: socket.socket) -> bytes:
    """Read until the end of an HTTP head (or EOF): the head and whatever followed it."""
    conn.settimeout(WAIT)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def ws_accept_for(head: bytes) -> str:
    """The Sec-WebSocket-Accept that answers the Sec-WebSocket-Key of a request head."""
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"sec-websocket-key":
            return base64.b64encode(hashlib.sha1(value.strip() + _GUID.encode()).digest()).decode()
    raise AssertionError(f"no Sec-WebSocket-Key in {head[:200]!r}")


def upgrade_answer(head: bytes, *extra: str) -> bytes:
    """A valid 101 answer to the WebSocket upgrade ``head`` (subprotocol mcp), with ``extra`` header lines."""
    lines = [
        "HTTP/1.1 101 Switching Protocols",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Accept: {ws_accept_for(head)}",
        "Sec-WebSocket-Protocol: mcp",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class TcpPeer:
    """A TCP server on 127.0.0.1 that hands each connection it accepts to :meth:`_take`, on
    its accept thread. Closing it (``close()``, or leaving its ``with``) sets :attr:`stop`,
    shuts every connection down and joins the accept thread."""

    def __init__(self, thread_name: str) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)  # close() does not wake accept(): poll for the end
        self.port: int = self._listener.getsockname()[1]
        self.stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._accepter = threading.Thread(target=self._accept, name=thread_name, daemon=True)
        self._accepter.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _take(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._conns.append(conn)
            self._take(conn)

    def close(self) -> None:
        self.stop.set()
        self._accepter.join(WAIT)
        self._listener.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()


#: What a hostile TCP peer does with one connection: (the socket, the request head it read, the stop event).
Behaviour = Callable[[socket.socket, bytes, threading.Event], None]


class HostileTcpPeer(TcpPeer):
    """A TCP server on 127.0.0.1 that reads each connection's request head and hands the
    connection to ``behave`` on a thread of its own; ``heads`` holds every head read. Closing
    it also joins every connection's thread."""

    def __init__(self, behave: Behaviour) -> None:
        self._behave = behave
        self.heads: list[bytes] = []
        self._threads: list[threading.Thread] = []
        super().__init__("test-hostile-accept")

    def _take(self, conn: socket.socket) -> None:
        thread = threading.Thread(target=self._serve, args=(conn,), name="test-hostile-conn", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            head = read_http_head(conn)
            self.heads.append(head)
            self._behave(conn, head, self.stop)

    def close(self) -> None:
        super().close()
        for thread in self._threads:
            thread.join(WAIT)


class StallingTlsPeer(TcpPeer):
    """A TCP server on 127.0.0.1 that accepts every connection, reads its first bytes and never
    sends a byte: a TLS client's ClientHello is never answered, its handshake stalls.
    ``hello_received`` is set once a client has sent its first bytes (it is then inside its
    handshake)."""

    def __init__(self) -> None:
        self.hello_received = threading.Event()
        super().__init__("test-stalling-tls")

    def _take(self, conn: socket.socket) -> None:
        conn.settimeout(WAIT)
        with contextlib.suppress(OSError):
            if conn.recv(65536):
                self.hello_received.set()


def threads_named(prefix: str) -> list[threading.Thread]:
    """Live threads whose name starts with ``prefix``."""
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def join_threads_named(prefix: str, timeout: float) -> list[str]:
    """Wait up to ``timeout`` for the threads named ``prefix...`` to end; return those still alive."""
    deadline = time.monotonic() + timeout
    for thread in threads_named(prefix):
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in threads_named(prefix)]


@contextlib.contextmanager
def unanswered_port() -> Iterator[int]:
    """A port on 127.0.0.1 where a TCP connect hangs: a listener that never accepts, its
    backlog filled, so Linux drops the SYN of every new connection and the client retries."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    try:
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


class RawWsPeer:
    """A hand-made WebSocket server for one connection, to misbehave exactly.

    It completes the opening handshake (choosing subprotocol ``mcp``), then
    does only what the test tells it: send raw frames, read the client's
    frames, fall silent, or drop the TCP connection.
    """

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"ws://127.0.0.1:{self._listener.getsockname()[1]}/mcp"
        self.conn: socket.socket | None = None
        self.request_headers: dict[str, str] = {}
        #: Whether each client frame read had its mask bit set (RFC 6455 section 5.1: all must).
        self.masked: list[bool] = []
        self.connected = threading.Event()
        self._buffer = b""
        self._thread = threading.Thread(target=self._accept, name="test-raw-ws", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self._listener.settimeout(WAIT)
        try:
            conn, _ = self._listener.accept()
        except OSError:
            return
        data = read_http_head(conn)
        if b"\r\n\r\n" not in data:
            return
        head, _, self._buffer = data.partition(b"\r\n\r\n")
        for line in head.decode().split("\r\n")[1:]:
            key, _, value = line.partition(":")
            self.request_headers[key.strip().lower()] = value.strip()
        conn.sendall(upgrade_answer(head))
        self.conn = conn
        self.connected.set()

    def wait_connected(self) -> socket.socket:
        """The accepted connection, once the handshake is done."""
        assert self.connected.wait(WAIT), "no client connected"
        assert self.conn is not None
        return self.conn

    @staticmethod
    def frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
        """An unmasked server-to-client frame."""
        first = (0x80 if fin else 0) | opcode
        size = len(payload)
        if size < 126:
            header = struct.pack("!BB", first, size)
        elif size < 1 << 16:
            header = struct.pack("!BBH", first, 126, size)
        else:
            header = struct.pack("!BBQ", first, 127, size)
        return header + payload

    def send_frames(self, *frames: bytes) -> None:
        """Send already built frames in one write."""
        self.wait_connected().sendall(b"".join(frames))

    def send_text(self, payload: bytes | str) -> None:
        """Send one text frame (payload bytes are sent as they are, valid UTF-8 or not)."""
        data = payload.encode() if isinstance(payload, str) else payload
        self.send_frames(self.frame(0x1, data))

    def _read_exact(self, size: int) -> bytes:
        conn = self.wait_connected()
        while len(self._buffer) < size:
            chunk = conn.recv(65536)
            if not chunk:
                raise ConnectionError("client closed the connection")
            self._buffer += chunk
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def recv_frame(self) -> tuple[int, bytes]:
        """Read one client frame; return (opcode, unmasked payload)."""
        first, second = self._read_exact(2)
        size = second & 0x7F
        if size == 126:
            (size,) = struct.unpack("!H", self._read_exact(2))
        elif size == 127:
            (size,) = struct.unpack("!Q", self._read_exact(8))
        self.masked.append(bool(second & 0x80))
        mask = self._read_exact(4) if second & 0x80 else b"\0\0\0\0"
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(self._read_exact(size)))
        return first & 0x0F, payload

    def drop(self) -> None:
        """Close the TCP connection without a closing handshake."""
        conn = self.wait_connected()
        conn.close()

    def close(self) -> None:
        """Release the sockets."""
        self._listener.close()
        if self.conn is not None:
            self.conn.close()
        self._thread.join(WAIT)
