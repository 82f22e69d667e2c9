"""The registry (sans-IO): every listener, subscription and watch of one client, the
subscribers they deliver to, and the legacy dispatch index.

An :class:`Entry` is one handle as the session sees it. Its messages go to its
``route``: the handle's own inbox (a thread subscriber), or the
:class:`ProxySlot` of its subscriber (an actor or a ``put()`` object, delivered
to by that subscriber's proxy actor). Every subscriber has one slot, whatever
the kind of subscriber: the slot's proxy actor is the stop hook that reports the
subscriber's death. A slot lives while an entry uses it. An entry's life is the
:class:`~._state.EntryState` table: it moves only through :meth:`Entry.to`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import _messages as m
from ._errors import NotConnected, TransitionError
from ._events import Effects, Outbox, Release, RetireProxy, StartProxy, ToWorker
from ._filters import NotificationFilter, event_message
from ._index import Index
from ._peer_text import peer_text
from ._state import ENTRY_MOVES, ENTRY_STARTS, UNANNOUNCED, EntryState, checked_move

_new_tuple = tuple.__new__


@dataclass(eq=False)
class ProxySlot:
    """One subscriber, the handles it serves, and its proxy actor (``ref``, set by the shell)."""

    key: Any
    subscriber: Any
    handle_ids: set[Any] = field(default_factory=set)
    ref: Any = None


@dataclass(eq=False)
class Entry:
    """One listener, subscription or watch."""

    handle: Any
    kind: str  # "listener" | "subscription" | "watch"
    era: str  # "legacy" | "modern"
    requested: NotificationFilter
    slot: ProxySlot
    #: Where its messages go: the handle's inbox, or its subscriber's ProxySlot.
    route: Any
    #: Where it is in its life (read it as ``state``; move it with ``to``).
    _state: EntryState
    # modern only
    listen_id: Any = None
    acknowledged: NotificationFilter | None = None
    ack_future: Any = None
    #: Events held while it re-listens (None until it first does: one object less per entry).
    held: list[tuple[str, dict[str, Any]]] | None = None
    relisten_attempts: int = 0
    #: Listens again after the server's graceful answer too, as after a drop: a live view (a
    #: watch, a catalog's subscription) follows a server that shut down back after its restart.
    follows_server: bool = False
    #: The last connection status it was told (``"status"`` filters only; None: none yet).
    said: str | None = None

    @property
    def state(self) -> EntryState:
        return self._state

    def to(self, state: EntryState) -> None:
        """Move to ``state``; raises TransitionError if :data:`~._state.ENTRY_MOVES` has no such move."""
        self._state = checked_move(ENTRY_MOVES, self._state, state)

    # Subscriptions speak their own vocabulary; listeners and watches speak the legacy
    # one, whatever the era, so watch() never branches.
    def event(self, method: str, params: dict[str, Any]) -> Any:
        # tuple.__new__ skips the NamedTuple's Python-level __new__: this runs per delivery.
        if self.kind == "subscription":
            return _new_tuple(m.SubscriptionEvent, (m.SUBSCRIPTION, self.handle, method, params))
        return event_message(self.handle, method, params)

    def closed(self, reason: Any) -> Any:
        if self.kind == "subscription":
            return m.SubscriptionClosed(m.SUBSCRIPTION_CLOSED, self.handle, reason)
        return m.Closed(m.CLOSED, self.handle, reason)

    @property
    def holds_uris(self) -> bool:
        """Whether the refcount worker holds URIs for it."""
        return self.era == "legacy" and self._state is EntryState.ACTIVE and bool(self.requested.uris)


class Registry:
    """Entries by handle id, subscriber slots by key, modern entries by listen id, the index."""

    def __init__(self, index: Index, effects: Effects) -> None:
        self.entries: dict[Any, Entry] = {}
        self.slots: dict[Any, ProxySlot] = {}
        self.by_listen_id: dict[Any, Entry] = {}
        self.index = index
        self._fx = effects
        #: What a ``"ready"`` status says of the connection in hand (set once it is negotiated).
        self.ready_detail: dict[str, Any] = {}

    def add(
        self, handle: Any, kind: str, era: str, flt: NotificationFilter, subscriber: Any, state: EntryState
    ) -> Entry:
        if state not in ENTRY_STARTS:
            raise TransitionError(f"an entry does not start {state.value!r}")
        slot = self.slots.get(subscriber.key)
        if slot is None:
            slot = self.slots[subscriber.key] = ProxySlot(subscriber.key, subscriber)
            self._fx.do(StartProxy(slot))
        route = slot if subscriber.target is not None else handle._inbox
        entry = Entry(handle, kind, era, flt, slot, route, state)
        self.entries[handle.id] = entry
        slot.handle_ids.add(handle.id)
        return entry

    @property
    def out(self) -> Outbox:
        """The messages queued for subscribers by the input being handled."""
        return self._fx.out

    def emit(self, entry: Entry, message: Any) -> None:
        self._fx.emit(entry.route, message)

    def forget(self, handle_id: Any) -> Entry | None:
        """Remove an entry from every table (no message, no release); retire its slot if idle."""
        entry = self.entries.pop(handle_id, None)
        if entry is None:
            return None
        self.index.remove(handle_id)
        if entry.listen_id is not None:
            self.by_listen_id.pop(entry.listen_id, None)
        entry.slot.handle_ids.discard(handle_id)
        if not entry.slot.handle_ids:
            self.retire(entry.slot)
        return entry

    def retire(self, slot: ProxySlot) -> None:
        if self.slots.get(slot.key) is slot:
            del self.slots[slot.key]
        self._fx.do(RetireProxy(slot))

    def release(self, entry: Entry) -> None:
        """Have the worker release what a legacy listener holds."""
        if entry.holds_uris:
            self._fx.do(ToWorker(Release(entry.handle.id)))

    def close(self, entry: Entry, reason: Any) -> None:
        """Deliver the one closing message and forget the entry (its URIs, if any, are the
        worker's to forget: a close comes with the end of the session that held them)."""
        if entry.state not in UNANNOUNCED:
            self.status(entry, "closed", {"reason": reason})
            self.emit(entry, entry.closed(reason))
        self._fx.reject(
            entry.ack_future, NotConnected(f"the subscription closed before it was acknowledged: {peer_text(reason)}")
        )
        self.forget(entry.handle.id)

    def status(self, entry: Entry, state: str, detail: dict[str, Any] | None = None) -> None:
        """Tell an announced entry whose filter asks for it the connection's status, in order with
        its other messages; ``"ready"`` is told once per outage (never twice in a row)."""
        if not entry.requested.status or entry.state in UNANNOUNCED or (state == entry.said == "ready"):
            return
        entry.said = state
        if detail is None:
            detail = dict(self.ready_detail)
        self.emit(entry, m.Status(m.STATUS, entry.handle, state, detail))

    def status_all(self, state: str, detail: dict[str, Any] | None = None) -> None:
        """:meth:`status` for every entry (each gets its own copy of ``detail``)."""
        for entry in list(self.entries.values()):
            if entry.requested.status:
                self.status(entry, state, None if detail is None else dict(detail))

    def of_era(self, era: str) -> list[Entry]:
        return [entry for entry in self.entries.values() if entry.era == era]
