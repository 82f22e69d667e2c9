"""The session monitor: the one way any thread feeds the session.

The rule it implements (who may run what, and the lock order) is written once, in this
package's docstring (``exmcp_actors._runtime``); this module is its code.

A thread that has an input for the session (a host thread's command, the client actor's
mailbox message, a reader's answer) takes :attr:`SessionMonitor.lock`, runs the input,
performs every effect it produced in order (the table in ``_effects``),
delivers the messages it queued, and lets go. The effects that complete a host's future
(:class:`~exmcp_actors._protocol._events.Settle`) are performed after the lock is released,
so no code outside the library ever runs under it. Because a host thread's command has put
its frames on the transport before the call returns, and the transport keeps the order it
was given, what one thread asks for reaches the wire in the order it asked.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import InvalidStateError
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .._protocol import _events as ev
from .._protocol._errors import InternalError, RequestTimeout
from .._protocol._jsonrpc import Frame
from .._protocol._session import Session

if TYPE_CHECKING:
    from collections.abc import Callable

logger = logging.getLogger("exmcp_actors")


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


def settle_all(settles: list[ev.Settle]) -> None:
    for effect in settles:
        settle(effect)


class Reentered(InternalError):
    """A thread that holds the monitor asked for it again: a bug of this library (it would
    wait for itself forever)."""


class SessionMonitor:
    """The session, behind one lock any thread may take. See the module docstring."""

    __slots__ = ("_followups", "_owner", "_perform", "_tell_actor", "lock", "session")

    def __init__(self, session: Session, perform: Callable[[Session, list[ev.Settle]], None]) -> None:
        self.session = session
        self.lock = threading.Lock()
        #: ``perform(session, settles)``: performs what the session queued (see ``_effects``),
        #: appending the Settle effects to ``settles`` for after the lock.
        self._perform = perform
        #: The thread that holds the lock (its ident), so a re-entry is a clear error, not a hang.
        self._owner: int | None = None
        #: Inputs raised while the lock was held on this thread (a bound that overflowed during
        #: a delivery): run before the lock is released.
        self._followups: list[Any] = []
        #: Hands an input to the client actor's mailbox (set once the actor exists).
        self._tell_actor: Callable[[Any], None] | None = None

    def attach(self, tell_actor: Callable[[Any], None]) -> None:
        self._tell_actor = tell_actor

    # -- entering --------------------------------------------------------------------------

    def run(self, message: Any, timeout: float | None = None) -> Any:
        """Run one input on this thread and perform what it produced; returns the session's
        answer. Raises what the session refuses the input with (after performing its effects),
        or RequestTimeout if the lock could not be had within ``timeout`` (nothing was done)."""
        # The same steps as turn(), without a generator: this runs for every command.
        self._enter(timeout)
        settles: list[ev.Settle] = []
        try:
            return self.session.handle(message)
        finally:
            self._exit(settles)

    @contextmanager
    def turn(self, timeout: float | None = None) -> Iterator[Session]:
        """Hold the monitor for a few steps of session code; everything they produced is
        performed when the block ends (Settles after the lock is released)."""
        self._enter(timeout)
        settles: list[ev.Settle] = []
        try:
            yield self.session
        finally:
            self._exit(settles)

    def try_answer(self, frame: Frame, settles: list[ev.Settle]) -> bool:
        """A reader's answer to a host's request, taken here if the lock is free right now.
        The reader holds the lane's lock, so it must never wait for this one; the Settle
        effects go to ``settles``, for the reader to perform once it holds no lock."""
        if self._owner == threading.get_ident() or not self.lock.acquire(blocking=False):
            return False
        self._owner = threading.get_ident()
        try:
            answered = self.session.answer_now(frame)
        finally:
            self._leave(settles)
        return answered

    def defer(self, message: Any) -> None:
        """An input raised where the session cannot be entered (inside a delivery): run before
        this thread lets go of the monitor if it holds it, else by the client actor."""
        if self._owner == threading.get_ident():
            self._followups.append(message)
        elif self._tell_actor is not None:
            self._tell_actor(message)

    @property
    def held_here(self) -> bool:
        """Whether the calling thread holds the monitor."""
        return self._owner == threading.get_ident()

    # -- the lock --------------------------------------------------------------------------

    def _enter(self, timeout: float | None) -> None:
        me = threading.get_ident()
        if self._owner == me:
            raise Reentered("a thread holding the session monitor asked for it again")
        if timeout is None:
            self.lock.acquire()
        elif not self.lock.acquire(timeout=max(0.0, timeout)):
            raise RequestTimeout(f"the client stayed busy for {timeout:g}s; nothing was sent")
        self._owner = me

    def _exit(self, settles: list[ev.Settle]) -> None:
        """Leave the monitor, then complete the futures its inputs settled."""
        try:
            self._leave(settles)
        finally:
            if settles:  # whatever else went wrong, a waiting host hears its answer
                settle_all(settles)

    def _leave(self, settles: list[ev.Settle]) -> None:
        """Perform what is queued (and any follow-up input), then let go of the lock."""
        try:
            while True:
                self._perform(self.session, settles)
                if not self._followups:
                    break
                followups, self._followups = self._followups, []
                for message in followups:
                    try:
                        self.session.handle(message)
                    except Exception:  # the thread that raised it is not the one to tell
                        logger.exception("%s: a follow-up input %r failed", self.session.name, message)
        finally:
            if self._followups:  # left over only if one raised past its handler
                self._followups.clear()
            self._owner = None
            self.lock.release()
