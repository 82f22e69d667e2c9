"""Small Streamable HTTP servers for the HTTP transport tests.

* :class:`ServerThread` serves any ASGI app with uvicorn on a free port, in a
  thread. The listening socket is bound and listening before the thread
  starts, so a client may connect at once: nothing to wait for.
* :class:`FakeMcp` is a scriptable endpoint. The JSON-RPC method of a POST
  picks a behaviour (``test/json``, ``test/sse``, ``test/long``...); see
  :meth:`FakeMcp._post`. It records every request, and tests wait on its
  state with :meth:`FakeMcp.wait_until` (a condition variable, no sleeps).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Self

import uvicorn
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

WAIT = 10.0  # seconds: the most any test waits for something that should happen


class ServerThread:
    """Runs ``app`` under uvicorn in a daemon thread on 127.0.0.1:<free port>."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        path: str = "/mcp",
        lifespan: str = "off",
        tls: tuple[str, str] | None = None,
    ) -> None:
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only
        # when the listener says so; without it Nagle adds ~40 ms per response.
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port: int = self._sock.getsockname()[1]
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}{path}"
        config = uvicorn.Config(
            app,
            lifespan=lifespan,  # type: ignore[arg-type]
            log_level="critical",
            timeout_graceful_shutdown=1,
            ssl_certfile=tls[0] if tls else None,
            ssl_keyfile=tls[1] if tls else None,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._sock]},
            name="uvicorn",
            daemon=True,
        )

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop listening at once, then end the open connections (within ~1 s)."""
        self._server.should_exit = True
        self._thread.join(WAIT)
        with contextlib.suppress(OSError):
            self._sock.close()


@dataclass
class Recorded:
    """One HTTP request the fake received."""

    method: str
    headers: dict[str, str]
    body: Any = None


@dataclass
class FakeMcp:
    """A scriptable MCP endpoint (see the module docstring).

    Attributes:
        sessions: issue ``Mcp-Session-Id`` on initialize and enforce it.
        get_mode: ``"stream"`` (SSE with ids and ``retry:``), or an HTTP
            status to answer every GET with (e.g. 405).
        probe_status: answer ``server/discover`` with this HTTP status (a
            legacy server); None answers it (a modern server).
        retry_ms: the ``retry:`` value sent at the start of the GET stream.
        unknown_session_status: 404, or 400 with a plain-text body naming the session.
    """

    sessions: bool = True
    get_mode: str | int = "stream"
    probe_status: int | None = None
    retry_ms: int = 20
    #: How an unknown session id is answered: 404 (the spec) or 400 (the Python SDK 1.x).
    unknown_session_status: int = 404
    posts: list[Recorded] = field(default_factory=list)
    gets: list[Recorded] = field(default_factory=list)
    deletes: list[Recorded] = field(default_factory=list)
    #: Request ids whose long stream the client closed.
    disconnected: list[Any] = field(default_factory=list)
    session_id: str | None = None
    get_streams_open: int = 0

    def __post_init__(self) -> None:
        self._cond = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._get_queues: list[asyncio.Queue[Any]] = []
        self._pending_get: list[Any] = []
        self._release: asyncio.Event | None = None
        self._event_no = 0
        self._sessions_issued = 0

    # -- test-side API (any thread) -------------------------------------------

    def wait_until(self, predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    def push(self, message: dict[str, Any]) -> None:
        """Send ``message`` on the GET stream (or the next one to connect)."""
        self._call(self._push, message)

    def drop_get(self) -> None:
        """End the open GET streams gracefully (the client should reconnect)."""
        self._call(self._push, _DROP)

    def expire_session(self) -> None:
        """Forget the session: later requests carrying it get 404."""
        with self._cond:
            self.session_id = None

    def release(self) -> None:
        """Let every ``test/slow`` request answer."""
        self._call(self._do_release)

    def posted(self, method: str) -> list[Recorded]:
        with self._cond:
            return [p for p in self.posts if isinstance(p.body, dict) and p.body.get("method") == method]

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None, "the fake has not served a request yet"
        self._loop.call_soon_threadsafe(fn, *args)

    def _changed(self, update: Callable[[], None] | None = None) -> None:
        with self._cond:
            if update is not None:
                update()
            self._cond.notify_all()

    # -- loop-side helpers -----------------------------------------------------

    def _push(self, item: Any) -> None:
        if self._get_queues:
            for q in self._get_queues:
                q.put_nowait(item)
        elif item is not _DROP:
            self._pending_get.append(item)

    def _do_release(self) -> None:
        if self._release is not None:
            self._release.set()

    # -- the ASGI app -----------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._release = asyncio.Event()
        request = Request(scope, receive)
        headers = {k.lower(): v for k, v in request.headers.items()}
        if request.method == "POST":
            response = await self._post(request, headers)
        elif request.method == "GET":
            response = await self._get(headers)
        elif request.method == "DELETE":
            self._changed(lambda: self.deletes.append(Recorded("DELETE", headers)))
            response = Response(status_code=200)
        else:
            response = Response(status_code=405)
        await response(scope, receive, send)

    def _session_rejected(self, headers: dict[str, str]) -> Response | None:
        if not self.sessions:
            return None
        sent = headers.get("mcp-session-id")
        if sent is None:
            return _rpc_error_response(400, -32600, "Bad Request: Missing session ID")
        if sent != self.session_id:
            if self.unknown_session_status == 400:
                # The Python SDK 1.x's answer to an unknown session id.
                return Response("Bad Request: No valid session ID provided", status_code=400)
            return _rpc_error_response(404, -32600, "Session not found")
        return None

    async def _post(self, request: Request, headers: dict[str, str]) -> Response:
        raw = await request.body()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw
        self._changed(lambda: self.posts.append(Recorded("POST", headers, body)))
        if not isinstance(body, dict):
            return _rpc_error_response(400, -32600, "not a JSON-RPC message")
        method = body.get("method")
        params = body.get("params") or {}
        rid = body.get("id")
        modern = "mcp-protocol-version" in headers and headers["mcp-protocol-version"] >= "2026"
        if method != "initialize" and not modern:
            rejected = self._session_rejected(headers)
            if rejected is not None:
                return rejected
        if "id" not in body:
            return Response(status_code=202)

        if method == "initialize":
            extra = {}
            if self.sessions:
                self._sessions_issued += 1
                sid = f"session-{self._sessions_issued}"
                self._changed(lambda: setattr(self, "session_id", sid))
                extra["Mcp-Session-Id"] = sid
            result = {
                "protocolVersion": params.get("protocolVersion"),
                "capabilities": {},
                "serverInfo": {"name": "fake", "version": "0"},
            }
            return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": result}, headers=extra)
        if method == "server/discover":
            if self.probe_status is not None:
                return Response(
                    f"no such thing ({self.probe_status})",
                    status_code=self.probe_status,
                )
            return JSONResponse(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {"supportedVersions": ["2026-07-28"], "capabilities": {}},
                }
            )
        if method in ("test/json", "tools/call", "resources/read", "prompts/get"):
            return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": {"echo": params}})
        if method == "test/sse":
            return _sse(self._sse_events(rid, params))
        if method in ("test/long", "subscriptions/listen"):
            return _sse(self._long_events(rid))
        if method == "test/drop":
            return _sse(self._drop_events(rid))
        if method == "test/abort":
            return _AbortingResponse(
                _frame(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/message",
                        "params": {"n": 0},
                    }
                )
            )
        if method == "test/slow":
            assert self._release is not None
            await self._release.wait()
            return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": {"slow": True}})
        if method == "test/status":
            if params.get("rpc"):
                return _rpc_error_response(params["status"], -32602, "bad params")
            return Response(params.get("body", "nope"), status_code=params["status"])
        if method == "test/batch":
            return JSONResponse([{"jsonrpc": "2.0", "id": rid, "result": {}}])
        if method == "test/accepted":
            return Response(status_code=202)
        if method == "test/resumable":
            return _sse(self._resumable_events())
        if method == "test/big":
            return _sse(self._big_events(rid, params["size"]))
        return _rpc_error_response(404, -32601, f"Method not found: {method}", rid)

    async def _sse_events(self, rid: Any, params: dict[str, Any]) -> AsyncIterator[bytes]:
        count = params.get("count", 3)
        frames = [
            _frame(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/message",
                    "params": {"n": n},
                }
            )
            for n in range(count)
        ]
        final = _frame({"jsonrpc": "2.0", "id": rid, "result": {"count": count}})
        if params.get("one_chunk"):
            # Everything in one write: the client should see one batch.
            yield b"".join(frames) + final
            return
        for f in frames:
            yield f
        yield b": a comment, then an event of another type\n\nevent: other\ndata: {}\n\n"
        yield final
        # A stream that stays open after its response: the client ends it.
        if params.get("linger"):
            await asyncio.Event().wait()

    async def _long_events(self, rid: Any) -> AsyncIterator[bytes]:
        try:
            yield _frame(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/subscriptions/acknowledged",
                    "params": {"id": rid},
                }
            )
            await asyncio.Event().wait()  # until the client goes away
        finally:
            self._changed(lambda: self.disconnected.append(rid))

    async def _drop_events(self, rid: Any) -> AsyncIterator[bytes]:
        yield _frame({"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": 0}})

    async def _resumable_events(self) -> AsyncIterator[bytes]:
        # A priming event (an id, empty data), then the server closes the stream.
        yield b"id: r1\nretry: 10\ndata:\n\n"

    async def _big_events(self, rid: Any, size: int) -> AsyncIterator[bytes]:
        yield b"data: " + b"x" * size + b"\n\n"
        yield _frame({"jsonrpc": "2.0", "id": rid, "result": {"after": "big"}})

    async def _get(self, headers: dict[str, str]) -> Response:
        self._changed(lambda: self.gets.append(Recorded("GET", headers)))
        if self.get_mode != "stream":
            return Response(status_code=int(self.get_mode))
        rejected = self._session_rejected(headers)
        if rejected is not None:
            return rejected
        last = headers.get("last-event-id")
        if last == "r1":
            # Resuming test/resumable's stream: its response, then the end.
            rid = self.posted("test/resumable")[-1].body["id"]
            return _sse(_once(_frame({"jsonrpc": "2.0", "id": rid, "result": {"resumed": True}}, "r2")))
        return _sse(self._get_events())

    async def _get_events(self) -> AsyncIterator[bytes]:
        q: asyncio.Queue[Any] = asyncio.Queue()
        for item in self._pending_get:
            q.put_nowait(item)
        self._pending_get.clear()
        self._get_queues.append(q)
        self._changed(lambda: setattr(self, "get_streams_open", self.get_streams_open + 1))
        try:
            yield f"retry: {self.retry_ms}\n\n".encode()
            while True:
                item = await q.get()
                if item is _DROP:
                    return
                self._event_no += 1
                yield _frame(item, f"e{self._event_no}")
        finally:
            self._get_queues.remove(q)
            self._changed(lambda: setattr(self, "get_streams_open", self.get_streams_open - 1))


_DROP = object()


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _frame(message: Any, event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\r\n" if event_id is not None else ""
    return f"{head}event: message\r\ndata: {json.dumps(message)}\r\n\r\n".encode()


def _sse(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def _rpc_error_response(status: int, code: int, message: str, rid: Any = None) -> Response:
    body = {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status)


class _AbortingResponse(Response):
    """Starts an SSE body, sends ``first``, then returns mid-body: uvicorn drops the connection."""

    def __init__(self, first: bytes) -> None:
        super().__init__(media_type="text/event-stream")
        self._first = first

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send({"type": "http.response.body", "body": self._first, "more_body": True})
        raise RuntimeError("the fake drops this stream midway")


@contextlib.contextmanager
def serving(app: ASGIApp, **kwargs: Any) -> Iterator[ServerThread]:
    """``with serving(app) as server:`` runs ``app`` for the block."""
    with ServerThread(app, **kwargs) as server:
        yield server
