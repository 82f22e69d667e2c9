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
produced by these; if it ever were, it is handed to the actor, never dropped. Under the
lock only session code and non-blocking effects run. A reader holds the lane's lock
and only *tries* this one, so the two locks cannot deadlock.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import InvalidStateError
from typing import Any, NamedTuple

import pykka

from ._protocol import _events as ev
from ._protocol._errors import TransportError
from ._protocol._jsonrpc import Frame
from ._protocol._session import Session
from ._transport._base import Transport

logger = logging.getLogger("exmcp_actors")

#: How long a host waits for the actor to finish its current input before using its inbox instead.
LOCK_WAIT = 1.0


class Leftovers(NamedTuple):
    """Effects an input run at the door produced that only the actor may perform (tell)."""

    todo: list[Any]
    out: ev.Outbox


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

    __slots__ = ("_actor_ref", "_session", "_transport", "lock")

    def __init__(self, session: Session, transport: Transport, actor_ref: pykka.ActorRef[Any]) -> None:
        self.lock = threading.Lock()
        self._session = session
        self._transport = transport
        self._actor_ref = actor_ref

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
            leftovers: list[Any] = []
            for effect in todo:
                if isinstance(effect, ev.Settle):
                    settle(effect)
                elif isinstance(effect, ev.Send):
                    self.send(effect)
                else:
                    leftovers.append(effect)
            if leftovers or out:
                logger.debug("handing %d effects and %d routes to the client actor", len(leftovers), len(out))
                try:
                    self._actor_ref.tell(Leftovers(leftovers, out))
                except pykka.ActorDeadError:
                    pass
