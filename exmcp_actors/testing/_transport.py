"""The memory transport: a real client ``Transport`` whose other end is a :class:`FakeServer`."""

from __future__ import annotations

import json
import threading
from typing import Any, Protocol

from exmcp_actors._protocol._errors import TransportError
from exmcp_actors._transport._base import FrameSink, Transport
from exmcp_actors.testing._connection import JOIN_TIMEOUT, FakeConnection


class MemoryPeer(Protocol):
    """The server end of a memory transport: a :class:`FakeServer`."""

    def _open_memory(self, sink: FrameSink, *, timeout: float, max_frame_bytes: int) -> FakeConnection:
        """A new connection whose client end is ``sink``; TransportError when refused or closed."""
        ...


class MemoryTransport(Transport):
    """An in-memory ``Transport`` wired to a :class:`FakeServer`.

    Each :meth:`open` is a new connection (a new session) on the server.
    Frames reach the sink on the connection's delivery thread, one
    ``frames_received`` call per server push; :meth:`FakeServer.drop` calls
    ``transport_lost`` exactly once; :meth:`close` never does.

    Args:
        server: the fake to connect to.
        stream_cancel: behave like HTTP for :meth:`cancel_stream` (end the
            listen server-side, record it in :attr:`FakeServer.stream_cancels`,
            return True) instead of like stdio/WebSocket (return False).
    """

    def __init__(self, server: MemoryPeer, *, stream_cancel: bool = False) -> None:
        self._server = server
        self._stream_cancel = stream_cancel
        self._lock = threading.Lock()
        self._conn: FakeConnection | None = None

    @property
    def connection(self) -> FakeConnection | None:
        """The connection made by the latest :meth:`open` (it may have ended)."""
        return self._conn

    def open(self, sink: FrameSink, *, timeout: float) -> None:
        """Open a new connection on the server.

        Raises:
            TransportError: the server refuses connections, is closed, or
                hangs (``refuse(hang=True)``) past ``timeout``.
        """
        with self._lock:
            previous, self._conn = self._conn, None
        if previous is not None:
            previous._end("client")
        conn = self._server._open_memory(sink, timeout=timeout, max_frame_bytes=self.max_frame_bytes)
        with self._lock:
            self._conn = conn

    def send(self, message: dict[str, Any]) -> None:
        """Queue ``message`` for the server; returns at once, whatever handlers do.

        Raises:
            TransportError: not open, or the connection was lost.
            TypeError: the message is not JSON-serialisable (from ``json.dumps``).
        """
        conn = self._conn
        if conn is None or conn.closed:
            raise TransportError(f"{self.describe()} is not open")
        # A JSON round trip, as on a real wire: nothing is shared by reference.
        conn._receive(json.dumps(message))

    def cancel_stream(self, request_id: Any) -> bool:
        """See the class docstring (``stream_cancel``)."""
        if not self._stream_cancel:
            return False
        conn = self._conn
        if conn is not None and not conn.closed:
            conn._cancel_stream(request_id)
        return True

    def negotiated(self, protocol_version: str, era: str) -> None:
        """Recorded as :attr:`FakeConnection.negotiated`."""
        conn = self._conn
        if conn is not None:
            conn.negotiated = (protocol_version, era)

    def close(self) -> None:
        """End the current connection; no ``transport_lost``, no frames after this."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn._end("client")
            # Not the handler thread: the test may be holding a handler;
            # FakeServer.close joins it.
            conn._join_delivery(JOIN_TIMEOUT)

    def describe(self) -> str:
        """``memory:fake#<connection number>``."""
        conn = self._conn
        return f"memory:fake#{conn.number}" if conn is not None else "memory:fake"
