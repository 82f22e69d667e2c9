"""Resource watches that carry content: the host's :class:`ResourceWatch` and its messages.

A watch gets the contents of one resource, then the contents again after each change.
The reading is shared (see ``_resource_feed``); what is per handle is the delivery: its
own inbox (or a courier thread for a ``put()`` subscriber) that keeps only the newest
contents waiting, so a slow or raising subscriber holds up no other and costs bounded memory.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, Final, Literal, NamedTuple

import pykka

from .._delivery._bound import DEFAULT_MAX_PENDING, check_max_pending
from .._delivery._inbox import LatestInbox
from .._delivery._targets import CUT, PutTarget, Subscriber, cut, deliver, resolve_subscriber
from .._protocol._errors import Error
from .._protocol._messages import CLOSED, FINAL_TAGS, Closed
from .._util._checks import check_timeout
from .._util._threads import start_daemon
from ._handle import Handle, unwatched, watch_subscriber
from ._resource_feed import ResourceFeed

RESOURCE_CHANGED: Final = "ex_mcp_resource_changed"
RESOURCE_READ_FAILED: Final = "ex_mcp_resource_read_failed"
#: Longest URI a watch takes (a host's argument: a longer one is a mistake, not a resource).
MAX_URI_CHARS: Final = 8192


class ResourceChanged(NamedTuple):
    """A watched resource's contents: ``("ex_mcp_resource_changed", handle, uri, contents)``."""

    tag: Literal["ex_mcp_resource_changed"]
    #: The :class:`ResourceWatch`.
    handle: Any
    uri: str
    #: The ``contents`` list of the ``resources/read`` result (shared by every handle: do not mutate).
    contents: list[dict[str, Any]]


class ResourceReadFailed(NamedTuple):
    """A read of a watched resource failed: ``("ex_mcp_resource_read_failed", handle, uri, error)``."""

    tag: Literal["ex_mcp_resource_read_failed"]
    handle: Any
    uri: str
    #: The :class:`~exmcp_actors.Error` (a ``RequestError`` from the server, a ``RequestTimeout``,
    #: or reason ``("contents_too_large", size, cap)`` or ``("too_many_contents", count, cap)``).
    error: Error


def _state_key(message: Any) -> Any:
    # Contents and failures both say "the resource now": only the newest one waits.
    return "state" if message[0] in (RESOURCE_CHANGED, RESOURCE_READ_FAILED) else None


class _Courier:
    """Delivers one handle's messages to its ``put()`` subscriber on a thread of its own."""

    def __init__(self, handle: ResourceWatch, target: PutTarget) -> None:
        self._handle: ResourceWatch | None = handle
        self._target: PutTarget | None = target
        self._box = LatestInbox(_state_key)
        self._thread = threading.Thread(target=self._run, name=f"exmcp-rwatch-{handle.id}", daemon=True)
        self._thread.start()
        handle.client._shared.adopt(self._thread)  # disconnect() waits for its Closed to be put()

    def offer(self, message: Any) -> None:
        self._box.put(message)
        if message[0] in FINAL_TAGS:
            self._box.finish()

    def stop(self) -> None:
        self._box.finish()

    def _run(self) -> None:
        handle, target = self._handle, self._target
        assert handle is not None and target is not None
        # Its end lets go of the handle and the subscriber: no cycle keeps them for a garbage
        # collection on some other thread, which a GUI toolkit's object does not survive.
        self._handle = self._target = None
        while True:
            try:
                message = self._box.get()
            except queue.Empty:
                return
            if not deliver(target, [message]):
                handle.close()  # its put() raised (logged once): it gets nothing more
                return
            if message[0] in FINAL_TAGS:
                return


class ResourceWatch(Handle):
    """The contents of one resource, kept current. Made by :meth:`Client.watch_resource`.

    Attributes:
        uri: the watched URI.
        contents: the contents last delivered to this handle (None before the first).
        follows_changes: whether the server tells of changes (a property; False: the
            contents come now and after each reconnect only).

    Messages: :class:`ResourceChanged` (the current contents first, then after each change
    that changed them), :class:`ResourceReadFailed`, and :class:`~exmcp_actors.Closed` when
    the client disconnects or the watch underneath ends (not after :meth:`close`).
    """

    def __init__(self, client: Any, uri: str, resolved: Subscriber) -> None:
        inbox = LatestInbox(_state_key) if resolved.target is None else None
        super().__init__(f"rwatch-{client._ids.next_id()}", client, resolved.owner, inbox)
        self.uri = uri
        self.contents: list[dict[str, Any]] | None = None
        self._alive = resolved.alive
        self._actor = resolved.target if isinstance(resolved.target, pykka.ActorRef) else None
        self._courier = _Courier(self, resolved.target) if isinstance(resolved.target, PutTarget) else None
        self._digest: bytes | None = None
        self._gone = False
        self._feed: ResourceFeed | None = None
        #: Stops watching its subscriber's life (set once it joined its feed).
        self._unwatch: Callable[[], None] = unwatched

    @property
    def follows_changes(self) -> bool:
        """Whether the server tells this watch when the resource changes: False where it cannot
        (no ``resources/subscribe`` on 2025-11-25, or a 2026-07-28 listen that did not take the
        URI, or none at all): then the contents come now and after each reconnect only."""
        return self._feed.follows_changes if self._feed is not None and not self._gone else False

    @property
    def reads(self) -> int:
        """``resources/read`` calls made for this URI so far, shared by every watch of it."""
        return self._feed.reads if self._feed is not None else 0

    def close(self) -> None:
        """Stop watching; the inbox ends once drained (no closing message). Idempotent."""
        if self._gone:
            return
        self._gone = True
        self._unwatch()
        cut(self, CUT)  # whatever a courier still holds is not delivered after this
        if self._feed is not None:
            self._feed.leave(self)
        self._stop_delivery()

    def _end(self) -> None:
        self.close()

    def _stop_delivery(self) -> None:
        if self._courier is not None:
            self._courier.stop()
        self._finish()

    # -- what the feed offers it (under the feed's lock: nothing here blocks) -----------------

    def _offer_contents(self, contents: list[dict[str, Any]], sealed: bytes) -> None:
        if self._gone or sealed == self._digest:
            return  # unchanged for this handle: not delivered again
        self._digest = sealed
        self.contents = contents
        self._send(ResourceChanged(RESOURCE_CHANGED, self, self.uri, contents))

    def _offer_failure(self, error: Error) -> None:
        if self._gone:
            return
        self._digest = None  # the next good read is news, whatever it holds
        self._send(ResourceReadFailed(RESOURCE_READ_FAILED, self, self.uri, error))

    def _offer_closed(self, reason: Any) -> None:
        if self._gone:
            return
        self._gone = True
        # Ended from underneath: close() will find it gone, so it stops watching its subscriber
        # here (with no lock held: the feed offers its end after letting go of its own).
        self._unwatch()
        self._send(Closed(CLOSED, self, reason))
        self._stop_delivery()

    def _send(self, message: Any) -> None:
        if not self._alive():
            self._drop_later()
            return
        if self._courier is not None:
            self._courier.offer(message)
        elif self._actor is not None:
            if not deliver(self._actor, [message]):  # a tell: no host code under the feed's lock
                self._drop_later()
        elif self._inbox is not None:
            self._inbox.put(message)

    def _drop_later(self) -> None:
        # Its subscriber died: leave the feed, but not here, under the feed's lock.
        if not self._gone:
            ender = start_daemon(self.close, f"exmcp-rwatch-end-{self.id}")
            if ender is not None:  # else (see start_daemon) it ends with its client
                self.client._shared.adopt(ender)


_REGISTRY_LOCK: Final = threading.Lock()


class ResourceWatchCalls:
    """The :class:`Client` mixin that makes resource watches."""

    _resource_feeds: dict[str, ResourceFeed]

    def watch_resource(
        self,
        uri: str,
        subscriber: Any = None,
        timeout: float = 5.0,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> ResourceWatch:
        """A :class:`ResourceWatch` of ``uri``: its contents now, then after each change.

        Args:
            uri: the resource's URI (a non-empty string).
            subscriber: as for :meth:`watch`.
            timeout: seconds for opening the watch underneath (``resources/subscribe`` or
                ``subscriptions/listen``) when this URI is not watched yet.
            max_pending: the bound of that watch underneath, as for :meth:`watch`; each
                handle keeps only the newest contents waiting, whatever this is.

        Raises:
            TypeError, ValueError: a bad argument. NotConnected, SubscribeFailed,
            RequestError, RequestTimeout: the watch underneath could not be opened.
        """
        if not isinstance(uri, str):
            raise TypeError(f"uri must be a string, got {type(uri).__name__} {uri!r}")
        if not uri or len(uri) > MAX_URI_CHARS:
            raise ValueError(f"uri must be a non-empty string of at most {MAX_URI_CHARS} characters, got {uri[:80]!r}")
        wait = check_timeout("timeout", timeout)
        limit = check_max_pending(max_pending)
        resolved = resolve_subscriber(subscriber)
        handle = ResourceWatch(self, uri, resolved)
        if handle._courier is not None:
            with _REGISTRY_LOCK:
                couriered: weakref.WeakSet[ResourceWatch]
                couriered = self.__dict__.setdefault("_couriered_watches", weakref.WeakSet())
                couriered.add(handle)
        while True:
            feed = self._resource_feed(uri, wait, limit)
            handle._feed = feed
            try:
                joined = feed.join(handle)
            except BaseException:
                feed.abandon_if_unused()
                handle._feed = None
                handle.close()
                raise
            if joined:
                # A subscriber that dies ends its watch, as any handle's (no delivery needed).
                handle._unwatch = watch_subscriber(handle, resolved, handle._drop_later)
                if handle._gone:  # it ended meanwhile, maybe before there was anything to unwatch
                    handle._unwatch()
                return handle

    def _resource_feed(self, uri: str, timeout: float, max_pending: int) -> ResourceFeed:
        with _REGISTRY_LOCK:
            feeds: dict[str, ResourceFeed] = self.__dict__.setdefault("_resource_feeds", {})
            feed = feeds.get(uri)
            if feed is None or feed._ended:
                feed = ResourceFeed(self, uri, timeout, max_pending, self._feed_ended)
                feeds[uri] = feed
            return feed

    def _cut_resource_watches(self) -> None:
        """After disconnect() waited for its threads: a ``put()`` still running on a courier may
        finish, and nothing more starts (as for every other handle)."""
        with _REGISTRY_LOCK:
            handles = list(self.__dict__.get("_couriered_watches", ()))
        for handle in handles:
            cut(handle, CUT)

    def _feed_ended(self, feed: ResourceFeed) -> None:
        with _REGISTRY_LOCK:
            feeds = self.__dict__.get("_resource_feeds", {})
            if feeds.get(feed.uri) is feed:
                del feeds[feed.uri]
