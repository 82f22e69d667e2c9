"""The keepalive's idle watch: tells the client actor when its connection received nothing
for a while (``WatchIdle`` asks for it, ``IdleFor`` is the answer; see ``_protocol/_keepalive``).

The connection's sink stamps :attr:`IdleWatch.last` with each batch it reads (one clock read,
no timer touched), and the one timer, on the shared scheduler, compares the stamp when it
fires: it re-arms for what is left of the quiet period, or tells the actor and re-arms for a
whole one. So traffic costs no timer churn, and a client with no keepalive arms nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .._protocol._events import IdleFor
from .._util._scheduler import TimerSlot

_monotonic = time.monotonic


class IdleWatch:
    """One client's idle watch; :meth:`watch` is called under the session monitor, the checks
    run on the scheduler thread (each watched connection has its own :class:`TimerSlot`, so a
    check of a connection no longer watched arms nothing)."""

    __slots__ = ("_slot", "_tell", "last")

    def __init__(self, tell: Callable[[Any], None]) -> None:
        self._tell = tell
        #: ``time.monotonic()`` when the watched connection last received a batch of frames.
        self.last = 0.0
        self._slot: TimerSlot | None = None

    @property
    def armed(self) -> bool:
        """A check is armed (for tests and diagnostics)."""
        slot = self._slot
        return slot is not None and slot.armed

    def watch(self, generation: int, seconds: float | None) -> None:
        """Watch connection ``generation`` for ``seconds`` of silence (None: watch nothing)."""
        old, self._slot = self._slot, None
        if old is not None:
            old.stop()
        if seconds is None:
            return
        slot = self._slot = TimerSlot()
        self.last = _monotonic()
        slot.arm(seconds, self._check, slot, generation, seconds)

    def stop(self) -> None:
        self.watch(0, None)

    def _check(self, slot: TimerSlot, generation: int, seconds: float) -> None:
        quiet = _monotonic() - self.last
        if quiet < seconds:
            slot.arm(seconds - quiet, self._check, slot, generation, seconds)
            return
        self._tell(IdleFor(generation))
        slot.arm(seconds, self._check, slot, generation, seconds)
