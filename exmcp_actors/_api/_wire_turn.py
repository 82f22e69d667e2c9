"""A host thread's URI subscriptions, taken and given back on that thread, in the client's
one wire turn (``SharedBook.serial``, see ``_runtime._refcount_worker``).

A registration subscribes its URIs here, and a removal (or a failed registration's rollback)
sends its ``resources/unsubscribe`` calls here too, so they are on the wire before the call
returns: the thread's next command cannot overtake them (``exmcp_actors._runtime``, Order).
The refcount worker does only what no host waits for: a dead subscriber's release, a
resubscription, and the answers a host gave up waiting for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pykka

from .._protocol._errors import RequestTimeout, SubscribeFailed, SubscriberNotAlive
from .._protocol._events import Release
from .._runtime._lazy_worker import LazyWorker
from .._runtime._refcount_worker import (
    SharedBook,
    Unanswered,
    UnansweredReleases,
    UnsentReleases,
    acquire_uris,
    release_here,
)

logger = logging.getLogger("exmcp_actors")

#: ``send(method, params, wait) -> pending``: a request sent on this thread, not awaited;
#: RequestTimeout (nothing sent) if the session stays busy for ``wait`` seconds.
Send = Callable[[str, dict[str, Any] | None, float], Any]
#: The least a wire call waits for the session, even past the deadline: a holder's steps take
#: microseconds, and a rollback sent at the deadline should not fall back for them.
SESSION_WAIT_FLOOR = 0.1


class WireTurn:
    """One client's URI subscriptions as its host threads take and give them back."""

    def __init__(self, book: SharedBook, worker: LazyWorker, send: Send) -> None:
        self.book = book
        self._worker = worker
        self._send = send

    def take(self, handle_id: Any, uris: tuple[str, ...], alive: Any, deadline: float, wait: float) -> None:
        """Take the URIs, subscribing where needed. On failure what was taken is given back in
        the same turn (its unsubscribes on the wire before this raises)."""
        book = self.book
        timed_out = RequestTimeout(f"resources/subscribe did not finish within {wait}s")
        if not book.serial.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise timed_out

        def subscribe(uri: str) -> None:
            pending = self._send("resources/subscribe", {"uri": uri}, _session_wait(deadline))
            try:
                pending.future.result(max(0.0, deadline - time.monotonic()))
            except BaseException as error:
                if not pending.future.done():
                    # Still in flight (timed out, or interrupted): the worker waits for it, and
                    # unsubscribes if the server subscribed and nobody holds the URI by then.
                    self._tell(Unanswered(uri, pending))
                if isinstance(error, FutureTimeout):
                    raise timed_out from None
                raise

        try:
            acquire_uris(book, subscribe, handle_id, uris, alive)
        except BaseException as error:
            # A refusal waits for the rollback's answers within the deadline; a timeout or an
            # interruption only sends it (the deadline is gone) and leaves the answers to the worker.
            refused = isinstance(error, (SubscribeFailed, SubscriberNotAlive))
            self._release_in_turn(handle_id, deadline if refused else time.monotonic())
            raise
        book.serial.release()

    def give_back(self, handle_id: Any, deadline: float, wait: float) -> None:
        """Give back what ``handle_id`` holds: on the wire when this returns.

        Raises:
            RequestTimeout: the turn stayed taken (by another thread's wire call, or a
                resubscription), or the session busy, past the deadline: what was not sent then,
                the worker sends later.
        """
        book = self.book
        if not book.holds(handle_id) or book.release_held(handle_id):
            return  # nothing held, or every URI keeps another holder: nothing for the wire
        if not book.serial.acquire(timeout=max(0.0, deadline - time.monotonic())):
            self._tell(Release(handle_id))
            raise RequestTimeout(
                f"resources/unsubscribe could not be sent within {wait:g}s: another wire call held the "
                "client's turn; the URIs are released once it ends"
            )
        if not self._release_in_turn(handle_id, deadline):
            raise RequestTimeout(
                f"resources/unsubscribe could not be sent within {wait:g}s: the client stayed busy; "
                "it is sent once the client is free"
            )

    def give_back_quietly(self, handle_id: Any, deadline: float) -> None:
        """:meth:`give_back` after a failure, which it never raises over (a turn that stays taken
        leaves the release to the worker)."""
        try:
            self.give_back(handle_id, deadline, max(0.0, deadline - time.monotonic()))
        except RequestTimeout:
            pass  # the worker does it
        except Exception:
            logger.exception("giving back the URIs of the failed registration %s failed", handle_id)

    def _release_in_turn(self, handle_id: Any, deadline: float) -> bool:
        """Send the unsubscribes, wait for their answers until ``deadline``, let go of the turn
        (which the caller holds). The worker takes over the answers still awaited, and the
        unsubscribes the session was too busy to take (then this returns False)."""

        def send(method: str, params: dict[str, Any] | None) -> Any:
            return self._send(method, params, _session_wait(deadline))

        try:
            released = release_here(self.book, send, handle_id, deadline)
        finally:
            self.book.serial.release()
        if released.sent:
            self._tell(UnansweredReleases(tuple(released.sent)))
        if released.unsent:
            self._tell(UnsentReleases(tuple(released.unsent)))
        return not released.unsent

    def _tell(self, message: Any) -> None:
        try:
            self._worker.tell(message)
        except pykka.ActorDeadError:
            pass  # the client stopped: its session, and its subscriptions, are gone


def _session_wait(deadline: float) -> float:
    return max(SESSION_WAIT_FLOOR, deadline - time.monotonic())
