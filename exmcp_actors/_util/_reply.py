"""The answer slots the session settles, once each, for one request: :class:`Reply`, which a
host thread waits on, and :class:`HookedReply`, which hands the outcome to a function."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any


class AnswerSlot:
    """What the session calls on a pending request's slot (``done``, ``set_result``,
    ``set_exception``); each kind says in ``_settle`` what settling does."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def done(self) -> bool:
        return self._set

    def set_result(self, value: Any) -> None:
        self._settle(value, None)

    def set_exception(self, error: BaseException) -> None:
        self._settle(None, error)

    def _settle(self, value: Any, error: BaseException | None) -> None:
        raise NotImplementedError


class Reply(AnswerSlot):
    """The answer to one host request: ``concurrent.futures.Future``'s ``done``, ``set_result``,
    ``set_exception`` and ``result(timeout)`` on one lock, without a Condition (a few microseconds
    less on both sides of every request). Set at most once: the session settles each pending
    request once, and the first outcome stands."""

    __slots__ = ("_error", "_lock", "_value")

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._lock.acquire()  # released once, by whoever sets the answer
        self._value: Any = None
        self._error: BaseException | None = None

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


class HookedReply(AnswerSlot):
    """The answer slot of one wire round of a submitted call: settling it runs
    ``on_answer(value, error)`` on the settling thread (the reader's or the actor's), once;
    a later outcome is ignored."""

    __slots__ = ("_lock", "_on_answer")

    def __init__(self, on_answer: Callable[[Any, BaseException | None], None]) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._on_answer = on_answer

    def _settle(self, value: Any, error: BaseException | None) -> None:
        with self._lock:
            if self._set:
                return
            self._set = True
        self._on_answer(value, error)
