"""What one server shares with its connections: its lock, the record of the wire, closing and silence."""

from __future__ import annotations

import threading

from exmcp_actors.testing._journal import Journal


class Shared:
    """The state a server and its connections share; guarded by ``lock``.

    Attributes:
        lock: the server's one lock (server-wide waits read connection state).
        changed: its condition, notified whenever something a test may wait on changes.
        closing: set once the server closes.
        journal: what crossed the wire, on every connection.
        silenced: no message is handled and no automatic answer sent (see :meth:`FakeServer.silence`).
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.closing = threading.Event()
        self.journal = Journal(self.changed)
        self.silenced = False
