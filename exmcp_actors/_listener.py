"""Legacy-era listeners: the host's handle on ``subscribe_notifications``."""

from __future__ import annotations

from typing import Any

from ._errors import ListenerNotFound, NotConnected
from ._handle import Handle
from ._protocol._filters import NotificationFilter
from ._subscriber import Inbox


class Listener(Handle):
    """A legacy notification listener.

    Attributes:
        id: unique within the client.
        client: the :class:`~exmcp_actors.Client` it belongs to.
        subscriber: who receives its messages (a thread, an actor, or a ``put()`` object).
        filter: the normalized filter (false categories dropped, URIs de-duplicated).

    Messages: :class:`~exmcp_actors.Notification`, :class:`~exmcp_actors.Reconnected`,
    then exactly one :class:`~exmcp_actors.Closed`, unless the listener is unsubscribed.
    """

    def __init__(
        self, listener_id: Any, client: Any, subscriber: Any, flt: NotificationFilter, inbox: Inbox | None
    ) -> None:
        super().__init__(listener_id, client, subscriber, inbox)
        self._normalized = flt

    @property
    def filter(self) -> dict[str, Any]:
        """The normalized filter as a dict."""
        return self._normalized.as_dict()

    def unsubscribe(self, timeout: float = 5.0) -> None:
        """Remove the listener; same as ``client.unsubscribe_notifications(listener)``."""
        self.client.unsubscribe_notifications(self, timeout=timeout)

    def close(self) -> None:
        """Unsubscribe if still registered (the context manager's exit)."""
        try:
            self.unsubscribe()
        except (ListenerNotFound, NotConnected):
            pass
