"""A live catalog: a server's tools, prompts and resources, refetched when the server says they changed.

Like the TypeScript SDK's ``listChanged`` auto-refresh (``Client`` option
``listChanged: {tools: {onChanged, debounceMs}}``), but for threads: one worker
thread per catalog owns the refetching. Messages that arrive while it fetches
are handled as one batch afterwards, so a burst of ``list_changed`` costs one or
two refetches of a kind and never two at once. In the legacy era it rides on a
:meth:`Client.watch` (and refetches everything after ``Reconnected``); in the
2026-07-28 era on a :meth:`Client.listen`, whose resync snapshot after a drop
replaces the lists without a refetch.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Literal, NamedTuple

from .._delivery._bound import DEFAULT_MAX_PENDING
from .._delivery._inbox import LatestInbox, catalog_key, coalesce_catalog, withdrawn_by_catalog
from .._delivery._targets import deliver, resolve_subscriber
from .._protocol._catalog_diff import diff_lists, report_diff
from .._protocol._errors import Error, RequestError
from .._protocol._filters import normalize_filter
from .._protocol._jsonrpc import METHOD_NOT_FOUND
from .._protocol._messages import (
    CLOSED,
    NOTIFICATION,
    RECONNECTED,
    SUBSCRIPTION,
    SUBSCRIPTION_CLOSED,
    SUBSCRIPTION_RESYNC,
)
from .._protocol._ratelog import RateLimitedLog
from .._util._threads import start_daemon
from ._catalog_fresh import Asked, CatalogStale, Expired, Fetched, Freshness, check_kinds
from ._handle import Handle, unwatched, watch_subscriber

logger = logging.getLogger("exmcp_actors.catalog")

#: The kinds a catalog follows, in the order it refreshes them.
KINDS: Final = ("tools", "prompts", "resources")
_FILTER_KEYS: Final = {kind: f"{kind}ListChanged" for kind in KINDS}
_METHOD_KINDS: Final = {f"notifications/{kind}/list_changed": kind for kind in KINDS}
#: Queued for the worker by close().
_STOP: Final = object()
_JOIN_WAIT: Final = 5.0
#: What a server's lists held that a diff left out, logged for all catalogs at most once per kind per 10 s.
_DIFF_LOG: Final = RateLimitedLog(logger)


class CatalogChanged(NamedTuple):
    """A catalog refreshed one kind:
    ``("ex_mcp_catalog_changed", catalog, kind, items, added, removed, changed)``.

    ``added``, ``removed`` and ``changed`` say what differs from the list before (see
    ``_protocol/_catalog_diff``): keys are tool and prompt names, resource URIs.
    """

    tag: Literal["ex_mcp_catalog_changed"]
    #: The :class:`Catalog` (``catalog.client.name`` tells which server).
    catalog: Any
    #: ``"tools"``, ``"prompts"`` or ``"resources"``.
    kind: str
    #: The full new list.
    items: list[dict[str, Any]]
    #: Keys only the new list has, in list order.
    added: tuple[str, ...]
    #: Keys only the list before had, in its order.
    removed: tuple[str, ...]
    #: Key -> the sorted top-level fields that differ (``{"z": ("inputSchema",)}``).
    changed: dict[str, tuple[str, ...]]


class _Feed:
    """The catalog's own put() subscriber: hands the handle's messages to the worker thread."""

    def __init__(self, events: queue.SimpleQueue[Any]) -> None:
        self.put = events.put


class Catalog(Handle):
    """A server's tools, prompts and resources, always the latest full lists.

    Made by :meth:`Client.catalog`. Only the kinds the server advertises in its
    capabilities are fetched (the others stay empty lists).

    Attributes:
        tools, prompts, resources: the latest full lists (replaced, never mutated).
        refreshes: how many fetches of each kind were made after the first.
        kinds: the kinds followed.

    The inbox (``get()``, ``get_nowait()``, iteration) yields :class:`CatalogChanged`
    after each refresh; it ends when the catalog is closed or its client disconnects.
    """

    def __init__(self, client: Any, subscriber: Any = None, timeout: float = 5.0) -> None:
        resolved = resolve_subscriber(subscriber)
        super().__init__(f"catalog-{client._ids.next_id()}", client, resolved.owner, None)
        if resolved.target is None:
            # Each CatalogChanged carries the full list: keep only the newest per kind, so a
            # host that reads catalog.tools and never the inbox costs bounded memory.
            self._inbox = LatestInbox(catalog_key, coalesce_catalog, withdrawn_by_catalog)
        self._target = resolved.target
        #: Stops watching its subscriber's life (set once the catalog runs).
        self._unwatch: Callable[[], None] = unwatched
        capabilities = client.server_capabilities or {}
        self.kinds: tuple[str, ...] = tuple(kind for kind in KINDS if kind in capabilities)
        self._lists: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
        self.refreshes: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._lock = threading.Lock()
        self._events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._timeout = timeout
        #: Refetch failures: a server that floods list_changed and fails every listing would
        #: otherwise cost a record per refetch.
        self._log = RateLimitedLog(logger)
        self._closed = False
        self._started = False
        #: kind -> whether its latest diff was cut at MAX_DIFFED (see :attr:`diff_truncated`).
        self._truncated: dict[str, bool] = {}
        advertised = {kind: capabilities[kind] for kind in self.kinds if isinstance(capabilities[kind], dict)}
        notified = frozenset(kind for kind, flags in advertised.items() if flags.get("listChanged") is True)
        self._fresh = Freshness(client.name, self.kinds, notified, self._fetch, self._lists, self._events.put, timeout)
        # Subscribe first, then fetch: a change in between is then refetched, never missed.
        # Always a source, even with no kinds: its Closed ends the inbox on disconnect.
        self._source: Handle | None = self._open()
        try:
            deadline = time.monotonic() + timeout  # the first listing of every kind, all pages
            for kind in self.kinds:
                self._lists[kind] = self._fresh.walk(kind, cache=True, deadline=deadline)
            self._started = True
        except BaseException:
            self._fresh.close()
            self._close_source()
            raise
        self._worker = threading.Thread(target=self._run, name=f"exmcp-catalog-{client.name}", daemon=True)
        self._worker.start()
        client._shared.adopt(self._worker)  # disconnect() returns once it ended, its inbox too
        # A subscriber that dies closes the catalog, as it ends any handle.
        self._unwatch = watch_subscriber(self, resolved, self._subscriber_gone)

    # -- what hosts read ---------------------------------------------------------------------

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self._fresh.current("tools")

    @property
    def prompts(self) -> list[dict[str, Any]]:
        return self._fresh.current("prompts")

    @property
    def resources(self) -> list[dict[str, Any]]:
        return self._fresh.current("resources")

    def refresh(self, kinds: Any = None, *, wait: bool = False) -> None:
        """Refetch ``kinds`` from the server (None: every kind followed; a kind; or an
        iterable of kinds; kinds the server does not advertise are skipped), after a random
        jitter of up to ``min(1 s, 10% of the kind's ttl)`` (1 s without hints), so hosts
        told of the same expiry do not all ask at once. A changed list publishes
        :class:`CatalogChanged`.

        ``wait=False`` returns at once (the worker fetches; failures are logged);
        ``wait=True`` waits out the jitter and fetches on the calling thread, within the
        catalog's timeout per kind, and raises what the fetch raises. Nothing on a closed catalog.

        Raises:
            TypeError: ``kinds`` is no kind nor an iterable of them; ``wait`` is no bool.
            ValueError: a kind other than ``"tools"``, ``"prompts"``, ``"resources"``.
            NotConnected, RequestError, RequestTimeout: with ``wait=True``, a fetch failed.
        """
        chosen = check_kinds(kinds, self.kinds)
        if not isinstance(wait, bool):
            raise TypeError(f"wait must be a bool, got {type(wait).__name__}")
        if self._closed or not chosen:
            return
        if not wait:
            self._fresh.ask(chosen)
        elif self._fresh.sleep_jitter(chosen):
            for kind in chosen:
                self._fresh.refetch_now(kind)

    def close(self, timeout: float = _JOIN_WAIT) -> None:
        """Stop following the server; the inbox ends once drained. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._unwatch()
        self._fresh.close()
        self._close_source()
        self._events.put(_STOP)
        if threading.current_thread() is not self._worker:
            self._worker.join(timeout)

    def _end(self) -> None:
        self.close()

    def _subscriber_gone(self) -> None:
        """Told by the liveness watch (perhaps in the ending thread): close, on a thread of its own."""
        closer = start_daemon(self.close, f"exmcp-catalog-end-{self.id}")
        if closer is not None:  # else (see start_daemon) it ends with its client
            self.client._shared.adopt(closer)

    # -- the worker --------------------------------------------------------------------------

    def _open(self) -> Handle:
        # With no kinds the filter must still enable something; such messages are ignored.
        flt = {_FILTER_KEYS[kind]: True for kind in self.kinds or KINDS[:1]}
        feed = _Feed(self._events)
        if self.client.era == "modern":
            try:
                # A subscription that follows the server back after a graceful shutdown too:
                # its resync snapshot then replaces the lists, as after a drop.
                listened: Handle = self.client._open_subscription(
                    normalize_filter(flt),
                    feed,
                    self._timeout,
                    DEFAULT_MAX_PENDING,
                    kind="subscription",
                    follows_server=True,
                )
                return listened
            except RequestError as exc:
                if exc.code != METHOD_NOT_FOUND:
                    raise
                # Nothing to listen to (-32601): a watch still connects, and has nothing to push.
        handle: Handle = self.client.watch(flt, subscriber=feed, timeout=self._timeout)
        return handle

    def _close_source(self) -> None:
        source, self._source = self._source, None
        if source is not None:
            source.close()

    def _fetch(self, kind: str, cache: bool, deadline: float | None, fresh: list[float]) -> list[dict[str, Any]]:
        """Walk ``kind`` (``fresh`` learns when it goes stale); every walk after the first counts."""
        timeout = None if deadline is None else self._timeout
        items: list[dict[str, Any]] = self.client._paginate(
            f"{kind}/list", timeout, cache, deadline=deadline, fresh=fresh
        )
        if self._started:
            self.refreshes[kind] += 1
        return items

    def _run(self) -> None:
        try:
            while self._handle_batch():
                pass
        finally:
            self._close_source()
            self._finish()

    def _handle_batch(self) -> bool:
        """Take everything queued, then refetch each kind it marked changed once; False to stop."""
        batch = [self._events.get()]
        while True:
            try:
                batch.append(self._events.get_nowait())
            except queue.Empty:
                break
        dirty: set[str] = set()
        asked: set[str] = set()
        go_on = True
        for message in batch:
            if message is _STOP:
                return False
            if isinstance(message, Expired | Fetched | Asked):
                self._freshen(message, asked)
                continue
            go_on = self._classify(message, dirty) and go_on
        for kind in self.kinds:
            if kind in dirty or kind in asked:
                self._refresh(kind, always=kind in dirty)
        return go_on

    def _freshen(self, message: Expired | Fetched | Asked, asked: set[str]) -> None:
        """A marker of the cache hints (``_catalog_fresh``), on the worker thread."""
        if isinstance(message, Asked):
            asked.update(message.kinds)
        elif isinstance(message, Fetched):
            items = self._fresh.take(message.kind, message.version)
            if items is not None:
                self._publish(message.kind, items)
                self._fresh.published(message.kind, message.version)
        elif self._fresh.still_expired(message):
            self._emit(CatalogStale("ex_mcp_catalog_stale", self, message.kind))

    def _classify(self, message: Any, dirty: set[str]) -> bool:
        """Mark what ``message`` changed in ``dirty``; False when the source ended for good."""
        tag = message[0]
        if tag in (NOTIFICATION, SUBSCRIPTION):
            kind = _METHOD_KINDS.get(message.method)
            if kind in self.kinds:
                dirty.add(kind)
        elif tag == RECONNECTED:
            dirty.update(self.kinds)
        elif tag == SUBSCRIPTION_RESYNC:
            state = message.state
            if isinstance(state, tuple) and state[0] == "complete":
                for kind in self.kinds:
                    if kind in state[1]:
                        dirty.discard(kind)  # the snapshot is newer than what came before it
                        self._show(kind, list(state[1][kind]))
                        self._fresh.replaced(kind)
            elif isinstance(state, tuple):
                dirty.update(self.kinds)  # the resync failed: refetch ourselves
        elif tag in (CLOSED, SUBSCRIPTION_CLOSED):
            reason = message.reason
            if isinstance(reason, tuple) and reason[0] == "era_changed" and not self._closed:
                # The server changed era across a reconnect: follow it in its new era.
                try:
                    self._source = self._open()
                except Error as exc:
                    logger.warning("catalog of %s: cannot follow the era change: %s", self.client.name, exc)
                    return False
                dirty.update(self.kinds)
                return True
            return False
        return True

    def _refresh(self, kind: str, *, always: bool = True) -> None:
        """Refetch ``kind``; publish it (only if it changed unless ``always``)."""
        with self._fresh.lock(kind):  # never two fetches of a kind at once, readers' included
            try:
                # Something changed, or may have gone unheard: from the server, not a kept page.
                items = self._fresh.walk(kind, cache=False)
            except Error as exc:
                # A Reconnected (or the close) follows a lost connection, and refetches then.
                self._log.warning(
                    f"refetch-{kind}", "catalog of %s: refetching %s failed: %s", self.client.name, kind, exc
                )
                return
            if not always and items == self._fresh.visible(kind):
                return
            version = self._fresh.offer(kind, items)  # under the lock: a reader's later list wins
        self._publish(kind, items)
        self._fresh.published(kind, version)

    def _show(self, kind: str, items: list[dict[str, Any]]) -> None:
        """Publish ``items`` as the newest list of ``kind`` (readers see them at once)."""
        version = self._fresh.offer(kind, items)
        self._publish(kind, items)
        self._fresh.published(kind, version)

    def _publish(self, kind: str, items: list[dict[str, Any]]) -> None:
        diff = diff_lists(kind, self._lists[kind], items)
        self._lists[kind] = items
        self._truncated[kind] = diff.truncated
        report_diff(_DIFF_LOG, self.client.name, kind, diff)
        self._emit(CatalogChanged("ex_mcp_catalog_changed", self, kind, items, *diff[:3]))

    def _emit(self, message: Any) -> None:
        """One message for the catalog's own inbox, or its subscriber."""
        if self._inbox is not None:
            self._inbox.put(message)
        else:
            deliver(self._target, [message])

    @property
    def diff_truncated(self) -> dict[str, bool]:
        """Kind -> whether the latest :class:`CatalogChanged` of it compared only the first
        ``MAX_DIFFED`` (10,000) items of each list (a longer list: what is past it is not in the diff)."""
        return {kind: self._truncated.get(kind, False) for kind in KINDS}


class CatalogCalls:
    """The :class:`Client` mixin that makes catalogs."""

    def catalog(self, subscriber: Any = None, timeout: float = 5.0) -> Catalog:
        """A live :class:`Catalog` of this server's tools, prompts and resources.

        Args:
            subscriber: who gets :class:`CatalogChanged` messages: None (the catalog's
                inbox), a Thread (the inbox too), a pykka ActorRef, or a ``put()`` object.
            timeout: seconds for opening the watch (or listen) it rides on, then for the
                first listing of every kind (all its pages).

        Raises:
            NotConnected, RequestError, RequestTimeout: the first fetch or the watch failed.
        """
        return Catalog(self, subscriber, timeout)
