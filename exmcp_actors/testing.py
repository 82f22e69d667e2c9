"""A scriptable in-process MCP server for tests: faults and wire-level edge cases.

:class:`FakeServer` speaks enough of both MCP eras (the legacy ``initialize``
handshake and the 2026-07-28 ``server/discover`` / ``subscriptions/listen``)
to drive a client through its whole life, and lets a test script every answer,
push anything (including malformed frames), and break the connection on cue.
It is reached through an in-memory :class:`MemoryTransport` (no sockets) or,
with :meth:`FakeServer.serve_websocket`, over a real WebSocket.

Example:
    A legacy peer, a listener, an update, then a dropped connection::

        import exmcp_actors as mcp
        from exmcp_actors.testing import FakeError, FakeServer, NO_REPLY

        with FakeServer() as server:
            client = mcp.connect(server.transport())
            listener = client.subscribe_notifications(
                {"resourceSubscriptions": ["file:///a.txt"]})
            server.wait_for("resources/subscribe", uri="file:///a.txt")
            server.updated("file:///a.txt")
            assert listener.get(timeout=5).method == "notifications/resources/updated"

            server.drop()                 # the client's transport is lost...
            server.wait_connections(2)    # ...and it reconnects

    Scripting answers::

        def failing_call(params, ctx):
            raise FakeError(-32000, "tool exploded")

        server.on("tools/call", failing_call)
        server.on("ping", lambda params, ctx: NO_REPLY)      # never answered

        gate = threading.Event()

        @server.on("resources/subscribe", concurrent=True)  # holds only this request
        def slow_subscribe(params, ctx):
            ctx.wait(gate)                # returns early if the connection ends
            return {}

    A modern peer (``era="modern"``) answers ``server/discover`` and
    acknowledges ``subscriptions/listen``; push events with
    :meth:`FakeServer.event` and end a subscription with
    :meth:`FakeServer.close_subscription`.

Threads: each connection has a handler thread (runs handlers in arrival
order) and a delivery thread (calls the client's sink, or writes the
WebSocket). ``send()`` on the client side only queues, so it never waits for a
handler. All threads are named ``exmcp-fake-...`` and :meth:`FakeServer.close`
joins them.
"""

from __future__ import annotations

import abc
import json
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Self, overload

from exmcp_actors._protocol._errors import TransportError
from exmcp_actors._transport._base import FrameSink, InvalidFrame, Transport

if TYPE_CHECKING:
    from websockets.http11 import Request, Response
    from websockets.sync.server import Server as _WsServer
    from websockets.sync.server import ServerConnection

__all__ = [
    "LEGACY_VERSIONS",
    "MODERN_VERSION",
    "NO_REPLY",
    "SUBSCRIPTION_ID_KEY",
    "FakeConnection",
    "FakeError",
    "FakeServer",
    "Handler",
    "MemoryTransport",
]

_log = logging.getLogger("exmcp_actors.testing")

#: The revisions answered by ``initialize`` (the legacy era), oldest first.
LEGACY_VERSIONS: Final[tuple[str, ...]] = (
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
)
#: The modern revision: no handshake, ``server/discover``, ``subscriptions/listen``.
MODERN_VERSION: Final = "2026-07-28"
#: The ``_meta`` key that stamps acknowledgments, events and listen results.
SUBSCRIPTION_ID_KEY: Final = "io.modelcontextprotocol/subscriptionId"
_PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
_CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
#: Methods that exist only in the legacy era: on a modern connection they are -32601, not a _meta error.
_LEGACY_ONLY_METHODS: Final = frozenset(
    {"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"}
)

_PARSE_ERROR: Final = -32700
_INVALID_REQUEST: Final = -32600
_METHOD_NOT_FOUND: Final = -32601
_INVALID_PARAMS: Final = -32602
_INTERNAL_ERROR: Final = -32603
_UNSUPPORTED_VERSION: Final = -32022

#: How many bytes of a bad frame an InvalidFrame keeps for the log.
_RAW_SNIPPET_BYTES: Final = 256
#: Bound on joining threads in close(); a handler stuck longer is logged, not awaited.
_JOIN_TIMEOUT: Final = 5.0
#: How often ctx.wait() re-checks whether the connection ended.
_WAIT_SLICE: Final = 0.05

Era = Literal["legacy", "modern", "both"]
Probe = Literal["error", "silent", "discover"]
ListKind = Literal["tools", "resources", "prompts"]
_ERAS: Final = ("legacy", "modern", "both")
_PROBES: Final = ("error", "silent", "discover")
_KINDS: Final = ("tools", "resources", "prompts")

#: ``handler(params, ctx)``: return a result (``None`` means ``{}``), raise
#: :class:`FakeError`, or return :data:`NO_REPLY`.
Handler = Callable[[dict[str, Any], "FakeConnection"], Any]
#: One frame on the wire, already encoded (or raw, from send_raw).
_Wire = str | bytes


class _NoReply:
    """Type of :data:`NO_REPLY`."""

    def __repr__(self) -> str:
        return "NO_REPLY"


#: Returned by a handler: never answer this request (the test may answer later
#: with :meth:`FakeConnection.respond`, or never).
NO_REPLY: Final = _NoReply()


class FakeError(Exception):
    """Raised by a handler to answer with a JSON-RPC error.

    Args:
        code: the JSON-RPC error code, e.g. ``-32602``.
        message: the error message.
        data: optional ``data`` member.
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data

    def as_error(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` object."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def _encode(message: Any) -> str:
    # Serialising at push time snapshots the message and raises TypeError to the caller.
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


def _notification(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def _stamped(params: dict[str, Any] | None, subscription_id: Any) -> dict[str, Any]:
    stamped = dict(params or {})
    meta = dict(stamped.get("_meta") or {})
    meta[SUBSCRIPTION_ID_KEY] = subscription_id
    stamped["_meta"] = meta
    return stamped


def _is_response(message: Any) -> bool:
    return isinstance(message, dict) and "id" in message and "method" not in message


def _params_match(message: Any, method: str | None, filters: dict[str, Any]) -> bool:
    if not isinstance(message, dict):
        return False
    if method is not None and message.get("method") != method:
        return False
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    return all(key in params and params[key] == value for key, value in filters.items())


def _decode_frame(data: _Wire, max_frame_bytes: int) -> Any:
    """Decode one frame as a real transport does: a JSON value or an InvalidFrame."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > max_frame_bytes:
        return InvalidFrame(
            f"frame too large: {len(raw)} bytes (limit {max_frame_bytes})",
            raw[:_RAW_SNIPPET_BYTES],
        )
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return InvalidFrame(f"invalid UTF-8: {exc}", raw[:_RAW_SNIPPET_BYTES])
    except ValueError as exc:
        return InvalidFrame(f"invalid JSON: {exc}", raw[:_RAW_SNIPPET_BYTES])


# --------------------------------------------------------------------------- endpoints


class _Endpoint(abc.ABC):
    """The client side of one connection, as its delivery thread sees it."""

    @abc.abstractmethod
    def deliver(self, frames: list[_Wire]) -> None:
        """Hand one push (one or more frames) to the client."""

    @abc.abstractmethod
    def lose(self, reason: str, *, graceful: bool) -> None:
        """End the connection from the server side."""


class _MemoryEndpoint(_Endpoint):
    def __init__(self, sink: FrameSink, max_frame_bytes: int) -> None:
        self._sink = sink
        self._max_frame_bytes = max_frame_bytes

    def deliver(self, frames: list[_Wire]) -> None:
        self._sink.frames_received([_decode_frame(frame, self._max_frame_bytes) for frame in frames])

    def lose(self, reason: str, *, graceful: bool) -> None:
        # In memory a server shutdown and an abrupt drop look the same to the client.
        self._sink.transport_lost(reason)


class _WebSocketEndpoint(_Endpoint):
    def __init__(self, ws: ServerConnection) -> None:
        self._ws = ws

    def deliver(self, frames: list[_Wire]) -> None:
        for frame in frames:
            # text=True sends bytes as an unvalidated text frame: the point of send_raw.
            self._ws.send(frame, text=True)

    def lose(self, reason: str, *, graceful: bool) -> None:
        if graceful:
            self._ws.close(1001, reason[:100])
            return
        # No close frame: shut the TCP socket so the client reads EOF mid-stream.
        try:
            self._ws.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._ws.close_socket()


class _Stop:
    """Delivery sentinel: the client closed; deliver nothing more."""


class _Lose:
    """Delivery sentinel: flush what is queued, then end the connection."""

    def __init__(self, reason: str, graceful: bool) -> None:
        self.reason = reason
        self.graceful = graceful


# --------------------------------------------------------------------------- connection


class FakeConnection:
    """One session between the fake and a client; also the ``ctx`` passed to handlers.

    Push methods on a connection return ``False`` instead of raising when the
    connection has ended, so a handler racing a drop does not fail.

    Attributes:
        number: 1 for the first connection the server accepted, 2 for the next...
        era: ``"legacy"`` once ``initialize`` was answered, ``"modern"`` once
            ``server/discover`` was, else ``None``.
        negotiated: what the client told its transport after the handshake
            (``(protocol_version, era)``), memory transport only.
        headers: the HTTP headers of the WebSocket upgrade request, names
            lower-cased (empty in memory).
        closed_by: ``"client"``, ``"drop"`` or ``"server"`` once ended.
    """

    def __init__(self, server: FakeServer, number: int, headers: dict[str, str]) -> None:
        self.number = number
        self.headers = headers
        self.era: str | None = None
        self.negotiated: tuple[str, str] | None = None
        self.closed_by: str | None = None
        self._server = server
        # One lock for all: server-wide waits read connection state.
        self._lock = server._lock
        self._ended = threading.Event()
        self._inbox: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._outbox: queue.SimpleQueue[list[_Wire] | _Stop | _Lose] = queue.SimpleQueue()
        self._subscriptions: list[str] = []
        self._listens: dict[Any, None] = {}  # ordered set of open listen ids
        self._cancelled: set[Any] = set()
        self._local = threading.local()
        self._threads: list[threading.Thread] = []
        self._delivery: threading.Thread | None = None

    def __repr__(self) -> str:
        state = f"closed by {self.closed_by}" if self.closed_by else "open"
        return f"<FakeConnection #{self.number} {state}>"

    # ---- lifecycle (private)

    def _start(self, endpoint: _Endpoint) -> None:
        prefix = f"exmcp-fake-{self.number}"
        handler = threading.Thread(target=self._handle_loop, name=f"{prefix}-handler", daemon=True)
        delivery = threading.Thread(
            target=self._deliver_loop,
            args=(endpoint,),
            name=f"{prefix}-delivery",
            daemon=True,
        )
        self._delivery = delivery
        self._threads += [handler, delivery]
        handler.start()
        delivery.start()

    def _end(self, by: str, reason: str = "", *, graceful: bool = False) -> bool:
        """End the connection once (later calls are no-ops); True if this call did."""
        with self._lock:
            if self._ended.is_set():
                return False
            self._ended.set()
            self.closed_by = by
            # Sentinels go in under the lock so no push can land behind them.
            self._outbox.put(_Stop() if by == "client" else _Lose(reason, graceful))
            self._inbox.put(None)
            self._server._changed.notify_all()
        return True

    def _join_delivery(self, timeout: float) -> None:
        thread = self._delivery
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _live_threads(self) -> list[threading.Thread]:
        with self._lock:
            return [thread for thread in self._threads if thread.is_alive()]

    def _deliver_loop(self, endpoint: _Endpoint) -> None:
        while True:
            item = self._outbox.get()
            if isinstance(item, _Stop):
                return
            if isinstance(item, _Lose):
                try:
                    endpoint.lose(item.reason, graceful=item.graceful)
                except Exception:  # a failing sink must not stop us
                    _log.debug("fake connection %d: ending failed", self.number, exc_info=True)
                return
            if self.closed_by == "client":
                continue  # the client closed: it must see nothing more
            try:
                endpoint.deliver(item)
            except Exception:  # a failing sink must not stop us
                _log.debug("fake connection %d: delivery failed", self.number, exc_info=True)

    # ---- inbound (private)

    def _receive(self, text: str) -> None:
        """A frame from the client: record it, then queue it for the handler thread."""
        try:
            message = json.loads(text)
        except ValueError:
            _log.warning(
                "fake connection %d: client sent invalid JSON: %.200r",
                self.number,
                text,
            )
            self._push(
                [
                    _encode(
                        {
                            "jsonrpc": "2.0",
                            "id": None,
                            "error": {"code": _PARSE_ERROR, "message": "Parse error"},
                        }
                    )
                ]
            )
            return
        server = self._server
        with self._lock:
            if self._ended.is_set():
                return
            server._received.append((self.number, message))
            if _is_response(message):
                try:
                    server._responses[message["id"]] = message
                except TypeError:
                    pass  # an unhashable id cannot answer anything we sent
            elif not server._silenced:
                # Parsed again by the handler thread: handlers share nothing with
                # `received`.
                self._inbox.put(text)
            server._changed.notify_all()

    def _handle_loop(self) -> None:
        while True:
            text = self._inbox.get()
            if text is None or self._ended.is_set():
                return
            try:
                self._dispatch(json.loads(text))
            except Exception:  # keep serving the next message
                _log.exception("fake connection %d: dispatch failed", self.number)

    def _dispatch(self, message: Any) -> None:
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            request_id = message.get("id") if isinstance(message, dict) else None
            self._answer(
                request_id,
                error={"code": _INVALID_REQUEST, "message": "Invalid Request"},
            )
            return
        method: str = message["method"]
        has_id = "id" in message
        request_id = message.get("id")
        params = message.get("params")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            if has_id:
                self._answer(
                    request_id,
                    error={
                        "code": _INVALID_PARAMS,
                        "message": "params must be an object",
                    },
                )
            return
        with self._lock:
            if method == "notifications/cancelled":
                cancelled = params.get("requestId")
                try:
                    self._cancelled.add(cancelled)
                    # How stdio/WebSocket clients end a subscription.
                    self._listens.pop(cancelled, None)
                except TypeError:
                    pass
            elif method == "subscriptions/listen" and has_id:
                try:
                    self._listens[request_id] = None
                except TypeError:
                    pass
            handler, concurrent = self._server._handler_for(method)
        if handler is None:
            if has_id:
                self._answer(
                    request_id,
                    error={
                        "code": _METHOD_NOT_FOUND,
                        "message": f"Method not found: {method}",
                    },
                )
            return
        if has_id and self.era == "modern" and self._server.check_meta:
            why = _modern_meta_problem(method, params)
            if why is not None:
                self._answer(request_id, error={"code": _INVALID_PARAMS, "message": f"Invalid params: {why}"})
                return
        if not concurrent:
            self._invoke(handler, message, params)
            return
        thread = threading.Thread(
            target=self._invoke,
            args=(handler, message, params),
            name=f"exmcp-fake-{self.number}-{method}",
            daemon=True,
        )
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    def _invoke(self, handler: Handler, message: dict[str, Any], params: dict[str, Any]) -> None:
        has_id = "id" in message
        self._local.message = message
        try:
            try:
                result = handler(params, self)
            except FakeError as exc:
                if has_id:
                    self._answer(message["id"], error=exc.as_error())
                return
            except Exception as exc:  # a buggy handler answers -32603
                _log.exception("fake handler for %r failed", message["method"])
                if has_id:
                    self._answer(
                        message["id"],
                        error={
                            "code": _INTERNAL_ERROR,
                            "message": f"{type(exc).__name__}: {exc}",
                        },
                    )
                return
            if has_id and result is not NO_REPLY:
                self._answer(message["id"], result={} if result is None else result)
        finally:
            self._local.message = None

    def _answer(
        self,
        request_id: Any,
        *,
        result: Any = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        # Automatic answers obey silence(); explicit respond() calls do not.
        if self._server._silenced:
            return
        if error is not None:
            self.respond_error(request_id, error["code"], error["message"], error.get("data"))
        else:
            self.respond(request_id, result)

    def _push(self, frames: list[_Wire], logged: Sequence[Any] | None = None) -> bool:
        with self._lock:
            if self._ended.is_set():
                return False
            self._outbox.put(frames)
            self._server._sent.extend((self.number, item) for item in (logged if logged is not None else frames))
        return True

    def _push_message(self, message: Any) -> bool:
        text = _encode(message)
        # `sent` keeps a decoded copy, so later changes to `message` do not show.
        return self._push([text], [json.loads(text)])

    def _finish_request(self, request_id: Any) -> None:
        with self._lock:
            try:
                self._listens.pop(request_id, None)
            except TypeError:
                pass

    def _cancel_stream(self, request_id: Any) -> None:
        with self._lock:
            try:
                self._listens.pop(request_id, None)
            except TypeError:
                pass
            self._server._stream_cancels.append((self.number, request_id))
            self._server._changed.notify_all()

    # ---- the current request (thread-local, so concurrent handlers each see their own)

    @property
    def message(self) -> dict[str, Any] | None:
        """The request or notification being handled on this thread, else ``None``."""
        message: dict[str, Any] | None = getattr(self._local, "message", None)
        return message

    @property
    def request_id(self) -> Any:
        """The id of the request handled on this thread (``None`` outside a handler)."""
        message = self.message
        return None if message is None else message.get("id")

    @property
    def method(self) -> str | None:
        """The method being handled on this thread (``None`` outside a handler)."""
        message = self.message
        return None if message is None else message.get("method")

    def is_cancelled(self, request_id: Any = None) -> bool:
        """Whether the client sent ``notifications/cancelled`` for ``request_id``.

        ``request_id`` defaults to the request being handled on this thread.
        """
        request_id = self.request_id if request_id is None else request_id
        with self._lock:
            try:
                return request_id in self._cancelled
            except TypeError:
                return False

    def wait(self, event: threading.Event, timeout: float = 5.0) -> bool:
        """Wait for ``event`` in a handler; give up when the connection or server ends.

        Returns:
            True if the event was set, False on timeout or when the connection ended.
        """
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if event.wait(min(remaining, _WAIT_SLICE)):
                return True
            if self._ended.is_set() or self._server._closing.is_set():
                return False

    # ---- state

    @property
    def closed(self) -> bool:
        """Whether the connection has ended (either side)."""
        return self._ended.is_set()

    def wait_closed(self, timeout: float = 5.0) -> bool:
        """Wait until the connection ends; returns whether it did within ``timeout``."""
        return self._ended.wait(timeout)

    @property
    def subscriptions(self) -> list[str]:
        """Legacy ``resources/subscribe`` URIs currently held, in subscription order."""
        with self._lock:
            return list(self._subscriptions)

    @property
    def listens(self) -> list[Any]:
        """Ids of ``subscriptions/listen`` requests neither answered nor cancelled."""
        with self._lock:
            return list(self._listens)

    # ---- pushing

    def notify(self, method: str, params: dict[str, Any] | None = None) -> bool:
        """Send a notification; ``params=None`` omits the member."""
        return self._push_message(_notification(method, params))

    def send(self, message: Any) -> bool:
        """Send any JSON value as one frame, as is (no ``jsonrpc`` member added)."""
        return self._push_message(message)

    def send_raw(self, data: str | bytes) -> bool:
        """Send one frame verbatim; the client decodes it as a real transport would."""
        return self._push([data])

    def send_batch(self, frames: Iterable[Any]) -> bool:
        """Send several frames in one delivery (one ``frames_received`` call in memory).

        Each item is a message (sent as JSON) or ``str``/``bytes`` (sent raw).
        """
        wire: list[_Wire] = []
        logged: list[Any] = []
        for item in frames:
            if isinstance(item, str | bytes):
                wire.append(item)
                logged.append(item)
            else:
                wire.append(_encode(item))
                logged.append(json.loads(wire[-1]))
        return self._push(wire, logged)

    def respond(self, request_id: Any, result: Any) -> bool:
        """Answer a request with ``result``, e.g. one a handler left with NO_REPLY."""
        self._finish_request(request_id)
        return self._push_message({"jsonrpc": "2.0", "id": request_id, "result": result})

    def respond_error(self, request_id: Any, code: int, message: str, data: Any = None) -> bool:
        """Answer a request with a JSON-RPC error."""
        self._finish_request(request_id)
        return self._push_message(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "error": FakeError(code, message, data).as_error(),
            }
        )

    def acknowledge(self, notifications: dict[str, Any], *, subscription_id: Any = None) -> bool:
        """Send ``notifications/subscriptions/acknowledged`` for ``notifications``.

        ``subscription_id`` defaults to the id of the listen request being handled,
        so a listen handler can ack a narrower or wider filter than requested.
        """
        sub = self.request_id if subscription_id is None else subscription_id
        return self.notify(
            "notifications/subscriptions/acknowledged",
            {"_meta": {SUBSCRIPTION_ID_KEY: sub}, "notifications": notifications},
        )

    def event(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        subscription_id: Any = None,
    ) -> bool:
        """Send a modern event: ``params._meta`` stamped with the subscription id.

        ``subscription_id`` defaults to the listen request being handled.
        """
        sub = self.request_id if subscription_id is None else subscription_id
        return self.notify(method, _stamped(params, sub))

    def close_subscription(self, subscription_id: Any = None, result: dict[str, Any] | None = None) -> bool:
        """Gracefully end a listen by answering it.

        ``result`` defaults to
        ``{"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: id}}``;
        ``subscription_id`` to the listen request being handled.
        """
        sub = self.request_id if subscription_id is None else subscription_id
        if result is None:
            result = {"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: sub}}
        return self.respond(sub, result)

    # ---- faults

    def drop(self, reason: str = "connection dropped by FakeServer") -> bool:
        """Abruptly end this connection: queued frames go out, then the loss."""
        return self._end("drop", reason)


# --------------------------------------------------------------------------- transport


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

    def __init__(self, server: FakeServer, *, stream_cancel: bool = False) -> None:
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
            conn._join_delivery(_JOIN_TIMEOUT)

    def describe(self) -> str:
        """``memory:fake#<connection number>``."""
        conn = self._conn
        return f"memory:fake#{conn.number}" if conn is not None else "memory:fake"


# --------------------------------------------------------------------------- server


def _default_capabilities() -> dict[str, Any]:
    return {
        "resources": {"subscribe": True, "listChanged": True},
        "tools": {"listChanged": True},
        "prompts": {"listChanged": True},
    }


def _modern_meta_problem(method: str, params: dict[str, Any]) -> str | None:
    """What a modern request's ``_meta`` envelope lacks, or None when it is complete."""
    if method == "server/discover" or method in _LEGACY_ONLY_METHODS:
        return None  # the probe may come bare; legacy-only methods are -32601 anyway
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        return "params._meta is required on every 2026-07-28 request"
    if meta.get(_PROTOCOL_VERSION_KEY) != MODERN_VERSION:
        return f"params._meta[{_PROTOCOL_VERSION_KEY!r}] must be {MODERN_VERSION!r}"
    if not isinstance(meta.get(_CLIENT_CAPABILITIES_KEY), dict):
        return f"params._meta[{_CLIENT_CAPABILITIES_KEY!r}] must be an object"
    return None


class FakeServer:
    """A scriptable MCP peer for tests; thread-safe, and a context manager.

    Args:
        era: ``"legacy"`` answers ``initialize``; ``"modern"`` answers
            ``server/discover`` and refuses ``initialize``; ``"both"`` answers both.
        protocol_version: what a legacy ``initialize`` answers when the client
            offers a version outside :data:`LEGACY_VERSIONS`.
        capabilities: advertised capabilities (default: resources with
            subscribe and listChanged, tools and prompts with listChanged).
        server_info: ``serverInfo``
            (default ``{"name": "exmcp-fake", "version": "0"}``).
        probe: how a legacy-only server treats ``server/discover``:
            ``"error"`` (-32601), ``"silent"`` (never answers) or
            ``"discover"`` (a result listing only legacy versions).
        instructions: optional ``instructions`` for initialize/discover results.
        tools: items for ``tools/list`` (default: one ``echo`` tool).
        resources: items for ``resources/list`` (default: one text resource).
        prompts: items for ``prompts/list`` (default: one ``greet`` prompt).
        page_size: paginate the three lists with ``nextCursor`` (default: one page).
        check_meta: on a modern connection (once ``server/discover`` was
            answered), answer -32602 to a request whose ``params._meta`` lacks
            ``io.modelcontextprotocol/protocolVersion`` (the modern version) or
            ``io.modelcontextprotocol/clientCapabilities`` (an object), as
            2026-07-28 requires of every request.

    The plain attributes ``protocol_version``, ``capabilities``,
    ``server_info``, ``probe``, ``instructions``, ``page_size`` and ``check_meta`` may be
    changed at any time; they apply to messages handled afterwards.

    Built-in methods: ``initialize``, ``ping``, ``server/discover``,
    ``resources/subscribe`` / ``unsubscribe`` (tracked per connection),
    ``tools/list``, ``resources/list``, ``prompts/list``, ``tools/call``
    (echoes the arguments as text), ``resources/read``, ``prompts/get``,
    ``logging/setLevel``, ``subscriptions/listen``. Anything else with an
    id gets -32601. Replace any of them with :meth:`on`.
    """

    def __init__(
        self,
        *,
        era: Era = "legacy",
        protocol_version: str = "2025-11-25",
        capabilities: dict[str, Any] | None = None,
        server_info: dict[str, Any] | None = None,
        probe: Probe = "error",
        instructions: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        resources: list[dict[str, Any]] | None = None,
        prompts: list[dict[str, Any]] | None = None,
        page_size: int | None = None,
        check_meta: bool = True,
    ) -> None:
        if era not in _ERAS:
            raise ValueError(f"era must be one of {_ERAS}, not {era!r}")
        if probe not in _PROBES:
            raise ValueError(f"probe must be one of {_PROBES}, not {probe!r}")
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._closing = threading.Event()
        self._era: Era = era
        self.protocol_version = protocol_version
        self.capabilities: dict[str, Any] = _default_capabilities() if capabilities is None else capabilities
        self.server_info: dict[str, Any] = (
            {"name": "exmcp-fake", "version": "0"} if server_info is None else server_info
        )
        self.probe: Probe = probe
        self.instructions = instructions
        self.page_size = page_size
        self.check_meta = check_meta
        self._items: dict[str, list[dict[str, Any]]] = {
            "tools": list(tools)
            if tools is not None
            else [
                {
                    "name": "echo",
                    "description": "Echo the arguments back as text.",
                    "inputSchema": {"type": "object"},
                }
            ],
            "resources": list(resources)
            if resources is not None
            else [
                {
                    "uri": "file:///fake/readme.txt",
                    "name": "readme.txt",
                    "mimeType": "text/plain",
                }
            ],
            "prompts": list(prompts)
            if prompts is not None
            else [
                {
                    "name": "greet",
                    "description": "Say hello.",
                    "arguments": [{"name": "who", "required": False}],
                }
            ],
        }
        self._resource_texts: dict[str, str] = {}
        self._handlers: dict[str, tuple[Handler, bool]] = {}
        self._defaults: dict[str, Handler] = {
            "initialize": self._initialize,
            "ping": self._ping,
            "logging/setLevel": self._ping,
            "server/discover": self._discover,
            "resources/subscribe": self._subscribe,
            "resources/unsubscribe": self._unsubscribe,
            "tools/list": self._lister("tools"),
            "resources/list": self._lister("resources"),
            "prompts/list": self._lister("prompts"),
            "tools/call": self._call_tool,
            "resources/read": self._read_resource,
            "prompts/get": self._get_prompt,
            "subscriptions/listen": self._listen,
        }
        self._connections: list[FakeConnection] = []
        self._open_attempts = 0
        self._received: list[tuple[int, Any]] = []
        self._sent: list[tuple[int, Any]] = []
        self._responses: dict[Any, dict[str, Any]] = {}
        self._stream_cancels: list[tuple[int, Any]] = []
        self._request_ids = 0
        self._silenced = False
        self._refusing = False
        self._refuse_left: int | None = None
        self._hang = False
        self._accepts = 0  # bumped by accept(), wakes hung opens
        self._ws_server: _WsServer | None = None
        self._ws_thread: threading.Thread | None = None
        self._ws_url: str | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<FakeServer era={self._era} connections={self.connections}>"

    # ------------------------------------------------------------------ transports

    def transport(self, *, stream_cancel: bool = False) -> MemoryTransport:
        """A new :class:`MemoryTransport` connected to this server."""
        return MemoryTransport(self, stream_cancel=stream_cancel)

    def serve_websocket(self) -> str:
        """Serve this fake over a real WebSocket too; returns ``ws://127.0.0.1:<port>``.

        Subprotocol ``"mcp"``, one JSON message per text frame. Idempotent.
        ``refuse()`` rejects the upgrade with HTTP 503; ``drop()`` shuts the
        TCP socket without a close frame; ``close()`` sends close code 1001.
        Needs the ``websockets`` package.
        """
        from websockets.sync.server import serve
        from websockets.typing import Subprotocol

        with self._lock:
            if self._closing.is_set():
                raise RuntimeError("FakeServer is closed")
            if self._ws_url is not None:
                return self._ws_url
            ws_server = serve(
                self._ws_handler,
                "127.0.0.1",
                0,
                subprotocols=[Subprotocol("mcp")],
                process_request=self._ws_process_request,
                compression=None,
                ping_interval=None,  # no keepalive traffic: tests stay deterministic
                close_timeout=1.0,
                max_size=None,
                logger=logging.getLogger("exmcp_actors.testing.websockets"),
            )
            port = ws_server.socket.getsockname()[1]
            thread = threading.Thread(target=ws_server.serve_forever, name="exmcp-fake-ws-accept", daemon=True)
            thread.start()
            self._ws_server, self._ws_thread = ws_server, thread
            self._ws_url = f"ws://127.0.0.1:{port}"
            return self._ws_url

    def _ws_process_request(self, ws: ServerConnection, request: Request) -> Response | None:
        try:
            self._admit(timeout=30.0)
        except TransportError as exc:
            return ws.respond(503, f"{exc}\n")
        return None

    def _ws_handler(self, ws: ServerConnection) -> None:
        from websockets.exceptions import ConnectionClosed

        headers = {key.lower(): value for key, value in ws.request.headers.raw_items()} if ws.request else {}
        with self._lock:
            if self._closing.is_set():
                return
            conn = self._new_connection(headers)
            conn._start(_WebSocketEndpoint(ws))
        # This websockets-owned thread is the connection's reader: name it like ours.
        threading.current_thread().name = f"exmcp-fake-{conn.number}-ws-reader"
        ws.recv_events_thread.name = f"exmcp-fake-{conn.number}-ws-events"
        try:
            while True:
                data = ws.recv()
                conn._receive(data if isinstance(data, str) else data.decode("utf-8", "replace"))
        except ConnectionClosed:
            pass
        finally:
            conn._end("client")

    def _admit(self, *, timeout: float) -> None:
        """Count an open attempt and apply refuse(); TransportError when refused."""
        deadline = time.monotonic() + timeout
        with self._changed:
            self._open_attempts += 1
            self._changed.notify_all()
            if self._closing.is_set():
                raise TransportError("FakeServer is closed")
            if not self._refusing:
                return
            hang = self._hang
            if self._refuse_left is not None:
                self._refuse_left -= 1
                if self._refuse_left <= 0:
                    self._refusing, self._refuse_left, self._hang = False, None, False
            if not hang:
                raise TransportError("connection refused by FakeServer")
            accepts = self._accepts
            released = self._changed.wait_for(
                lambda: self._closing.is_set() or self._accepts != accepts,
                timeout=max(0.0, deadline - time.monotonic()),
            )
            if self._closing.is_set():
                raise TransportError("FakeServer is closed")
            if not released:
                raise TransportError(f"FakeServer did not answer within {timeout}s")

    def _new_connection(self, headers: dict[str, str]) -> FakeConnection:
        # Caller holds the lock.
        conn = FakeConnection(self, len(self._connections) + 1, headers)
        self._connections.append(conn)
        self._changed.notify_all()
        return conn

    def _open_memory(self, sink: FrameSink, *, timeout: float, max_frame_bytes: int) -> FakeConnection:
        self._admit(timeout=timeout)
        with self._lock:
            if self._closing.is_set():
                raise TransportError("FakeServer is closed")
            conn = self._new_connection({})
            # Started under the lock so close() never sees a connection without threads.
            conn._start(_MemoryEndpoint(sink, max_frame_bytes))
        return conn

    # ------------------------------------------------------------------ scripting

    @overload
    def on(self, method: str, handler: Handler, *, concurrent: bool = False) -> Handler: ...

    @overload
    def on(self, method: str, handler: None = None, *, concurrent: bool = False) -> Callable[[Handler], Handler]: ...

    def on(
        self, method: str, handler: Handler | None = None, *, concurrent: bool = False
    ) -> Handler | Callable[[Handler], Handler]:
        """Handle ``method`` with ``handler(params, ctx)``; usable as a decorator.

        The handler returns the result (``None`` means ``{}``), raises
        :class:`FakeError`, or returns :data:`NO_REPLY`; it may push with
        ``ctx.notify(...)`` first. Handlers of one connection run one at a time
        in arrival order on its handler thread; ``concurrent=True`` runs each
        call on a thread of its own instead, so a held request (waiting on an
        event the test controls) does not hold up later messages.
        Notifications (no id) reach handlers too; their return is ignored.
        """

        def register(fn: Handler) -> Handler:
            with self._lock:
                self._handlers[method] = (fn, concurrent)
            return fn

        return register if handler is None else register(handler)

    def off(self, method: str) -> None:
        """Forget the handler set with :meth:`on`; any built-in one applies again."""
        with self._lock:
            self._handlers.pop(method, None)

    def default_handler(self, method: str) -> Handler | None:
        """The built-in handler of ``method``, e.g. to call it from an override."""
        return self._defaults.get(method)

    def _handler_for(self, method: str) -> tuple[Handler | None, bool]:
        with self._lock:
            if method in self._handlers:
                return self._handlers[method]
            return self._defaults.get(method), False

    def set_items(self, kind: ListKind, items: list[dict[str, Any]]) -> None:
        """Replace what ``<kind>/list`` returns (tools, resources or prompts)."""
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, not {kind!r}")
        with self._lock:
            self._items[kind] = list(items)

    def set_resource_text(self, uri: str, text: str) -> None:
        """What ``resources/read`` returns for ``uri`` (else ``"contents of <uri>"``)."""
        with self._lock:
            self._resource_texts[uri] = text

    @property
    def era(self) -> Era:
        """The era this server speaks; see :meth:`set_era`."""
        return self._era

    def set_era(self, era: Era) -> None:
        """Switch era, e.g. to ``"modern"`` before a reconnect.

        It applies to messages handled afterwards, on every connection.
        """
        if era not in _ERAS:
            raise ValueError(f"era must be one of {_ERAS}, not {era!r}")
        self._era = era

    # ------------------------------------------------------------------ observing

    @property
    def received(self) -> list[tuple[int, Any]]:
        """A copy of every message clients sent: ``(connection_number, message)``."""
        with self._lock:
            return list(self._received)

    @property
    def sent(self) -> list[tuple[int, Any]]:
        """A copy of everything pushed to clients: ``(connection_number, frame)``."""
        with self._lock:
            return list(self._sent)

    @property
    def stream_cancels(self) -> list[tuple[int, Any]]:
        """``(connection_number, request_id)`` of each HTTP-like ``cancel_stream``."""
        with self._lock:
            return list(self._stream_cancels)

    def messages(
        self,
        method: str | None = None,
        *,
        connection: int | None = None,
        **param_filters: Any,
    ) -> list[Any]:
        """Received messages with ``method`` (any if None) and matching params."""
        with self._lock:
            return [
                message
                for number, message in self._received
                if (connection is None or number == connection) and _params_match(message, method, param_filters)
            ]

    def count(self, method: str, *, connection: int | None = None, **param_filters: Any) -> int:
        """How many received messages match.

        Example: ``server.count("resources/subscribe", uri="file:///a")``.
        """
        return len(self.messages(method, connection=connection, **param_filters))

    def wait_for(
        self,
        predicate: str | Callable[[Any], bool],
        timeout: float = 5.0,
        *,
        connection: int | None = None,
        **param_filters: Any,
    ) -> tuple[int, Any]:
        """Wait until a received message matches; returns ``(connection, message)``.

        Args:
            predicate: a method name, or a function of the message (lookup
                errors inside it count as no match).
            timeout: seconds to wait.
            connection: only look at this connection's messages.
            **param_filters: params members the message must have, e.g. ``uri=...``.

        Raises:
            AssertionError: nothing matched in time; it lists what was received.
        """

        def matches(message: Any) -> bool:
            if isinstance(predicate, str):
                return _params_match(message, predicate, param_filters)
            try:
                return bool(predicate(message)) and _params_match(message, None, param_filters)
            except (KeyError, IndexError, TypeError, AttributeError):
                return False

        def find() -> tuple[int, Any] | None:
            for number, message in self._received:
                if (connection is None or number == connection) and matches(message):
                    return number, message
            return None

        with self._changed:
            found = self._changed.wait_for(find, timeout)
            if found is None:
                wanted = f"{predicate!r} {param_filters or ''}"
                raise AssertionError(f"no message matching {wanted} within {timeout}s; " + self._describe_received())
            return found

    def _describe_received(self) -> str:
        lines = [f"  #{number}: {_encode(message)[:300]}" for number, message in self._received[-50:]]
        return "received:\n" + "\n".join(lines) if lines else "received nothing"

    @property
    def connections(self) -> int:
        """How many connections were opened so far."""
        with self._lock:
            return len(self._connections)

    @property
    def open_attempts(self) -> int:
        """How many times clients tried to open a connection (refused ones too)."""
        with self._lock:
            return self._open_attempts

    def connection(self, number: int | None = None) -> FakeConnection:
        """Connection ``number`` (1-based), or the latest one.

        Raises:
            LookupError: there is no such connection.
        """
        with self._lock:
            if not self._connections:
                raise LookupError("no client has connected to the FakeServer yet")
            if number is None:
                return self._connections[-1]
            if not 1 <= number <= len(self._connections):
                raise LookupError(f"no connection #{number} (there are {len(self._connections)})")
            return self._connections[number - 1]

    def wait_connections(self, n: int, timeout: float = 5.0) -> FakeConnection:
        """Wait until ``n`` connections were opened; returns connection ``n``.

        Raises:
            AssertionError: fewer than ``n`` in time.
        """
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._connections) >= n, timeout):
                raise AssertionError(f"{len(self._connections)} connection(s) within {timeout}s, expected {n}")
            return self._connections[n - 1]

    def subscriptions(self, conn: int | None = None) -> list[str]:
        """Legacy URIs subscribed now on connection ``conn`` (default: the latest)."""
        with self._lock:
            if not self._connections:
                return []
            return self.connection(conn).subscriptions

    def open_listens(self, conn: int | None = None) -> list[Any]:
        """Ids of listens still open on connection ``conn`` (default: the latest)."""
        with self._lock:
            if not self._connections:
                return []
            return self.connection(conn).listens

    def wait_response(self, request_id: Any, timeout: float = 5.0) -> dict[str, Any]:
        """Wait for the client's response to a :meth:`request`; returns the message.

        Raises:
            AssertionError: no response in time.
        """
        with self._changed:
            if not self._changed.wait_for(lambda: request_id in self._responses, timeout):
                raise AssertionError(f"no response to {request_id!r} within {timeout}s; " + self._describe_received())
            return self._responses[request_id]

    # ------------------------------------------------------------------ pushing

    def _target(self, connection: int | None) -> FakeConnection:
        return self.connection(connection)

    @staticmethod
    def _ensure(conn: FakeConnection, pushed: bool) -> None:
        if not pushed:
            raise RuntimeError(f"connection #{conn.number} is closed (by {conn.closed_by})")

    def notify(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        connection: int | None = None,
    ) -> None:
        """Send a notification on ``connection`` (default: the latest).

        Raises:
            RuntimeError: that connection has ended.
            LookupError: no such connection.
        """
        conn = self._target(connection)
        self._ensure(conn, conn.notify(method, params))

    def send(self, message: Any, *, connection: int | None = None) -> None:
        """Send any JSON value as one frame, as is. Raises like :meth:`notify`."""
        conn = self._target(connection)
        self._ensure(conn, conn.send(message))

    def send_raw(self, data: str | bytes, *, connection: int | None = None) -> None:
        """Send one frame verbatim, e.g. ``"{not json"``.

        In memory the client gets an InvalidFrame;
        over WebSocket it is a raw text frame). Raises like :meth:`notify`."""
        conn = self._target(connection)
        self._ensure(conn, conn.send_raw(data))

    def send_batch(self, frames: Iterable[Any], *, connection: int | None = None) -> None:
        """Deliver several frames at once: one ``frames_received`` call in memory.

        Over WebSocket it is a burst of frames. Items are messages or raw
        ``str``/``bytes``. Raises like :meth:`notify`.
        """
        conn = self._target(connection)
        self._ensure(conn, conn.send_batch(frames))

    def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        connection: int | None = None,
    ) -> str:
        """Send a server-to-client request; returns its id (``"fake-<n>"``).

        Wait for the answer with :meth:`wait_response`.
        """
        conn = self._target(connection)
        with self._lock:
            self._request_ids += 1
            request_id = f"fake-{self._request_ids}"
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self._ensure(conn, conn.send(message))
        return request_id

    def updated(self, uri: str, *, connection: int | None = None) -> None:
        """Send legacy ``notifications/resources/updated {uri}``, subscribed or not."""
        self.notify("notifications/resources/updated", {"uri": uri}, connection=connection)

    def list_changed(self, kind: ListKind, *, connection: int | None = None) -> None:
        """Send ``notifications/<kind>/list_changed`` (no params)."""
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, not {kind!r}")
        self.notify(f"notifications/{kind}/list_changed", connection=connection)

    def _listen_target(self, subscription_id: Any, connection: int | None) -> FakeConnection:
        if connection is not None:
            return self.connection(connection)
        with self._lock:
            for conn in reversed(self._connections):
                try:
                    # Only open connections: a stale id then goes to the latest one.
                    if not conn.closed and subscription_id in conn._listens:
                        return conn
                except TypeError:
                    break
        return self.connection()

    def event(
        self,
        subscription_id: Any,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        connection: int | None = None,
    ) -> None:
        """Send a modern event stamped with ``_meta[SUBSCRIPTION_ID_KEY]``.

        It goes on the open connection where that listen is open, else on the
        latest connection (so a stale id can be tested). Raises like :meth:`notify`.
        """
        conn = self._listen_target(subscription_id, connection)
        self._ensure(conn, conn.event(method, params, subscription_id=subscription_id))

    def close_subscription(
        self,
        subscription_id: Any,
        result: dict[str, Any] | None = None,
        *,
        connection: int | None = None,
    ) -> None:
        """Gracefully end a listen by answering it.

        ``result`` defaults to
        ``{"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: id}}``.
        Raises like :meth:`notify`.
        """
        conn = self._listen_target(subscription_id, connection)
        self._ensure(conn, conn.close_subscription(subscription_id, result))

    # ------------------------------------------------------------------ faults

    def drop(
        self,
        reason: str = "connection dropped by FakeServer",
        *,
        connection: int | None = None,
    ) -> None:
        """Abruptly lose ``connection`` (default: the latest).

        Frames already pushed are delivered first, then the client's sink gets
        ``transport_lost(reason)`` once (memory) or the TCP socket is shut
        without a close frame (WebSocket). No-op if it already ended.
        """
        self._target(connection).drop(reason)

    def refuse(self, n: int | None = None, *, hang: bool = False) -> None:
        """Refuse the next ``n`` open attempts (if None, all until :meth:`accept`).

        A refused open raises TransportError (memory) or gets HTTP 503
        (WebSocket). With ``hang=True`` a refused open instead waits, like an
        unresponsive host, until its timeout (then TransportError) or until
        :meth:`accept` lets it through.
        """
        if n is not None and n <= 0:
            raise ValueError("n must be positive or None")
        with self._changed:
            self._refusing, self._refuse_left, self._hang = True, n, hang

    def accept(self) -> None:
        """Stop refusing; hung opens go through."""
        with self._changed:
            self._refusing, self._refuse_left, self._hang = False, None, False
            self._accepts += 1
            self._changed.notify_all()

    def silence(self) -> None:
        """Stop answering, like a hung server, until :meth:`resume`.

        Incoming messages are still recorded in :attr:`received` but never
        handled, and automatic answers are not sent. Explicit pushes still go
        out, and connections still open.
        """
        self._silenced = True

    def resume(self) -> None:
        """Undo :meth:`silence` from now on (silenced messages stay unanswered)."""
        self._silenced = False

    def close(self) -> None:
        """End every connection (clients see it lost), stop serving, join all threads.

        Idempotent. A handler still blocked after a few seconds is logged, not awaited.
        """
        with self._changed:
            self._closing.set()
            self._changed.notify_all()  # wakes hung opens
            connections = list(self._connections)
            ws_server, ws_thread = self._ws_server, self._ws_thread
            self._ws_server = self._ws_thread = None
        for conn in connections:
            conn._end("server", "FakeServer closed", graceful=True)
        if ws_server is not None:
            ws_server.shutdown()
        if ws_thread is not None:
            ws_thread.join(_JOIN_TIMEOUT)
        deadline = time.monotonic() + _JOIN_TIMEOUT
        current = threading.current_thread()
        for conn in connections:
            for thread in conn._live_threads():
                if thread is not current:
                    thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [thread.name for conn in connections for thread in conn._live_threads() if thread is not current]
        if stuck:
            _log.warning(
                "FakeServer.close: threads still running (blocked handlers?): %s",
                ", ".join(stuck),
            )

    # ---------------------------------------------------------- built-in handlers

    def _initialize(self, params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        if self._era == "modern":
            raise FakeError(
                _METHOD_NOT_FOUND,
                f"Method not found: initialize (this server speaks only {MODERN_VERSION})",
            )
        offered = params.get("protocolVersion")
        version = offered if offered in LEGACY_VERSIONS else self.protocol_version
        ctx.era = "legacy"
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": self.capabilities,
            "serverInfo": self.server_info,
        }
        if self.instructions is not None:
            result["instructions"] = self.instructions
        return result

    def _ping(self, params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        if self._era == "modern":
            raise FakeError(_METHOD_NOT_FOUND, f"Method not found: {ctx.method}")
        return {}

    def _discover(self, params: dict[str, Any], ctx: FakeConnection) -> Any:
        if self._era == "legacy":
            if self.probe == "silent":
                return NO_REPLY  # a stdio server that ignores unknown requests
            if self.probe == "error":
                raise FakeError(_METHOD_NOT_FOUND, "Method not found: server/discover")
            supported = list(reversed(LEGACY_VERSIONS))
        elif self._era == "modern":
            supported = [MODERN_VERSION]
        else:
            supported = [MODERN_VERSION, *reversed(LEGACY_VERSIONS)]
        meta = params.get("_meta")
        requested = meta.get(_PROTOCOL_VERSION_KEY) if isinstance(meta, dict) else None
        if requested is not None and requested not in supported:
            raise FakeError(
                _UNSUPPORTED_VERSION,
                "Unsupported protocol version",
                {"supported": supported, "requested": requested},
            )
        if self._era != "legacy":
            ctx.era = "modern"
        result: dict[str, Any] = {
            "supportedVersions": supported,
            "capabilities": self.capabilities,
            "serverInfo": self.server_info,
        }
        if self.instructions is not None:
            result["instructions"] = self.instructions
        return result

    def _require_legacy(self, ctx: FakeConnection) -> None:
        if self._era == "modern":
            raise FakeError(_METHOD_NOT_FOUND, f"Method not found: {ctx.method}")

    @staticmethod
    def _uri(params: dict[str, Any]) -> str:
        uri = params.get("uri")
        if not isinstance(uri, str) or not uri:
            raise FakeError(_INVALID_PARAMS, "params.uri must be a non-empty string")
        return uri

    def _subscribe(self, params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        self._require_legacy(ctx)
        uri = self._uri(params)
        with self._changed:
            if uri not in ctx._subscriptions:
                ctx._subscriptions.append(uri)
            self._changed.notify_all()
        return {}

    def _unsubscribe(self, params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        self._require_legacy(ctx)
        uri = self._uri(params)
        with self._changed:
            if uri in ctx._subscriptions:
                ctx._subscriptions.remove(uri)
            self._changed.notify_all()
        return {}

    def _lister(self, kind: str) -> Handler:
        def list_items(params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
            with self._lock:
                items = list(self._items[kind])
            size = self.page_size
            cursor = params.get("cursor")
            start = 0
            if cursor is not None:
                # Opaque on purpose: a client doing arithmetic on cursors breaks.
                if not isinstance(cursor, str) or not cursor.startswith("page:") or not cursor[5:].isdigit():
                    raise FakeError(_INVALID_PARAMS, f"Invalid cursor: {cursor!r}")
                start = int(cursor[5:])
            end = len(items) if size is None else start + size
            result: dict[str, Any] = {kind: items[start:end]}
            if end < len(items):
                result["nextCursor"] = f"page:{end}"
            return result

        return list_items

    def _call_tool(self, params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        name = params.get("name")
        with self._lock:
            known = any(tool.get("name") == name for tool in self._items["tools"])
        if not known:
            raise FakeError(_INVALID_PARAMS, f"Unknown tool: {name}")
        arguments = params.get("arguments") or {}
        return {
            "content": [{"type": "text", "text": _encode(arguments)}],
            "isError": False,
        }

    def _read_resource(self, params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        uri = self._uri(params)
        with self._lock:
            text = self._resource_texts.get(uri, f"contents of {uri}")
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}

    def _get_prompt(self, params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        name = params.get("name")
        with self._lock:
            known = any(prompt.get("name") == name for prompt in self._items["prompts"])
        if not known:
            raise FakeError(_INVALID_PARAMS, f"Unknown prompt: {name}")
        arguments = params.get("arguments") or {}
        return {
            "description": f"prompt {name}",
            "messages": [
                {
                    "role": "user",
                    "content": {"type": "text", "text": f"{name} {_encode(arguments)}"},
                }
            ],
        }

    def _listen(self, params: dict[str, Any], ctx: FakeConnection) -> Any:
        if self._era == "legacy":
            raise FakeError(_METHOD_NOT_FOUND, "Method not found: subscriptions/listen")
        requested = params.get("notifications")
        # Honour exactly what was asked; override for a narrower or wider ack.
        ctx.acknowledge(requested if isinstance(requested, dict) else {})
        return NO_REPLY
