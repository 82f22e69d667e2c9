"""One URI's shared reader: the inner watch, the one ``resources/read`` in flight, and the fan-out.

Every :class:`~exmcp_actors.ResourceWatch` of a client on the same URI rides on one
:class:`ResourceFeed`. Its inner :meth:`Client.watch` only sets flags (so a server that
floods ``resources/updated`` costs no memory while a read is in flight); its worker thread
reads whenever a flag says so, one read at a time, and hands the result to every handle.
Changes that arrive during a read leave the flag set: exactly one more read follows.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Final

from .._protocol._catalog_diff import canonical_digest
from .._protocol._errors import Error, NotConnected, ProtocolError
from .._protocol._events import AuthContextNow
from .._protocol._list_cache import PUBLIC, cache_hints
from .._protocol._messages import CLOSED, NOTIFICATION, RECONNECTED, SUBSCRIPTION_RESYNC
from .._protocol._peer_text import peer_text
from .._protocol._ratelog import RateLimitedLog
from .._protocol._uris import uri_within
from ._handle import Handle

logger = logging.getLogger("exmcp_actors.resource_watch")

#: Largest contents a watch delivers: the characters of every ``text`` and ``blob``. Below
#: the transport's 16 MiB frame limit, so a resource that grows too big gets a
#: ResourceReadFailed that says so rather than a frame dropped and a read timing out.
MAX_CONTENTS_CHARS: Final = 8 * 1024 * 1024
#: Most content items a watch delivers: each costs a dict however little it holds, so a frame
#: of empty ones (``{},`` repeated) would cost some 60 bytes of memory per 3 bytes of wire.
MAX_CONTENTS_ITEMS: Final = 10_000
#: A positive ``ttlMs`` keeps a read fresh for joining handles at least this long.
MIN_FRESH: Final = 1.0
_UPDATED: Final = "notifications/resources/updated"
_JOIN_WAIT: Final = 2.0


def contents_of(uri: str, result: Any) -> list[dict[str, Any]]:
    """The ``contents`` list of a read result, checked and within the caps.

    Raises:
        ProtocolError: the result has no list of content objects.
        Error: the contents are larger than the cap (reason ``("contents_too_large", size, cap)``),
            or are more than :data:`MAX_CONTENTS_ITEMS` items (``("too_many_contents", count, cap)``).
    """
    contents = result.get("contents") if isinstance(result, dict) else None
    if isinstance(contents, list) and len(contents) > MAX_CONTENTS_ITEMS:
        raise Error(
            f"the contents of {peer_text(uri)} are {len(contents)} items, more than a resource watch "
            f"delivers ({MAX_CONTENTS_ITEMS}); read it with read_resource() instead",
            reason=("too_many_contents", len(contents), MAX_CONTENTS_ITEMS),
        )
    if not isinstance(contents, list) or not all(isinstance(item, dict) for item in contents):
        raise ProtocolError(
            f"the resources/read result for {peer_text(uri)} has no list of contents: {peer_text(result)}"
        )
    size = 0
    for item in contents:
        for key in ("text", "blob"):
            value = item.get(key)
            if isinstance(value, str):
                size += len(value)
    cap = MAX_CONTENTS_CHARS
    if size > cap:
        raise Error(
            f"the contents of {peer_text(uri)} are {size} characters, more than a resource watch "
            f"delivers ({cap}); read it with read_resource() instead",
            reason=("contents_too_large", size, cap),
        )
    return contents


class ResourceFeed:
    """The shared reader of one (client, URI); see the module docstring.

    Handles join and leave it; it ends when the last leaves or its inner watch closes
    (then every handle gets the watch's ``Closed`` reason).
    """

    def __init__(self, client: Any, uri: str, timeout: float, max_pending: int, on_end: Any) -> None:
        self.client = client
        self.uri = uri
        self._timeout = timeout
        self._max_pending = max_pending
        self._on_end = on_end  # removes it from the client's registry
        self._lock = threading.Condition(threading.Lock())
        self._open_lock = threading.Lock()
        self._handles: list[Any] = []
        self._inner: Handle | None = None
        self._worker: threading.Thread | None = None
        self._dirty = False
        self._reading = False
        self._reopen: Any = None  # the era_changed reason that asks to watch again
        self._closed_reason: Any = None
        self._ended = False
        #: The last good read: its contents, digest, and until when it is fresh (monotonic).
        self._latest: tuple[list[dict[str, Any]], bytes] | None = None
        self._fresh_until = 0.0
        #: Who may be served the last read while fresh: anyone (None, ``cacheScope`` "public"),
        #: else only the authorization context it was read in (the spec's MUST NOT share).
        self._read_as: str | None = None
        #: ``resources/read`` calls made, and change signals that arrived during one.
        self.reads = 0
        self.coalesced = 0
        #: A legacy watch's URI is subscribed on the server (a modern one asks its acknowledgment).
        self._subscribed = False
        self._log = RateLimitedLog(logger)

    # -- handles -----------------------------------------------------------------------------

    def join(self, handle: Any) -> bool:
        """Add ``handle``, opening the inner watch first if needed; False if the feed ended.

        Raises:
            whatever :meth:`Client.watch` raises (nothing is kept then).
        """
        with self._open_lock:
            with self._lock:
                if self._ended:
                    return False
                opened = self._inner is not None
            if not opened:
                inner = self._open()
                self._say_if_unheard(inner)
                with self._lock:
                    self._inner = inner
                    if self._worker is None:
                        self._worker = threading.Thread(
                            target=self._run, name=f"exmcp-rwatch-{self.client.name}", daemon=True
                        )
                        self._worker.start()
                        # disconnect() returns once it ended: its handles' Closed delivered.
                        self.client._shared.adopt(self._worker)
            context = self._context() if self._read_as is not None else None
            with self._lock:
                if self._ended:
                    return False
                self._handles.append(handle)
                fresh = self._latest is not None and not self._dirty and time.monotonic() < self._fresh_until
                if fresh and self._read_as is not None and self._read_as != context:
                    fresh = False  # a private read, and the host now asks as someone else
                if fresh:
                    assert self._latest is not None
                    # Still fresh by its ttlMs, and no change heard since: no read needed.
                    handle._offer_contents(*self._latest)
                elif not self._reading:
                    self._dirty = True  # an in-flight read's result reaches it anyway
                    self._lock.notify()
        return True

    def leave(self, handle: Any) -> None:
        """Remove ``handle``; the last one to leave ends the feed and its inner watch."""
        with self._lock:
            if handle in self._handles:
                self._handles.remove(handle)
            if self._handles or self._ended or self._inner is None:
                return
            self._ended = True
            inner, self._inner = self._inner, None
            self._lock.notify()
        self._on_end(self)
        inner.close()

    def abandon_if_unused(self) -> None:
        """After a failed first open: end a feed no handle joined."""
        with self._lock:
            if self._handles or self._inner is not None or self._ended:
                return
            self._ended = True
        self._on_end(self)

    # -- the inner watch's subscriber --------------------------------------------------------

    def put(self, message: Any) -> None:
        """The inner watch's messages: only flags, so nothing piles up during a read."""
        tag = message[0]
        with self._lock:
            if tag == NOTIFICATION:
                if message.method != _UPDATED:
                    return
                if self._reading:
                    self.coalesced += 1
            elif tag == RECONNECTED:
                # Something may have gone unheard: read again. A legacy resubscription may have
                # failed (a server that no longer advertises resources.subscribe): then no change
                # is told any more.
                report = message.report
                if any(failed[0] == self.uri for failed in report.get("failed", ())):
                    self._subscribed = False
                elif self.uri in report.get("resubscribed", ()):
                    self._subscribed = True
            elif tag == SUBSCRIPTION_RESYNC:
                pass  # something may have gone unheard: read again
            elif tag == CLOSED:
                reason = message.reason
                if isinstance(reason, tuple) and reason[0] == "era_changed":
                    self._reopen = reason
                else:
                    self._closed_reason = reason
            else:
                return
            self._dirty = True
            self._lock.notify()

    def _open(self) -> Handle:
        client = self.client
        flt: dict[str, Any] = {"resourceSubscriptions": [self.uri]}
        if client.era != "modern":
            resources = (client.server_capabilities or {}).get("resources")
            if not (isinstance(resources, dict) and resources.get("subscribe") is True):
                # Nothing to subscribe to: a watch that hears only reconnects and the end.
                flt = {"resourcesListChanged": True}
        handle: Handle = client.watch(flt, subscriber=self, timeout=self._timeout, max_pending=self._max_pending)
        self._subscribed = "resourceSubscriptions" in flt
        return handle

    @property
    def follows_changes(self) -> bool:
        """Whether the server tells of this URI's changes (see ``ResourceWatch``)."""
        return _hears(self._inner, self.uri, self._subscribed)

    def _say_if_unheard(self, inner: Handle) -> None:
        """A watch whose server cannot tell of changes is told about once, not left to wait."""
        if _hears(inner, self.uri, self._subscribed):
            return
        client = self.client
        notices: RateLimitedLog = client.__dict__.setdefault("_unheard_log", RateLimitedLog(logger))
        why = (
            "it offers no resources/subscribe"
            if getattr(inner, "acknowledged_filter", None) is None
            else "its subscriptions/listen did not take the URI"
        )
        notices.warning(
            "unheard",
            "resource watch of %s on %s: the server cannot tell of changes to it (%s); its contents "
            "are read now and after each reconnect, never on a change (read_resource() reads it anew)",
            peer_text(self.uri),
            client.name,
            why,
        )

    # -- the worker --------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._step():
                pass
        except Exception:  # a bug of ours: the handles must still end
            logger.exception("resource watch of %s on %s failed", self.client.name, peer_text(self.uri))
            self._end_all(("crashed", "resource watch worker"))

    def _step(self) -> bool:
        """Wait for a reason to read, and read once; False once the feed ended."""
        with self._lock:
            # No timeout: a ttlMs is a freshness hint, never a polling interval (the spec's
            # caching text says a client SHOULD NOT refetch in the background).
            while not (self._dirty or self._ended):
                self._lock.wait()
            if self._ended:
                return False
            self._dirty = False
            reopen, self._reopen = self._reopen, None
            closed = self._closed_reason
        if closed is not None:
            self._end_all(closed)
            return False
        if reopen is not None and not self._watch_again(reopen):
            return False
        self._read()
        return True

    def _watch_again(self, reason: Any) -> bool:
        """The server changed era across a reconnect: watch it in its new era."""
        try:
            inner = self._open()
        except Error as exc:
            logger.warning(
                "resource watch of %s on %s cannot follow the era change: %s",
                self.client.name,
                peer_text(self.uri),
                exc,
            )
            self._end_all(reason)
            return False
        self._say_if_unheard(inner)
        with self._lock:
            if self._ended:
                stale: Handle | None = inner
            else:
                stale, self._inner = None, inner
        if stale is not None:
            stale.close()
            return False
        return True

    def _context(self) -> str:
        """Who the client makes requests as now ("" where that cannot change; a stopped
        client's is no one's: an unmatched marker)."""
        try:
            context: str = self.client._run(AuthContextNow())
        except Error:
            return "\x00stopped"
        return context

    def _read(self) -> None:
        with self._lock:
            self._reading = True
            self.reads += 1
        context = self._context()
        try:
            call = self.client._start("resources/read", {"uri": self.uri}, timeout=None, interactive=True)
            result = self.client._wait(call)
            contents = contents_of(self.uri, result)
        except Error as exc:
            self._failed(exc)
            return
        finally:
            with self._lock:
                self._reading = False
                busy = self._dirty
        if busy:
            self._log.warning(
                "fast",
                "%s changes faster than it can be read: the changes during a read are coalesced into one more read",
                peer_text(self.uri),
            )
        # A result reached through input_required rounds depends on the inputs: never kept.
        ttl_ms, scope = cache_hints(result) if call.input_rounds == 0 else (0, PUBLIC)
        sealed = canonical_digest(contents)  # what "unchanged" compares
        with self._lock:
            if self._latest is not None and self._latest[1] == sealed:
                contents = self._latest[0]  # unchanged: the handles hold this copy, keep only it
            self._latest = (contents, sealed)
            self._read_as = None if scope == PUBLIC else context
            self._fresh_until = time.monotonic() + max(ttl_ms / 1000, MIN_FRESH) if ttl_ms > 0 else 0.0
            for handle in list(self._handles):
                handle._offer_contents(contents, sealed)

    def _failed(self, exc: Error) -> None:
        if isinstance(exc, NotConnected) and self.client.status != "ready":
            return  # the reconnect's Reconnected (or the watch's Closed) follows, and decides
        with self._lock:
            self._latest = None
            for handle in list(self._handles):
                handle._offer_failure(exc)

    def _end_all(self, reason: Any) -> None:
        with self._lock:
            self._ended = True
            handles, self._handles = self._handles, []
            inner, self._inner = self._inner, None
        self._on_end(self)
        for handle in handles:
            handle._offer_closed(reason)
        if inner is not None:
            inner.close()

    def join_worker(self, timeout: float = _JOIN_WAIT) -> None:
        worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)


def _hears(inner: Any, uri: str, subscribed: bool) -> bool:
    """Whether the watch ``inner`` hears of changes to ``uri``: a 2026-07-28 one had it (or a URI
    it is under) acknowledged; a legacy one ``subscribed`` it (only where the server offers
    ``resources/subscribe``, and again after each reconnect)."""
    if inner is None:
        return False
    acknowledged = getattr(inner, "acknowledged_filter", None)
    if isinstance(acknowledged, dict):
        uris = acknowledged.get("resourceSubscriptions") or ()
        return uri_within(uri, tuple(held for held in uris if isinstance(held, str)))
    return subscribed
