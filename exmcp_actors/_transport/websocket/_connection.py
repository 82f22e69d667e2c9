"""The WebSocket transport: subprotocol ``"mcp"``, one JSON-RPC message per text frame.

The connection and the opening handshake are made in ``_handshake`` (bounded, under the
one deadline of ``open()``, no cookie jar); websocket-client's low-level
:class:`websocket.WebSocket` (not ``WebSocketApp``, whose automatic reconnect hides errors)
frames and masks every send. The socket stays blocking after the handshake (a send that
timed out midway would leave half a frame on the wire); a dead peer is found by the
heartbeat, and the socket shut down under the blocked reader (``abort``).

Receiving skips websocket-client (its ``recv_data_frame`` costs about 10 us of CPU a
frame): the reader reads 64 KiB at a time and parses every whole frame with
:class:`FrameParser` (``_frames``), about 2 us a message. UTF-8 is checked as a message
is decoded; bad UTF-8, or a binary frame that is not UTF-8 JSON, becomes an InvalidFrame.

Threads per connection (daemons, ended by ``close()`` or by the loss): ``exmcp-ws-reader``
(hands every message of a read to the sink in one call, at most ``max_batch_frames``, and
answers pings) and ``exmcp-ws-writer`` (queued messages, pings, the close frame: one
thread, as websocket-client sends must be serialised). The heartbeat runs on the shared
scheduler: a ping every ``heartbeat_interval``; no complete frame ``heartbeat_timeout``
after it (a trickled unfinished frame does not count), and the loss is reported.

A message over ``max_frame_bytes`` or a broken frame fails the connection (RFC 6455
section 7.1.7, as websockets and aiohttp do): an InvalidFrame, the loss reported at once
(the client reconnects under its policy), a close frame with status 1009 (message too big)
or 1002 (protocol error). After that, as after any closing handshake, what arrives is
dropped until the server closes the TCP connection, for ``close_timeout`` at most.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final

import websocket

from ..._auth import OAuth
from ..._protocol._errors import TransportError
from ..._util._redact import redact_url
from ..._util._scheduler import TimerSlot
from .._base import DEFAULT_MAX_FRAME_BYTES, Frame, FrameSink, Transport
from .._framing import (
    ConnectionSlot,
    LossLatch,
    QueueWriter,
    decode_message,
    encode_message,
    invalid_frame,
    join_thread,
    logger,
    oversized_error,
)
from ._frames import (
    CLOSE_REASONS,
    OP_BINARY,
    OP_CLOSE,
    OP_PING,
    OP_TEXT,
    STATUS_MESSAGE_TOO_BIG,
    STATUS_PROTOCOL_ERROR,
    FrameParser,
    Oversized,
    ProtocolError,
    WsEvent,
    close_frame_text,
)
from ._handshake import (
    Deadline,
    HandshakeError,
    HandshakeRefused,
    Opened,
    OpenGate,
    open_websocket,
    why_not_upgraded,
)

#: The subprotocol the former MCP SDK WebSocket transports used.
SUBPROTOCOL: Final = "mcp"

#: Upgrade attempts with a new OAuth token before the refusal stands.
_AUTH_ROUNDS: Final = 4

#: One socket read: most of a flood's frames per system call, and what a 64 KiB TCP window holds.
_READ_SIZE: Final = 65536

# Exceptions that mean "this connection is broken" wherever they come from.
_IO_ERRORS: Final = (websocket.WebSocketException, OSError)


class WebSocketTransport(Transport):
    """An MCP peer at a ``ws://`` or ``wss://`` URL.

    Each ``open()`` makes a new socket. ``wss://`` verifies the server's
    certificate and host name against the system CAs unless ``sslopt`` says
    otherwise (it is passed to websocket-client as is, e.g.
    ``{"ca_certs": "ca.pem"}`` or ``{"context": ssl_context}``).

    Args:
        url: ``ws://`` or ``wss://`` URL.
        headers: extra handshake headers (``Authorization``, ``Origin``, ``Cookie``...). No
            cookie jar is kept: a ``Set-Cookie`` in the server's answer is ignored.
        heartbeat_interval: seconds between pings; ``None`` or 0 turns the heartbeat off.
        heartbeat_timeout: seconds to wait for any frame after a ping.
        sslopt: websocket-client TLS options; default: verify certificates.
        max_frame_bytes: a larger message becomes an InvalidFrame and fails the
            connection (close status 1009); the client reconnects.
        close_timeout: seconds ``close()`` waits for the peer's closing handshake (and a failed
            connection for the server to close it).
        max_batch_frames: most frames handed to the sink in one call.
        auth: an :class:`~exmcp_actors.OAuth`: its bearer token goes on the
            upgrade request, and a 401/403 answer starts its flow (one retry per new token).

    Example:
        >>> WebSocketTransport("wss://user:pw@example.com/mcp?token=x").describe()
        'websocket wss://example.com/mcp'
    """

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        heartbeat_interval: float | None = 15.0,
        heartbeat_timeout: float = 10.0,
        sslopt: Mapping[str, Any] | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        close_timeout: float = 1.0,
        max_batch_frames: int = 1024,
        auth: OAuth | None = None,
    ) -> None:
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme not in ("ws", "wss"):
            raise ValueError(f"not a WebSocket URL (ws:// or wss://): {redact_url(url)!r}")
        for key, value in (headers or {}).items():
            if any(c in f"{key}{value}" for c in "\r\n\0"):
                raise ValueError(f"header {key!r} holds a line break or NUL")
        if heartbeat_interval and heartbeat_timeout <= 0:
            raise ValueError("heartbeat_timeout must be positive")
        if auth is not None and not isinstance(auth, OAuth):
            raise TypeError(f"auth must be an exmcp_actors.OAuth, got {type(auth).__name__}")
        self.url = url
        self.auth = auth
        self.headers = dict(headers or {})
        self.heartbeat_interval = heartbeat_interval or None
        self.heartbeat_timeout = heartbeat_timeout
        self.sslopt: dict[str, Any] = (
            dict(sslopt) if sslopt is not None else {"cert_reqs": ssl.CERT_REQUIRED, "check_hostname": True}
        )
        self.max_frame_bytes = max_frame_bytes
        self.close_timeout = close_timeout
        self.max_batch_frames = max_batch_frames
        self._slot: ConnectionSlot[_WsConnection] = ConnectionSlot()
        self._gate = OpenGate()

    @property
    def subprotocol(self) -> str | None:
        """The subprotocol the server chose for the current connection."""
        conn = self._slot.current
        return conn.subprotocol if conn is not None else None

    def open(self, sink: FrameSink, *, timeout: float) -> None:
        """Connect a new socket and upgrade it within ``timeout`` seconds in all (the TCP
        connection, TLS, the handshake), ending any previous one."""
        self._slot.close()
        conn = _WsConnection(self, sink)
        try:
            with self._gate.opening(timeout) as deadline:
                conn.start(deadline)
        except HandshakeError as exc:  # aborted before it began
            raise TransportError(f"{self.describe()}: cannot connect: {exc}") from exc
        self._slot.install(conn)

    def abort_open(self) -> None:
        """Make an ``open()`` in progress on another thread fail now, whatever step it is
        blocked in (the TCP connection, TLS, the upgrade), and any open until ``close()``."""
        self._gate.abort()

    def send(self, message: dict[str, Any]) -> None:
        """Queue one message as one text frame."""
        conn = self._slot.current
        if conn is None:
            raise TransportError(f"{self.describe()}: not open")
        conn.send(encode_message(message))

    def close(self) -> None:
        """Send a close frame (best effort), shut the socket down, join the threads. Idempotent."""
        self._gate.reset()
        self._slot.close()

    def describe(self) -> str:
        """``websocket <url without credentials or query>``."""
        return f"websocket {redact_url(self.url)}"

    def __repr__(self) -> str:
        return f"WebSocketTransport({redact_url(self.url)!r})"


class _WsConnection:
    """One socket and its three threads."""

    def __init__(self, transport: WebSocketTransport, sink: FrameSink) -> None:
        self.t = transport
        self.label = transport.describe()
        self.latch = LossLatch(sink, self.label)
        self.ws = websocket.WebSocket(  # frames and masks what we send (the handshake is ours)
            enable_multithread=True,  # sends from the writer and pongs from the reader
            skip_utf8_validation=True,
        )
        self.sock: socket.socket | None = None
        self.subprotocol: str | None = None
        #: What the server sent right after its handshake answer: the start of its frames.
        self._first_bytes = b""
        #: When the reader last received a complete frame (pongs too), for the heartbeat.
        self.last_rx = time.monotonic()
        #: The reader is inside the sink.
        self.delivering = False
        self._stop = threading.Event()
        self._ping_due = threading.Event()
        #: The status of the close frame the writer sends on its way out (None: none), and
        #: whether we failed the connection (RFC 6455 section 7.1.7).
        self._close_status: int | None = None
        self._failed = False
        self._finish_lock = threading.Lock()
        self._finished = False
        self.writer = QueueWriter(
            "exmcp-ws-writer",
            self._write_batch,
            on_error=self._writer_failed,
            on_exit=self._writer_exit,
        )
        self.reader = threading.Thread(target=self._read_loop, name="exmcp-ws-reader", daemon=True)
        #: The next ping or pong check, on the shared scheduler (its own lock, not _finish_lock,
        #: which _finish holds while it joins threads).
        self._heartbeat = TimerSlot()
        #: The end of the wait for the server to close a connection we failed.
        self._close_wait = TimerSlot()

    # -- lifecycle ---------------------------------------------------------

    def start(self, deadline: Deadline) -> None:
        """Connect and upgrade before ``deadline`` (see ``_handshake``)."""
        try:
            opened = self._connect(deadline)
        except (HandshakeError, *_IO_ERRORS, ValueError) as exc:
            why = deadline.abandoned() if deadline.aborted else why_not_upgraded(self.t.url, exc)
            raise TransportError(f"{self.label}: cannot connect: {why}") from exc
        self.sock = self.ws.sock = opened.sock
        self.ws.connected = True  # websocket-client frames and masks what we send from now on
        self.subprotocol = opened.subprotocol
        self._first_bytes = opened.rest
        logger.debug("%s: connected (subprotocol %r)", self.label, self.subprotocol)
        self.last_rx = time.monotonic()
        self.writer.start()
        self.reader.start()
        if self.t.heartbeat_interval:
            self._heartbeat.arm(self.t.heartbeat_interval, self._heartbeat_ping)

    def _connect(self, deadline: Deadline) -> Opened:
        """The upgrade; with OAuth, bearer token on it and a new token on 401/403. Redirects
        are refused: following one would re-send Authorization wherever it points."""
        auth = self.t.auth
        for _ in range(_AUTH_ROUNDS):
            token = auth.bearer(self.t.url) if auth is not None else None
            headers = dict(self.t.headers, Authorization=f"Bearer {token}") if token is not None else self.t.headers
            try:
                return open_websocket(self.t.url, headers, self.t.sslopt, SUBPROTOCOL, deadline)
            except HandshakeRefused as exc:
                if auth is None or exc.status not in (401, 403):
                    raise
                challenge = exc.headers.get("www-authenticate")
                if not auth.challenge(self.t.url, exc.status, challenge, token):
                    raise
        raise TransportError(f"{self.label}: the server refused every new token")

    def send(self, data: bytes) -> None:
        if not self.latch.active:
            state = "closed" if self.latch.closed else f"lost ({self.latch.lost_reason})"
            raise TransportError(f"{self.label}: connection {state}")
        self.writer.put(data)

    def close(self) -> None:
        """Closing handshake (best effort, bounded), then tear everything down."""
        self.latch.close()
        self._stop.set()
        if self._close_status is None:
            self._close_status = websocket.STATUS_NORMAL
        self.writer.stop()  # queued messages, then the close frame
        timeout = self.t.close_timeout
        deadline = time.monotonic() + timeout
        join_thread(self.writer.thread, timeout)
        # The reader ends when the peer answers our close frame.
        join_thread(self.reader, deadline - time.monotonic())
        self._finish()
        join_thread(self.reader, timeout, self.label)
        logger.debug("%s: closed", self.label)

    def _abort(self) -> None:
        """Shut the socket down under any thread blocked on it."""
        sock = self.sock
        if sock is not None:
            try:
                # socket.socket.shutdown, not SSLSocket.shutdown, which drops
                # the TLS object under a thread that may be using it.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass

    def _finish(self) -> None:
        """Stop the threads and close the socket. Runs once; by the reader or by close()."""
        with self._finish_lock:
            if self._finished:
                return
            self._finished = True
            self._stop.set()
            # Lost, or close() already gave the closing handshake its time:
            # shut down first, so that a writer blocked in send wakes up.
            self._abort()
            self.writer.stop()
            join_thread(self.writer.thread, self.t.close_timeout, self.label)
            self._heartbeat.stop()
            self._close_wait.stop()
            self.ws.shutdown()  # type: ignore[no-untyped-call]

    # -- threads -----------------------------------------------------------

    def _write_batch(self, batch: list[bytes]) -> None:
        ws = self.ws
        for data in batch:
            if self._ping_due.is_set():
                self._ping()
            ws.send(data, OP_TEXT)
        if self._ping_due.is_set():
            self._ping()

    def _ping(self) -> None:
        self._ping_due.clear()
        self.ws.ping()

    def _writer_failed(self, exc: BaseException) -> None:
        if self.latch.report_lost(f"{self.label}: send failed: {exc!r}"):
            self._abort()

    def _writer_exit(self) -> None:
        status = self._close_status
        if status is not None:
            try:
                self.ws.send_close(status, CLOSE_REASONS.get(status, b""))
            except _IO_ERRORS as exc:
                logger.debug("%s: could not send the close frame: %r", self.label, exc)

    def _recv(self, sock: socket.socket) -> bytes:
        """One read: up to 64 KiB, plus what TLS has already decrypted (b"" at EOF)."""
        data = sock.recv(_READ_SIZE)
        if data and isinstance(sock, ssl.SSLSocket):
            pending = sock.pending()
            if pending:
                data += sock.recv(pending)
        return data

    def _read_loop(self) -> None:
        sock = self.sock
        assert sock is not None
        parser = FrameParser(self.t.max_frame_bytes)
        seen = 0
        try:
            data = self._first_bytes
            while True:
                if data:
                    events = parser.feed(data)
                    if parser.frames != seen:
                        # Only a complete frame (a pong too) proves the peer alive: a peer
                        # trickling one unfinished frame must not keep the link "up".
                        seen = parser.frames
                        self.last_rx = time.monotonic()
                    end = self._handle(events)
                    if end is not None:
                        self._reader_lost(end)
                        if parser.done:  # a close frame came, or we failed the connection
                            self._wait_for_the_peer_to_close(sock)
                        return
                data = self._recv(sock)
                if not data:
                    self._reader_lost("peer dropped the connection without a close frame")
                    return
        except Exception as exc:  # OSError...: the link is unusable
            self._reader_lost(f"connection failed: {exc!r}")
        finally:
            self._finish()

    def _handle(self, events: list[WsEvent]) -> str | None:
        """Decode and deliver the messages of one read, answer pings; the loss, if the stream ended."""
        max_bytes = self.t.max_frame_bytes
        batch: list[Frame] = []
        end: str | None = None
        for event in events:
            if type(event) is tuple:
                opcode, payload = event
                if opcode <= OP_BINARY:
                    batch.append(decode_message(payload, max_bytes))
                elif opcode == OP_PING:
                    end = self._pong(payload)
                    if end is not None:
                        break
                elif opcode == OP_CLOSE:
                    end = self._peer_closed(payload)
                # pong: liveness only, already counted in last_rx
            elif isinstance(event, Oversized):
                batch.append(invalid_frame(oversized_error(event.size, max_bytes), event.preview))
                end = self._fail(
                    STATUS_MESSAGE_TOO_BIG, f"a message of more than max_frame_bytes={max_bytes} bytes arrived"
                )
            elif isinstance(event, ProtocolError):
                end = self._fail(STATUS_PROTOCOL_ERROR, f"protocol error: {event.reason}")
        if batch:
            self._deliver(batch)
        return end

    def _fail(self, status: int, reason: str) -> str:
        """Fail the connection (RFC 6455 section 7.1.7): the writer sends a close frame with
        ``status`` after what is queued, and nothing more is parsed. Returns the loss's reason."""
        self._stop.set()  # no more heartbeat
        self._failed = True
        if self._close_status is None:
            self._close_status = status
        self.writer.stop()
        return f"connection failed: {reason}; closed it with status {status}"

    def _wait_for_the_peer_to_close(self, sock: socket.socket) -> None:
        """After the closing handshake, or failing the connection: drop what arrives until the
        server closes the TCP connection, as a client should (RFC 6455 section 7.1.1: the
        server closes first, and holds the TIME_WAIT; the websockets library waits the same
        way), within ``close_timeout``."""
        self._close_wait.arm(self.t.close_timeout, self._abort)
        with contextlib.suppress(OSError):
            while self._recv(sock):
                pass

    def _pong(self, payload: bytes) -> str | None:
        """Answer a ping (the send is locked against the writer's); the loss if that fails."""
        try:
            self.ws.pong(payload)
        except _IO_ERRORS as exc:
            return f"connection failed: cannot answer a ping: {exc!r}"
        return None

    def _deliver(self, batch: list[Frame]) -> None:
        max_batch = self.t.max_batch_frames
        self.delivering = True
        try:
            for start in range(0, len(batch), max_batch):
                self.latch.deliver(batch[start : start + max_batch] if len(batch) > max_batch else batch)
        finally:
            self.delivering = False

    def _peer_closed(self, payload: bytes) -> str:
        """Have the peer's close frame answered (unless ours went first) and say why the link
        ended. The writer answers, after what is queued: nothing may follow a close frame."""
        if self._close_status is None:
            self._stop.set()  # no more heartbeat
            self._close_status = websocket.STATUS_NORMAL
            self.writer.stop()
        return f"peer closed the connection ({close_frame_text(payload)})"

    def _reader_lost(self, what: str) -> None:
        if self.latch.active:
            self.latch.report_lost(f"{self.label}: {what}")

    # The heartbeat runs on the process-wide scheduler (``_scheduler``), not a thread of its
    # own: a ping is due every ``heartbeat_interval``, its check ``heartbeat_timeout`` later.

    def _heartbeat_ping(self) -> None:
        if self._stop.is_set():
            return
        ping_at = time.monotonic()
        self._ping_due.set()
        self.writer.wake()
        self._heartbeat.arm(self.t.heartbeat_timeout, self._heartbeat_check, ping_at)

    def _heartbeat_check(self, ping_at: float) -> None:
        if self._stop.is_set():
            return
        timeout = self.t.heartbeat_timeout
        # A reader held up in the sink cannot see the pong: not the peer's fault.
        if self.last_rx < ping_at and not self.delivering:
            reason = f"{self.label}: heartbeat timeout: no frame within {timeout:g}s of a ping"
            if self.latch.report_lost(reason):
                self._abort()
            return
        interval = self.t.heartbeat_interval
        assert interval is not None
        self._heartbeat.arm(max(0.0, ping_at + interval - time.monotonic()), self._heartbeat_ping)
