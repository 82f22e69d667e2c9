"""A hostile HTTP/1.1 peer on 127.0.0.1 that writes every answer byte by byte as a test says.

Unlike the ASGI fakes of ``http_fakes``, nothing here is checked on the way out: a status
line may carry any reason phrase, a body may stop mid-chunk, a connection may be reset
(RST) or left hanging. Each request is handed to the test's ``answer(exchange)``, on the
connection's own thread; it returns True to keep the connection for the next request.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any, Generic, Self, TypeVar

WAIT = 10.0
CHUNK = 64 * 1024

LEGACY_INIT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"resources": {"subscribe": True}},
    "serverInfo": {"name": "raw"},
}


def rpc_result(request_id: Any, result: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode()


class Exchange:
    """One request (``method``, ``headers`` lower-cased, ``body`` decoded JSON or None) and
    the raw socket to answer it on."""

    def __init__(self, conn: socket.socket, method: str, headers: dict[str, str], body: Any) -> None:
        self.conn = conn
        self.method = method
        self.headers = headers
        self.body = body

    @property
    def rpc_method(self) -> Any:
        return self.body.get("method") if isinstance(self.body, dict) else None

    def write(self, data: bytes) -> None:
        self.conn.sendall(data)

    def head(self, status: str, headers: dict[str, str] | None = None) -> None:
        """The status line (``"503 Busy"``, sent as it is) and the headers."""
        lines = [f"HTTP/1.1 {status}", *(f"{name}: {value}" for name, value in (headers or {}).items())]
        self.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def whole(self, status: str, body: bytes = b"", content_type: str = "application/json") -> None:
        """A complete answer with a Content-Length, in one write."""
        lines = [f"HTTP/1.1 {status}", f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
        self.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)

    def start_sse(self) -> None:
        self.head("200 OK", {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"})

    def chunk(self, data: bytes) -> None:
        self.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def end_chunks(self) -> None:
        self.write(b"0\r\n\r\n")

    def reset(self) -> None:
        """Abort the connection with a TCP RST."""
        self.conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.conn.close()


def legacy_basics(exchange: Exchange) -> bool:
    """Answer what a legacy server answers the same way every time; False if it is none of
    those (initialize, a notification or a response, a DELETE)."""
    body = exchange.body
    if exchange.method == "DELETE":
        exchange.whole("200 OK")
    elif exchange.rpc_method == "initialize":
        exchange.whole("200 OK", rpc_result(body["id"], LEGACY_INIT))
    elif exchange.method == "POST" and isinstance(body, dict) and not ("id" in body and "method" in body):
        exchange.whole("202 Accepted")
    else:
        return False
    return True


#: What a server makes of one request it read: an exchange to record and answer.
ExchangeT = TypeVar("ExchangeT")


class LoopbackServer(Generic[ExchangeT]):
    """The server loop of the hand-made HTTP/1.1 peers: accepts on a free port of 127.0.0.1
    until :meth:`stop`, each connection on its own thread; reads each request's head and body,
    has ``make(conn, method, path, headers, body)`` turn it into an exchange, records it in
    :attr:`requests` and hands it to ``answer``, which returns True to keep the connection
    for the next request."""

    def __init__(
        self,
        make: Callable[[socket.socket, str, str, dict[str, str], bytes], ExchangeT],
        answer: Callable[[ExchangeT], bool],
        *,
        thread_name: str,
    ) -> None:
        self._make = make
        self._answer = answer
        self._thread_name = thread_name
        self._sock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port: int = self._sock.getsockname()[1]
        self._cond = threading.Condition()
        self.requests: list[ExchangeT] = []
        self._conns: set[socket.socket] = set()
        #: Set by :meth:`stop`: an answer that stalls waits on it.
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def wait_until(self, predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=self._thread_name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no 40 ms per answer
            with self._cond:
                if self.stopping.is_set():
                    conn.close()
                    return
                self._conns.add(conn)
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(CHUNK)
                    if not data:
                        return
                    buffer += data
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                headers = {}
                for line in header_lines:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                while len(buffer) < length:
                    data = conn.recv(CHUNK)
                    if not data:
                        return
                    buffer += data
                body, buffer = buffer[:length], buffer[length:]
                method, path = request_line.split(" ")[:2]
                exchange = self._make(conn, method, path, headers, body)
                with self._cond:
                    self.requests.append(exchange)
                    self._cond.notify_all()
                if not self._answer(exchange):
                    return
        except OSError:
            pass  # the client gave up on us: what most hostile answers are waiting for
        finally:
            with self._cond:
                self._conns.discard(conn)
            conn.close()

    def stop(self) -> None:
        """Stop listening, shut every connection down, join the threads."""
        with self._cond:
            self.stopping.set()
            conns = list(self._conns)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() in progress
        except OSError:
            pass
        self._sock.close()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            thread.join(WAIT)


def _json_exchange(conn: socket.socket, method: str, path: str, headers: dict[str, str], body: bytes) -> Exchange:
    return Exchange(conn, method, headers, json.loads(body) if body else None)


class RawHttp(LoopbackServer[Exchange]):
    """Serves ``answer`` on a free port until :meth:`stop`; records every request."""

    def __init__(self, answer: Callable[[Exchange], bool]) -> None:
        super().__init__(_json_exchange, answer, thread_name="raw-http")
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def count(self, method: str, rpc_method: str | None = None) -> int:
        with self._cond:
            return sum(
                1 for r in self.requests if r.method == method and (rpc_method is None or r.rpc_method == rpc_method)
            )
