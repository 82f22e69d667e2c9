"""Notification filters: validation, normalization and matching (sans-IO).

One vocabulary for both eras (the MCP 2026-07-28 notification-filter keys),
validated the same way whatever the connection state, so filter errors are
raised before anything is sent.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Final

from . import _messages as m
from ._errors import FilterError
from ._uris import uri_key, uri_within

_new_tuple = tuple.__new__

TOOLS = "toolsListChanged"
PROMPTS = "promptsListChanged"
RESOURCES = "resourcesListChanged"
#: Server log messages (``notifications/message``): delivered to legacy listeners and watches.
LOG_MESSAGES = "logMessages"
#: Completions of URL elicitations (``notifications/elicitation/complete``, MCP 2025-11-25):
#: delivered as :class:`~._messages.ElicitationComplete`; no wire key (2026-07-28 has none).
ELICITATION_COMPLETED = "elicitationComplete"
RESOURCE_SUBSCRIPTIONS = "resourceSubscriptions"
TASK_IDS = "taskIds"
#: Raw hooks: notification methods delivered as they come, known or not (legacy listeners and watches).
METHODS = "methods"
#: Connection status messages (:class:`~._messages.Status`) for the handle; no wire key.
STATUS = "status"
#: Bounds on ``methods``: the filter rides in every dispatch, and a method is a short name.
MAX_METHODS = 64
MAX_METHOD_LENGTH = 256

CATEGORY_KEYS: tuple[str, ...] = (TOOLS, PROMPTS, RESOURCES, LOG_MESSAGES, ELICITATION_COMPLETED)
WIRE_CATEGORY_KEYS: tuple[str, ...] = (TOOLS, PROMPTS, RESOURCES)
FILTER_KEYS: frozenset[str] = frozenset((*CATEGORY_KEYS, RESOURCE_SUBSCRIPTIONS, TASK_IDS, METHODS, STATUS))

TOOLS_LIST_CHANGED = "notifications/tools/list_changed"
PROMPTS_LIST_CHANGED = "notifications/prompts/list_changed"
RESOURCES_LIST_CHANGED = "notifications/resources/list_changed"
RESOURCE_UPDATED = "notifications/resources/updated"
LOG_MESSAGE = "notifications/message"
ELICITATION_COMPLETE = "notifications/elicitation/complete"
TASK_STATUS = "notifications/tasks/status"
#: The tasks extension's push on 2026-07-28 (SEP-2663); ``TASK_STATUS`` is the 2025-11-25 one.
TASK_NOTIFICATION = "notifications/tasks"
#: Task statuses a ``taskIds`` listen hears: the extension's method, and the older drafts' name.
TASK_NOTIFICATIONS: frozenset[str] = frozenset((TASK_NOTIFICATION, TASK_STATUS))

#: list_changed method -> the filter key that enables it.
CATEGORY_OF_METHOD: dict[str, str] = {
    TOOLS_LIST_CHANGED: TOOLS,
    PROMPTS_LIST_CHANGED: PROMPTS,
    RESOURCES_LIST_CHANGED: RESOURCES,
    LOG_MESSAGE: LOG_MESSAGES,
    ELICITATION_COMPLETE: ELICITATION_COMPLETED,
}

#: Every notification method a filter can enable.
FILTERABLE_METHODS: frozenset[str] = frozenset((*CATEGORY_OF_METHOD, RESOURCE_UPDATED, *TASK_NOTIFICATIONS))

_LIST_CHANGED: Final = frozenset((TOOLS_LIST_CHANGED, PROMPTS_LIST_CHANGED, RESOURCES_LIST_CHANGED))


def event_message(handle: Any, method: str, params: dict[str, Any]) -> Any:
    """The message a listener or watch receives for a notification: a completed elicitation is
    an :class:`~._messages.ElicitationComplete`, anything else a :class:`~._messages.Notification`."""
    # tuple.__new__ skips the NamedTuple's Python-level __new__: this runs per delivery.
    if method == ELICITATION_COMPLETE:
        return _new_tuple(m.ElicitationComplete, (m.ELICITATION_COMPLETE, handle, params.get("elicitationId"), params))
    return _new_tuple(m.Notification, (m.NOTIFICATION, handle, method, params))


def raw_message(handle: Any, method: str, params: dict[str, Any]) -> Any:
    """The message a listener whose ``methods`` name ``method`` receives: a :class:`~._messages.RawNotification`."""
    return _new_tuple(m.RawNotification, (m.RAW_NOTIFICATION, handle, method, params))


def signal_key(method: str, params: dict[str, Any]) -> Hashable | None:
    """What a pure change signal is about (None: the notification is not one).

    The three ``list_changed`` and ``resources/updated`` for one URI say only "refetch this":
    wherever notifications wait under a bound, one waiting signal per key says it all."""
    if method in _LIST_CHANGED:
        return method
    if method == RESOURCE_UPDATED:
        uri = params.get("uri")
        return ("uri", uri) if isinstance(uri, str) else None
    return None


@dataclass(frozen=True, slots=True)
class NotificationFilter:
    """A validated, normalized filter.

    Attributes:
        categories: the enabled list_changed keys, in canonical order.
        uris: resource URIs, de-duplicated in first-seen order.
        task_ids: task ids (modern peers only), de-duplicated in first-seen order.
        methods: notification methods delivered raw (legacy only), de-duplicated in first-seen order.
        status: the handle also gets the client's connection status (no wire meaning).
    """

    categories: frozenset[str] = frozenset()
    uris: tuple[str, ...] = ()
    task_ids: tuple[str, ...] | None = None
    methods: tuple[str, ...] = ()
    status: bool = False

    def as_dict(self, *, wire: bool = False) -> dict[str, Any]:
        """The normalized filter as a dict: false categories dropped. ``wire``: as
        ``subscriptions/listen`` takes it (no ``logMessages``: 2026-07-28 has no such key)."""
        keys = WIRE_CATEGORY_KEYS if wire else CATEGORY_KEYS
        result: dict[str, Any] = {key: True for key in keys if key in self.categories}
        if self.uris:
            result[RESOURCE_SUBSCRIPTIONS] = list(self.uris)
        if self.task_ids is not None:
            result[TASK_IDS] = list(self.task_ids)
        if self.methods and not wire:
            result[METHODS] = list(self.methods)
        if self.status and not wire:
            result[STATUS] = True
        return result

    def enables(self, method: str, params: Any, *, sub_resources: bool = False) -> bool:
        """Whether a notification passes this filter.

        URIs match exactly; with ``sub_resources`` (modern events, checked against an
        acknowledged filter) a sub-resource of a listed URI matches too (legacy events are
        matched the same way by the listener index, ``_index``).
        """
        category = CATEGORY_OF_METHOD.get(method)
        if category is not None:
            return category in self.categories
        if method == RESOURCE_UPDATED:
            uri = params.get("uri") if isinstance(params, dict) else None
            if not isinstance(uri, str):
                return False
            if sub_resources:
                return uri_within(uri, self.uris)
            key = uri_key(uri)
            return any(uri_key(base) == key for base in self.uris)
        if method in TASK_NOTIFICATIONS and self.task_ids:
            return isinstance(params, dict) and params.get("taskId") in self.task_ids
        return False

    def is_within(self, other: NotificationFilter) -> bool:
        """True when everything this filter enables is enabled by ``other``."""
        if not self.categories <= other.categories:
            return False
        if not set(self.uris) <= set(other.uris):
            return False
        return self.task_ids is None or (other.task_ids is not None and set(self.task_ids) <= set(other.task_ids))


_NO_CATEGORIES: frozenset[str] = frozenset()


def _dedupe(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _string_list(value: Any, key: str, element_reason: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise FilterError(f"{key} must be a list, got {type(value).__name__}", reason="invalid_subscription_filter")
    for item in value:
        if not isinstance(item, str) or not item:
            raise FilterError(f"{key} entries must be non-empty strings, got {item!r}", reason=element_reason)
    return _dedupe(value)


def normalize_filter(raw: Any, *, allow_tasks: bool = False, allow_methods: bool = True) -> NotificationFilter:
    """Validate and normalize a host-supplied filter.

    Args:
        raw: what the host passed.
        allow_tasks: True on a modern peer, where ``taskIds`` is meaningful.
        allow_methods: False for a ``subscriptions/listen``, whose filter the server applies.

    Raises:
        FilterError: with ``.reason`` naming what was wrong.
    """
    if not isinstance(raw, dict):
        raise FilterError(
            f"a notification filter must be a dict, got {type(raw).__name__}",
            reason="subscription_filter_required",
        )
    unknown = [key for key in raw if key not in FILTER_KEYS]
    if unknown:
        raise FilterError(
            f"the filter has unknown keys {sorted(map(str, unknown))}; the known ones are {sorted(FILTER_KEYS)}",
            reason="unknown_subscription_filter",
        )
    categories = set()
    for key in CATEGORY_KEYS:
        if key not in raw:
            continue
        value = raw[key]
        if not isinstance(value, bool):
            raise FilterError(f"{key} must be true or false, got {value!r}", reason="invalid_subscription_filter")
        if value:
            categories.add(key)
    uris: tuple[str, ...] = ()
    if RESOURCE_SUBSCRIPTIONS in raw:
        uris = _string_list(raw[RESOURCE_SUBSCRIPTIONS], RESOURCE_SUBSCRIPTIONS, "invalid_resource_subscription")
    task_ids: tuple[str, ...] | None = None
    if TASK_IDS in raw:
        task_ids = _string_list(raw[TASK_IDS], TASK_IDS, "invalid_task_subscription")
        if not allow_tasks:
            raise FilterError(
                "taskIds needs a peer that speaks MCP 2026-07-28",
                reason="task_subscriptions_require_mcp_2026_07_28",
            )
    methods = _methods(raw[METHODS], allow_methods) if METHODS in raw else ()
    status = raw.get(STATUS, False)
    if not isinstance(status, bool):
        raise FilterError(f"{STATUS} must be true or false, got {status!r}", reason="invalid_subscription_filter")
    if not categories and not uris and not task_ids and not methods:
        # Status alone is refused too: a listen with nothing to listen to is the server's to refuse.
        raise FilterError("the filter enables nothing", reason="empty_subscription_filter")
    categories_set = frozenset(categories) if categories else _NO_CATEGORIES
    return NotificationFilter(categories_set, uris, task_ids, methods, status)


def _methods(value: Any, allowed: bool) -> tuple[str, ...]:
    methods = _string_list(value, METHODS, "invalid_method_subscription")
    if len(methods) > MAX_METHODS:
        raise FilterError(
            f"{METHODS} names {len(methods)} methods; at most {MAX_METHODS} are taken",
            reason="invalid_method_subscription",
        )
    for method in methods:
        if len(method) > MAX_METHOD_LENGTH:
            raise FilterError(
                f"{METHODS} entries must be at most {MAX_METHOD_LENGTH} characters, got one of {len(method)}",
                reason="invalid_method_subscription",
            )
    if not allowed:
        raise FilterError(
            f"{METHODS} is for listeners and watches of MCP 2024-11-05 .. 2025-11-25 peers, "
            "not for a subscriptions/listen, whose filter the server applies",
            reason="methods_require_legacy_listener",
        )
    return methods


def filter_from_wire(raw: Any) -> NotificationFilter | None:
    """Parse a filter the peer sent (an acknowledgment), leniently: None if malformed."""
    if not isinstance(raw, dict):
        return None
    categories = frozenset(key for key in CATEGORY_KEYS if raw.get(key) is True)
    uris_raw = raw.get(RESOURCE_SUBSCRIPTIONS, [])
    tasks_raw = raw.get(TASK_IDS)
    if not isinstance(uris_raw, list) or not all(isinstance(u, str) for u in uris_raw):
        return None
    task_ids: tuple[str, ...] | None = None
    if tasks_raw is not None:
        if not isinstance(tasks_raw, list) or not all(isinstance(t, str) for t in tasks_raw):
            return None
        task_ids = _dedupe(tasks_raw)
    return NotificationFilter(categories, _dedupe(uris_raw), task_ids)
