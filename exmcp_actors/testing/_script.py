"""Scripted answers: which handler answers each method, the test's over the built-in ones."""

from __future__ import annotations

import threading

from exmcp_actors.testing._protocol import Handler


class Script:
    """The handlers a test set with :meth:`FakeServer.on`, over the built-in ones.

    Args:
        lock: the server's lock.
        defaults: method name to built-in handler.
    """

    def __init__(self, lock: threading.RLock, defaults: dict[str, Handler]) -> None:
        self._lock = lock
        self._defaults = defaults
        self._handlers: dict[str, tuple[Handler, bool]] = {}

    def set(self, method: str, handler: Handler, *, concurrent: bool) -> None:
        with self._lock:
            self._handlers[method] = (handler, concurrent)

    def remove(self, method: str) -> None:
        with self._lock:
            self._handlers.pop(method, None)

    def default(self, method: str) -> Handler | None:
        return self._defaults.get(method)

    def handler_for(self, method: str) -> tuple[Handler | None, bool]:
        """The handler of ``method`` (None: unknown) and whether it runs on a thread of its own."""
        with self._lock:
            if method in self._handlers:
                return self._handlers[method]
            return self._defaults.get(method), False
