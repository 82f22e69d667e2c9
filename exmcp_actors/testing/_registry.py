"""The server's connections: numbering them as they open, finding one, waiting for one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from exmcp_actors.testing._connection import FakeConnection
from exmcp_actors.testing._endpoints import Endpoint
from exmcp_actors.testing._shared import Shared


class Registry:
    """Every connection a server opened, numbered from 1; all access under the server's lock.

    Args:
        shared: what the server shares with its connections; a new connection notifies its condition,
            and none opens once the server is closing.
        answer: what answers each client message on a connection (the server's script).
    """

    def __init__(self, shared: Shared, answer: Callable[[FakeConnection, Any], None]) -> None:
        self._shared = shared
        self._changed = shared.changed
        self._answer = answer
        self._connections: list[FakeConnection] = []

    def __len__(self) -> int:
        with self._changed:
            return len(self._connections)

    def all(self) -> list[FakeConnection]:
        """A copy of the list, oldest first."""
        with self._changed:
            return list(self._connections)

    def open(self, headers: dict[str, str], endpoint: Endpoint) -> FakeConnection | None:
        """A new, started connection to ``endpoint``; None once the server is closing."""
        with self._changed:
            if self._shared.closing.is_set():
                return None
            conn = FakeConnection(len(self._connections) + 1, headers, self._shared, self._answer)
            self._connections.append(conn)
            self._changed.notify_all()
            # Started under the lock so close() never sees a connection without threads.
            conn._start(endpoint)
        return conn

    def get(self, number: int | None = None) -> FakeConnection:
        """See :meth:`FakeServer.connection`."""
        with self._changed:
            if not self._connections:
                raise LookupError("no client has connected to the FakeServer yet")
            if number is None:
                return self._connections[-1]
            if not 1 <= number <= len(self._connections):
                raise LookupError(f"no connection #{number} (there are {len(self._connections)})")
            return self._connections[number - 1]

    def find(self, number: int | None) -> FakeConnection | None:
        """Like :meth:`get`, but None while no client has connected."""
        with self._changed:
            return self.get(number) if self._connections else None

    def wait(self, n: int, timeout: float) -> FakeConnection:
        """See :meth:`FakeServer.wait_connections`."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._connections) >= n, timeout):
                raise AssertionError(f"{len(self._connections)} connection(s) within {timeout}s, expected {n}")
            return self._connections[n - 1]

    def for_listen(self, subscription_id: Any, number: int | None) -> FakeConnection:
        """Connection ``number``; else the open one where that listen is open, else the latest."""
        if number is not None:
            return self.get(number)
        with self._changed:
            for conn in reversed(self._connections):
                # Only open connections: a stale id then goes to the latest one.
                if not conn.closed and subscription_id in conn._listens:
                    return conn
        return self.get()
