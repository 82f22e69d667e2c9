"""A handle's inbox: the mailbox a thread subscriber reads with ``get()``."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any, Final

from .._protocol._catalog_diff import compose
from .._protocol._messages import FINAL_TAGS, NOTIFICATION, Notification
from ._bound import Bound


class Inbox:
    """An unbounded, thread-safe mailbox on ``queue.SimpleQueue``.

    SimpleQueue waits in C without the GIL, and a waiting host costs one wake-up per
    message; a ``threading.Condition`` cost about 5 us more per wake-up, and twice the CPU.
    Finishing queues a marker behind the last message: ``get`` then ends once drained.
    """

    __slots__ = ("_finished", "_queue", "bound", "owner")

    def __init__(self, bound: Bound | None = None) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._finished = False
        #: The handle's ``max_pending`` bound (None: unbounded), applied by :func:`land`.
        self.bound = bound
        #: The handle it is the inbox of: a :class:`SharedEvent` read here becomes its message.
        self.owner: Any = None

    def put(self, item: Any) -> None:
        self._queue.put(item)

    def put_many(self, items: Iterable[Any]) -> None:
        put = self._queue.put
        for item in items:
            put(item)

    def finish(self) -> None:
        """No more messages will come: every ``get`` ends once the inbox is drained."""
        if not self._finished:
            self._finished = True
            self._queue.put(_END)

    @property
    def finished(self) -> bool:
        return self._finished

    def __len__(self) -> int:
        size = self._queue.qsize()
        return size - 1 if self._finished and size else size  # the end marker is no message

    def get(self, timeout: float | None = None) -> Any:
        """The next message; blocks up to ``timeout`` seconds (forever when None).

        Raises:
            queue.Empty: nothing arrived in time, or the inbox is finished and drained.
            TypeError: a timeout that is not a number.
            ValueError: a negative or NaN timeout.
        """
        # This runs once per message read: the queue itself rejects what it cannot wait for,
        # and only then is the timeout looked at (a clear error, or forever for one too long to
        # wait for). A bool it would take as 0 or 1 second, so that is refused first.
        if type(timeout) is bool:
            _checked_timeout(timeout)
        try:
            item = self._queue.get(True, timeout)
        except (TypeError, ValueError, OverflowError):
            item = self._queue.get(True, _checked_timeout(timeout))
        if type(item) is SharedEvent:
            return _new_tuple(Notification, (NOTIFICATION, self.owner, item.method, item.params))
        if item is _END:
            self._queue.put(_END)  # for the next get, in this thread or another
            raise queue.Empty
        return item


class SharedEvent:
    """One legacy notification put in every inbox it reaches (see ``_runtime._lane.dispatch_now``);
    each inbox's ``get`` turns it into a :class:`~.._protocol._messages.Notification` for its
    own handle. Never seen outside an inbox."""

    __slots__ = ("method", "params")

    def __init__(self, method: str, params: dict[str, Any]) -> None:
        self.method = method
        self.params = params


_new_tuple = tuple.__new__

#: Queued behind an inbox's last message when it is finished.
_END: Final = object()
_TIMEOUT_MAX: Final = threading.TIMEOUT_MAX


def _checked_timeout(timeout: Any) -> float | None:
    """A ``get`` timeout the lock can wait for (forever: None); TypeError or ValueError if it is none."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, got {type(timeout).__name__} {timeout!r}")
    if not timeout >= 0:  # NaN too
        raise ValueError(f"timeout must be a non-negative number, got {timeout!r}")
    if timeout > _TIMEOUT_MAX:
        return None  # math.inf and the like: forever, as the lock cannot wait longer
    return timeout


def land(inbox: Inbox, messages: list[Any]) -> None:
    """Put a batch in an inbox, within its bound; after a closing message, the inbox is finished."""
    bound = inbox.bound
    if bound is not None:
        if bound.credit >= len(messages):  # far below the bound: no need to count what waits
            bound.credit -= len(messages)
            bound.sent += len(messages)
        else:
            messages = bound.admit(messages, len(inbox))
            if not messages:
                return
    inbox.put_many(messages)
    if messages[-1][0] in FINAL_TAGS:
        inbox.finish()  # the closing message is the last: iteration and get() end after it


class LatestInbox(Inbox):
    """An inbox that keeps only the newest pending message per key (``key(message)``).

    For messages that each carry the full state (a catalog's :class:`CatalogChanged` holds
    the whole list): a host that never reads the inbox costs one message per key, not one
    per refresh. Messages whose key is None are queued as usual. ``merge(waiting, newer)``,
    if given, makes what is kept of the two (under the inbox's lock: it must be quick).
    ``withdraws(message)``, if given, names the key of a waiting message that ``message``
    makes obsolete: that one is taken back, so a newer message of its key queues behind
    ``message`` rather than taking the old place ahead of it (the order must stay true).
    """

    __slots__ = ("_key", "_latest", "_lock", "_merge", "_withdrawn", "_withdraws")

    def __init__(
        self,
        key: Any,
        merge: Callable[[Any, Any], Any] | None = None,
        withdraws: Callable[[Any], Any] | None = None,
    ) -> None:
        super().__init__()
        self._key = key
        #: (waiting, newer) -> what is kept in their place; None keeps the newer one.
        self._merge = merge
        self._withdraws = withdraws
        #: key -> (its slot in the queue, the message kept there).
        self._latest: dict[Any, tuple[_Slot, Any]] = {}
        #: Slots still queued whose message was withdrawn (no message: ``len`` leaves them out).
        self._withdrawn = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return max(0, super().__len__() - self._withdrawn)

    def put(self, item: Any) -> None:
        key = self._key(item)
        if key is None:
            super().put(item)
            return
        with self._lock:
            if self._withdraws is not None:
                obsolete = self._withdraws(item)
                if obsolete is not None and self._latest.pop(obsolete, None) is not None:
                    self._withdrawn += 1  # its slot, still queued, is skipped by get()
            entry = self._latest.get(key)
            if entry is not None:
                self._latest[key] = (entry[0], item if self._merge is None else self._merge(entry[1], item))
                return
            slot = _Slot(key)
            self._latest[key] = (slot, item)
        super().put(slot)

    def put_many(self, items: Iterable[Any]) -> None:
        for item in items:
            self.put(item)

    def get(self, timeout: float | None = None) -> Any:
        while True:
            item = super().get(timeout)
            if not isinstance(item, _Slot):
                return item
            with self._lock:
                entry = self._latest.get(item.key)
                if entry is not None and entry[0] is item:
                    del self._latest[item.key]
                    return entry[1]
                self._withdrawn -= 1
            # A withdrawn message's slot: it was queued already, so the next look waits no
            # longer than this one did (at most one more ``timeout`` per withdrawn message).


class _Slot:
    """Where a coalesced message waits in a :class:`LatestInbox` (the message itself is kept aside)."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key


def catalog_key(message: Any) -> Any:
    """The coalescing key of a :class:`CatalogChanged` (its catalog and kind), of a
    :class:`CatalogStale` (the same, apart), or of a :class:`HubCollision` (its hub catalog,
    kind and name); None for anything else."""
    if message[0] == "ex_mcp_catalog_changed":
        return (id(message[1]), message[2])
    if message[0] == "ex_mcp_hub_collision":
        return (id(message[1]), message[2], message[3])
    if message[0] == "ex_mcp_catalog_stale":  # apart from its kind's changes: neither replaces the other
        return (id(message[1]), message[2], "stale")
    return None


def withdrawn_by_catalog(message: Any) -> Any:
    """What a catalog's message makes obsolete in its inbox: a :class:`CatalogChanged` the
    unread :class:`CatalogStale` of its kind (the list was fetched after it went stale)."""
    if message[0] == "ex_mcp_catalog_changed":
        return (id(message[1]), message[2], "stale")
    return None


def coalesce_catalog(waiting: Any, newer: Any) -> Any:
    """The merge of catalog inboxes: a :class:`CatalogChanged` kept in place of one the reader
    has not taken carries the diff of both, so the reader still learns every change."""
    if newer[0] != "ex_mcp_catalog_changed":
        return newer
    diff = compose(newer.kind, waiting, newer, newer.items)
    return newer._replace(added=diff.added, removed=diff.removed, changed=diff.changed)
