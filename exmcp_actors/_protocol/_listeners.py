"""Legacy listeners (sans-IO): registration in steps, and the pause across a reconnect.

A registration is three steps, so the client actor never waits on the wire:
``register`` (an entry exists, not delivered to), the refcount worker's
``resources/subscribe`` calls (the host waits on the worker), then ``activate``
(the entry is indexed and delivered to). ``abandon`` undoes whatever exists of
a registration that failed.

After a loss, delivery pauses (the :class:`~._state.Pause` table): plain
notifications are held until every listener that existed at the loss has been
told :class:`~exmcp_actors.Reconnected` (with what its URIs' resubscription gave),
then released in wire order.

The backlog is bounded like a handle's pending messages (``_delivery/_bound``), so
a chatty or hostile server cannot grow it without limit during the pause. Below
the bound everything is held, in order. At the bound, a change signal whose key
is held already is coalesced into the held one (which takes the latest params),
and one of a new key is still held, up to twice the bound. Anything else is not
held: each listener it would have reached misses it, so when the pause ends that
listener gets what was held before the miss, then its closing message
``("overflow", bound)``, and is dropped as an overflowed handle is (its URIs
released). The bound is one per session (:data:`MAX_HELD_NOTIFICATIONS`): the
backlog is the session's, shared by every listener, and a bound that moved with
the listeners registered during the pause could not be reasoned about.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any, Final

from . import _messages as m
from ._errors import NotConnected, SubscriberNotAlive
from ._events import ResubscribeReport
from ._filters import FILTERABLE_METHODS, NotificationFilter, signal_key
from ._index import dispatch
from ._ratelog import RateLimitedLog
from ._registry import Entry, Registry
from ._state import PAUSE_MOVES, EntryState, Pause, checked_move

logger = logging.getLogger("exmcp_actors")

#: Notifications held across a legacy reconnect before change signals coalesce: a handle's
#: default ``max_pending``, and what a modern subscription holds while it is not live.
MAX_HELD_NOTIFICATIONS: Final = 10_000


class Listeners:
    """The legacy side of a session's registry.

    ``drop(entry)`` removes an entry no message can reach any more (its URIs released), as
    the session does for an overflowed handle."""

    def __init__(
        self,
        registry: Registry,
        drop: Callable[[Entry], None],
        name: str = "client",
        bound: int = MAX_HELD_NOTIFICATIONS,
    ) -> None:
        self._registry = registry
        self._drop = drop
        self._name = name
        self.bound = bound
        self.pause = Pause.NONE
        #: (method, params, raw_only): ``raw_only`` for one the session consumed (see :meth:`consumed`).
        self._held: list[tuple[str, dict[str, Any], bool]] = []
        #: At the bound: where the last held signal of each key is.
        self._signal_at: dict[Hashable, int] = {}
        #: Listeners that missed a notification past the bound -> how many held ones reach them first.
        self._missed: dict[Any, int] = {}
        #: The listeners to tell Reconnected after the loss, in registration order.
        self._at_loss: dict[Any, None] = {}
        self._log = RateLimitedLog(logger)

    @property
    def held_count(self) -> int:
        """How many notifications wait for the pause to end (at most twice the bound)."""
        return len(self._held)

    # -- registration ----------------------------------------------------------------------

    def register(self, handle: Any, kind: str, flt: NotificationFilter, subscriber: Any, *, activate: bool) -> None:
        """Step 1, or steps 1 and 3 at once (``activate``: nothing is left for the worker)."""
        if not subscriber.alive():
            raise SubscriberNotAlive()
        state = EntryState.ACTIVE if activate else EntryState.PENDING
        entry = self._registry.add(handle, kind, "legacy", flt, subscriber, state)
        if activate:
            self._registry.index.add(handle.id, flt, entry)
            self._registry.status(entry, "ready")

    def activate(self, listener_id: Any, ready: bool, status: str) -> None:
        registry = self._registry
        entry = registry.entries.get(listener_id)
        # Asked directly too: the liveness watcher may not have told of its death yet.
        if entry is None or entry.state is EntryState.DEAD or not entry.slot.subscriber.alive():
            registry.forget(listener_id)
            raise SubscriberNotAlive()
        if not ready:
            registry.forget(listener_id)
            raise NotConnected(f"the client is {status}")
        if entry.era != "legacy":
            return  # a watch whose peer turned modern meanwhile: it listens as a subscription already
        entry.to(EntryState.ACTIVE)
        registry.index.add(entry.handle.id, entry.requested, entry)
        registry.status(entry, "ready")  # its first message: the client it was opened on is ready

    def abandon(self, listener_id: Any) -> None:
        self._registry.forget(listener_id)

    # -- the pause across a reconnect ------------------------------------------------------

    def pause_for_reconnect(self) -> None:
        """The connection dropped: hold notifications; remember whom to tell."""
        if self.pause is Pause.NONE:
            self.pause = checked_move(PAUSE_MOVES, self.pause, Pause.HELD)
        for handle_id, entry in self._registry.entries.items():
            if entry.era == "legacy" and entry.state is EntryState.ACTIVE:
                self._at_loss[handle_id] = None

    def hold(self, method: str, params: dict[str, Any], *, raw_only: bool = False) -> None:
        index = self._registry.index
        if (raw_only or method not in FILTERABLE_METHODS) and not index.reached_raw(method, params):
            return
        held = self._held
        if self.pause is Pause.HELD:
            held.append((method, params, raw_only))
            if len(held) >= self.bound:
                self._reach_the_bound()
            return
        key = None if raw_only else signal_key(method, params)
        if key is not None:
            at = self._signal_at.get(key)
            if at is not None:
                held[at] = (method, params, False)  # coalesced: the held one says the latest
                return
            if len(held) < 2 * self.bound:
                self._signal_at[key] = len(held)
                held.append((method, params, False))
                return
        reached = () if raw_only else index.reached(method, params)
        for entry in (*reached, *index.reached_raw(method, params)):
            self._missed.setdefault(entry.handle.id, len(held))

    def consumed(self, method: str, params: dict[str, Any]) -> None:
        """A notification the session itself took (progress, a cancellation, a malformed one)
        still reaches the listeners whose ``methods`` name it, in order with the rest."""
        if self.pause is Pause.NONE:
            dispatch(self._registry.index, method, params, self._registry.out, raw_only=True)
        else:  # held for the raw hooks alone: an unknown elicitation's completion stays ignored
            self.hold(method, params, raw_only=True)

    def _reach_the_bound(self) -> None:
        self.pause = checked_move(PAUSE_MOVES, self.pause, Pause.FULL)
        for at, (method, params, raw_only) in enumerate(self._held):
            key = None if raw_only else signal_key(method, params)
            if key is not None:
                self._signal_at[key] = at
        self._log.warning(
            "held-bound",
            "%s: %d notifications held across the reconnect; change signals now coalesce, and a listener"
            " that misses any other notification is closed with ('overflow', %d) when the pause ends",
            self._name,
            self.bound,
            self.bound,
        )

    def resume(self, report: ResubscribeReport | None = None) -> None:
        """Tell every listener that existed at the loss, then release what was held, in order."""
        if self.pause is Pause.NONE:
            return  # nothing is held, and nobody was lost
        registry = self._registry
        for handle_id in self._at_loss:
            entry = registry.entries.get(handle_id)
            if entry is None or entry.era != "legacy" or entry.state is not EntryState.ACTIVE:
                continue
            uris = entry.requested.uris
            resubscribed = [u for u in uris if report is not None and u in report.resubscribed]
            failed = [(u, report.failed[u]) for u in uris if report is not None and u in report.failed]
            registry.emit(
                entry, m.Reconnected(m.RECONNECTED, entry.handle, {"resubscribed": resubscribed, "failed": failed})
            )
        self._at_loss = {}
        self.pause = checked_move(PAUSE_MOVES, self.pause, Pause.NONE)
        held, self._held = self._held, []
        missed, self._missed = self._missed, {}
        self._signal_at = {}
        index, out = registry.index, registry.out
        # Each listener that missed one gets what was held before it missed, then its end.
        cuts = sorted(missed.items(), key=lambda item: item[1])
        next_cut = 0
        for at, (method, params, raw_only) in enumerate(held):
            while next_cut < len(cuts) and cuts[next_cut][1] == at:
                self._overflow(cuts[next_cut][0])
                next_cut += 1
            dispatch(index, method, params, out, raw_only=raw_only)
        for handle_id, _ in cuts[next_cut:]:
            self._overflow(handle_id)

    def _overflow(self, handle_id: Any) -> None:
        """A listener missed a notification past the bound: it ends as an overflowed handle does."""
        entry = self._registry.entries.get(handle_id)
        if entry is None or entry.state is not EntryState.ACTIVE:
            return  # removed meanwhile
        self._registry.emit(entry, entry.closed(("overflow", self.bound)))
        self._drop(entry)
