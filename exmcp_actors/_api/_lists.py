"""The list requests: ``list_tools`` and its kin, every page followed, each page served from
the session's kept pages while the server's cache hints say it is fresh (``_list_cache``).

:class:`ListCalls` is a mixin of :class:`~exmcp_actors.Client` (through ``ServerCalls``).
"""

from __future__ import annotations

import json
import time
from typing import Any, Final, NamedTuple

from .._protocol._errors import ProtocolError, RequestError, RequestTimeout
from .._protocol._events import CachedPage, LearnTools, StorePage
from .._protocol._jsonrpc import INVALID_PARAMS
from .._protocol._list_cache import cache_hints
from .._protocol._peer_text import peer_text

#: Most pages a list_* call follows before deciding the server loops.
MAX_PAGES: Final = 10_000
#: What a listing's items are called in its result.
ITEMS: Final = {
    "tools/list": "tools",
    "resources/list": "resources",
    "prompts/list": "prompts",
    "resources/templates/list": "resourceTemplates",
}


class Page(NamedTuple):
    """One page's raw result, and whether it was a kept copy."""

    result: Any
    kept: bool


def _time_left(method: str, timeout: float | None, deadline: float) -> float:
    """The timeout of a walk's next page: what is left until ``deadline``, at most ``timeout``."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise RequestTimeout(f"{method} was not walked to its last page in time")
    return left if timeout is None else min(timeout, left)


def _kept_form(result: Any) -> bytes | None:
    """A page as it is kept, compact JSON; None when it nests deeper than this thread's stack
    lets the encoder go (the reader decoded it near the top of its own stack; the host's
    thread may be deep in its own calls)."""
    try:
        return json.dumps(result, separators=(",", ":")).encode()
    except RecursionError:
        return None


def _copy_of(data: bytes) -> Any:
    """A fresh copy of a kept page; None when this thread is too deep to decode it (then the
    page is fetched again)."""
    try:
        return json.loads(data)
    except RecursionError:
        return None


class ListCalls:
    """See the module docstring."""

    def request(self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None) -> Any:
        raise NotImplementedError

    def _run(self, message: Any, timeout: float | None = None) -> Any:
        raise NotImplementedError

    def _fetch_page(self, method: str, cursor: Any, *, cache: bool = True, timeout: float | None = None) -> Page:
        """One page's raw result, cache hints (``ttlMs``, ``cacheScope``) included, as the
        server sent it: a kept fresh copy when ``cache`` allows, else fetched (and kept per
        its hints). ``cache=False`` fetches and replaces what is kept."""
        lookup = self._run(CachedPage(method, cursor, cache))
        kept = _copy_of(lookup.hit) if lookup.hit is not None else None
        if kept is not None:
            return Page(kept, True)
        result = self.request(method, {"cursor": cursor} if cursor is not None else None, timeout=timeout)
        if lookup.ticket is not None:
            ttl_ms, scope = cache_hints(result)
            data = _kept_form(result) if ttl_ms > 0 else b""
            if data is None:
                ttl_ms, data = 0, b""  # a page this thread cannot copy is not kept
            # Nothing to keep, and (after a plain miss) nothing kept that this page supersedes.
            if ttl_ms > 0 or not cache or lookup.hit is not None:
                self._run(StorePage(lookup.ticket, data, ttl_ms, scope))
        return Page(result, False)

    def _listed_page(self, method: str, cursor: Any, *, cache: bool = True, timeout: float | None = None) -> Any:
        """One page as a one-page listing returns it: the raw result, hints included, a tools
        page without the tools the 2026-07-28 ``x-mcp-header`` rules exclude."""
        result = self._fetch_page(method, cursor, cache=cache, timeout=timeout).result
        if method == "tools/list" and isinstance(result, dict) and isinstance(result.get("tools"), list):
            result["tools"] = self._run(LearnTools(result["tools"], False))
        return result

    def _paginate(self, method: str, timeout: float | None, cache: bool, *, deadline: float | None = None) -> list[Any]:
        """Every page of ``method``, each within ``timeout``; all of them by ``deadline``
        (``time.monotonic()``) when given: a walk that is part of another call."""
        kept: list[bool] = []
        try:
            return self._walk(method, timeout, cache, kept, deadline)
        except RequestError as error:
            if error.code != INVALID_PARAMS or not any(kept):
                raise
            # A kept page led to a cursor the server no longer takes: start afresh, once.
            return self._walk(method, timeout, False, [], deadline)

    def _walk(
        self, method: str, timeout: float | None, cache: bool, kept: list[bool], deadline: float | None
    ) -> list[Any]:
        """Every page of ``method``; ``kept`` learns, page by page, which were kept copies."""
        key = ITEMS[method]
        items: list[Any] = []
        cursor: Any = None
        seen: set[Any] = set()
        for _ in range(MAX_PAGES):
            wait = timeout if deadline is None else _time_left(method, timeout, deadline)
            result, was_kept = self._fetch_page(method, cursor, cache=cache, timeout=wait)
            kept.append(was_kept)
            page = result.get(key) if isinstance(result, dict) else None
            if not isinstance(page, list):
                raise ProtocolError(f"{method} result has no {key!r} list: {peer_text(result)}")
            items.extend(page)
            cursor = result.get("nextCursor")
            if cursor is None:
                if method == "tools/list":
                    visible: list[Any] = self._run(LearnTools(items, True))
                    return visible
                return items
            if isinstance(cursor, dict | list):  # a cursor is an opaque token, never a structure
                raise ProtocolError(f"{method} returned a nextCursor that is no cursor: {peer_text(cursor)}")
            if cursor in seen:
                raise ProtocolError(f"{method} repeated the cursor {peer_text(cursor, quote=True)}")
            seen.add(cursor)
        raise ProtocolError(f"{method} returned more than {MAX_PAGES} pages")

    def list_tools(self, *, cache: bool = True, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every tool, all pages followed.

        On MCP 2026-07-28 over Streamable HTTP, tools whose ``x-mcp-header`` annotations are
        invalid are left out (and logged once). ``cache=False``: fetch every page, whatever
        is kept (and keep the fresh pages).
        """
        return self._paginate("tools/list", timeout, cache)

    def list_resources(self, *, cache: bool = True, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every resource, all pages followed (``cache`` as for :meth:`list_tools`)."""
        return self._paginate("resources/list", timeout, cache)

    def list_prompts(self, *, cache: bool = True, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every prompt, all pages followed (``cache`` as for :meth:`list_tools`)."""
        return self._paginate("prompts/list", timeout, cache)

    def list_resource_templates(self, *, cache: bool = True, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every resource template, all pages followed (``cache`` as for :meth:`list_tools`)."""
        return self._paginate("resources/templates/list", timeout, cache)
