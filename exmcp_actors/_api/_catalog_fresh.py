"""How long a catalog's lists stay fresh: MCP 2026-07-28 cache hints (``ttlMs``) applied to a
:class:`~exmcp_actors.Catalog`.

Each walk of a kind learns when its first page goes stale (``_lists``: kept pages keep their
own expiry). Reading ``catalog.tools`` (etc.) after that refetches on the reading thread,
through the kept pages, so only the stale ones go to the server; readers at the same time
share that one refetch. The spec says a client SHOULD NOT poll on ``ttlMs``: nothing is
refetched in the background. Where the server does not advertise ``listChanged`` for a kind,
its subscribers are told once per expiry (:class:`CatalogStale`), from a timer on the shared
scheduler that only queues a marker for the catalog's worker (host code never runs on the
scheduler thread).

Bounds against a hostile server: ``ttlMs`` is capped at a day (``_list_cache``); a kind is
considered fresh for at least :data:`MIN_FRESH` after a walk, so a server answering
``ttlMs`` 0 costs at most one walk per second per kind however often the host reads; a kind
whose walk is stale at once (``ttlMs`` 0, absent, invalid) while the server advertises
``listChanged`` for it is followed by its notifications alone, as before these hints; a
legacy connection has no hints (lists stay until a ``list_changed``). A failed refetch serves
the last list, logs (rate limited) and is not retried for a growing while (1 s to 30 s).
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Final, Literal, NamedTuple

from .._protocol._errors import Error, RequestTimeout
from .._protocol._ratelog import RateLimitedLog
from .._util._scheduler import TimerHandle, call_later

logger = logging.getLogger("exmcp_actors.catalog")

#: Seconds a walked kind counts as fresh at least, whatever its ``ttlMs``.
MIN_FRESH: Final = 1.0
#: Most seconds a host-asked refresh waits before fetching (see :meth:`Freshness.jitter`).
MAX_JITTER: Final = 1.0
#: Of the kind's freshness span, the share a refresh's jitter may reach.
JITTER_SHARE: Final = 0.1
#: After a failed refetch, the first wait before the next try; it doubles up to MAX_RETRY.
RETRY_AFTER: Final = 1.0
MAX_RETRY: Final = 30.0
_LOG: Final = RateLimitedLog(logger)


class CatalogStale(NamedTuple):
    """A kind's ``ttlMs`` ran out on a server that does not advertise ``listChanged`` for it:
    ``("ex_mcp_catalog_stale", catalog, kind)``. Reading the list refetches it."""

    tag: Literal["ex_mcp_catalog_stale"]
    #: The :class:`Catalog`.
    catalog: Any
    #: ``"tools"``, ``"prompts"`` or ``"resources"``.
    kind: str


class Expired(NamedTuple):
    """Queued for the worker by a kind's expiry timer (``epoch``: the walk that armed it)."""

    kind: str
    epoch: int


class Fetched(NamedTuple):
    """Queued for the worker: a reader's refetch changed the list (publish ``version``)."""

    kind: str
    version: int


class Asked(NamedTuple):
    """Queued for the worker after a refresh's jitter: refetch these kinds."""

    kinds: tuple[str, ...]


def check_kinds(kinds: Any, known: tuple[str, ...]) -> tuple[str, ...]:
    """``refresh``'s ``kinds``: None (all), a kind, or an iterable of kinds; as a tuple.

    Raises:
        TypeError: not None, a string or an iterable of strings.
        ValueError: a string that is no kind.
    """
    if kinds is None:
        return known
    named = (kinds,) if isinstance(kinds, str) else kinds
    if not isinstance(named, Iterable) or isinstance(named, bytes | dict):
        raise TypeError(f"kinds must be None, a kind or an iterable of kinds, got {type(kinds).__name__}")
    out: list[str] = []
    for kind in named:
        if not isinstance(kind, str):
            raise TypeError(f"kinds must hold strings, got {type(kind).__name__}")
        if kind not in ("tools", "prompts", "resources"):
            raise ValueError(f"kinds: {kind!r} is none of 'tools', 'prompts', 'resources'")
        if kind in known and kind not in out:
            out.append(kind)
    return tuple(out)


class Freshness:
    """One catalog's freshness per kind; see the module docstring.

    ``fetch(kind, cache, deadline, fresh)`` walks a kind (``fresh`` learns when it goes
    stale); ``lists`` is the catalog's published lists; ``enqueue`` hands a marker to its
    worker. Fetches of a kind run one at a time under that kind's lock (the worker's too);
    ``_state`` guards the small tables and is never held around a fetch or host code.
    """

    def __init__(
        self,
        name: str,
        kinds: tuple[str, ...],
        notified: frozenset[str],
        fetch: Callable[[str, bool, float | None, list[float]], list[dict[str, Any]]],
        lists: dict[str, list[dict[str, Any]]],
        enqueue: Callable[[Any], None],
        timeout: float,
    ) -> None:
        self._name = name
        self._kinds = kinds
        #: Kinds whose list_changed the server advertises (no stale notice for them).
        self._notified = notified
        self._fetch = fetch
        self._lists = lists
        self._enqueue = enqueue
        self._timeout = timeout
        self.clock: Callable[[], float] = time.monotonic
        self._state = threading.Lock()
        self._locks = {kind: threading.Lock() for kind in kinds}
        self._stale_at: dict[str, float] = dict.fromkeys(kinds, math.inf)
        self._span: dict[str, float] = dict.fromkeys(kinds, math.inf)
        self._epoch: dict[str, int] = dict.fromkeys(kinds, 0)
        self._failures: dict[str, int] = dict.fromkeys(kinds, 0)
        self._timers: dict[str, TimerHandle] = {}
        #: kind -> (version, items) fetched but not yet published by the worker.
        self._pending: dict[str, tuple[int, list[dict[str, Any]]]] = {}
        self._version = 0
        self._closed = threading.Event()

    # -- what the catalog asks -----------------------------------------------------------------

    def walk(self, kind: str, *, cache: bool, deadline: float | None = None) -> list[dict[str, Any]]:
        """Walk ``kind`` (the caller holds its lock, or no one else can fetch yet) and learn
        its freshness. Raises what the walk raises."""
        fresh: list[float] = []
        items = self._fetch(kind, cache, deadline, fresh)
        self._learn(kind, fresh[0] if fresh else math.inf)
        return items

    def lock(self, kind: str) -> threading.Lock:
        return self._locks[kind]

    def visible(self, kind: str) -> list[dict[str, Any]]:
        """The newest list of ``kind``: fetched and waiting to be published, else published."""
        pending = self._pending.get(kind)
        return pending[1] if pending is not None else self._lists[kind]

    def offer(self, kind: str, items: list[dict[str, Any]]) -> int:
        """``items`` are the newest list of ``kind``, to be published as ``version``."""
        with self._state:
            self._version += 1
            self._pending[kind] = (self._version, items)
            return self._version

    def take(self, kind: str, version: int) -> list[dict[str, Any]] | None:
        """The list offered as ``version``, if nothing newer was offered since."""
        with self._state:
            pending = self._pending.get(kind)
            return pending[1] if pending is not None and pending[0] == version else None

    def published(self, kind: str, version: int) -> None:
        with self._state:
            pending = self._pending.get(kind)
            if pending is not None and pending[0] == version:
                del self._pending[kind]

    def replaced(self, kind: str) -> None:
        """A list came without hints (a resync snapshot): the next read walks the kept pages
        again, unless the kind follows notifications alone."""
        with self._state:
            if self._stale_at.get(kind, math.inf) != math.inf:
                self._stale_at[kind] = self.clock()
                self._epoch[kind] += 1

    def still_expired(self, marker: Expired) -> bool:
        """Whether an expiry marker is still news (no walk of its kind since, not closed)."""
        return not self._closed.is_set() and self._epoch.get(marker.kind) == marker.epoch

    def current(self, kind: str) -> list[dict[str, Any]]:
        """What reading ``catalog.<kind>`` returns: refetched first when stale (see the
        module docstring); a failed or timed-out refetch serves the last list."""
        if kind not in self._locks or self._closed.is_set() or self.clock() < self._stale_at[kind]:
            return self.visible(kind)
        lock = self._locks[kind]
        if not lock.acquire(timeout=self._timeout):
            return self.visible(kind)  # another reader's refetch is slow: the last list
        try:
            if self.clock() < self._stale_at[kind]:
                return self.visible(kind)  # refetched by the reader before us
            try:
                return self._refetch(kind, cache=True)
            except Error as exc:
                self._failed(kind, exc)
                return self.visible(kind)
        finally:
            lock.release()

    def refetch_now(self, kind: str) -> None:
        """A host-asked refetch of ``kind`` from the server, on the caller's thread, within the
        catalog's timeout: waiting for another fetch of the kind (the worker's may take the
        server's time, page after page) counts. Raises what the walk raises, and
        RequestTimeout when the other fetch outlasts the timeout."""
        deadline = time.monotonic() + self._timeout
        lock = self._locks[kind]
        if not lock.acquire(timeout=self._timeout):
            raise RequestTimeout(f"{kind} was not refetched within {self._timeout:g}s: another fetch of it is running")
        try:
            self._refetch(kind, cache=False, deadline=deadline)
        finally:
            lock.release()

    def _refetch(self, kind: str, *, cache: bool, deadline: float | None = None) -> list[dict[str, Any]]:
        """Under the kind's lock: walk it by ``deadline`` (default: within the catalog's
        timeout); a changed list is handed to the worker to publish."""
        if deadline is None:
            deadline = time.monotonic() + self._timeout
        items = self.walk(kind, cache=cache, deadline=deadline)
        if items != self.visible(kind):
            self._enqueue(Fetched(kind, self.offer(kind, items)))
        return items

    def jitter(self, kinds: tuple[str, ...]) -> float:
        """A refresh's random wait: up to ``min(MAX_JITTER, JITTER_SHARE * span)`` seconds,
        the span being how long the kinds' last walks were fresh for (MAX_JITTER without hints)."""
        span = min((self._span[kind] for kind in kinds), default=math.inf)
        return random.uniform(0.0, min(MAX_JITTER, JITTER_SHARE * span))

    def ask(self, kinds: tuple[str, ...]) -> None:
        """Queue a refetch of ``kinds`` for the worker after a jitter."""
        if kinds and not self._closed.is_set():
            call_later(self.jitter(kinds), self._enqueue, Asked(kinds))

    def sleep_jitter(self, kinds: tuple[str, ...]) -> bool:
        """Wait out a refresh's jitter on the caller's thread; False when closed meanwhile."""
        return not self._closed.wait(self.jitter(kinds))

    def close(self) -> None:
        self._closed.set()
        with self._state:
            timers, self._timers = list(self._timers.values()), {}
        for timer in timers:
            timer.cancel()

    # -- inside -------------------------------------------------------------------------------

    def _learn(self, kind: str, until: float) -> None:
        now = time.monotonic()
        if until == math.inf or (until <= now and kind in self._notified):
            stale_at = math.inf  # no hints, or stale at once with notifications to follow
        else:
            stale_at = max(until, now + MIN_FRESH)
        with self._state:
            self._stale_at[kind] = stale_at
            self._span[kind] = stale_at - now
            self._failures[kind] = 0
            self._epoch[kind] += 1
            epoch = self._epoch[kind]
            old = self._timers.pop(kind, None)
            if stale_at != math.inf and kind not in self._notified and not self._closed.is_set():
                self._timers[kind] = call_later(stale_at - now, self._enqueue, Expired(kind, epoch))
        if old is not None:
            old.cancel()

    def _failed(self, kind: str, exc: Error) -> None:
        with self._state:
            wait = min(MAX_RETRY, RETRY_AFTER * 2 ** min(self._failures[kind], 8))
            self._failures[kind] += 1
            self._stale_at[kind] = self.clock() + wait
        _LOG.warning(
            f"refetch-{kind}",
            "catalog of %s: refetching the stale %s failed (the last list is served; next try in %.0f s): %s",
            self._name,
            kind,
            wait,
            exc,
        )
