"""What the bridges share: one rate-limited log, and the tests of a message and a callback."""

from __future__ import annotations

import logging
import threading
from typing import Any, Final

from .._protocol._messages import FINAL_TAGS
from .._protocol._ratelog import RateLimitedLog

logger = logging.getLogger("exmcp_actors.bridges")

#: Every bridge's drops and callback failures: a host's loop or window gone for good would
#: otherwise cost a record per message.
ratelog: Final = RateLimitedLog(logger)


def is_final(message: Any) -> bool:
    """Whether ``message`` is a handle's closing message (nothing follows it for that handle)."""
    return isinstance(message, tuple) and bool(message) and message[0] in FINAL_TAGS


def check_callable(name: str, value: Any) -> None:
    """TypeError naming ``name`` unless ``value`` can be called."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__} {value!r}")


class Backlog:
    """What a bridge has handed towards its host and the host has not taken yet, bounded by
    ``max_pending``: past the bound a new message is dropped and counted (a handle's closing
    message never is), with one warning per burst (a burst ends once the host brought the
    backlog down to half the bound). Its lock guards the counts only, never host code."""

    __slots__ = ("_burst", "_lock", "_name", "dropped", "max_pending", "pending")

    def __init__(self, name: str, max_pending: int) -> None:
        self._name = name
        self.max_pending = max_pending
        self.pending = 0
        self.dropped = 0
        self._burst = False
        self._lock = threading.Lock()

    def admit(self, message: Any) -> bool:
        """Count ``message`` as pending (True), or as dropped over the bound (False)."""
        with self._lock:
            if self.pending < self.max_pending or is_final(message):
                self.pending += 1
                return True
            self.dropped += 1
            starts, self._burst = not self._burst, True
        if starts:
            ratelog.warning(
                f"{self._name}-overflow",
                "%s: %d messages wait unread (max_pending); dropping new ones until the reader catches up "
                "(%d dropped so far)",
                self._name,
                self.max_pending,
                self.dropped,
            )
        return False

    def taken(self, count: int = 1) -> None:
        """The host took ``count`` messages (or they were discarded)."""
        with self._lock:
            self.pending -= count
            if self._burst and self.pending <= self.max_pending // 2:
                self._burst = False

    def drop(self, count: int = 1) -> None:
        """Count ``count`` messages dropped for another reason (a closed loop, a closed bridge)."""
        with self._lock:
            self.dropped += count
