"""The message tuples subscribers receive. The first field is always the tag,
so both tuple patterns and attribute access work::

    match msg:
        case ("ex_mcp_notification", listener, method, params): ...
        case ("ex_mcp_raw_notification", listener, method, params): ...
        case mcp.Closed(reason=reason): ...
"""

from __future__ import annotations

from typing import Any, Final, Literal, NamedTuple


class Notification(NamedTuple):
    """A server notification that passed a listener's filter."""

    tag: Literal["ex_mcp_notification"]
    #: The Listener (or Watch) it was delivered for.
    listener: Any
    #: The notification method, e.g. ``"notifications/resources/updated"``.
    method: str
    #: The notification params (``{}`` when the server sent none).
    params: dict[str, Any]


class RawNotification(NamedTuple):
    """A server notification whose method a listener's ``methods`` names, delivered as it came
    (known or not, checked only to be a notification with object params)."""

    tag: Literal["ex_mcp_raw_notification"]
    #: The Listener (or Watch) it was delivered for.
    listener: Any
    #: The notification method, e.g. ``"notifications/com.example/progress"``.
    method: str
    #: The notification params (``{}`` when the server sent none).
    params: dict[str, Any]


class ElicitationComplete(NamedTuple):
    """The server finished a URL-mode elicitation the client had handed to the host
    (``notifications/elicitation/complete``; an ``elicitationComplete`` filter asks for it)."""

    tag: Literal["ex_mcp_elicitation_complete"]
    listener: Any
    #: The ``elicitationId`` of the ``elicitation/create`` (or -32042 error) it completes.
    elicitation_id: str
    #: The notification params as sent.
    params: dict[str, Any]


class Reconnected(NamedTuple):
    """The client reconnected and re-subscribed the listener's URIs."""

    tag: Literal["ex_mcp_notification_reconnected"]
    listener: Any
    #: ``{"resubscribed": [uri, ...], "failed": [(uri, reason), ...]}``, in the listener's filter order.
    report: dict[str, list[Any]]


class Closed(NamedTuple):
    """The listener is closed; nothing follows this message."""

    tag: Literal["ex_mcp_notification_closed"]
    listener: Any
    #: Why: ``"disconnected"``, ``("shutdown", r)``, ``("transport_closed", r)``,
    #: ``("reconnect_exhausted", r)``, ``("era_changed", "modern")``, ``("crashed", e)``.
    reason: Any


class SubscriptionEvent(NamedTuple):
    """A modern (2026-07-28) event inside the acknowledged filter."""

    tag: Literal["ex_mcp_subscription"]
    subscription: Any
    method: str
    params: dict[str, Any]


class SubscriptionResync(NamedTuple):
    """A modern subscription is being re-opened after an abrupt drop.

    ``state`` is ``"started"``, ``("complete", snapshot)`` or ``("failed", reason)``.
    """

    tag: Literal["ex_mcp_subscription_resync"]
    subscription: Any
    state: Any


class SubscriptionClosed(NamedTuple):
    """A modern subscription ended; nothing follows this message."""

    tag: Literal["ex_mcp_subscription_closed"]
    subscription: Any
    reason: Any


NOTIFICATION: Final = "ex_mcp_notification"
RAW_NOTIFICATION: Final = "ex_mcp_raw_notification"
ELICITATION_COMPLETE: Final = "ex_mcp_elicitation_complete"
RECONNECTED: Final = "ex_mcp_notification_reconnected"
CLOSED: Final = "ex_mcp_notification_closed"
SUBSCRIPTION: Final = "ex_mcp_subscription"
SUBSCRIPTION_RESYNC: Final = "ex_mcp_subscription_resync"
SUBSCRIPTION_CLOSED: Final = "ex_mcp_subscription_closed"

#: Tags after which a handle receives nothing more.
FINAL_TAGS = frozenset((CLOSED, SUBSCRIPTION_CLOSED))


class Status(NamedTuple):
    """The client's connection status, for a handle whose filter has ``"status": True``; in
    order with the handle's other messages (``"reconnecting"`` before the ``Reconnected`` of
    that reconnect, ``"ready"`` after it, ``"closed"`` just before the closing message)."""

    tag: Literal["ex_mcp_status"]
    #: The Listener, Subscription or Watch it was delivered for.
    handle: Any
    #: ``"connecting"``, ``"ready"``, ``"reconnecting"`` or ``"closed"``.
    state: str
    #: ``ready``: ``{"era", "protocolVersion"}``; ``reconnecting``: ``{"attempt", "delay",
    #: "reason"}``; ``connecting``: ``{"attempt"}``; ``closed``: ``{"reason"}`` (the closing
    #: message's reason).
    detail: dict[str, Any]


STATUS: Final = "ex_mcp_status"
#: The states a Status reports.
STATUS_STATES: Final = ("connecting", "ready", "reconnecting", "closed")
