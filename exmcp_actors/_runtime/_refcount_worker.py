"""The URI-refcount worker: one actor per client that serializes every listener
``resources/subscribe`` and ``resources/unsubscribe``.

The bookkeeping is :class:`~exmcp_actors._protocol._refcount.RefcountBook`;
the wire calls go out through the client like any other request. The book sits
in a :class:`SharedBook` with two locks: ``lock`` guards every change of the
counts, and ``serial`` is held for the whole of each operation that may go to
the wire, so those run one at a time, in the order they take it.

A host thread that waits for a wire operation runs it itself, under ``serial``
(``_api._wire_turn``): a registration's subscribes (:func:`acquire_uris`), a
removal's or a failed registration's unsubscribes (:func:`release_here`). So
they are on the wire before its call returns, and its next command comes after
them; asking the worker would also cost two thread hand-offs more. The worker
runs what no host waits for, under the same ``serial``: a dead subscriber's
release, a resubscription, and the answers a host gave up waiting for. A
registration on URIs that are all held already, and a removal that leaves
every URI of its listener still held, need no wire call: they change the counts
under ``lock`` alone and wait for nobody. While a wire call is in flight for a
URI its count is zero (before a subscribe) or already zero (before an
unsubscribe), so those shortcuts never apply to it, and the host queues on
``serial`` instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

import pykka

from .._protocol._errors import Error, NotConnected, RequestTimeout, SubscribeFailed, SubscriberNotAlive, error_term
from .._protocol._events import Release, Reset, Resubscribe, ResubscribeReport
from .._protocol._refcount import RefcountBook

logger = logging.getLogger("exmcp_actors")

#: Seconds a resubscription's wire calls may take when the session names no timeout.
RESUBSCRIBE_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Wire:
    """The client's requests, as the worker makes them (the facade's, like any host request)."""

    #: ``request(method, params) -> result``: send and wait; raises the library's errors.
    request: Callable[[str, dict[str, Any]], Any]
    #: ``send(method, params) -> pending``: send without waiting.
    send: Callable[[str, dict[str, Any] | None], Any]
    #: ``await_answer(pending, seconds) -> result``: wait for a sent request.
    await_answer: Callable[[Any, float], Any]
    #: Seconds a request may take when nothing else bounds it.
    timeout: float


@dataclass(frozen=True, slots=True)
class Inspect:
    """Counts, held and lost URIs, for tests and diagnostics (ask)."""


@dataclass(frozen=True, slots=True)
class Unanswered:
    """A registration gave up on a ``resources/subscribe`` still in flight (tell). The worker
    waits for its answer and, if the server subscribed, unsubscribes unless someone holds the
    URI by then: a server subscription never outlives every holder."""

    uri: str
    #: The request, as ``Wire.send`` returned it.
    pending: Any


@dataclass(frozen=True, slots=True)
class UnansweredReleases:
    """A host gave up waiting for the answers to the ``resources/unsubscribe`` calls it sent
    (tell): the worker waits for them, so that a failure is logged and the request of a server
    that never answers is cancelled on the wire."""

    #: ``(uri, pending)`` of each, as ``Wire.send`` returned it.
    sent: tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True)
class UnsentReleases:
    """A host could not send these ``resources/unsubscribe`` calls (the session stayed busy
    past its wait) (tell): the worker sends each whose URI nobody holds by then."""

    uris: tuple[str, ...]


#: ``request(method, params)``: a wire call that returns the result or raises the library's errors.
Request = Callable[[str, dict[str, Any]], Any]
#: ``send(method, params) -> pending``: a wire call sent, not awaited (``Wire.send``).
Send = Callable[[str, dict[str, Any] | None], Any]


class SharedBook:
    """The client's :class:`RefcountBook`, the lock every change of it takes, and the lock
    every operation that may go to the wire holds throughout (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.serial = threading.Lock()
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

    def holds(self, listener_id: Hashable) -> bool:
        """Whether a listener holds any URI."""
        with self.lock:
            return bool(self.book.held_by(listener_id))

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


def acquire_uris(
    shared: SharedBook,
    subscribe: Callable[[str], Any],
    listener_id: Hashable,
    uris: tuple[str, ...],
    alive: Callable[[], bool],
) -> None:
    """Take every URI for a listener, subscribing on the wire where needed. The caller holds
    ``shared.serial``. On failure what was taken is recorded for the listener all the same,
    so that a :class:`Release` gives it back (the caller asks the worker for it)."""
    taken: list[str] = []
    try:
        for uri in uris:
            with shared.lock:
                needs_subscribe = shared.book.needs_subscribe(uri)
            if needs_subscribe:
                # Checked right before each wire call: a dead subscriber's registration sends nothing more.
                if not alive():
                    raise SubscriberNotAlive()
                try:
                    subscribe(uri)
                except RequestTimeout:
                    raise
                except Error as error:
                    raise SubscribeFailed(uri, error_term(error)) from error
            with shared.lock:
                shared.book.take(uri)
            taken.append(uri)
    finally:
        with shared.lock:
            shared.book.record(listener_id, taken)


@dataclass(slots=True)
class Released:
    """What giving back a listener's URIs sent, and what it could not send."""

    #: ``(uri, pending)`` of each ``resources/unsubscribe`` sent.
    sent: list[tuple[str, Any]] = field(default_factory=list)
    #: URIs nobody holds any more whose unsubscribe could not be sent: the session stayed busy
    #: past the wait (a bug of the library's, or a host holding it from a test).
    unsent: list[str] = field(default_factory=list)


def send_releases(shared: SharedBook, send: Send, listener_id: Hashable) -> Released:
    """Give back what a listener holds: one holder less of each of its URIs, and a
    ``resources/unsubscribe`` for each that nobody holds any more, all sent before any answer
    is awaited (so they are on the wire, in order, when this returns). The caller holds
    ``shared.serial``."""
    with shared.lock:
        uris = shared.book.forget(listener_id)
    released = Released()
    for uri in reversed(uris):
        with shared.lock:
            unsubscribe = shared.book.drop(uri)
        if unsubscribe:
            try:
                released.sent.append((uri, send("resources/unsubscribe", {"uri": uri})))
            except RequestTimeout:  # nothing was sent
                released.unsent.append(uri)
    return released


def release_here(shared: SharedBook, send: Send, listener_id: Hashable, deadline: float) -> Released:
    """:func:`send_releases`, then wait for the answers until ``deadline`` (a monotonic time);
    ``sent`` keeps the calls still unanswered by then (for :class:`UnansweredReleases`)."""
    released = send_releases(shared, send, listener_id)
    late: list[tuple[str, Any]] = []
    for uri, pending in released.sent:
        try:
            pending.future.result(max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            late.append((uri, pending))
        except Error as error:
            unsubscribe_failed(uri, error)
    released.sent = late
    return released


def unsubscribe_uri(request: Request, uri: str) -> None:
    try:
        request("resources/unsubscribe", {"uri": uri})
    except Error as error:
        unsubscribe_failed(uri, error)


def unsubscribe_failed(uri: str, error: Error) -> None:
    if isinstance(error, NotConnected):
        # The session is gone or going: its subscriptions went with it.
        logger.info("resources/unsubscribe %s not sent: %s", uri, error)
    else:
        # The server keeps nothing we can fix from here; the count is already gone.
        logger.warning("resources/unsubscribe %s failed: %s", uri, error)


def done_in_place(shared: SharedBook, message: Any) -> bool:
    """Do what ``message`` asks if it needs no wire call (forgetting the book); whether it did.
    A worker that never started does such work on the caller's thread: with nothing queued
    before it, the order is the same as if the worker had done it."""
    if isinstance(message, Reset):
        with shared.lock:
            shared.book = RefcountBook()
        return True
    return False


def inspect_book(shared: SharedBook) -> dict[str, Any]:
    """Counts, held and lost URIs of a client's book (what ``Inspect`` answers)."""
    with shared.lock:
        book = shared.book
        return {
            "counts": {uri: book.count(uri) for uri in book.held_uris()},
            "lost": sorted(book.lost_uris()),
            "empty": book.is_empty(),
        }


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
        if isinstance(message, Release):
            with self._shared.serial:
                released = send_releases(self._shared, self._wire.send, message.listener_id)
                for uri in released.unsent:
                    logger.warning("resources/unsubscribe %s not sent: the client stayed busy", uri)
                self._await_unsubscribes(released.sent)
        elif isinstance(message, UnansweredReleases):
            self._await_unsubscribes(message.sent)
        elif isinstance(message, UnsentReleases):
            with self._shared.serial:
                for uri in message.uris:
                    with self._lock:
                        unheld = self._shared.book.count(uri) == 0
                    if unheld:
                        unsubscribe_uri(self._request, uri)
        elif isinstance(message, Unanswered):
            with self._shared.serial:
                self._settle_unanswered(message)
        elif isinstance(message, Resubscribe):
            with self._shared.serial:
                self._resubscribe(message.generation, message.timeout or RESUBSCRIBE_TIMEOUT)
        elif isinstance(message, Reset):
            done_in_place(self._shared, message)
        elif isinstance(message, Inspect):
            return inspect_book(self._shared)
        return None

    def _await_unsubscribes(self, sent: Sequence[tuple[str, Any]]) -> None:
        """Wait for the answers to unsubscribes sent (all within one request timeout)."""
        deadline = time.monotonic() + self._wire.timeout
        for uri, pending in sent:
            try:
                self._wire.await_answer(pending, deadline - time.monotonic())
            except Error as error:
                unsubscribe_failed(uri, error)

    def _settle_unanswered(self, message: Unanswered) -> None:
        try:
            self._wire.await_answer(message.pending, self._wire.timeout)
        except Error as error:
            logger.info("resources/subscribe %s, given up on by its registration: %s", message.uri, error)
            return
        with self._lock:
            unheld = self._shared.book.count(message.uri) == 0
        if unheld:
            unsubscribe_uri(self._request, message.uri)

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
                sent.append((uri, wire.send("resources/subscribe", {"uri": uri})))
            except Error as error:
                failed[uri] = error_term(error)
        deadline = time.monotonic() + timeout
        for uri, pending in sent:
            try:
                wire.await_answer(pending, deadline - time.monotonic())
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
