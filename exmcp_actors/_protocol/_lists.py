"""The session's part for what the server lists (sans-IO): the kept pages (``_list_cache``)
and the tool book (``_tool_book``), and the host commands that reach them.

What it needs of the rest of the session comes as callables: ``era()`` and
``generation()`` of the connection in hand, and ``auth_context()``, who the transport
makes requests as (an opaque digest; see ``Transport.auth_context``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._events import AuthContextNow, CachedPage, LearnTools, StorePage
from ._list_cache import LIST_METHODS, ListCache, PageLookup
from ._tool_book import ToolBook

__all__ = ["ServerLists"]


class ServerLists:
    """See the module docstring."""

    def __init__(
        self,
        name: str,
        era: Callable[[], str | None],
        generation: Callable[[], int],
        auth_context: Callable[[], str] | None = None,
        *,
        cache: ListCache | None = None,
    ) -> None:
        self.cache = cache if cache is not None else ListCache()
        self.tools = ToolBook(name)
        self._era = era
        self._generation = generation
        #: None: one set of credentials for the client's life.
        self._auth_context = auth_context if auth_context is not None else str

    def _cacheable(self, method: str, cursor: Any) -> bool:
        # Only modern results carry hints; a cursor that is no string is no key to keep it under.
        return self._era() == "modern" and method in LIST_METHODS and (cursor is None or isinstance(cursor, str))

    def cached(self, message: CachedPage) -> PageLookup:
        if not self._cacheable(message.method, message.cursor):
            return PageLookup(None, None)
        context, generation = self._auth_context(), self._generation()
        cache = self.cache
        found = (
            cache.find(message.method, message.cursor, context=context, generation=generation) if message.use else None
        )
        ticket = cache.ticket(message.method, message.cursor, context=context, generation=generation)
        return PageLookup(None, ticket) if found is None else PageLookup(found[0], ticket, found[1])

    def store(self, message: StorePage) -> bool:
        return self.cache.store(
            message.ticket,
            message.data,
            message.ttl_ms,
            message.scope,
            context=self._auth_context(),
            generation=self._generation(),
        )

    def context(self, message: AuthContextNow) -> str:
        return self._auth_context()

    def learn(self, message: LearnTools) -> list[Any]:
        return self.tools.learn(message.tools, modern=self._era() == "modern", complete=message.complete)

    def heard(self, method: str) -> None:
        """A notification arrived (any era: a stale page must never outlive its list_changed)."""
        self.cache.heard(method)
