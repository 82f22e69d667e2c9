"""A rate-limited logger: bad input from a server (or a bug it trips) costs at most one record per
interval and kind."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final

#: Seconds between two records of one kind.
DEFAULT_INTERVAL: Final = 10.0


class RateLimitedLog:
    """Logs a record of each ``kind`` at most once per ``interval``; the next one says how many were skipped.

    A hostile or broken peer can send a bad frame per byte: a record (worse, a
    traceback) for each would cost more than the frame and flood the host's logs.

    Example:
        >>> log = RateLimitedLog(logging.getLogger("x"))
        >>> log.warning("bad-id", "%s: dropped a response with id %r", "srv", [1])
    """

    __slots__ = ("_clock", "_interval", "_logger", "_next", "_skipped")

    def __init__(
        self, logger: logging.Logger, interval: float = DEFAULT_INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._next: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def warning(self, kind: str, msg: str, *args: Any, exc_info: bool = False) -> bool:
        """Log ``msg % args`` at WARNING unless a record of ``kind`` went out lately; whether it was logged."""
        return self._log(logging.WARNING, kind, msg, args, exc_info)

    def info(self, kind: str, msg: str, *args: Any) -> bool:
        """Like :meth:`warning`, at INFO."""
        return self._log(logging.INFO, kind, msg, args, False)

    def error(self, kind: str, msg: str, *args: Any, exc_info: bool = False) -> bool:
        """Like :meth:`warning`, at ERROR."""
        return self._log(logging.ERROR, kind, msg, args, exc_info)

    def _log(self, level: int, kind: str, msg: str, args: tuple[Any, ...], exc_info: bool) -> bool:
        now = self._clock()
        if now < self._next.get(kind, now):
            self._skipped[kind] = self._skipped.get(kind, 0) + 1
            return False
        self._next[kind] = now + self._interval
        skipped = self._skipped.pop(kind, 0)
        if skipped:
            msg += " (%d more like it in the last %gs were not logged)"
            args = (*args, skipped, self._interval)
        self._logger.log(level, msg, *args, exc_info=exc_info)
        return True
