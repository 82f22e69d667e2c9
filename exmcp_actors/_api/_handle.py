"""What hosts hold: a handle with an inbox, shared by listeners, subscriptions and watches."""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from typing import Any

from .._delivery._inbox import Inbox
from .._delivery._targets import Delivered, Subscriber
from .._protocol._errors import ListenerNotFound, NotConnected
from .._protocol._filters import NotificationFilter
from .._protocol._messages import FINAL_TAGS


class Handle(Delivered):
    """Common surface: ``get()``, iteration until the closing message, context manager.

    When the subscriber is an actor or a ``put()`` object, messages go there and
    ``get()`` is not available on the handle.
    """

    def __init__(self, handle_id: Any, client: Any, subscriber: Any, inbox: Inbox | None) -> None:
        super().__init__(handle_id, inbox)
        self.client = client
        self.subscriber = subscriber
        if inbox is not None and type(self).get is Handle.get:
            # The inbox's own get, bound here: one Python call less on every message read.
            self.__dict__["get"] = inbox.get

    def _require_inbox(self) -> Inbox:
        if self._inbox is None:
            raise RuntimeError(
                f"messages for this {type(self).__name__.lower()} go to its subscriber "
                f"({self.subscriber!r}), not to an inbox on the handle"
            )
        return self._inbox

    def get(self, timeout: float | None = None) -> Any:
        """The next message, blocking up to ``timeout`` seconds (forever when None).

        Raises:
            queue.Empty: nothing arrived in time, or the handle ended and its inbox is drained.
        """
        inbox = self._inbox  # not _require_inbox(): one call less on every message
        if inbox is None:
            inbox = self._require_inbox()
        return inbox.get(timeout)

    def get_nowait(self) -> Any:
        """The next message if one is waiting, without blocking.

        Raises:
            queue.Empty: the inbox is empty (or the handle ended and its inbox is drained).
        """
        return self._require_inbox().get(0)

    def pending(self) -> int:
        """How many messages wait in the inbox."""
        return len(self._require_inbox())

    def __iter__(self) -> Iterator[Any]:
        """Every message until (and including) the closing one; stops early if the handle is removed."""
        inbox = self._require_inbox()
        while True:
            try:
                message = inbox.get()
            except queue.Empty:
                return
            yield message
            if message[0] in FINAL_TAGS:
                return

    def _end(self) -> None:  # pragma: no cover - every handle kind says how it ends
        raise NotImplementedError

    def close(self) -> None:
        """End the handle if it is still registered (the context manager's exit)."""
        try:
            self._end()
        except (ListenerNotFound, NotConnected):
            pass

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}>"


class FilteredHandle(Handle):
    """A handle made from one normalized filter, removed with ``unsubscribe()``
    (no closing message follows): listeners and watches."""

    def __init__(
        self, handle_id: Any, client: Any, subscriber: Any, flt: NotificationFilter, inbox: Inbox | None
    ) -> None:
        super().__init__(handle_id, client, subscriber, inbox)
        self._normalized = flt

    @property
    def filter(self) -> dict[str, Any]:
        """The normalized filter as a dict (false categories dropped, URIs de-duplicated)."""
        return self._normalized.as_dict()

    def unsubscribe(self, timeout: float = 5.0) -> None:
        """Remove it and release its URIs; returns once the wire unsubscribe (if any) is done.

        Raises:
            ListenerNotFound: it was already removed or closed (a no-op on a stopped client).
            RequestTimeout: see :meth:`Client.unsubscribe_notifications`.
        """
        self.client._remove_handle(self, timeout=timeout)

    def _end(self) -> None:
        # A cleanup: URIs that cannot be released in time are released later, without raising.
        self.client._remove_handle(self, timeout=5.0, release_later=True)


class _Gone:
    """What the client's liveness watch tells (``tell()``) once a subscriber is dead."""

    __slots__ = ("_on_gone",)

    def __init__(self, on_gone: Callable[[], None]) -> None:
        self._on_gone = on_gone

    def tell(self, message: Any) -> None:
        self._on_gone()


def watch_subscriber(handle: Handle, resolved: Subscriber, on_gone: Callable[[], None]) -> Callable[[], None]:
    """Have ``on_gone()`` called (once, on whichever thread notices; it must not block) when the
    subscriber of a handle that has no proxy dies: told of by a thread that registered itself,
    else polled, as every subscriber is (``_runtime._subscriber_proxy.LivenessWatcher``).
    Returns what stops watching."""
    watcher = handle.client._shared.liveness
    if not resolved.watched or watcher is None:
        return unwatched
    key = ("handle", handle.id)
    watcher.watch(key, resolved.alive, _Gone(on_gone), resolved.end)
    return lambda: watcher.unwatch(key)


def unwatched() -> None:
    """What stops watching a subscriber that was never watched."""
