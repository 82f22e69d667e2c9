"""The URI-refcount worker: one actor per client that runs every listener
``resources/subscribe`` and ``resources/unsubscribe`` one at a time.

The bookkeeping is :class:`~exmcp_actors._protocol._refcount.RefcountBook`;
this actor only adds the wire calls, which go out through the client like any
other request. Callers wait on this actor, never on the client actor, so a
slow ``resources/subscribe`` never stalls delivery.

The book sits in a :class:`SharedBook` behind a lock, so that a registration
on a URI that is already held, and a removal that leaves every URI of its
listener still held, change the counts on the host's thread without a
round trip to the worker: neither needs the wire. Everything that does goes
through the worker, one operation at a time, as before. While the worker is
on the wire for a URI its count is zero (before a subscribe) or already zero
(before an unsubscribe), so the host's shortcut never applies to it and the
host queues behind the worker instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol

import pykka

from ._protocol._errors import Error, NotConnected, SubscribeFailed, SubscriberNotAlive, error_term
from ._protocol._events import Acquire, Release, Reset, Resubscribe, ResubscribeReport
from ._protocol._refcount import RefcountBook

logger = logging.getLogger("exmcp_actors")

#: Seconds a resubscription's wire calls may take when the session names no timeout.
RESUBSCRIBE_TIMEOUT = 30.0


class Wire(Protocol):
    """The client's requests, as the worker uses them (see ``_calls.ServerCalls``)."""

    def request(self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None) -> Any: ...

    def _send_request(self, method: str, params: dict[str, Any] | None) -> Any: ...

    def _await_request(self, pending: Any, wait: float) -> Any: ...


@dataclass(frozen=True, slots=True)
class Inspect:
    """Counts, held and lost URIs, for tests and diagnostics (ask)."""


class SharedBook:
    """The client's :class:`RefcountBook` and the lock every change of it takes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.book = RefcountBook()

    def take_held(self, listener_id: Hashable, uris: tuple[str, ...]) -> bool:
        """Take ``uris`` for a listener if every one is held already (no wire call); False otherwise."""
        with self.lock:
            book = self.book
            if not uris or any(book.needs_subscribe(uri) for uri in uris):
                return False
            for uri in uris:
                book.take(uri)
            book.record(listener_id, uris)
            return True

    def release_held(self, listener_id: Hashable) -> bool:
        """Release a listener's URIs if every one keeps another holder (no wire call); False otherwise."""
        with self.lock:
            book = self.book
            uris = book.held_by(listener_id)
            if not uris:
                return False
            for uri in set(uris):
                if book.count(uri) <= uris.count(uri):
                    return False
            for uri in book.forget(listener_id):
                book.drop(uri)
            return True


class RefcountWorker(pykka.ThreadingActor):
    """Serializes listener subscribe/unsubscribe for one client."""

    use_daemon_thread = True

    def __init__(
        self,
        wire: Wire,
        client_ref: pykka.ActorRef[Any],
        on_thread: Callable[[], None],
        shared: SharedBook | None = None,
    ) -> None:
        super().__init__()
        self._wire = wire
        self._request = wire.request
        self._client_ref = client_ref
        self._shared = shared if shared is not None else SharedBook()
        self._lock = self._shared.lock
        self._on_thread = on_thread

    def on_start(self) -> None:
        self._on_thread()  # lets the client join this thread on disconnect

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Acquire):
            return self._acquire(message)
        if isinstance(message, Release):
            with self._lock:
                uris = self._shared.book.forget(message.listener_id)
            self._release_uris(uris)
        elif isinstance(message, Resubscribe):
            self._resubscribe(message.generation, message.timeout or RESUBSCRIBE_TIMEOUT)
        elif isinstance(message, Reset):
            with self._lock:
                self._shared.book = RefcountBook()
        elif isinstance(message, Inspect):
            with self._lock:
                book = self._shared.book
                return {
                    "counts": {uri: book.count(uri) for uri in book.held_uris()},
                    "lost": sorted(book.lost_uris()),
                    "empty": book.is_empty(),
                }
        return None

    def _acquire(self, message: Acquire) -> None:
        taken: list[str] = []
        shared = self._shared
        for uri in message.uris:
            with self._lock:
                needs_subscribe = shared.book.needs_subscribe(uri)
            if needs_subscribe:
                # Checked right before each wire call: a dead subscriber's registration sends nothing more.
                if not message.alive():
                    self._release_uris(taken)
                    raise SubscriberNotAlive()
                try:
                    self._request("resources/subscribe", {"uri": uri})
                except Error as error:
                    self._release_uris(taken)
                    raise SubscribeFailed(uri, error_term(error)) from error
            with self._lock:
                shared.book.take(uri)
            taken.append(uri)
        with self._lock:
            shared.book.record(message.listener_id, taken)

    def _release_uris(self, uris: tuple[str, ...] | list[str]) -> None:
        for uri in reversed(uris):
            with self._lock:
                unsubscribe = self._shared.book.drop(uri)
            if unsubscribe:
                try:
                    self._request("resources/unsubscribe", {"uri": uri})
                except NotConnected as error:
                    # The session is gone or going: its subscriptions went with it.
                    logger.info("resources/unsubscribe %s not sent: %s", uri, error)
                except Error as error:
                    # The server keeps nothing we can fix from here; the count is already gone.
                    logger.warning("resources/unsubscribe %s failed: %s", uri, error)

    def _resubscribe(self, generation: int, timeout: float) -> None:
        """Subscribe every held URI again. The calls are all in flight at once and share one
        deadline, so a slow URI costs the report at most ``timeout``, not ``timeout`` per URI."""
        resubscribed: set[str] = set()
        failed: dict[str, Any] = {}
        wire = self._wire
        with self._lock:
            held = self._shared.book.held_uris()
        sent: list[tuple[str, Any]] = []
        for uri in held:
            try:
                sent.append((uri, wire._send_request("resources/subscribe", {"uri": uri})))
            except Error as error:
                failed[uri] = error_term(error)
        deadline = time.monotonic() + timeout
        for uri, pending in sent:
            try:
                wire._await_request(pending, deadline - time.monotonic())
            except Error as error:
                failed[uri] = error_term(error)
            else:
                resubscribed.add(uri)
        with self._lock:
            book = self._shared.book
            for uri in held:
                if uri in resubscribed:
                    book.mark_found(uri)
                else:
                    book.mark_lost(uri)
        try:
            self._client_ref.tell(ResubscribeReport(generation, frozenset(resubscribed), failed))
        except pykka.ActorDeadError:
            pass
