"""The fault script for opening connections: count attempts, refuse them, or hang them until accepted."""

from __future__ import annotations

import threading
import time

from exmcp_actors._protocol._errors import TransportError


class Gate:
    """Admits or refuses each attempt to open a connection, as :meth:`FakeServer.refuse` scripts.

    Args:
        changed: the server's condition (its lock guards the gate too).
        closing: set when the server closes; hung attempts then fail.
    """

    def __init__(self, changed: threading.Condition, closing: threading.Event) -> None:
        self._changed = changed
        self._closing = closing
        self._attempts = 0
        self._refusing = False
        self._refuse_left: int | None = None
        self._hang = False
        self._accepts = 0  # bumped by accept(), wakes hung opens

    @property
    def attempts(self) -> int:
        """How many times clients tried to open a connection (refused ones too)."""
        with self._changed:
            return self._attempts

    def admit(self, *, timeout: float) -> None:
        """Count an open attempt and apply refuse(); TransportError when refused."""
        deadline = time.monotonic() + timeout
        with self._changed:
            self._attempts += 1
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

    def refuse(self, n: int | None, *, hang: bool) -> None:
        """See :meth:`FakeServer.refuse`."""
        if n is not None and n <= 0:
            raise ValueError("n must be positive or None")
        with self._changed:
            self._refusing, self._refuse_left, self._hang = True, n, hang

    def accept(self) -> None:
        """See :meth:`FakeServer.accept`."""
        with self._changed:
            self._refusing, self._refuse_left, self._hang = False, None, False
            self._accepts += 1
            self._changed.notify_all()
