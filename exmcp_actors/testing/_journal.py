"""The server's record of the wire: what clients sent and were sent, and the waits a test runs on it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from exmcp_actors.testing._codec import encode, is_response, params_match

#: ``(connection_number, message)`` rows, oldest first.
Rows = list[tuple[int, Any]]


class Journal:
    """Everything that crossed the wire, for every connection; all access under the server's lock.

    Args:
        changed: the server's condition; recording notifies it, waits wait on it.
    """

    def __init__(self, changed: threading.Condition) -> None:
        self._changed = changed
        self.received: Rows = []
        self.sent: Rows = []
        self.stream_cancels: Rows = []
        self._responses: dict[Any, dict[str, Any]] = {}
        self._request_ids = 0

    def copy(self, rows: Rows) -> Rows:
        """A copy of ``rows`` (one of the three lists above), taken under the lock."""
        with self._changed:
            return list(rows)

    # ---- recording (the caller holds the lock)

    def record_received(self, number: int, message: Any) -> bool:
        """Record a client's message; True when it is a response (then it is not handled)."""
        self.received.append((number, message))
        if not is_response(message):
            return False
        try:
            self._responses[message["id"]] = message
        except TypeError:
            pass  # an unhashable id cannot answer anything we sent
        return True

    def record_sent(self, number: int, items: Iterable[Any]) -> None:
        self.sent.extend((number, item) for item in items)

    def record_stream_cancel(self, number: int, request_id: Any) -> None:
        self.stream_cancels.append((number, request_id))
        self._changed.notify_all()

    def next_request_id(self) -> str:
        """A fresh id for a server-to-client request: ``"fake-<n>"``."""
        with self._changed:
            self._request_ids += 1
            return f"fake-{self._request_ids}"

    # ---- queries

    def messages(self, method: str | None, connection: int | None, filters: dict[str, Any]) -> list[Any]:
        """Received messages with ``method`` (any if None) and matching params."""
        with self._changed:
            return [
                message
                for number, message in self.received
                if (connection is None or number == connection) and params_match(message, method, filters)
            ]

    def wait_for(
        self,
        predicate: str | Callable[[Any], bool],
        timeout: float,
        connection: int | None,
        filters: dict[str, Any],
    ) -> tuple[int, Any]:
        """See :meth:`FakeServer.wait_for`."""

        def matches(message: Any) -> bool:
            if isinstance(predicate, str):
                return params_match(message, predicate, filters)
            try:
                return bool(predicate(message)) and params_match(message, None, filters)
            except (KeyError, IndexError, TypeError, AttributeError):
                return False

        def find() -> tuple[int, Any] | None:
            for number, message in self.received:
                if (connection is None or number == connection) and matches(message):
                    return number, message
            return None

        with self._changed:
            found = self._changed.wait_for(find, timeout)
            if found is None:
                wanted = f"{predicate!r} {filters or ''}"
                raise AssertionError(f"no message matching {wanted} within {timeout}s; " + self._describe_received())
            return found

    def wait_response(self, request_id: Any, timeout: float) -> dict[str, Any]:
        """See :meth:`FakeServer.wait_response`."""
        with self._changed:
            if not self._changed.wait_for(lambda: request_id in self._responses, timeout):
                raise AssertionError(f"no response to {request_id!r} within {timeout}s; " + self._describe_received())
            return self._responses[request_id]

    def _describe_received(self) -> str:
        lines = [f"  #{number}: {encode(message)[:300]}" for number, message in self.received[-50:]]
        return "received:\n" + "\n".join(lines) if lines else "received nothing"
