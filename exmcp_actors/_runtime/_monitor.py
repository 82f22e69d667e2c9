"""The session's side door: a host or reader thread runs one input itself, under the
session lock, instead of a round trip through the client actor's inbox.

The client actor owns the session and runs every input under :attr:`SessionDoor.lock`,
performing the effects before it lets go. A few inputs produce nothing but a send or a
settled future, and their callers would only sit waiting for the actor to run them; a
round trip through its inbox costs two thread wake-ups (issue 14). So:

- a host's request (:meth:`send_request`): the frame goes to the transport's writer
  from the host's own thread;
- an answer a reader sees while the delivery lane is open (:meth:`answer`): the reader
  settles the host's future itself, after delivering what came before it on the wire;
- a legacy registration that needs no new proxy and no wire call (:meth:`register`).

Whatever the actor must do itself (start a proxy, tell the worker, arm a timer) is never
produced by these: a registration whose subscriber has no proxy yet goes to the actor, which
starts one before anything can be delivered to it. Under the lock only session code and
non-blocking effects run. A reader holds the lane's lock
and only *tries* this one, so the two locks cannot deadlock.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from .._protocol import _events as ev
from .._protocol._errors import TransportError
from .._protocol._jsonrpc import Frame
from .._protocol._session import Session
from .._transport._base import Transport

logger = logging.getLogger("exmcp_actors")

#: How long a host waits for the actor to finish its current input before using its inbox instead.
LOCK_WAIT = 1.0


class Reply:
    """The answer to one host request: ``concurrent.futures.Future``'s ``done``, ``set_result``,
    ``set_exception`` and ``result(timeout)`` on one lock, without a Condition (a few microseconds
    less on both sides of every request). Set at most once, always under the session lock."""

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


def settle(effect: ev.Settle) -> None:
    """Complete a host's future; the first outcome stands."""
    future = effect.future
    if future.done():
        return
    try:
        if effect.error is None:
            future.set_result(effect.result)
        else:
            future.set_exception(effect.error)
    except InvalidStateError:
        pass  # completed meanwhile


class SessionDoor:
    """See the module docstring. Built by the client actor; used by the facade and the lane."""

    __slots__ = ("_session", "_transport", "lock")

    def __init__(self, session: Session, transport: Transport) -> None:
        self.lock = threading.Lock()
        self._session = session
        self._transport = transport

    def send_request(self, message: ev.SendRequest) -> bool:
        """Send a host's request from this thread; False when the actor stayed busy (use its inbox)."""
        if not self.lock.acquire(timeout=LOCK_WAIT):
            return False
        try:
            self._run(message)
        finally:
            self.lock.release()
        return True

    def register(self, message: ev.RegisterListener, timeout: float) -> bool:
        """Register and activate a legacy listener whose URIs are all held, if its subscriber has a
        proxy already; False if it has none (use the actor). Raises what the session refuses with."""
        if not self.lock.acquire(timeout=min(timeout, LOCK_WAIT)):
            return False
        try:
            if message.subscriber.key not in self._session.registry.slots:
                return False  # a new subscriber needs a proxy actor: only the actor starts one
            self._run(message)
        finally:
            self.lock.release()
        return True

    def answer(self, frame: Frame) -> bool:
        """A reader's answer to a host request, settled here if the lock is free right now."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            if not self._session.answer_now(frame):
                return False
            self._perform()
        finally:
            self.lock.release()
        return True

    def send(self, effect: ev.Send) -> None:
        """Queue a frame on the transport; a failed request is failed in the session (its effects
        wait for the caller, who holds the lock)."""
        try:
            self._transport.send(effect.message)
        except TransportError as error:
            logger.warning("%s: send failed: %s", self._session.name, error)
            if effect.request_id is not None:
                self._session.handle(ev.SendFailed(effect.request_id))

    def _run(self, message: Any) -> None:
        try:
            self._session.handle(message)
        finally:
            self._perform()

    def _perform(self) -> None:
        effects = self._session.effects
        while effects.todo or effects.out:
            todo, out = effects.take()
            if out:  # the inputs run here emit nothing (see the module docstring)
                raise RuntimeError("only the client actor delivers messages to subscribers")
            for effect in todo:
                if isinstance(effect, ev.Settle):
                    settle(effect)
                elif isinstance(effect, ev.Send):
                    self.send(effect)  # a failure queues the request's Settle: the loop takes it
                else:  # the inputs run here produce nothing else (see the module docstring)
                    raise RuntimeError(f"{effect!r} may only be performed by the client actor")
