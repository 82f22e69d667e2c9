"""An ordered set of JSON-RPC ids that tolerates ids a client got wrong."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class IdSet:
    """Ids in the order they were added; an unhashable id is never a member, and never an error.

    A client may send any JSON value as an id (a list, an object); such an id
    cannot match anything the fake tracks, so adding it does nothing.
    """

    def __init__(self) -> None:
        self._ids: dict[Any, None] = {}

    def add(self, request_id: Any) -> None:
        try:
            self._ids[request_id] = None
        except TypeError:
            pass

    def discard(self, request_id: Any) -> None:
        try:
            self._ids.pop(request_id, None)
        except TypeError:
            pass

    def __contains__(self, request_id: object) -> bool:
        try:
            return request_id in self._ids
        except TypeError:
            return False

    def __iter__(self) -> Iterator[Any]:
        return iter(self._ids)
