"""The pending-request table (sans-IO): every request in flight, and who waits for its answer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._errors import Error, RequestError
from ._events import Effects
from ._jsonrpc import Answer, RequestFailed, Response


@dataclass(eq=False, slots=True)
class Pending:
    """An in-flight request: a host's future, or an internal callback (the handshake's)."""

    method: str
    future: Any = None
    callback: Callable[[Answer], None] | None = None


class PendingTable:
    """Requests by id. Answers resolve host futures through effects; internal callbacks run at once."""

    def __init__(self, effects: Effects) -> None:
        self._pending: dict[Any, Pending] = {}
        self._fx = effects

    def __len__(self) -> int:
        return len(self._pending)

    def add(
        self, request_id: Any, method: str, *, future: Any = None, callback: Callable[[Answer], None] | None = None
    ) -> None:
        self._pending[request_id] = Pending(method, future, callback)

    def pop(self, request_id: Any) -> Pending | None:
        return self._pending.pop(request_id, None)

    def awaits_host(self, request_id: Any) -> bool:
        """Whether a host's future (not an internal callback) waits for this id."""
        pending = self._pending.get(request_id)
        return pending is not None and pending.callback is None

    def answer(self, msg: Answer) -> bool:
        """Route an answer (or the transport's failure) to whoever waits for it; False if no
        request has this id."""
        pending = self._pending.pop(msg.id, None)
        if pending is None:
            return False
        if pending.callback is not None:
            pending.callback(msg)
        elif isinstance(msg, Response):
            self._fx.resolve(pending.future, msg.result)
        elif isinstance(msg, RequestFailed):
            self._fx.reject(pending.future, msg.error)  # the transport's own words, typed as its fault
        else:
            self._fx.reject(pending.future, RequestError(msg.code, msg.message, msg.data))
        return True

    def fail_all(self, error: Error) -> None:
        """Fail every host request in flight (the connection is gone)."""
        pending, self._pending = self._pending, {}
        for item in pending.values():
            self._fx.reject(item.future, error)
