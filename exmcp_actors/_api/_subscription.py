"""Modern (2026-07-28) subscriptions and era-agnostic watches: the host's handles."""

from __future__ import annotations

from typing import Any

from .._delivery._inbox import Inbox
from .._protocol._filters import NotificationFilter
from ._handle import FilteredHandle, Handle


class Subscription(Handle):
    """A ``subscriptions/listen`` stream.

    Attributes:
        subscription_id: the listen request's id; a re-listen after a drop gets a new one.
        requested_filter: the normalized filter that was asked for.
        acknowledged_filter: what the server acknowledged (never wider than requested).

    Messages: :class:`~exmcp_actors.SubscriptionEvent`,
    :class:`~exmcp_actors.SubscriptionResync` (``"started"``, ``("complete", snapshot)``,
    ``("failed", reason)``), then one :class:`~exmcp_actors.SubscriptionClosed`.
    """

    def __init__(
        self, handle_id: Any, client: Any, subscriber: Any, flt: NotificationFilter, inbox: Inbox | None
    ) -> None:
        super().__init__(handle_id, client, subscriber, inbox)
        self.requested_filter: dict[str, Any] = flt.as_dict()
        self.acknowledged_filter: dict[str, Any] | None = None
        self.subscription_id: Any = None

    def cancel(self, timeout: float = 5.0) -> None:
        """End the subscription: ``notifications/cancelled`` (stdio, WebSocket) or closing the
        stream (HTTP). The subscriber then receives ``SubscriptionClosed(..., "cancelled")``.

        Raises:
            ListenerNotFound: it was already cancelled or closed.
        """
        self.client._cancel_subscription(self, timeout=timeout)

    def _end(self) -> None:
        self.cancel()


class Watch(FilteredHandle):
    """An era-agnostic handle: a legacy listener or a modern subscription underneath,
    the same :class:`~exmcp_actors.Notification` / :class:`~exmcp_actors.Reconnected` /
    :class:`~exmcp_actors.Closed` messages either way.

    Attributes:
        filter: the normalized filter.
        era: the era of the peer when the watch was made.
    """

    def __init__(
        self, handle_id: Any, client: Any, subscriber: Any, flt: NotificationFilter, inbox: Inbox | None, era: str
    ) -> None:
        super().__init__(handle_id, client, subscriber, flt, inbox)
        self.era = era
        self.acknowledged_filter: dict[str, Any] | None = None
        self.subscription_id: Any = None
