"""The answer slot a host waits on for one request."""

from __future__ import annotations

import threading
from concurrent.futures import InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any


class Reply:
    """The answer to one host request: ``concurrent.futures.Future``'s ``done``, ``set_result``,
    ``set_exception`` and ``result(timeout)`` on one lock, without a Condition (a few microseconds
    less on both sides of every request). Set at most once: the session settles each pending
    request once, and the first outcome stands."""

    __slots__ = ("_error", "_lock", "_set", "_value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()  # released once, by whoever sets the answer
        self._set = False
        self._value: Any = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._set

    def set_result(self, value: Any) -> None:
        self._settle(value, None)

    def set_exception(self, error: BaseException) -> None:
        self._settle(None, error)

    def _settle(self, value: Any, error: BaseException | None) -> None:
        if self._set:
            raise InvalidStateError("the reply is set already")
        self._value, self._error, self._set = value, error, True
        self._lock.release()

    def result(self, timeout: float | None = None) -> Any:
        """The answer, waiting up to ``timeout`` seconds (forever when None).

        Raises:
            concurrent.futures.TimeoutError: no answer in time.
            The exception it was set with.
        """
        if not self._set:
            wait = -1 if timeout is None or timeout > threading.TIMEOUT_MAX else max(0.0, timeout)
            if not self._lock.acquire(timeout=wait):
                raise FutureTimeout()
            self._lock.release()  # for any other waiter
        if self._error is not None:
            raise self._error
        return self._value
