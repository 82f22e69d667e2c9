"""The listener index: which listeners a notification reaches, and the routing of
notifications to it (sans-IO).

Indexed by list_changed category and by URI, so dispatch costs time in
proportion to the listeners a notification matches, not to all listeners.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any, Generic, Protocol, TypeVar

from ._filters import CATEGORY_OF_METHOD, RESOURCE_UPDATED, NotificationFilter, event_message, raw_message
from ._handshake import META_SUBSCRIPTION_ID
from ._host_checks import SESSION_NOTIFICATIONS
from ._uris import _CACHED_CHARS, uri_key

T = TypeVar("T")


#: How many ``resources/updated`` URIs an index remembers what they reached (see ``_reached``).
_REACHED_KEPT = 1024


class ListenerIndex(Generic[T]):
    """Maps categories and URIs to the entries (listeners) that enabled them.

    Entries are kept in registration order, so listeners of one subscriber
    receive a notification in the order they were registered.
    """

    def __init__(self) -> None:
        self._by_category: dict[str, dict[Hashable, T]] = {}
        self._by_uri: dict[str, dict[Hashable, T]] = {}
        #: The same entries under each URI without its trailing slashes, for sub-resources, and
        #: how many URIs have each such length (a lookup costs one try per length held).
        self._by_base: dict[str, dict[Hashable, T]] = {}
        self._base_lengths: dict[int, int] = {}
        self._by_method: dict[str, dict[Hashable, T]] = {}
        self._filters: dict[Hashable, NotificationFilter] = {}
        #: Each entry's place in registration order.
        self._order: dict[Hashable, int] = {}
        self._added = 0
        #: What each ``resources/updated`` URI reached, as the server spelt it, until the index
        #: next changes: a flood of one URI's updates costs a dict lookup each, not its key form
        #: and the walk of its parents (at most :data:`_REACHED_KEPT` URIs, whatever the server
        #: sends, and only those its key cache takes: a server's URI may be megabytes long).
        self._reached: dict[str, dict[Hashable, T] | None] = {}

    def __len__(self) -> int:
        return len(self._filters)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._filters

    def add(self, key: Hashable, flt: NotificationFilter, entry: T) -> None:
        """Index an entry under every category and URI its filter enables."""
        if key in self._filters:
            raise ValueError(f"entry {key!r} is already indexed")
        self._filters[key] = flt
        self._reached.clear()
        self._added += 1
        self._order[key] = self._added
        for category in flt.categories:
            self._by_category.setdefault(category, {})[key] = entry
        for uri in flt.uris:  # by the form every spelling of it shares: servers echo their own
            key_form = uri_key(uri)
            self._by_uri.setdefault(key_form, {})[key] = entry
            base = key_form.rstrip("/")
            self._by_base.setdefault(base, {})[key] = entry
            self._base_lengths[len(base)] = self._base_lengths.get(len(base), 0) + 1
        for method in flt.methods:
            self._by_method.setdefault(method, {})[key] = entry

    def remove(self, key: Hashable) -> None:
        """Remove an entry; unknown keys are ignored."""
        flt = self._filters.pop(key, None)
        if flt is None:
            return
        self._reached.clear()
        del self._order[key]
        for category in flt.categories:
            _discard(self._by_category, category, key)
        for uri in flt.uris:
            key_form = uri_key(uri)
            _discard(self._by_uri, key_form, key)
            base = key_form.rstrip("/")
            _discard(self._by_base, base, key)
            left = self._base_lengths[len(base)] - 1
            if left:
                self._base_lengths[len(base)] = left
            else:
                del self._base_lengths[len(base)]
        for method in flt.methods:
            _discard(self._by_method, method, key)

    def reached(self, method: str, params: Any) -> Iterable[T]:
        """The entries a legacy notification reaches (the filter is authoritative), in
        registration order. A view, not a copy: valid until the index next changes."""
        bucket = self._bucket(method, params)
        return bucket.values() if bucket else ()

    def reached_raw(self, method: str, params: Any) -> list[T]:
        """The entries whose ``methods`` name ``method`` and that :meth:`reached` does not reach
        already (one message per listener), in registration order."""
        named = self._by_method.get(method)
        if not named:
            return []
        covered = self._bucket(method, params)
        return [entry for key, entry in named.items() if not covered or key not in covered]

    def _bucket(self, method: str, params: Any) -> dict[Hashable, T] | None:
        if method == RESOURCE_UPDATED:
            uri = params.get("uri") if type(params) is dict else None
            if type(uri) is not str:
                return None
            try:
                return self._reached[uri]
            except KeyError:
                pass
            reached = self._updated(uri_key(uri))
            if len(uri) <= _CACHED_CHARS:
                if len(self._reached) >= _REACHED_KEPT:
                    self._reached.clear()
                self._reached[uri] = reached
            return reached
        category = CATEGORY_OF_METHOD.get(method)
        return self._by_category.get(category) if category is not None else None

    def _updated(self, uri: str) -> dict[Hashable, T] | None:
        """The entries a ``resources/updated`` of ``uri`` (in its key form, ``uri_key``) reaches:
        those of ``uri`` and, since the spec says the URI "might be a sub-resource of the one that
        the client actually subscribed to", those of each URI it is under (as
        ``_uris.uri_within`` matches a modern one), in registration order. Costs one try per
        length of URI held, whatever the server sends."""
        exact = self._by_uri.get(uri)
        under = [
            bucket
            for length in self._base_lengths
            if length < len(uri) and uri[length] == "/" and (bucket := self._by_base.get(uri[:length])) is not None
        ]
        if not under:
            return exact
        entries = dict(exact) if exact else {}
        for bucket in under:
            entries.update(bucket)
        order = self._order
        return {key: entries[key] for key in sorted(entries, key=order.__getitem__)}


class Index(Protocol):
    """The listener index as the session uses it (the client actor passes its delivery lane,
    which takes a lock to change it; tests pass a plain :class:`ListenerIndex`)."""

    def __len__(self) -> int: ...

    def __contains__(self, key: Any) -> bool: ...

    def add(self, key: Any, flt: NotificationFilter, entry: Any) -> None: ...

    def remove(self, key: Any) -> None: ...

    def reached(self, method: str, params: Any) -> Any: ...

    def reached_raw(self, method: str, params: Any) -> list[Any]: ...


def _discard(buckets: dict[str, dict[Hashable, T]], name: str, key: Hashable) -> None:
    bucket = buckets.get(name)
    if bucket is None:
        return
    bucket.pop(key, None)
    if not bucket:
        del buckets[name]


# -- routing notifications -----------------------------------------------------------------

ACK_METHOD = "notifications/subscriptions/acknowledged"


def notification_parts(frame: Any) -> tuple[str, dict[str, Any]] | None:
    """``(method, params)`` of a well-formed notification, else None (classify it fully).

    Notifications are nearly all of the traffic, so they skip the full classification.
    """
    if type(frame) is dict and "id" not in frame and frame.get("jsonrpc") == "2.0":
        method = frame.get("method")
        params = frame.get("params")
        if params is None:
            params = {}
        if type(method) is str and type(params) is dict and method not in SESSION_NOTIFICATIONS:
            return method, params
    return None  # the session reads progress, cancellations, logs and task status itself


def subscription_id_of(params: dict[str, Any]) -> Any:
    """The modern subscription id a notification is stamped with; None for a legacy one."""
    meta = params.get("_meta")
    return meta.get(META_SUBSCRIPTION_ID) if type(meta) is dict else None


def for_a_subscription(method: str, params: dict[str, Any]) -> bool:
    """Whether a notification belongs to a modern subscription (an acknowledgment, or an event
    stamped with a subscription id): never to a legacy listener."""
    return method == ACK_METHOD or subscription_id_of(params) is not None


def dispatch(
    index: Index, method: str, params: dict[str, Any], out: dict[Any, list[Any]], *, raw_only: bool = False
) -> None:
    """Queue a legacy notification for every listener the index says it reaches (``raw_only``:
    only those whose ``methods`` name it, for a notification the session itself consumed).

    Entries carry ``route`` (where their messages go) and ``handle``."""
    if not raw_only:
        for entry in index.reached(method, params):
            items = out.get(entry.route)
            if items is None:
                items = out[entry.route] = []
            # Indexed entries are legacy listeners and watches: a Notification (or an ElicitationComplete).
            items.append(event_message(entry.handle, method, params))
    for entry in index.reached_raw(method, params):
        out.setdefault(entry.route, []).append(raw_message(entry.handle, method, params))
