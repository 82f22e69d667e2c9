"""Legacy-era listeners: the host's handle on ``subscribe_notifications``."""

from __future__ import annotations

from ._handle import FilteredHandle


class Listener(FilteredHandle):
    """A legacy notification listener.

    Attributes:
        id: unique within the client.
        client: the :class:`~exmcp_actors.Client` it belongs to.
        subscriber: who receives its messages (a thread, an actor, or a ``put()`` object).
        filter: the normalized filter (false categories dropped, URIs de-duplicated).

    Messages: :class:`~exmcp_actors.Notification`, :class:`~exmcp_actors.Reconnected`,
    then exactly one :class:`~exmcp_actors.Closed`, unless the listener is unsubscribed.
    """
