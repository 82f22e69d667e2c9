"""List results kept while the server says they are fresh (sans-IO): MCP 2026-07-28 cache
hints (SEP-2549), and the session part that answers the host's list commands.

A modern list result carries ``ttlMs`` (how long it may be reused) and ``cacheScope``:
``"public"`` results may be served to anyone, ``"private"`` ones (and those without a
scope) only within the authorization context that fetched them (another access token is
another context). Each page is kept on its own, under its method and cursor, as the spec
has it; a page is fresh until ``ttlMs`` after it was stored, and the matching
``notifications/*/list_changed`` makes every page of that list stale at once. A fetch
that started before such a notification, or on an earlier connection, or under another
authorization context, stores nothing: what it brought back may predate the change.

Memory is bounded: at most :data:`MAX_ENTRIES` pages and :data:`MAX_BYTES` bytes of them
(their JSON and the cursors they are kept under), the least recently used going first; a
page larger than the whole budget is not kept. Pages are kept as JSON text, so each hit is
a fresh copy the host may change. Legacy results are never kept: those revisions define no
hints.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final, NamedTuple

__all__ = [
    "EVICTED_BY",
    "LIST_METHODS",
    "MAX_BYTES",
    "MAX_ENTRIES",
    "MAX_TTL_MS",
    "ListCache",
    "PageLookup",
    "Ticket",
    "cache_hints",
]

LIST_METHODS: Final = frozenset({"tools/list", "prompts/list", "resources/list", "resources/templates/list"})
#: Notification -> the lists it makes stale (templates enumerate the same resources).
EVICTED_BY: Final = {
    "notifications/tools/list_changed": ("tools/list",),
    "notifications/prompts/list_changed": ("prompts/list",),
    "notifications/resources/list_changed": ("resources/list", "resources/templates/list"),
}
#: Longest a page is reused, whatever ``ttlMs`` says (a day, as the Python SDK caps it).
MAX_TTL_MS: Final = 24 * 60 * 60 * 1000
MAX_ENTRIES: Final = 256
MAX_BYTES: Final = 8 * 1024 * 1024
PUBLIC: Final = "public"
PRIVATE: Final = "private"


def cache_hints(result: Any) -> tuple[int, str]:
    """``(ttl_ms, scope)`` of a list result: ``ttlMs`` absent, negative or not an integer
    counts as 0 (stale at once), as the spec says; a scope other than ``"public"`` is private."""
    ttl = result.get("ttlMs") if isinstance(result, dict) else None
    scope = PUBLIC if isinstance(result, dict) and result.get("cacheScope") == PUBLIC else PRIVATE
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not ttl > 0:
        return 0, scope
    return int(min(ttl, MAX_TTL_MS)), scope


class Ticket(NamedTuple):
    """What a fetch must still match when its result comes back, to be stored."""

    method: str
    cursor: Any
    epoch: int
    generation: int
    context: str


class PageLookup(NamedTuple):
    """A page's JSON when a fresh one is kept, else None; and the ticket to store the
    fetched one with (None where nothing is kept: a legacy connection, or none at all)."""

    hit: bytes | None
    ticket: Ticket | None
    #: When the kept page goes stale (the cache's clock); meaningless without a hit.
    expires: float = 0.0


class _Page(NamedTuple):
    data: bytes
    expires: float
    #: What keeping it costs against the byte bound: its JSON, and the cursor it is kept under.
    cost: int


def _cost(data: bytes, cursor: Any) -> int:
    # A cursor is the server's to size (a page not kept may hand out a megabyte of one for a
    # tiny page that is): it is held as long as the page, so it counts.
    return len(data) + (len(cursor.encode("utf-8", "surrogatepass")) if isinstance(cursor, str) else 0)


class ListCache:
    """The pages; see the module docstring. Its owner serializes the calls."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self._clock = clock
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        #: (method, cursor, scope, context or "") -> page; least recently used first.
        self._pages: OrderedDict[tuple[str, Any, str, str], _Page] = OrderedDict()
        self._bytes = 0
        #: The pages' costs (their JSON and their cursors), held under ``max_bytes``.
        self._held = 0
        #: Per method, bumped by each eviction: a fetch begun before it stores nothing.
        self._epochs: dict[str, int] = {}
        self._generation = 0

    def __len__(self) -> int:
        return len(self._pages)

    @property
    def size(self) -> int:
        """Bytes of JSON kept."""
        return self._bytes

    def _keys(self, method: str, cursor: Any, context: str) -> tuple[tuple[str, Any, str, str], ...]:
        return (method, cursor, PRIVATE, context), (method, cursor, PUBLIC, "")

    def _connection(self, generation: int) -> None:
        """A new connection: the server may have restarted, and what it changed since went unheard."""
        if generation != self._generation:
            self._generation = generation
            self._pages.clear()
            self._bytes = self._held = 0

    def lookup(self, method: str, cursor: Any, *, context: str, generation: int) -> bytes | None:
        """A fresh page for ``context`` (its own private one first, then a public one)."""
        found = self.find(method, cursor, context=context, generation=generation)
        return None if found is None else found[0]

    def find(self, method: str, cursor: Any, *, context: str, generation: int) -> tuple[bytes, float] | None:
        """As :meth:`lookup`, with when the page goes stale."""
        self._connection(generation)
        now = self._clock()
        for key in self._keys(method, cursor, context):
            page = self._pages.get(key)
            if page is None:
                continue
            if now < page.expires:
                self._pages.move_to_end(key)
                return page.data, page.expires
            self._drop(key)
        return None

    def ticket(self, method: str, cursor: Any, *, context: str, generation: int) -> Ticket:
        self._connection(generation)
        return Ticket(method, cursor, self._epochs.get(method, 0), generation, context)

    def store(self, ticket: Ticket, data: bytes, ttl_ms: int, scope: str, *, context: str, generation: int) -> bool:
        """Keep a fetched page if nothing made it stale meanwhile; whether it was kept.

        The fetched page supersedes any kept for the same key, even one it does not replace
        (a ``ttlMs`` of 0, a scope that changed)."""
        method, cursor = ticket.method, ticket.cursor
        if generation != ticket.generation or context != ticket.context or self._epochs.get(method, 0) != ticket.epoch:
            return False
        self._connection(generation)
        private, public = self._keys(method, cursor, context)
        self._drop(private)
        self._drop(public)
        cost = _cost(data, cursor)
        if ttl_ms <= 0 or cost > self._max_bytes:
            return False
        key = public if scope == PUBLIC else private
        self._pages[key] = _Page(data, self._clock() + ttl_ms / 1000.0, cost)
        self._bytes += len(data)
        self._held += cost
        while len(self._pages) > self._max_entries or self._held > self._max_bytes:
            self._drop(next(iter(self._pages)))
        return True

    def evict(self, method: str) -> None:
        """Every page of ``method`` is stale, and fetches in flight store nothing."""
        self._epochs[method] = self._epochs.get(method, 0) + 1
        for key in [key for key in self._pages if key[0] == method]:
            self._drop(key)

    def heard(self, notification: str) -> None:
        """A notification arrived: a ``list_changed`` evicts its lists."""
        for method in EVICTED_BY.get(notification, ()):
            self.evict(method)

    def _drop(self, key: tuple[str, Any, str, str]) -> None:
        page = self._pages.pop(key, None)
        if page is not None:
            self._bytes -= len(page.data)
            self._held -= page.cost
