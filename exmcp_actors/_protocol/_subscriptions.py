"""Modern subscriptions (sans-IO): ``subscriptions/listen``, its acknowledgment, and the
re-listen and resync after a drop.

An entry waits for its acknowledgment (``awaiting_ack``), which must not be
wider than the request; it is then ``live`` and delivers the events inside the
acknowledged filter. A watch on a server with nothing to listen to (it answers the
listen with -32601, as it may) is ``live`` too, with an empty acknowledged filter and
no stream: it has nothing to push, and a reconnect asks again. When its stream drops (the connection, or on HTTP its own
stream) it is ``relistening`` until a new listen is acknowledged, then
``resyncing`` while the snapshot is refetched off the actor (a watch skips the
snapshot and reports ``Reconnected``), then ``live`` again. The server's graceful
answer ends an explicit subscription; a watch or a catalog's subscription
(``follows_server``) takes it as a drop, since a server shutting down answers so.
Events that arrive while it is not live are held and released in order afterwards.
These states and their moves are the :class:`~._state.EntryState` table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from . import _messages as m
from ._config import SessionConfig
from ._errors import (
    ConnectionLost,
    Error,
    ListenerNotFound,
    ProtocolError,
    RequestError,
    SubscriberNotAlive,
    TransportError,
    error_term,
)
from ._events import ArmTimer, CancelOnWire, CancelSubscription, Effects, FetchSnapshot, Relisten, ResyncDone
from ._extensions import with_tasks_extension
from ._filters import FILTERABLE_METHODS, LOG_MESSAGE, LOG_MESSAGES, NotificationFilter, filter_from_wire
from ._handshake import META_SUBSCRIPTION_ID, with_modern_meta
from ._index import ACK_METHOD
from ._jsonrpc import METHOD_NOT_FOUND, Answer, ErrorResponse, RequestBuilder, RequestFailed, Response
from ._peer_text import peer_text
from ._ratelog import RateLimitedLog
from ._registry import Entry, Registry
from ._state import FETCHING, HOLDING, EntryState

logger = logging.getLogger("exmcp_actors")

#: Events held for a modern subscription that is not live yet (before its ack, during a resync).
MAX_HELD_EVENTS = 10_000
#: Listen ids the server cancelled, remembered so the answer that may follow is skipped quietly.
MAX_ENDED_BY_SERVER = 64


class Subscriptions:
    """The modern side of a session's registry.

    What it needs of the rest of the session comes as callables: ``cancel_on_wire(request_id,
    reason)`` sends a cancellation on the current connection (if one is ready),
    ``generation()`` tags the connection in hand, and ``relistened(handle_id)`` tells the
    connection's life that a subscription its reconnect re-listened is acknowledged again."""

    def __init__(
        self,
        registry: Registry,
        effects: Effects,
        ids: RequestBuilder,
        config: SessionConfig,
        name: str,
        *,
        cancel_on_wire: Callable[[Any, str], None],
        generation: Callable[[], int],
        relistened: Callable[[Any], None],
    ) -> None:
        self._registry = registry
        self._fx = effects
        self._ids = ids
        self._config = config
        self._name = name
        #: Bad input from the server (floods of events it should not send): logged at a bounded rate.
        self._log = RateLimitedLog(logger)
        self._cancel_on_wire = cancel_on_wire
        self._generation = generation
        self._relistened = relistened
        self._ended_by_server: dict[Any, None] = {}

    def open(
        self,
        handle: Any,
        kind: str,
        flt: NotificationFilter,
        subscriber: Any,
        acknowledged: Any,
        follows_server: bool = False,
    ) -> None:
        if not subscriber.alive():
            raise SubscriberNotAlive()
        entry = self._registry.add(handle, kind, "modern", flt, subscriber, EntryState.AWAITING_ACK)
        entry.ack_future = acknowledged
        entry.follows_server = follows_server or kind == "watch"
        self.listen(entry)

    def listen(self, entry: Entry) -> None:
        """Send a (new) ``subscriptions/listen`` for an entry."""
        by_listen_id = self._registry.by_listen_id
        if entry.listen_id is not None:
            by_listen_id.pop(entry.listen_id, None)
        entry.listen_id = f"listen-{self._ids.next_id()}"
        entry.held = [] if entry.state is EntryState.AWAITING_ACK or entry.held is None else entry.held
        by_listen_id[entry.listen_id] = entry
        handle = entry.handle
        if hasattr(handle, "subscription_id"):
            handle.subscription_id = entry.listen_id
        params = with_modern_meta(
            {"notifications": entry.requested.as_dict(wire=True)},
            self._config.client_info,
            with_tasks_extension(self._config.capabilities, entry.requested.task_ids is not None),
        )
        self._fx.send(RequestBuilder.request("subscriptions/listen", params, entry.listen_id))

    def relisten_dropped(self) -> list[Any]:
        """On a new modern connection: listen again for every entry whose stream dropped.

        Returns the ids of the handles re-listened."""
        relistened = []
        for entry in self._registry.of_era("modern"):
            if entry.state is EntryState.RELISTENING and entry.listen_id is None:
                self.listen(entry)
                relistened.append(entry.handle.id)
        return relistened

    def owns(self, request_id: Any) -> Entry | None:
        return self._registry.by_listen_id.get(request_id)

    # -- what the server sends -------------------------------------------------------------

    def on_notification(self, subscription_id: Any, method: str, params: dict[str, Any]) -> None:
        entry = self._registry.by_listen_id.get(subscription_id)
        if entry is None:  # one a server repeats costs one record per interval, not one each
            self._log.warning(
                "unknown-subscription",
                "%s: %s for unknown subscription id %s skipped",
                self._name,
                peer_text(method),
                peer_text(subscription_id, quote=True),
            )
            return
        if method == ACK_METHOD:
            self._acknowledged(entry, params)
            return
        if method not in FILTERABLE_METHODS:
            logger.debug(
                "%s: %s on subscription %s (not an event) skipped",
                self._name,
                peer_text(method),
                peer_text(subscription_id, quote=True),
            )
            return
        if entry.acknowledged is None or entry.state in HOLDING:
            if entry.held is None:
                entry.held = []
            if len(entry.held) < MAX_HELD_EVENTS:
                entry.held.append((method, params))
            else:
                # A resync's snapshot (or the acknowledgment's) supersedes what is dropped here.
                self._log.warning(
                    "held-bound",
                    "%s: more than %d events held for %r; dropping",
                    self._name,
                    MAX_HELD_EVENTS,
                    entry.handle,
                )
            return
        if entry.acknowledged.enables(method, params, sub_resources=True):
            self._registry.emit(entry, entry.event(method, _unstamped(params)))
        else:
            self._log.info(
                "outside-ack",
                "%s: event %s outside the acknowledged filter of %r dropped",
                self._name,
                method,
                entry.handle,
            )

    def log_message(self, params: dict[str, Any]) -> None:
        """2026-07-28 sends log messages on the stream of the request they concern, not of a
        subscription: they reach every modern handle whose filter asked for ``logMessages``."""
        registry = self._registry
        for entry in list(registry.by_listen_id.values()):
            if entry.state is EntryState.LIVE and LOG_MESSAGES in entry.requested.categories:
                registry.emit(entry, entry.event(LOG_MESSAGE, params))

    def _acknowledged(self, entry: Entry, params: dict[str, Any]) -> None:
        registry, effects = self._registry, self._fx
        ack = filter_from_wire(params.get("notifications"))
        if ack is None or not ack.is_within(entry.requested):
            acked = params.get("notifications")
            why = f"acknowledgment {peer_text(acked)} is wider than the request {entry.requested.as_dict()!r}"
            if ack is None:
                why = f"malformed acknowledgment {peer_text(acked)}"
            logger.error("%s: %s; closing the subscription", self._name, why)
            self.cancel_on_wire(entry)
            if entry.state is EntryState.AWAITING_ACK:
                effects.reject(entry.ack_future, ProtocolError(why, reason=("invalid_acknowledgment", acked)))
                registry.forget(entry.handle.id)
            else:
                registry.close(entry, ("protocol_error", why))
            return
        first = entry.state is EntryState.AWAITING_ACK
        entry.acknowledged = ack
        handle = entry.handle
        if hasattr(handle, "acknowledged_filter"):
            handle.acknowledged_filter = ack.as_dict()
        if first:
            entry.to(EntryState.LIVE)
            registry.status(entry, "ready")
            future, entry.ack_future = entry.ack_future, None
            effects.resolve(future, ack)
            self._release_held(entry)
            return
        # Told after the watch's Reconnected: the last one re-listened settles the connection,
        # and its "ready" status comes after that Reconnected.
        if entry.kind == "watch":
            # A watch has no snapshot: the re-listen reports like a legacy reconnect. The
            # outage is over, so the next one gets every attempt again (as a resync ends one).
            report = {"resubscribed": list(ack.uris), "failed": []}
            registry.emit(entry, m.Reconnected(m.RECONNECTED, handle, report))
            entry.to(EntryState.LIVE)
            entry.relisten_attempts = 0
            self._release_held(entry)
            self._relistened(handle.id)
            return
        self._relistened(handle.id)
        if entry.state in FETCHING:
            # The snapshot in flight answers an earlier acknowledgment: one more fetch follows
            # it, however many acknowledgments come meanwhile (never a thread for each).
            entry.to(EntryState.RESYNCING_AGAIN)
            return
        entry.to(EntryState.RESYNCING)
        self._fetch_snapshot(entry)

    def _fetch_snapshot(self, entry: Entry) -> None:
        assert entry.listen_id is not None and entry.acknowledged is not None
        self._fx.do(FetchSnapshot(entry.handle.id, entry.listen_id, entry.acknowledged))

    def _release_held(self, entry: Entry) -> None:
        held, entry.held = entry.held or [], []
        ack = entry.acknowledged
        for method, params in held:
            if ack is not None and ack.enables(method, params, sub_resources=True):
                self._registry.emit(entry, entry.event(method, _unstamped(params)))

    def answered(self, entry: Entry, msg: Answer) -> None:
        """The listen request itself was answered: the server ended the stream, or refused it;
        or the transport failed its exchange."""
        registry = self._registry
        if isinstance(msg, Response):
            if entry.state is EntryState.AWAITING_ACK:
                self._fx.reject(
                    entry.ack_future, ProtocolError("the server ended the subscription before acknowledging it")
                )
                registry.forget(entry.handle.id)
                return
            if entry.follows_server:
                # The server ended it gracefully, as one shutting down does (the TypeScript SDK
                # v2's close()): a live view follows it back, as after a drop. An explicit
                # listen() ends here, as the SDKs' clients do.
                self._relisten_later(entry, ("complete", msg.result))
                return
            registry.close(entry, ("complete", msg.result))
            return
        no_listen = isinstance(msg, ErrorResponse) and msg.code == METHOD_NOT_FOUND and entry.kind == "watch"
        if no_listen and entry.state in (EntryState.AWAITING_ACK, EntryState.RELISTENING):
            self._nothing_to_listen(entry)
            return
        error = msg.error if isinstance(msg, RequestFailed) else RequestError(msg.code, msg.message, msg.data)
        if isinstance(error, TransportError) and entry.state is not EntryState.AWAITING_ACK:
            # HTTP: this subscription's stream dropped, or its re-listen could not reach the
            # server. Not the server's answer: re-listen after a backoff (or on reconnect).
            self._relisten_later(entry, error_term(error))
            return
        if entry.state is EntryState.AWAITING_ACK:
            self._fx.reject(entry.ack_future, error)
            registry.forget(entry.handle.id)
            return
        if (entry.state in FETCHING or entry.state is EntryState.RELISTENING) and entry.kind == "subscription":
            registry.emit(
                entry, m.SubscriptionResync(m.SUBSCRIPTION_RESYNC, entry.handle, ("failed", error_term(error)))
            )
        registry.close(entry, ("error", error_term(error)))

    def _relisten_later(self, entry: Entry, why: Any) -> None:
        """Its stream ended (``why``, a term): listen again after a backoff, or on reconnect;
        closed as exhausted once the attempts of one outage are spent."""
        self.stream_dropped(entry)
        entry.relisten_attempts += 1
        if entry.relisten_attempts > self._config.max_reconnect_attempts:
            self._registry.close(entry, ("reconnect_exhausted", why))
            return
        delay = self._config.backoff.delay(entry.relisten_attempts)
        self._fx.do(ArmTimer(delay, Relisten(entry.handle.id, self._generation())))

    def _nothing_to_listen(self, entry: Entry) -> None:
        """The server has no ``subscriptions/listen`` (-32601): the watch is live all the same,
        acknowledged for nothing, with no stream; after a reconnect it reports like any watch."""
        logger.info(
            "%s: the server has no subscriptions/listen (-32601): %r has nothing to listen to",
            self._name,
            entry.handle,
        )
        if entry.listen_id is not None:
            self._registry.by_listen_id.pop(entry.listen_id, None)
            entry.listen_id = None
        handle = entry.handle
        handle.subscription_id = None
        handle.acknowledged_filter = {}
        entry.acknowledged = NotificationFilter()
        if entry.state is EntryState.AWAITING_ACK:
            entry.to(EntryState.LIVE)
            self._registry.status(entry, "ready")
            future, entry.ack_future = entry.ack_future, None
            self._fx.resolve(future, entry.acknowledged)
        else:
            self._registry.emit(entry, m.Reconnected(m.RECONNECTED, handle, {"resubscribed": [], "failed": []}))
            entry.to(EntryState.LIVE)
            self._relistened(handle.id)
        entry.relisten_attempts = 0
        entry.held = []

    def cancelled_by_server(self, params: dict[str, Any]) -> bool:
        """A server's ``notifications/cancelled``: True when it names one of our listens,
        which is then closed with ``("cancelled_by_server", reason)``.

        The server tore the subscription down on purpose (2026-07-28 cancellation: it MUST
        send this when it does), as with its graceful answer, so nothing re-listens: a
        re-listen is for a stream that ended without the server saying so. No cancellation
        goes back (the request is no longer in progress); on HTTP our end of its stream is
        closed, in case the server keeps it open.
        """
        request_id = params.get("requestId")
        if isinstance(request_id, bool) or not isinstance(request_id, str | int):
            return False
        entry = self._registry.by_listen_id.get(request_id)
        if entry is None:
            return False
        reason = params.get("reason") if isinstance(params.get("reason"), str) else None
        logger.info(
            "%s: the server ended subscription %s (%s)",
            self._name,
            peer_text(request_id, quote=True),
            peer_text(reason) if reason is not None else "no reason given",
        )
        self._registry.by_listen_id.pop(request_id, None)
        entry.listen_id = None
        self._ended_by_server[request_id] = None
        if len(self._ended_by_server) > MAX_ENDED_BY_SERVER:
            del self._ended_by_server[next(iter(self._ended_by_server))]
        self._fx.do(CancelOnWire(request_id, None))
        term = ("cancelled_by_server", reason)
        if entry.state is EntryState.AWAITING_ACK:
            why = "the server cancelled subscriptions/listen before acknowledging it"
            self._fx.reject(entry.ack_future, Error(f"{why}: {peer_text(reason)}" if reason else why, reason=term))
            self._registry.forget(entry.handle.id)
            return True
        if (entry.state in FETCHING or entry.state is EntryState.RELISTENING) and entry.kind == "subscription":
            registry = self._registry
            registry.emit(entry, m.SubscriptionResync(m.SUBSCRIPTION_RESYNC, entry.handle, ("failed", term)))
        self._registry.close(entry, term)
        return True

    def ended_by_server(self, request_id: Any) -> bool:
        """Whether ``request_id`` is a listen the server cancelled (its late answer is no news)."""
        try:
            return request_id in self._ended_by_server
        except TypeError:  # an unhashable id is none of ours
            return False

    # -- drops, re-listens and resyncs -----------------------------------------------------

    def stream_dropped(self, entry: Entry) -> None:
        """An entry's stream is gone (its connection, or its own HTTP stream): re-listen later."""
        if entry.state is EntryState.AWAITING_ACK:
            # Never acknowledged: the listen() call is still waiting; fail it.
            self._fx.reject(entry.ack_future, ConnectionLost("the connection was lost before the acknowledgment"))
            self._registry.forget(entry.handle.id)
            return
        if entry.state is EntryState.LIVE and entry.kind == "subscription":
            self._registry.emit(entry, m.SubscriptionResync(m.SUBSCRIPTION_RESYNC, entry.handle, "started"))
        entry.to(EntryState.RELISTENING)
        if entry.listen_id is not None:
            self._registry.by_listen_id.pop(entry.listen_id, None)
            entry.listen_id = None

    def relisten(self, message: Relisten, modern_ready: bool) -> None:
        entry = self._registry.entries.get(message.handle_id)
        if entry is None or entry.state is not EntryState.RELISTENING or message.generation != self._generation():
            return
        if modern_ready:
            self.listen(entry)

    def resync_done(self, message: ResyncDone) -> None:
        entry = self._registry.entries.get(message.handle_id)
        if entry is None or entry.listen_id != message.listen_id or entry.state not in FETCHING:
            return  # stale: the subscription dropped again or was closed meanwhile
        if entry.state is EntryState.RESYNCING_AGAIN:
            entry.to(EntryState.RESYNCING)  # acknowledged again since this fetch began: fetch anew
            self._fetch_snapshot(entry)
            return
        outcome = ("complete", message.snapshot) if message.error is None else ("failed", message.error)
        self._registry.emit(entry, m.SubscriptionResync(m.SUBSCRIPTION_RESYNC, entry.handle, outcome))
        entry.to(EntryState.LIVE)
        entry.relisten_attempts = 0
        self._release_held(entry)

    def become_modern(self, entry: Entry) -> None:
        """A legacy watch whose peer turned modern carries on as a subscription."""
        self._registry.index.remove(entry.handle.id)
        entry.era = "modern"
        entry.follows_server = True
        entry.to(EntryState.RELISTENING)
        entry.acknowledged = None
        self.listen(entry)

    # -- ending ----------------------------------------------------------------------------

    def cancel_on_wire(self, entry: Entry) -> None:
        if entry.listen_id is not None:
            self._cancel_on_wire(entry.listen_id, "cancelled by the client")
            self._registry.by_listen_id.pop(entry.listen_id, None)
            entry.listen_id = None

    def cancel(self, message: CancelSubscription) -> None:
        entry = self._registry.entries.get(message.handle_id)
        if entry is None:
            raise ListenerNotFound()
        self.cancel_on_wire(entry)
        if message.reason is None:
            self._fx.reject(entry.ack_future, ListenerNotFound("cancelled before the acknowledgment"))
            self._registry.forget(entry.handle.id)
        else:
            self._registry.close(entry, message.reason)


def _unstamped(params: dict[str, Any]) -> dict[str, Any]:
    """Event params without the subscription id stamp, so they read like legacy ones."""
    meta = params.get("_meta")
    if not isinstance(meta, dict) or META_SUBSCRIPTION_ID not in meta:
        return params
    rest = {key: value for key, value in meta.items() if key != META_SUBSCRIPTION_ID}
    clean = {key: value for key, value in params.items() if key != "_meta"}
    if rest:
        clean["_meta"] = rest
    return clean
