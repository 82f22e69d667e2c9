"""The listener index: which listeners a notification reaches (sans-IO).

Indexed by list_changed category and by URI, so dispatch costs time in
proportion to the listeners a notification matches, not to all listeners.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any, Generic, TypeVar

from ._filters import CATEGORY_OF_METHOD, RESOURCE_UPDATED, NotificationFilter

T = TypeVar("T")


class ListenerIndex(Generic[T]):
    """Maps categories and URIs to the entries (listeners) that enabled them.

    Entries are kept in registration order, so listeners of one subscriber
    receive a notification in the order they were registered.
    """

    def __init__(self) -> None:
        self._by_category: dict[str, dict[Hashable, T]] = {}
        self._by_uri: dict[str, dict[Hashable, T]] = {}
        self._filters: dict[Hashable, NotificationFilter] = {}

    def __len__(self) -> int:
        return len(self._filters)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._filters

    def add(self, key: Hashable, flt: NotificationFilter, entry: T) -> None:
        """Index an entry under every category and URI its filter enables."""
        if key in self._filters:
            raise ValueError(f"entry {key!r} is already indexed")
        self._filters[key] = flt
        for category in flt.categories:
            self._by_category.setdefault(category, {})[key] = entry
        for uri in flt.uris:
            self._by_uri.setdefault(uri, {})[key] = entry

    def remove(self, key: Hashable) -> None:
        """Remove an entry; unknown keys are ignored."""
        flt = self._filters.pop(key, None)
        if flt is None:
            return
        for category in flt.categories:
            _discard(self._by_category, category, key)
        for uri in flt.uris:
            _discard(self._by_uri, uri, key)

    def reached(self, method: str, params: Any) -> Iterable[T]:
        """The entries a legacy notification reaches (the filter is authoritative), in
        registration order. A view, not a copy: valid until the index next changes."""
        if method == RESOURCE_UPDATED:
            uri = params.get("uri") if type(params) is dict else None
            bucket = self._by_uri.get(uri) if type(uri) is str else None
        else:
            category = CATEGORY_OF_METHOD.get(method)
            bucket = self._by_category.get(category) if category is not None else None
        return bucket.values() if bucket else ()


def _discard(buckets: dict[str, dict[Hashable, T]], name: str, key: Hashable) -> None:
    bucket = buckets.get(name)
    if bucket is None:
        return
    bucket.pop(key, None)
    if not bucket:
        del buckets[name]
