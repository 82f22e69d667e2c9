"""A subscriber read with ``async for`` on an asyncio event loop."""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType
from typing import Any

from .._delivery._bound import check_max_pending
from ._common import Backlog, logger, ratelog


class AsyncioSubscriber:
    """A ``put()`` subscriber whose messages are read with ``async for msg in sub`` on ``loop``.

    ``put()`` (the library's thread) only hands the message to ``loop.call_soon_threadsafe``:
    it never waits for the loop. At most ``max_pending`` messages wait unread (queued for the
    loop or in this object); past that a new message is dropped and counted in
    :attr:`dropped`, and one warning is logged per burst (a burst ends once the reader has
    brought the backlog down to half the bound). A handle's closing message is never dropped
    for the bound, so a reader always learns that a handle ended. A closed loop drops the
    message with a rate-limited log. :meth:`close` (or :meth:`aclose`) ends the iteration at
    once; what was unread is discarded, and what comes later is dropped.

    Iterate on ``loop`` only; several tasks may iterate at once, each message goes to one.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, *, max_pending: int = 10_000) -> None:
        if not isinstance(loop, asyncio.AbstractEventLoop):
            raise TypeError(f"loop must be an asyncio event loop, got {type(loop).__name__} {loop!r}")
        #: Shared by put() (a library thread) and the reader (the loop).
        self._backlog = Backlog("AsyncioSubscriber", check_max_pending(max_pending))
        self._loop = loop
        self._closed = False
        # The loop's thread only.
        self._items: deque[Any] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def max_pending(self) -> int:
        return self._backlog.max_pending

    @property
    def pending(self) -> int:
        """Messages handed over by ``put()`` and not read yet."""
        return self._backlog.pending

    @property
    def dropped(self) -> int:
        """Messages dropped so far: over the bound, for a closed loop, or after :meth:`close`."""
        return self._backlog.dropped

    @property
    def closed(self) -> bool:
        return self._closed

    def put(self, message: Any) -> None:
        """Hand ``message`` to the loop (any thread; never blocks, never raises)."""
        if self._closed:
            self._count_drop()
            return
        if self._loop.is_closed():
            self._drop_for_closed_loop()
            return
        if not self._backlog.admit(message):
            return
        try:
            self._loop.call_soon_threadsafe(self._land, message)
        except RuntimeError:  # the loop closed since the check above
            self._backlog.taken()
            self._drop_for_closed_loop()

    def _count_drop(self) -> None:
        self._backlog.drop()

    def _drop_for_closed_loop(self) -> None:
        self._count_drop()
        ratelog.warning("asyncio-closed", "AsyncioSubscriber: its event loop is closed; a message was dropped")

    def _land(self, message: Any) -> None:
        """On the loop: queue ``message`` for the reader and wake one."""
        if self._closed:
            self._backlog.taken()
            self._backlog.drop()
            return
        self._items.append(message)
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _wake_all(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def __aiter__(self) -> AsyncioSubscriber:
        return self

    async def __anext__(self) -> Any:
        if asyncio.get_running_loop() is not self._loop:
            raise RuntimeError("an AsyncioSubscriber is read on the loop it was given, not on another one")
        while not self._items:
            if self._closed:
                raise StopAsyncIteration
            waiter = self._loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # it was woken for a message: the next reader gets it
                raise
        if self._closed:
            raise StopAsyncIteration
        message = self._items.popleft()
        self._backlog.taken()
        return message

    def close(self) -> None:
        """End the iteration (any thread): every reader stops, what was unread is discarded,
        and what ``put()`` gets from now on is dropped. Close the handles too, so the client
        stops delivering here."""
        if self._closed:
            return
        self._closed = True
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._discard()
            return
        try:
            self._loop.call_soon_threadsafe(self._discard)
        except RuntimeError:
            logger.debug("AsyncioSubscriber closed after its loop: nothing to wake")

    def _discard(self) -> None:
        unread = len(self._items)
        self._items.clear()
        if unread:
            self._backlog.taken(unread)
            self._backlog.drop(unread)
        self._wake_all()

    async def aclose(self) -> None:
        """:meth:`close`, for ``async with`` and symmetry with async generators."""
        self.close()

    async def __aenter__(self) -> AsyncioSubscriber:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
