"""Legacy listeners (sans-IO): registration in steps, and the pause across a reconnect.

A registration is three steps, so the client actor never waits on the wire:
``register`` (an entry exists, not delivered to), the refcount worker's
``resources/subscribe`` calls (the host waits on the worker), then ``activate``
(the entry is indexed and delivered to). ``abandon`` undoes whatever exists of
a registration that failed.

After a loss, delivery pauses: plain notifications are held until every
listener that existed at the loss has been told :class:`~exmcp_actors.Reconnected`
(with what its URIs' resubscription gave), then released in wire order.
"""

from __future__ import annotations

from typing import Any

from . import _messages as m
from ._errors import NotConnected, SubscriberNotAlive
from ._events import ResubscribeReport
from ._filters import FILTERABLE_METHODS, NotificationFilter
from ._index import dispatch
from ._registry import Registry


class Listeners:
    """The legacy side of a session's registry."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self.paused = False
        self._held: list[tuple[str, dict[str, Any]]] = []
        #: The listeners to tell Reconnected after the loss, in registration order.
        self._at_loss: dict[Any, None] = {}

    # -- registration ----------------------------------------------------------------------

    def register(self, handle: Any, kind: str, flt: NotificationFilter, subscriber: Any, *, activate: bool) -> None:
        """Step 1, or steps 1 and 3 at once (``activate``: nothing is left for the worker)."""
        if not subscriber.alive():
            raise SubscriberNotAlive()
        entry = self._registry.add(handle, kind, "legacy", flt, subscriber, "active" if activate else "pending")
        if activate:
            self._registry.index.add(handle.id, flt, entry)

    def activate(self, listener_id: Any, ready: bool, status: str) -> None:
        registry = self._registry
        entry = registry.entries.get(listener_id)
        # Asked directly too: the liveness watcher polls, and may not have noticed yet.
        if entry is None or entry.state == "dead" or not entry.slot.subscriber.alive():
            registry.forget(listener_id)
            raise SubscriberNotAlive()
        if not ready:
            registry.forget(listener_id)
            raise NotConnected(f"the client is {status}")
        entry.state = "active"
        registry.index.add(entry.handle.id, entry.requested, entry)

    def abandon(self, listener_id: Any) -> None:
        self._registry.forget(listener_id)

    # -- the pause across a reconnect ------------------------------------------------------

    def pause(self) -> None:
        """The connection dropped: hold notifications; remember whom to tell."""
        self.paused = True
        for handle_id, entry in self._registry.entries.items():
            if entry.era == "legacy" and entry.state == "active":
                self._at_loss[handle_id] = None

    def hold(self, method: str, params: dict[str, Any]) -> None:
        if method in FILTERABLE_METHODS:
            self._held.append((method, params))

    def resume(self, report: ResubscribeReport | None = None) -> None:
        """Tell every listener that existed at the loss, then release what was held, in order."""
        registry = self._registry
        for handle_id in self._at_loss:
            entry = registry.entries.get(handle_id)
            if entry is None or entry.era != "legacy" or entry.state != "active":
                continue
            uris = entry.requested.uris
            resubscribed = [u for u in uris if report is not None and u in report.resubscribed]
            failed = [(u, report.failed[u]) for u in uris if report is not None and u in report.failed]
            registry.emit(
                entry, m.Reconnected(m.RECONNECTED, entry.handle, {"resubscribed": resubscribed, "failed": failed})
            )
        self._at_loss = {}
        self.paused = False
        held, self._held = self._held, []
        for method, params in held:
            dispatch(registry.index, method, params, registry.out)
