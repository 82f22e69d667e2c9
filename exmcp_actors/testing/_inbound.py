"""The inbound half of one connection: record each client frame, then run its handler and answer."""

from __future__ import annotations

import json
import logging
import queue
import threading
from typing import TYPE_CHECKING, Any

from exmcp_actors.testing._codec import encode
from exmcp_actors.testing._ids import IdSet
from exmcp_actors.testing._protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    NO_REPLY,
    PARSE_ERROR,
    FakeError,
    Handler,
    modern_meta_problem,
)

if TYPE_CHECKING:
    from exmcp_actors.testing._connection import FakeConnection
    from exmcp_actors.testing._server import FakeServer

_log = logging.getLogger("exmcp_actors.testing")


class Inbound:
    """What a connection does with the frames its client sends.

    :meth:`receive` records a frame and queues it; the handler thread
    (:meth:`thread`) dispatches queued messages in arrival order to the
    server's handlers and sends their automatic answers. A ``concurrent``
    handler runs on a thread of its own instead.

    Attributes:
        cancelled: ids named by the client's ``notifications/cancelled``.
    """

    def __init__(self, conn: FakeConnection, server: FakeServer) -> None:
        self._conn = conn
        self._server = server
        self._inbox: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._local = threading.local()
        self.cancelled = IdSet()

    @property
    def message(self) -> dict[str, Any] | None:
        """The request or notification being handled on this thread, else ``None``."""
        message: dict[str, Any] | None = getattr(self._local, "message", None)
        return message

    def thread(self, name: str) -> threading.Thread:
        """The handler thread (not yet started)."""
        return threading.Thread(target=self._loop, name=name, daemon=True)

    def close(self) -> None:
        """Let the handler thread finish; the caller holds the server lock."""
        self._inbox.put(None)

    def receive(self, text: str) -> None:
        """A frame from the client: record it, then queue it for the handler thread."""
        conn, server = self._conn, self._server
        try:
            message = json.loads(text)
        except ValueError:
            _log.warning("fake connection %d: client sent invalid JSON: %.200r", conn.number, text)
            parse_error = {"code": PARSE_ERROR, "message": "Parse error"}
            conn.send_raw(encode({"jsonrpc": "2.0", "id": None, "error": parse_error}))
            return
        with server._changed:
            if conn.closed:
                return
            if not server._journal.record_received(conn.number, message) and not server._silenced:
                # Parsed again by the handler thread: handlers share nothing with `received`.
                self._inbox.put(text)
            server._changed.notify_all()

    def _loop(self) -> None:
        while True:
            text = self._inbox.get()
            if text is None or self._conn.closed:
                return
            try:
                self._dispatch(json.loads(text))
            except Exception:  # keep serving the next message
                _log.exception("fake connection %d: dispatch failed", self._conn.number)

    def _dispatch(self, message: Any) -> None:
        conn, server = self._conn, self._server
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            self._fail(message.get("id") if isinstance(message, dict) else None, INVALID_REQUEST, "Invalid Request")
            return
        method: str = message["method"]
        has_id = "id" in message
        request_id = message.get("id")
        params = message.get("params")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            if has_id:
                self._fail(request_id, INVALID_PARAMS, "params must be an object")
            return
        with server._lock:
            if method == "notifications/cancelled":
                cancelled = params.get("requestId")
                self.cancelled.add(cancelled)
                conn._listens.discard(cancelled)  # how stdio/WebSocket clients end a subscription
            elif method == "subscriptions/listen" and has_id:
                conn._listens.add(request_id)
            handler, concurrent = server._script.handler_for(method)
        if handler is None:
            if has_id:
                self._fail(request_id, METHOD_NOT_FOUND, f"Method not found: {method}")
            return
        if has_id and conn.era == "modern" and server.check_meta:
            why = modern_meta_problem(method, params)
            if why is not None:
                self._fail(request_id, INVALID_PARAMS, f"Invalid params: {why}")
                return
        if not concurrent:
            self._invoke(handler, message, params)
            return
        name = f"exmcp-fake-{conn.number}-{method}"
        conn._spawn(threading.Thread(target=self._invoke, args=(handler, message, params), name=name, daemon=True))

    def _invoke(self, handler: Handler, message: dict[str, Any], params: dict[str, Any]) -> None:
        has_id = "id" in message
        self._local.message = message
        try:
            try:
                result = handler(params, self._conn)
            except FakeError as exc:
                if has_id:
                    self._answer(message["id"], error=exc.as_error())
                return
            except Exception as exc:  # a buggy handler answers -32603
                _log.exception("fake handler for %r failed", message["method"])
                if has_id:
                    self._fail(message["id"], INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
                return
            if has_id and result is not NO_REPLY:
                self._answer(message["id"], result={} if result is None else result)
        finally:
            self._local.message = None

    def _fail(self, request_id: Any, code: int, message: str) -> None:
        self._answer(request_id, error={"code": code, "message": message})

    def _answer(self, request_id: Any, *, result: Any = None, error: dict[str, Any] | None = None) -> None:
        # Automatic answers obey silence(); explicit respond() calls do not.
        if self._server._silenced:
            return
        if error is not None:
            self._conn.respond_error(request_id, error["code"], error["message"], error.get("data"))
        else:
            self._conn.respond(request_id, result)
