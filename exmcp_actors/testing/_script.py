"""Scripted answers: which handler answers each method (the test's over the built-in ones), and answering with it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from exmcp_actors.testing._connection import FakeConnection, Handler
from exmcp_actors.testing._protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    NO_REPLY,
    FakeError,
    modern_meta_problem,
)
from exmcp_actors.testing._shared import Shared

_log = logging.getLogger("exmcp_actors.testing")


class Script:
    """The handlers a test set with :meth:`FakeServer.on`, over the built-in ones, and how they answer.

    :meth:`answer` runs on a connection's handler thread, in arrival order; a
    ``concurrent`` handler runs on a thread of its own instead.

    Args:
        shared: what the server shares with its connections (its lock, whether it is silenced).
        defaults: method name to built-in handler.
        check_meta: the server's current ``check_meta``.
    """

    def __init__(self, shared: Shared, defaults: dict[str, Handler], check_meta: Callable[[], bool]) -> None:
        self._shared = shared
        self._defaults = defaults
        self._check_meta = check_meta
        self._handlers: dict[str, tuple[Handler, bool]] = {}

    def set(self, method: str, handler: Handler, *, concurrent: bool) -> None:
        with self._shared.lock:
            self._handlers[method] = (handler, concurrent)

    def remove(self, method: str) -> None:
        with self._shared.lock:
            self._handlers.pop(method, None)

    def default(self, method: str) -> Handler | None:
        return self._defaults.get(method)

    def handler_for(self, method: str) -> tuple[Handler | None, bool]:
        """The handler of ``method`` (None: unknown) and whether it runs on a thread of its own."""
        with self._shared.lock:
            if method in self._handlers:
                return self._handlers[method]
            return self._defaults.get(method), False

    def answer(self, conn: FakeConnection, message: Any) -> None:
        """Have one message of ``conn``'s client handled, or answer the error it deserves."""
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            request_id = message.get("id") if isinstance(message, dict) else None
            self._fail(conn, request_id, INVALID_REQUEST, "Invalid Request")
            return
        method: str = message["method"]
        has_id = "id" in message
        request_id = message.get("id")
        params = message.get("params")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            if has_id:
                self._fail(conn, request_id, INVALID_PARAMS, "params must be an object")
            return
        conn._note(message, params)
        handler, concurrent = self.handler_for(method)
        if handler is None:
            if has_id:
                self._fail(conn, request_id, METHOD_NOT_FOUND, f"Method not found: {method}")
            return
        if has_id and conn.era == "modern" and self._check_meta():
            why = modern_meta_problem(method, params)
            if why is not None:
                self._fail(conn, request_id, INVALID_PARAMS, f"Invalid params: {why}")
                return
        if not concurrent:
            self._invoke(conn, handler, message, params)
            return
        name = f"exmcp-fake-{conn.number}-{method}"
        args = (conn, handler, message, params)
        conn._spawn(threading.Thread(target=self._invoke, args=args, name=name, daemon=True))

    def _invoke(self, conn: FakeConnection, handler: Handler, message: dict[str, Any], params: dict[str, Any]) -> None:
        has_id = "id" in message
        with conn._handling(message):
            try:
                result = handler(params, conn)
            except FakeError as exc:
                if has_id:
                    self._reply(conn, message["id"], error=exc.as_error())
                return
            except Exception as exc:  # a buggy handler answers -32603
                _log.exception("fake handler for %r failed", message["method"])
                if has_id:
                    self._fail(conn, message["id"], INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
                return
            if has_id and result is not NO_REPLY:
                self._reply(conn, message["id"], result={} if result is None else result)

    def _fail(self, conn: FakeConnection, request_id: Any, code: int, message: str) -> None:
        self._reply(conn, request_id, error={"code": code, "message": message})

    def _reply(
        self, conn: FakeConnection, request_id: Any, *, result: Any = None, error: dict[str, Any] | None = None
    ) -> None:
        # Automatic answers obey silence(); explicit respond() calls do not.
        if self._shared.silenced:
            return
        if error is not None:
            conn.respond_error(request_id, error["code"], error["message"], error.get("data"))
        else:
            conn.respond(request_id, result)
