"""A tiny legacy-MCP peer that floods ``notifications/resources/updated`` (benchmarks only).

It speaks just enough of MCP 2024-11-05 .. 2025-11-25 for every client in the
benchmarks (raw readers, the official SDK client, exmcp_actors):

- ``initialize`` (echoes a legacy version it knows, else offers 2025-11-25),
  ``notifications/initialized``, ``ping``, ``tools/list``;
- ``resources/subscribe`` / ``resources/unsubscribe``: answered at once and
  counted (see the ``stats`` tool); ``server/discover`` gets -32601, so an
  ``auto`` client falls back to ``initialize``;
- ``tools/call`` ``flood`` ``{uri, count, rate=0, stamp=false}``: writes
  ``count`` updates for ``uri`` and then the tool result (over HTTP the result
  comes first, see below). With ``rate=0`` the
  frames are serialised once and written in large blocks, as fast as the pipe
  or socket takes them; with ``rate>0`` they are paced at ``rate`` per second,
  one write each, and with ``stamp`` each carries
  ``params._meta.sentNs = time.monotonic_ns()`` taken just before its write
  (CLOCK_MONOTONIC is system-wide on Linux, so a reader in another process can
  subtract it from its own ``time.monotonic_ns()``);
- ``tools/call`` ``stats`` (JSON text: subscribe/unsubscribe counters) and
  ``reset_stats``.

Transports:

- ``--transport stdio``: newline-delimited JSON on stdin/stdout.
- ``--transport ws``: the ``websockets`` library, subprotocol ``mcp``, one
  message per text frame, no compression. A flood writes pre-framed bytes
  straight to the connection's asyncio transport: frames are whole, so they
  never interleave with the library's own writes (pongs, close).
- ``--transport http``: legacy (2025-11-25) Streamable HTTP on ``/mcp``, a
  raw asyncio HTTP/1.1 server (keep-alive; request bodies need
  ``Content-Length``). ``POST initialize`` answers JSON with an
  ``Mcp-Session-Id`` header, which every later request must carry (missing:
  400, unknown: 404). A POSTed notification or response gets 202; a request
  gets its JSON answer. ``GET`` (``Accept: text/event-stream``) opens the
  session's standalone SSE stream (one per session, else 409), a chunked
  ``text/event-stream`` body. ``DELETE`` ends the session and its stream.
  Here ``flood`` is answered at once (``{"queued": count}``) and its frames go
  to the GET stream as ``data:`` events, one chunk per block; a flood waits up
  to ``GET_STREAM_WAIT`` seconds for that stream to open (so no client needs a
  warm-up), and floods of one session run one after the other.

ws and http listen on 127.0.0.1 only and print ``LISTENING <port>`` once they
accept connections; SIGTERM stops them.

Run: ``python -m benchmarks.flood_server --transport stdio|ws|http [--port N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import struct
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

LEGACY_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST = "2025-11-25"
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
#: Frames per block in an unpaced flood.
BLOCK_FRAMES = 512

TOOLS = [
    {
        "name": "flood",
        "description": "Sends `count` resources/updated for `uri` (rate=0: as fast as possible).",
        "inputSchema": {
            "type": "object",
            "properties": {
                "uri": {"type": "string"},
                "count": {"type": "integer", "minimum": 0},
                "rate": {"type": "number", "minimum": 0},
                "stamp": {"type": "boolean"},
            },
            "required": ["uri", "count"],
        },
    },
    {"name": "stats", "description": "Subscribe/unsubscribe counters as JSON text.", "inputSchema": {"type": "object"}},
    {"name": "reset_stats", "description": "Zero the counters.", "inputSchema": {"type": "object"}},
]


def dumps(message: dict[str, Any]) -> str:
    """Compact JSON, as most servers write it."""
    return json.dumps(message, separators=(",", ":"))


def update_frame(uri: str, sent_ns: int | None = None) -> str:
    """One ``notifications/resources/updated`` frame (no newline)."""
    params: dict[str, Any] = {"uri": uri}
    if sent_ns is not None:
        params["_meta"] = {"sentNs": sent_ns}
    return dumps({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": params})


def result(request_id: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def text_result(request_id: Any, value: Any) -> dict[str, Any]:
    return result(request_id, {"content": [{"type": "text", "text": json.dumps(value)}], "isError": False})


@dataclass(frozen=True, slots=True)
class Flood:
    """What the transport loop must do for a ``flood`` call, then answer ``request_id``."""

    request_id: Any
    uri: str
    count: int
    rate: float
    stamp: bool


@dataclass
class FloodPeer:
    """The protocol: one decoded message in, replies (or a Flood) out. No I/O."""

    subscribe_calls: int = 0
    unsubscribe_calls: int = 0
    subscribe_by_uri: dict[str, int] = field(default_factory=dict)
    unsubscribe_by_uri: dict[str, int] = field(default_factory=dict)
    subscribed: set[str] = field(default_factory=set)

    def stats(self) -> dict[str, Any]:
        return {
            "subscribe_calls": self.subscribe_calls,
            "unsubscribe_calls": self.unsubscribe_calls,
            "distinct_subscribed_uris": len(self.subscribe_by_uri),
            "max_subscribe_per_uri": max(self.subscribe_by_uri.values(), default=0),
            "distinct_unsubscribed_uris": len(self.unsubscribe_by_uri),
            "max_unsubscribe_per_uri": max(self.unsubscribe_by_uri.values(), default=0),
            "subscribed_now": len(self.subscribed),
        }

    def reset(self) -> None:
        self.subscribe_calls = self.unsubscribe_calls = 0
        self.subscribe_by_uri.clear()
        self.unsubscribe_by_uri.clear()

    def handle(self, message: Any) -> dict[str, Any] | Flood | None:
        if not isinstance(message, dict):
            return error(None, -32600, "not a JSON-RPC object")
        method = message.get("method")
        request_id = message.get("id")
        params = message.get("params") or {}
        if "id" not in message:
            return None  # notifications (initialized, cancelled) and stray responses
        if method == "initialize":
            offered = params.get("protocolVersion")
            version = offered if offered in LEGACY_VERSIONS else LATEST
            return result(
                request_id,
                {
                    "protocolVersion": version,
                    "capabilities": {"resources": {"subscribe": True}, "tools": {}},
                    "serverInfo": {"name": "exmcp-bench-flood", "version": "1.0"},
                },
            )
        if method == "ping":
            return result(request_id, {})
        if method == "resources/subscribe":
            uri = str(params.get("uri"))
            self.subscribe_calls += 1
            self.subscribe_by_uri[uri] = self.subscribe_by_uri.get(uri, 0) + 1
            self.subscribed.add(uri)
            return result(request_id, {})
        if method == "resources/unsubscribe":
            uri = str(params.get("uri"))
            self.unsubscribe_calls += 1
            self.unsubscribe_by_uri[uri] = self.unsubscribe_by_uri.get(uri, 0) + 1
            self.subscribed.discard(uri)
            return result(request_id, {})
        if method == "tools/list":
            return result(request_id, {"tools": TOOLS})
        if method == "tools/call":
            name = params.get("name")
            args = params.get("arguments") or {}
            if name == "flood":
                try:
                    return Flood(
                        request_id,
                        str(args["uri"]),
                        int(args["count"]),
                        float(args.get("rate", 0) or 0),
                        bool(args.get("stamp", False)),
                    )
                except (KeyError, TypeError, ValueError) as exc:
                    return error(request_id, INVALID_PARAMS, f"bad flood arguments: {exc!r}")
            if name == "stats":
                return text_result(request_id, self.stats())
            if name == "reset_stats":
                self.reset()
                return text_result(request_id, {"reset": True})
            return error(request_id, INVALID_PARAMS, f"unknown tool {name!r}")
        return error(request_id, METHOD_NOT_FOUND, f"Method not found: {method}")


def paced(count: int, rate: float, emit: Callable[[int], None]) -> None:
    """Call ``emit(i)`` ``count`` times at ``rate`` per second (sleep, then spin the last 200 us)."""
    interval = 1.0 / rate
    start = time.perf_counter()
    for i in range(count):
        target = start + i * interval
        while True:
            left = target - time.perf_counter()
            if left <= 0:
                break
            if left > 0.0003:
                time.sleep(left - 0.0002)
        emit(i)


# --------------------------------------------------------------------------- stdio


def serve_stdio() -> None:
    peer = FloodPeer()
    out = sys.stdout.buffer
    stdin = sys.stdin.buffer
    for raw in stdin:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        reply = peer.handle(message)
        if reply is None:
            continue
        if isinstance(reply, Flood):
            started = time.perf_counter()
            if reply.rate > 0:

                def emit(_: int, uri: str = reply.uri, stamp: bool = reply.stamp) -> None:
                    line = update_frame(uri, time.monotonic_ns() if stamp else None) + "\n"
                    out.write(line.encode())
                    out.flush()

                paced(reply.count, reply.rate, emit)
            else:
                line = (update_frame(reply.uri) + "\n").encode()
                block = line * BLOCK_FRAMES
                for _ in range(reply.count // BLOCK_FRAMES):
                    out.write(block)
                out.write(line * (reply.count % BLOCK_FRAMES))
            reply = text_result(reply.request_id, {"sent": reply.count, "seconds": time.perf_counter() - started})
        out.write((dumps(reply) + "\n").encode())
        out.flush()


# --------------------------------------------------------------------------- asyncio floods (ws, http)


async def flood_async(
    job: Flood,
    wire: Callable[[bytes, int], bytes],
    write: Callable[[bytes], object],
    drain: Callable[[], Awaitable[None]],
) -> None:
    """Write ``job``'s frames: ``wire(payload, n)`` is the bytes of ``n`` copies of one encoded message.

    Unpaced: one write per block of ``BLOCK_FRAMES``; paced: one write per
    frame, stamped just before it when asked.
    """
    if job.rate > 0:
        interval = 1.0 / job.rate
        start = time.perf_counter()
        for i in range(job.count):
            left = start + i * interval - time.perf_counter()
            if left > 0.0003:
                await asyncio.sleep(left - 0.0002)
            while start + i * interval > time.perf_counter():
                pass
            sent_ns = time.monotonic_ns() if job.stamp else None
            write(wire(update_frame(job.uri, sent_ns).encode(), 1))
            await drain()
        return
    payload = update_frame(job.uri).encode()
    block = wire(payload, BLOCK_FRAMES)
    for _ in range(job.count // BLOCK_FRAMES):
        write(block)
        await drain()
    if job.count % BLOCK_FRAMES:
        write(wire(payload, job.count % BLOCK_FRAMES))
        await drain()


def listening(port: int) -> None:
    print(f"LISTENING {port}", flush=True)


def stop_on_signals() -> asyncio.Future[None]:
    """A future that SIGTERM or SIGINT completes."""
    loop = asyncio.get_running_loop()
    stop: asyncio.Future[None] = loop.create_future()

    def stop_soon() -> None:
        if not stop.done():
            stop.set_result(None)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_soon)
    return stop


# --------------------------------------------------------------------------- websocket


def ws_text_frame(payload: bytes) -> bytes:
    """An unmasked server-to-client FIN text frame."""
    size = len(payload)
    if size < 126:
        header = struct.pack("!BB", 0x81, size)
    elif size < 65536:
        header = struct.pack("!BBH", 0x81, 126, size)
    else:
        header = struct.pack("!BBQ", 0x81, 127, size)
    return header + payload


async def serve_ws(port: int) -> None:
    from websockets.asyncio.server import ServerConnection, serve

    peer = FloodPeer()

    def ws_frames(payload: bytes, copies: int) -> bytes:
        return ws_text_frame(payload) * copies

    async def handler(conn: ServerConnection) -> None:
        async for text in conn:
            try:
                message = json.loads(text)
            except ValueError:
                continue
            reply = peer.handle(message)
            if reply is None:
                continue
            if isinstance(reply, Flood):
                started = time.perf_counter()
                await flood_async(reply, ws_frames, conn.transport.write, conn.drain)
                reply = text_result(reply.request_id, {"sent": reply.count, "seconds": time.perf_counter() - started})
            await conn.send(dumps(reply))

    stop = stop_on_signals()
    async with serve(
        handler,
        "127.0.0.1",
        port,
        subprotocols=["mcp"],  # type: ignore[list-item]
        compression=None,
        ping_interval=None,
        max_size=None,
    ) as server:
        listening(next(iter(server.sockets)).getsockname()[1])
        await stop


# --------------------------------------------------------------------------- streamable http

#: How long a flood waits for its session's GET stream to open, seconds.
GET_STREAM_WAIT = 10.0
REASONS = {
    200: "OK",
    202: "Accepted",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
}
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


def http_response(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS[status]}", f"Content-Length: {len(body)}"]
    if body:
        lines.append("Content-Type: application/json")
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def json_response(status: int, message: dict[str, Any], headers: dict[str, str] | None = None) -> bytes:
    return http_response(status, dumps(message).encode(), headers)


def sse_chunk(payload: bytes, copies: int) -> bytes:
    """``copies`` SSE ``data:`` events carrying ``payload``, as one HTTP/1.1 chunk."""
    body = b"data: " + payload + b"\n\n"
    body *= copies
    return b"%x\r\n%b\r\n" % (len(body), body)


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    """Method, path, lower-cased headers and body of the next request; None at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    request_line, *lines = head.decode("latin-1").split("\r\n")
    method, target, _ = request_line.split(" ", 2)
    headers = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return method, target.partition("?")[0], headers, body


@dataclass
class HttpSession:
    """One ``Mcp-Session-Id``: its GET stream (if open) and its floods."""

    stream: asyncio.StreamWriter | None = None
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    flooding: asyncio.Lock = field(default_factory=asyncio.Lock)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def end(self) -> None:
        self.ended.set()
        for task in list(self.tasks):
            task.cancel()


class HttpFloodServer:
    """Legacy Streamable HTTP on ``/mcp`` (see the module docstring)."""

    def __init__(self) -> None:
        self.peer = FloodPeer()
        self.sessions: dict[str, HttpSession] = {}

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (request := await read_request(reader)) is not None:
                method, path, headers, body = request
                if method == "GET" and path == "/mcp":
                    refusal, session = self.check_get(headers)
                    if session is not None:
                        await self.serve_stream(session, reader, writer)
                        return  # a GET stream is the connection's last exchange
                    writer.write(refusal)
                else:
                    writer.write(self.respond(method, path, headers, body))
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # a client that went away, or spoke something else
        except asyncio.CancelledError:
            pass  # shutting down (else asyncio's stream callback logs the cancellation as an error)
        finally:
            writer.close()

    def session_of(self, headers: dict[str, str]) -> tuple[bytes, HttpSession | None]:
        session_id = headers.get("mcp-session-id")
        if not session_id:
            return json_response(400, error(None, -32600, "Bad Request: Missing session ID")), None
        session = self.sessions.get(session_id)
        if session is None:
            return json_response(404, error(None, -32600, "Session not found")), None
        return b"", session

    def respond(self, method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
        if path != "/mcp":
            return http_response(404)
        if method == "POST":
            return self.post(headers, body)
        if method == "DELETE":
            refusal, session = self.session_of(headers)
            if session is None:
                return refusal
            del self.sessions[headers["mcp-session-id"]]
            session.end()
            return http_response(200)
        return http_response(405, headers={"Allow": "GET, POST, DELETE"})

    def post(self, headers: dict[str, str], body: bytes) -> bytes:
        try:
            message = json.loads(body)
        except ValueError:
            return json_response(400, error(None, -32700, "Parse error"))
        if not isinstance(message, dict):
            return json_response(400, error(None, -32600, "not a single JSON-RPC object"))
        if message.get("method") == "initialize":
            reply = self.peer.handle(message)
            assert isinstance(reply, dict)
            session_id = uuid.uuid4().hex
            self.sessions[session_id] = HttpSession()
            return json_response(200, reply, {"Mcp-Session-Id": session_id})
        refusal, session = self.session_of(headers)
        if session is None:
            return refusal
        reply = self.peer.handle(message)
        if reply is None:
            return http_response(202)  # a notification or a response
        if isinstance(reply, Flood):
            task = asyncio.get_running_loop().create_task(self.flood(session, reply))
            session.tasks.add(task)
            task.add_done_callback(session.tasks.discard)
            reply = text_result(reply.request_id, {"queued": reply.count})
        return json_response(200, reply)

    def check_get(self, headers: dict[str, str]) -> tuple[bytes, HttpSession | None]:
        if "text/event-stream" not in headers.get("accept", ""):
            return http_response(406), None
        refusal, session = self.session_of(headers)
        if session is not None and session.stream is not None:
            return json_response(409, error(None, -32600, "Conflict: Only one SSE stream is allowed per session")), None
        return refusal, session

    async def serve_stream(
        self, session: HttpSession, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """The standalone SSE stream, until the session ends or the client goes away."""
        writer.write(SSE_HEAD)
        await writer.drain()
        session.stream = writer
        session.opened.set()
        gone = asyncio.ensure_future(reader.read(1))  # EOF: the client closed the stream
        ended = asyncio.ensure_future(session.ended.wait())
        try:
            await asyncio.wait({gone, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            ended.cancel()
            session.stream = None
            session.opened.clear()
        if session.ended.is_set():
            writer.write(b"0\r\n\r\n")  # the last chunk: the body ends cleanly
            await writer.drain()

    async def flood(self, session: HttpSession, job: Flood) -> None:
        async with session.flooding:
            try:
                await asyncio.wait_for(session.opened.wait(), GET_STREAM_WAIT)
            except TimeoutError:
                print(f"flood of {job.count}: no GET stream within {GET_STREAM_WAIT}s, dropped", file=sys.stderr)
                return
            stream = session.stream
            assert stream is not None

            def write(data: bytes) -> None:
                if session.stream is not stream:
                    raise ConnectionResetError("the GET stream ended")
                stream.write(data)

            try:
                await flood_async(job, sse_chunk, write, stream.drain)
            except (ConnectionError, RuntimeError):
                pass  # the client went away mid-flood

    async def serve(self, port: int) -> None:
        stop = stop_on_signals()
        server = await asyncio.start_server(self.connection, "127.0.0.1", port)
        async with server:
            listening(server.sockets[0].getsockname()[1])
            await stop
            for session in self.sessions.values():
                session.end()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["stdio", "ws", "http"], required=True)
    parser.add_argument("--port", type=int, default=0, help="ws/http: port on 127.0.0.1 (0 picks a free one)")
    args = parser.parse_args(argv)
    if args.transport == "stdio":
        try:
            serve_stdio()
        except (BrokenPipeError, KeyboardInterrupt):
            pass
        os._exit(0)  # no flush of a broken pipe at exit
    asyncio.run(serve_ws(args.port) if args.transport == "ws" else HttpFloodServer().serve(args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
