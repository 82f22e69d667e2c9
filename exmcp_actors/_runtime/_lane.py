"""The delivery lane: lets a transport's reader thread deliver plain notifications itself.

At a steady trickle every message used to wake three threads in turn: the
reader, the client actor and the host. The lane removes the middle one for
the bulk of the traffic: when the client is settled (ready, legacy era, not
paused after a loss) and the actor has no frames of this connection still
queued, the reader routes plain notifications through the listener index and
lands them itself. Everything else (responses, server requests, stamped
modern events, anything while the lane is shut) goes to the client actor as
before, and from then on so does every later frame, until the actor has
handled them: the wire order a subscriber sees never changes.

The session's index is changed only under the lane's lock, and the lane is opened or
shut under it too, so a listener the session removed is never delivered to afterwards,
and the closing messages that follow a shut lane come after everything the reader
delivered. Where this lock stands in the lock order: ``exmcp_actors._runtime``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

import pykka

from .._delivery._bound import admit_to_proxy
from .._delivery._inbox import Inbox, SharedEvent, land
from .._protocol._events import Outbox, Settle
from .._protocol._filters import ELICITATION_COMPLETE, NotificationFilter, event_message, raw_message
from .._protocol._index import ListenerIndex, for_a_subscription, notification_parts
from .._protocol._jsonrpc import Frame
from ._monitor import settle_all
from ._subscriber_proxy import Deliver

#: ``replace(slot, found_ref) -> ref or None``: the proxy of a slot found with none yet (None)
#: or with a stopped one (see ``Shell.replace_proxy``).
Replace = Callable[[Any, Any], Any]

#: Releases the GIL and the CPU for a moment (one syscall).
_yield_gil: Callable[[], None] = getattr(os, "sched_yield", None) or (lambda: time.sleep(0))


def _never(frame: Frame, settles: list[Settle]) -> bool:
    return False


def _no_successor(slot: Any, stopped: Any) -> Any:
    return None


def flush(out: Outbox, replace: Replace) -> None:
    """Deliver what a handler produced: one batch per route, in order. Never runs host code:
    an inbox only queues, and a proxy is only told (it calls ``put()`` on its own thread)."""
    for route, queued in out.items():
        if type(route) is Inbox:
            land(route, queued)
            continue
        messages = admit_to_proxy(queued)
        if not messages:
            continue
        ref = route.ref
        if ref is not None:
            try:
                ref.tell(Deliver(messages))
                continue
            except pykka.ActorDeadError:
                pass
        # Not started yet (a registration indexes its listener a moment before it starts the
        # proxy, and a reader may deliver in between), or stopped from outside (not by its
        # subscriber's death, which removes the route): whoever finds it so starts it, once,
        # and it takes the batch, so no message (a closing one included) is lost.
        successor = replace(route, ref)
        try:
            if successor is not None:
                successor.tell(Deliver(messages))
        except pykka.ActorDeadError:
            pass  # the client is going down with its subscribers: nobody left to deliver to
    out.clear()


def dispatch_now(index: ListenerIndex[Any], method: str, params: dict[str, Any], out: Outbox) -> bool:
    """``_index.dispatch`` for the reader; True if it reached anyone.

    A message for an inbox lands at once, one for a proxy waits in ``out`` for :func:`flush`.
    Each inbox is one handle's and the reader always lands it here, so its order is the wire's.
    A plain notification lands as one :class:`SharedEvent` put in every inbox it reaches: the
    reader allocates one object per notification, not one per listener, and a backlog holds
    one (measured: the per-listener tuples and the collector chasing them were most of the
    cost of a fan-out to 1,000 listeners)."""
    reached = index.reached(method, params)
    if reached:
        shared = SharedEvent(method, params) if method != ELICITATION_COMPLETE else None
        for entry in reached:
            route = entry.route
            if type(route) is not Inbox:
                out.setdefault(route, []).append(event_message(entry.handle, method, params))
                continue
            bound = route.bound
            # land()'s own fast path, for one message without a list: far below the bound,
            # one put (see Bound.credit).
            if shared is not None and bound is not None and bound.credit > 0:
                bound.credit -= 1
                bound.sent += 1
                route._queue.put(shared)
            else:
                land(route, [event_message(entry.handle, method, params)])
    raw = index.reached_raw(method, params)
    for entry in raw:
        message = raw_message(entry.handle, method, params)
        if type(entry.route) is Inbox:
            land(entry.route, [message])
        else:
            out.setdefault(entry.route, []).append(message)
    return bool(reached) or bool(raw)


class DeliveryLane:
    """Shared by the client actor and its connections' reader threads. See the module docstring."""

    __slots__ = ("_backlog", "_lock", "_open_for", "answer", "index", "reached", "reached_raw", "replace")

    def __init__(self, index: ListenerIndex[Any]) -> None:
        self.index = index
        #: The session's lookups need no lock: they run under the session monitor, as every write does.
        self.reached = index.reached
        self.reached_raw = index.reached_raw
        #: Re-entrant: a reader holding it may take the session monitor to settle an answer, and
        #: what that performs may open or shut the lane (the same thread, taking it again).
        self._lock = threading.RLock()
        #: The connection generation the reader may deliver for; None: the lane is shut.
        self._open_for: int | None = None
        #: Frame batches handed to the actor and not handled yet.
        self._backlog = 0
        #: ``answer(frame, settles) -> bool``: takes a host's answer here if it can (``SessionMonitor.try_answer``).
        self.answer: Callable[[Frame, list[Settle]], bool] = _never
        #: Starts the proxy of a slot found without a live one (``Shell.replace_proxy``).
        self.replace: Replace = _no_successor

    # -- the reader's side -----------------------------------------------------------------

    def take(self, generation: int, frames: list[Frame], forward: Callable[[list[Frame]], None]) -> None:
        """Deliver what the reader may deliver itself; ``forward`` the rest to the actor, in order."""
        settles: list[Settle] = []
        try:
            if not self._take(generation, frames, forward, settles):
                return
        finally:
            settle_all(settles)  # with no lock held: its caller wakes now
        # Hand the GIL to the subscriber just woken, now rather than when this thread next
        # blocks: measured at 1,000 msg/s over stdio, p99 226 -> 162 us and CPU 87 -> 73 us
        # per message. Once per read, so a flood of large reads does not notice it.
        _yield_gil()

    def _take(
        self, generation: int, frames: list[Frame], forward: Callable[[list[Frame]], None], settles: list[Settle]
    ) -> bool:
        """The lane's part of :meth:`take`, under its lock; True if it woke anyone."""
        with self._lock:
            if self._backlog or generation != self._open_for:
                self._forward(forward, frames)
                return False
            out: Outbox = {}
            index, replace = self.index, self.replace
            delivered = False
            for position, frame in enumerate(frames):
                parts = notification_parts(frame)
                if parts is None or for_a_subscription(*parts):
                    # Whatever comes next happens after what came before it was delivered.
                    flush(out, replace)
                    if parts is None and type(frame) is dict and "method" not in frame and self.answer(frame, settles):
                        continue  # a host's answer, taken here
                    self._forward(forward, frames[position:])
                    return False
                if dispatch_now(index, parts[0], parts[1], out):
                    delivered = True
            if out:
                flush(out, replace)
            return delivered or bool(settles)

    def _forward(self, forward: Callable[[list[Frame]], None], frames: list[Frame]) -> None:
        self._backlog += 1
        forward(frames)

    # -- the actor's side ------------------------------------------------------------------

    def handled(self) -> None:
        """The actor finished a forwarded batch (and flushed what it produced)."""
        with self._lock:
            self._backlog -= 1

    def open_for(self, generation: int | None) -> None:
        """Let readers of ``generation`` deliver (None shuts the lane)."""
        if generation != self._open_for:
            with self._lock:
                self._open_for = generation

    # -- the index, as the session changes it: under the lock ------------------------------

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, key: Hashable) -> bool:
        return key in self.index

    def add(self, key: Hashable, flt: NotificationFilter, entry: Any) -> None:
        with self._lock:
            if flt.status:
                # Its "ready" status, queued with this change, goes before anything a reader
                # delivers to it: the lane opens again once the change's messages are flushed.
                self._open_for = None
            self.index.add(key, flt, entry)

    def remove(self, key: Hashable) -> None:
        if key in self.index:
            with self._lock:
                self.index.remove(key)
