"""The list requests: ``list_tools`` and its kin, every page followed, each page served from
the session's kept pages while the server's cache hints say it is fresh (``_list_cache``);
``list_page`` for one page; and the host's ``meta=`` of every call (:func:`check_meta`).

:class:`ListCalls` is a mixin of :class:`~exmcp_actors.Client` (through ``ServerCalls``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from .._protocol._errors import ProtocolError, RequestError, RequestTimeout
from .._protocol._events import CachedPage, LearnTools, StorePage
from .._protocol._handshake import META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION
from .._protocol._jsonrpc import INVALID_PARAMS
from .._protocol._list_cache import cache_hints
from .._protocol._peer_text import peer_text

#: Most pages a list_* call follows before deciding the server loops.
MAX_PAGES: Final = 10_000
#: Most items one walk of a listing gathers, and most bytes of pages (as compact JSON): past
#: either the listing is refused (a ProtocolError), so a server whose pages never end costs a
#: bounded amount of memory, not all of it (a page is up to 16 MiB on the wire).
MAX_ITEMS: Final = 100_000
MAX_WALK_BYTES: Final = 64 * 1024 * 1024
#: Most JSON values one walk gathers (see :func:`_values_in`): a value costs some 30 to 90 bytes
#: decoded, whatever its JSON takes (an empty object is 3 bytes of it), so the bytes alone let
#: pages of empty objects hold some 1.8 GB within 64 MiB; 4 million values are some 300 MB at
#: most, and more than 64 MiB of listings as servers write them (some 27 bytes a value).
MAX_WALK_VALUES: Final = 4_000_000
#: What a listing's items are called in its result.
ITEMS: Final = {
    "tools/list": "tools",
    "resources/list": "resources",
    "prompts/list": "prompts",
    "resources/templates/list": "resourceTemplates",
}
#: A host's ``meta=``: the ``_meta`` of its request (see :func:`check_meta`).
Meta = Mapping[str, Any] | None
#: What a ``list_*`` call returns: the items of every page.
Items = list[dict[str, Any]]
#: ``list_page`` kinds (the names of the ``list_*`` calls) -> their methods.
KINDS: Final = {
    "tools": "tools/list",
    "prompts": "prompts/list",
    "resources": "resources/list",
    "resource_templates": "resources/templates/list",
}
#: The 2026-07-28 envelope: the library's own ``_meta`` keys on every request, in both eras
#: (on a legacy connection a protocolVersion key would make a dual-era server take the
#: request for a 2026-07-28 one). A host's ``meta=`` never sets them.
OWN_META_KEYS: Final = frozenset({META_PROTOCOL_VERSION, META_CLIENT_INFO, META_CLIENT_CAPABILITIES})


def check_meta(meta: Any) -> dict[str, Any] | None:
    """A host's ``meta=`` as the ``_meta`` it adds to a request: a copy, without the keys
    of :data:`OWN_META_KEYS` (the library's win); None for None.

    Raises:
        TypeError: ``meta`` is not a mapping with string keys, or its ``progressToken`` is no
            string or integer (the spec's MUST; checked even where ``progress=`` replaces it).
    """
    if meta is None:
        return None
    if not isinstance(meta, Mapping):
        raise TypeError(f"meta must be a mapping with string keys (the request's _meta), got {type(meta).__name__}")
    for key in meta:
        if not isinstance(key, str):
            raise TypeError(f"meta must be a mapping with string keys, but it has the key {key!r}")
    if "progressToken" in meta:
        token = meta["progressToken"]
        if isinstance(token, bool) or not isinstance(token, str | int):
            raise TypeError(f"meta's progressToken must be a string or an integer, got {type(token).__name__}")
    return {key: value for key, value in meta.items() if key not in OWN_META_KEYS}


def with_meta(params: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
    """``params`` with the host's checked ``meta`` under the ``_meta`` the library put there
    (the library's keys win)."""
    if meta is None:
        return params
    return {**params, "_meta": {**meta, **(params.get("_meta") or {})}}


def page_items(method: str, result: Any) -> list[Any]:
    """The items of one page of ``method``'s result.

    Raises:
        ProtocolError: the result has no list of them.
    """
    key = ITEMS[method]
    page = result.get(key) if isinstance(result, dict) else None
    if not isinstance(page, list):
        raise ProtocolError(f"{method} result has no {key!r} list: {peer_text(result)}")
    return page


class Page(NamedTuple):
    """One page's raw result, and whether it was a kept copy."""

    result: Any
    kept: bool
    #: ``time.monotonic()`` when its ``ttlMs`` runs out (receipt time for 0); inf where the
    #: page carries no hints (a legacy connection, a page asked for with ``meta``).
    fresh_until: float = math.inf
    #: Its size as compact JSON (what a walk counts against :data:`MAX_WALK_BYTES`).
    size: int = 0
    #: The values it holds (what a walk counts against :data:`MAX_WALK_VALUES`).
    values: int = 0


def _time_left(method: str, timeout: float | None, deadline: float, walked: int) -> float:
    """The timeout of a walk's next page: what is left until ``deadline``, at most ``timeout``."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise _walk_timeout(method, walked)
    return left if timeout is None else min(timeout, left)


def _walk_timeout(method: str, walked: int) -> RequestTimeout:
    return RequestTimeout(f"{method} was not walked to its last page in time ({walked:,} pages walked)")


def _kept_form(result: Any) -> bytes | None:
    """A page as it is kept, compact JSON; None when it nests deeper than this thread's stack
    lets the encoder go (the reader decoded it near the top of its own stack; the host's
    thread may be deep in its own calls)."""
    try:
        return json.dumps(result, separators=(",", ":")).encode()
    except RecursionError:
        return None


def _size_of(data: bytes | None, result: Any) -> tuple[int, int]:
    """What a page counts against a walk's bytes and values: those of its compact JSON
    ``data``, or, for a page too deep to encode on this thread, what :func:`_measured` finds."""
    if data is None:
        return _measured(result)
    return len(data), _values_in(data)


def _measured(result: Any) -> tuple[int, int]:
    """About the bytes of a page's compact JSON, and its values, counted without recursion:
    for a page nested deeper than this thread's stack lets the encoder go (the host may be deep
    in its own calls; charging such a page the largest frame refused small listings). Stops
    past :data:`MAX_WALK_VALUES` values, which refuses the walk."""
    size = values = 0
    stack = [result]
    while stack and values <= MAX_WALK_VALUES:
        node = stack.pop()
        values += 1
        if isinstance(node, dict):
            size += 2 + sum(len(key) + 4 for key in node)  # quotes, colon, comma
            stack.extend(node.values())
        elif isinstance(node, list):
            size += 2 + len(node)
            stack.extend(node)
        else:
            size += len(node) + 2 if isinstance(node, str) else 8
    return size, values


def _values_in(data: bytes) -> int:
    """The values a page's compact JSON holds, told at C speed: one per bracket that opens an
    object or an array, one per comma (one value less than it holds at most; a bracket or a
    comma inside a string counts too)."""
    return data.count(b"{") + data.count(b"[") + data.count(b",")


def _refused(method: str, items: int, size: int, values: int, pages: int) -> ProtocolError | None:
    """The error of a walk that went past a bound, naming the bound; None within them."""
    if items > MAX_ITEMS:
        past = f"{MAX_ITEMS:,} items"
    elif size > MAX_WALK_BYTES:
        past = f"{MAX_WALK_BYTES >> 20} MiB of pages (as compact JSON)"
    elif values > MAX_WALK_VALUES:
        past = f"{MAX_WALK_VALUES:,} JSON values"
    else:
        return None
    return ProtocolError(
        f"{method} returned more than {past} over {pages:,} page{'s' if pages != 1 else ''}: the listing is refused "
        "(list_page() reads a listing page by page)"
    )


def _copy_of(data: bytes) -> Any:
    """A fresh copy of a kept page; None when this thread is too deep to decode it (then the
    page is fetched again)."""
    try:
        return json.loads(data)
    except RecursionError:
        return None


class ListCalls:
    """See the module docstring."""

    _request_timeout: float

    def request(self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None) -> Any:
        raise NotImplementedError

    def _run(self, message: Any, timeout: float | None = None) -> Any:
        raise NotImplementedError

    def _fetch_page(
        self,
        method: str,
        cursor: Any,
        *,
        cache: bool = True,
        timeout: float | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Page:
        """One page's raw result, cache hints (``ttlMs``, ``cacheScope``) included, as the
        server sent it: a kept fresh copy when ``cache`` allows, else fetched (and kept per
        its hints). ``cache=False`` fetches and replaces what is kept. A page asked for with
        ``meta`` (checked) is always fetched, and neither kept nor replacing what is: the
        server may answer a request with ``_meta`` otherwise, and the host asked for a request."""
        params = with_meta({"cursor": cursor} if cursor is not None else {}, meta)
        if meta is not None:
            result = self.request(method, params, timeout=timeout)
            size, values = _size_of(_kept_form(result), result)
            return Page(result, False, size=size, values=values)
        lookup = self._run(CachedPage(method, cursor, cache))
        kept = _copy_of(lookup.hit) if lookup.hit is not None else None
        if kept is not None:
            return Page(kept, True, lookup.expires, len(lookup.hit), _values_in(lookup.hit))
        result = self.request(method, params or None, timeout=timeout)
        fresh_until = math.inf
        data = _kept_form(result)
        if lookup.ticket is not None:
            ttl_ms, scope = cache_hints(result)
            fresh_until = time.monotonic() + ttl_ms / 1000.0
            kept_data = data if ttl_ms > 0 and data is not None else b""
            if not kept_data:
                ttl_ms = 0  # nothing to keep, or a page this thread cannot copy: not kept
            # Nothing to keep, and (after a plain miss) nothing kept that this page supersedes.
            if ttl_ms > 0 or not cache or lookup.hit is not None:
                self._run(StorePage(lookup.ticket, kept_data, ttl_ms, scope))
        return Page(result, False, fresh_until, *_size_of(data, result))

    def _paginate(
        self,
        method: str,
        timeout: float | None,
        cache: bool,
        *,
        deadline: float | None = None,
        meta: Meta = None,
        fresh: list[float] | None = None,
    ) -> list[Any]:
        """Every page of ``method``, each within ``timeout``, all of them by ``deadline``
        (``time.monotonic()``): a walk that is part of another call; without one, the whole walk
        within ``timeout`` (the client's ``request_timeout`` when None). Each page's request
        carries the host's ``meta`` (see :meth:`_fetch_page`). ``fresh``, when given, learns
        when the first of the pages walked goes stale (see :class:`Page`)."""
        checked = check_meta(meta)
        if deadline is None:
            deadline = time.monotonic() + (self._request_timeout if timeout is None else timeout)
        pages: list[Page] = []
        try:
            items = self._walk(method, timeout, cache, pages, deadline, checked)
        except RequestError as error:
            if error.code != INVALID_PARAMS or not any(page.kept for page in pages):
                raise
            # A kept page led to a cursor the server no longer takes: start afresh, once.
            pages = []
            items = self._walk(method, timeout, False, pages, deadline, checked)
        if fresh is not None:
            fresh.append(min((page.fresh_until for page in pages), default=math.inf))
        return items

    def _walk(
        self,
        method: str,
        timeout: float | None,
        cache: bool,
        pages: list[Page],
        deadline: float | None,
        meta: dict[str, Any] | None,
    ) -> list[Any]:
        """Every page of ``method``; ``pages`` learns, page by page, whether each was a kept
        copy and when it goes stale (without its result)."""
        items: list[Any] = []
        cursor: Any = None
        seen: set[Any] = set()
        spent = counted = 0
        result: Any = None
        try:
            for _ in range(MAX_PAGES):
                wait = timeout if deadline is None else _time_left(method, timeout, deadline, len(pages))
                try:
                    result, was_kept, fresh_until, size, values = self._fetch_page(
                        method, cursor, cache=cache, timeout=wait, meta=meta
                    )
                except RequestTimeout:
                    if deadline is not None and time.monotonic() >= deadline:  # the walk's time ran out
                        raise _walk_timeout(method, len(pages)) from None
                    raise
                pages.append(Page(None, was_kept, fresh_until))
                items.extend(page_items(method, result))
                spent += size
                counted += values
                refused = _refused(method, len(items), spent, counted, len(pages))
                if refused is not None:
                    raise refused
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
        except BaseException:
            # The error's traceback keeps this frame alive as long as whoever caught it keeps the
            # error (a Call, as the cause of its own): what the walk gathered goes now.
            items.clear()
            seen.clear()
            result = None
            raise

    def list_tools(self, *, cache: bool = True, meta: Meta = None, timeout: float | None = None) -> Items:
        """Every tool, all pages followed, within ``timeout`` for the whole walk (default: the
        client's ``request_timeout``); past :data:`MAX_ITEMS` items, :data:`MAX_WALK_BYTES`
        of pages or :data:`MAX_WALK_VALUES` values a ProtocolError.

        On MCP 2026-07-28 over Streamable HTTP, tools whose ``x-mcp-header`` annotations are
        invalid are left out (and logged once). ``cache=False``: fetch every page, whatever
        is kept (and keep the fresh pages). ``meta``: a mapping each page's request carries
        as its ``_meta`` (merged under the library's own keys); such a walk is never served
        from kept pages, and keeps none.
        """
        return self._paginate("tools/list", timeout, cache, meta=meta)

    def list_resources(self, *, cache: bool = True, meta: Meta = None, timeout: float | None = None) -> Items:
        """Every resource, all pages followed (``cache`` and ``meta`` as for :meth:`list_tools`)."""
        return self._paginate("resources/list", timeout, cache, meta=meta)

    def list_prompts(self, *, cache: bool = True, meta: Meta = None, timeout: float | None = None) -> Items:
        """Every prompt, all pages followed (``cache`` and ``meta`` as for :meth:`list_tools`)."""
        return self._paginate("prompts/list", timeout, cache, meta=meta)

    def list_resource_templates(self, *, cache: bool = True, meta: Meta = None, timeout: float | None = None) -> Items:
        """Every resource template, all pages followed (``cache`` and ``meta`` as for :meth:`list_tools`)."""
        return self._paginate("resources/templates/list", timeout, cache, meta=meta)

    def list_page(
        self,
        kind: str,
        cursor: str | None = None,
        *,
        meta: Meta = None,
        cache: bool = True,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """One page of a listing, as the server sent it: the result dict with its items,
        ``nextCursor`` (absent on the last page) and, on MCP 2026-07-28, the cache hints
        ``ttlMs`` and ``cacheScope``. Pass ``nextCursor`` back as ``cursor`` for the next page.

        Args:
            kind: ``"tools"``, ``"prompts"``, ``"resources"`` or ``"resource_templates"``.
            cursor: a ``nextCursor`` the server gave; None for the first page.
            meta, cache: as for :meth:`list_tools` (the page is kept and served as theirs are).

        Raises:
            ValueError: an unknown ``kind``.
            TypeError: a ``cursor`` that is not a string, a ``meta`` that is no mapping with
                string keys.
            ProtocolError: the result is not a page of ``kind``.
        """
        method = KINDS.get(kind) if isinstance(kind, str) else None
        if method is None:
            raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")
        if cursor is not None and not isinstance(cursor, str):
            raise TypeError(
                f"cursor must be a string (a nextCursor the server gave) or None, got {type(cursor).__name__}"
            )
        page = self._fetch_page(method, cursor, cache=cache, timeout=timeout, meta=check_meta(meta))
        result: dict[str, Any] = page.result
        items = page_items(method, result)  # a dict holding a page of its kind, or a ProtocolError
        if method == "tools/list":  # without the tools the 2026-07-28 x-mcp-header rules exclude
            result["tools"] = self._run(LearnTools(items, False))
        return result
