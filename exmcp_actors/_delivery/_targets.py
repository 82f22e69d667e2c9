"""Who receives a handle's messages, and the part of a handle that delivery reads.

A handle's messages go to its own inbox (a thread subscriber), to an actor (``tell``), or to
an object with ``put()``. Delivery to the last two runs on that subscriber's proxy actor
(``_runtime/_subscriber_proxy``), never under a lock of the library: ``put()`` is host code.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import pykka

from .._protocol._messages import FINAL_TAGS, STATUS
from .._util._thread_end import ThreadEnd, current_thread_end
from ._bound import Bound, handed_over
from ._inbox import Inbox, land

logger = logging.getLogger("exmcp_actors")

#: Cut levels: what may still start being delivered to a handle's subscriber (levels only rise).
LIVE: Final = 0
#: Only its closing message (cancel(), disconnect(): the backlog is dropped).
FINAL_ONLY: Final = 1
#: Nothing (unsubscribe(), a dead subscriber, a disconnect() that has returned).
CUT: Final = 2


class Delivered:
    """What delivery knows of a handle: the base of every handle the host holds.

    The runtime reads and ends a handle only through these members, so it never needs the
    host-facing class (``_api``) above it.
    """

    def __init__(self, handle_id: Any, inbox: Inbox | None) -> None:
        self.id = handle_id
        self._inbox = inbox
        if inbox is not None:
            inbox.owner = self
        #: Its ``max_pending`` bound (see ``_bound``).
        self._bound: Bound | None = inbox.bound if inbox is not None else None
        #: What may still start being delivered to it (see :func:`cut`).
        self._cut = LIVE

    def _finish(self) -> None:
        """Nothing more will reach it: a reader of its inbox stops once it is drained."""
        if self._inbox is not None:
            self._inbox.finish()


def cut(handle: Delivered, level: int) -> None:
    """Stop new deliveries to ``handle`` from ``level`` on (levels only rise)."""
    handle._cut = max(handle._cut, level)


def _stopped(message: Any) -> bool:
    """Whether ``message`` must not start being delivered any more (see :func:`cut`)."""
    level: int = getattr(message[1], "_cut", LIVE)
    if level == LIVE:
        return False
    # The "closed" status goes with the closing message it announces.
    return level == CUT or (message[0] not in FINAL_TAGS and not (message[0] == STATUS and message[2] == "closed"))


@dataclass(frozen=True, slots=True)
class Subscriber:
    """A resolved ``subscriber=`` argument.

    Attributes:
        key: identity shared by every handle of the same subscriber.
        target: what the handle's messages are delivered to (None: the handle's own inbox).
        alive: the liveness check (always true for ``put()`` objects).
        watched: whether the liveness watcher must watch it.
        owner: the original object, for ``handle.subscriber``.
        end: the thread's end, which tells of it without polling: set for a thread that
            registers itself (see ``_util._thread_end``); None means it is polled.
    """

    key: Any
    target: Any
    alive: Callable[[], bool]
    watched: bool
    owner: Any
    end: ThreadEnd | None = None


def _always_alive() -> bool:
    return True


def resolve_subscriber(subscriber: Any) -> Subscriber:
    """Turn the host's ``subscriber=`` argument into a :class:`Subscriber`.

    Raises:
        TypeError: the argument is none of the accepted kinds.
    """
    if subscriber is None:
        subscriber = threading.current_thread()
    if isinstance(subscriber, threading.Thread):
        # Only the thread itself can hold its end; any other thread is polled.
        end = current_thread_end() if subscriber is threading.current_thread() else None
        return Subscriber(("thread", id(subscriber)), None, subscriber.is_alive, True, subscriber, end)
    if isinstance(subscriber, pykka.ActorRef):
        return Subscriber(("actor", subscriber.actor_urn), subscriber, subscriber.is_alive, True, subscriber)
    put = getattr(subscriber, "put", None)
    if callable(put) and not isinstance(subscriber, type):  # a class (queue.Queue) is not a mailbox
        return Subscriber(("put", id(subscriber)), PutTarget(subscriber), _always_alive, False, subscriber)
    raise TypeError(
        "subscriber must be None (the calling thread), a threading.Thread, a pykka.ActorRef "
        f"or an object with a put() method, got {type(subscriber).__name__}"
    )


class PutTarget:
    """A ``put()`` subscriber. After its ``put()`` raised once it is never called again:
    the failure is logged once and its handles are removed (see the subscriber proxy)."""

    __slots__ = ("failed", "obj")

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self.failed = False

    def deliver(self, messages: list[Any]) -> bool:
        """Put each message still wanted, in order; False once ``put()`` has raised."""
        if self.failed:
            return False
        put = self.obj.put
        for message in messages:
            handed_over(message)
            if _stopped(message):
                continue
            try:
                put(message)
            except Exception:  # the host's code: it must not reach a library thread
                self.failed = True
                logger.exception(
                    "subscriber %r raised from put(); its listeners are removed and it gets nothing more",
                    self.obj,
                )
                return False
        return True


def deliver(target: Any, messages: list[Any]) -> bool:
    """Deliver to an actor (``tell``), a ``put()`` object or an inbox, in order, skipping
    what was cut meanwhile; False if the subscriber is dead or its ``put()`` raised.
    Runs the host's ``put()``: call it with no lock of the library held."""
    if isinstance(target, Inbox):
        land(target, messages)
        return True
    if isinstance(target, PutTarget):
        return target.deliver(messages)
    try:
        for message in messages:
            handed_over(message)
            if not _stopped(message):
                target.tell(message)
    except pykka.ActorDeadError:
        return False
    return True
