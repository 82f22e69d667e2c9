"""The URI-refcount worker: one actor per client that runs every listener
``resources/subscribe`` and ``resources/unsubscribe`` one at a time.

The bookkeeping is :class:`~exmcp_actors._protocol._refcount.RefcountBook`;
this actor only adds the wire calls, which go out through the client like any
other request. Callers wait on this actor, never on the client actor, so a
slow ``resources/subscribe`` never stalls delivery.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
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


class RefcountWorker(pykka.ThreadingActor):
    """Serializes listener subscribe/unsubscribe for one client."""

    use_daemon_thread = True

    def __init__(self, wire: Wire, client_ref: pykka.ActorRef[Any], on_thread: Callable[[], None]) -> None:
        super().__init__()
        self._wire = wire
        self._request = wire.request
        self._client_ref = client_ref
        self._book = RefcountBook()
        self._on_thread = on_thread

    def on_start(self) -> None:
        self._on_thread()  # lets the client join this thread on disconnect

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Acquire):
            return self._acquire(message)
        if isinstance(message, Release):
            self._release_uris(self._book.forget(message.listener_id))
        elif isinstance(message, Resubscribe):
            self._resubscribe(message.generation, message.timeout or RESUBSCRIBE_TIMEOUT)
        elif isinstance(message, Reset):
            self._book = RefcountBook()
        elif isinstance(message, Inspect):
            return {
                "counts": {uri: self._book.count(uri) for uri in self._book.held_uris()},
                "lost": sorted(self._book.lost_uris()),
                "empty": self._book.is_empty(),
            }
        return None

    def _acquire(self, message: Acquire) -> None:
        taken: list[str] = []
        for uri in message.uris:
            if self._book.needs_subscribe(uri):
                # Checked right before each wire call: a dead subscriber's registration sends nothing more.
                if not message.alive():
                    self._release_uris(taken)
                    raise SubscriberNotAlive()
                try:
                    self._request("resources/subscribe", {"uri": uri})
                except Error as error:
                    self._release_uris(taken)
                    raise SubscribeFailed(uri, error_term(error)) from error
            self._book.take(uri)
            taken.append(uri)
        self._book.record(message.listener_id, taken)

    def _release_uris(self, uris: tuple[str, ...] | list[str]) -> None:
        for uri in reversed(uris):
            if self._book.drop(uri):
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
        sent: list[tuple[str, Any]] = []
        for uri in self._book.held_uris():
            try:
                sent.append((uri, wire._send_request("resources/subscribe", {"uri": uri})))
            except Error as error:
                self._book.mark_lost(uri)
                failed[uri] = error_term(error)
        deadline = time.monotonic() + timeout
        for uri, pending in sent:
            try:
                wire._await_request(pending, deadline - time.monotonic())
            except Error as error:
                self._book.mark_lost(uri)
                failed[uri] = error_term(error)
            else:
                self._book.mark_found(uri)
                resubscribed.add(uri)
        try:
            self._client_ref.tell(ResubscribeReport(generation, frozenset(resubscribed), failed))
        except pykka.ActorDeadError:
            pass
