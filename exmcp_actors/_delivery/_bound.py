"""The bound on a handle's pending messages (``max_pending=``): bounded memory per subscriber.

A message is *pending* from the moment the library queues it for a subscriber until the
subscriber has it. Where it waits, and so where it is counted:

- a handle with its own inbox (a thread subscriber): the inbox (its size);
- a ``put()`` object or an actor: its subscriber proxy's mailbox, counted per handle
  (``sent`` by whoever queues, ``done`` by the proxy as it hands each message over).
  What an actor's own mailbox holds afterwards is the actor's business.

Below the bound every message is queued. At the bound, a pure change signal (the three
``list_changed``, ``resources/updated`` for one URI) whose key already waits is coalesced into
the one waiting (the reader, refetching after it, sees the latest state anyway), and one of a
key not waiting is still queued, up to twice the bound (a hostile server cannot grow it
further with made-up URIs). Anything else closes the handle: its last message is a closing one
with reason ``("overflow", max_pending)``, nothing follows, and the client removes it (its
URIs are released, a modern subscription is cancelled on the wire).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Final

from .._protocol import _messages as m
from .._protocol._filters import signal_key as notification_signal_key

DEFAULT_MAX_PENDING: Final = 10_000
_EVENT_TAGS: Final = frozenset((m.NOTIFICATION, m.SUBSCRIPTION))


def check_max_pending(value: Any) -> int:
    """``max_pending`` as an int: TypeError unless an int, ValueError unless positive."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_pending must be an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"max_pending must be at least 1, got {value!r}")
    return value


def signal_key(message: Any) -> Hashable | None:
    """What a pure change signal is about (None: the message is not one)."""
    if message[0] not in _EVENT_TAGS:
        return None
    return notification_signal_key(message[2], message[3])


def overflow_closing(message: Any, limit: int) -> Any:
    """The closing message, in the handle's own vocabulary, that ends it on overflow."""
    reason = ("overflow", limit)
    if message[0].startswith("ex_mcp_subscription"):
        return m.SubscriptionClosed(m.SUBSCRIPTION_CLOSED, message[1], reason)
    return m.Closed(m.CLOSED, message[1], reason)


class Bound:
    """One handle's bound. ``admit`` runs where messages are queued (the client actor, or a
    reader thread through the lane, never both at once); ``done`` is the proxy's count."""

    __slots__ = ("_args", "_on_overflow", "_signal_at", "credit", "done", "limit", "overflowed", "sent")

    def __init__(self, limit: int, on_overflow: Callable[..., None], *args: Any) -> None:
        self.limit = limit
        #: Messages queued so far; the n-th queued (from 0) is pending while n >= sent - pending.
        self.sent = 0
        #: Messages a proxy has handed over (unused for an inbox, whose size says it).
        self.done = 0
        self.overflowed = False
        #: How many more an inbox surely takes: the bound less what waited when last counted,
        #: less what was queued since (what waits only shrinks meanwhile). Counting what waits
        #: once per ``limit`` messages, not once per message, is what keeps fan-out cheap.
        self.credit = limit
        #: ``on_overflow(*args)`` once the handle overflows (no closure: one object less per handle).
        self._on_overflow = on_overflow
        self._args = args
        #: Where the last signal of each key admitted at the bound was queued (made at the bound).
        self._signal_at: dict[Hashable, int] | None = None

    def admit(self, messages: list[Any], pending: int) -> list[Any]:
        """What to queue of ``messages``, ``pending`` waiting already."""
        if self.overflowed:
            return []
        if pending + len(messages) <= self.limit:  # the common case: far below the bound
            self.sent += len(messages)
            self.credit = self.limit - pending - len(messages)
            return messages
        self.credit = 0  # near the bound: count what waits for every message from here
        admitted: list[Any] = []
        for message in messages:
            if pending < self.limit or message[0] in m.FINAL_TAGS:
                admitted.append(message)
            elif not self._admit_signal(message, pending):
                continue  # coalesced into the same signal, still waiting
            elif pending >= 2 * self.limit or signal_key(message) is None:
                admitted.append(overflow_closing(message, self.limit))
                self.sent += 1
                self.overflowed = True
                self._on_overflow(*self._args)
                break
            else:
                admitted.append(message)
            self.sent += 1
            pending += 1
        return admitted

    def _admit_signal(self, message: Any, pending: int) -> bool:
        """False if ``message`` is a signal whose key waits already (it is then dropped)."""
        key = signal_key(message)
        if key is None:
            return True
        oldest_waiting = self.sent - pending
        signal_at = self._signal_at
        if signal_at is None:
            signal_at = self._signal_at = {}
        at = signal_at.get(key)
        if at is not None and at >= oldest_waiting:
            return False
        if len(signal_at) >= self.limit:  # forget the keys no longer waiting
            signal_at = self._signal_at = {k: v for k, v in signal_at.items() if v >= oldest_waiting}
        signal_at[key] = self.sent
        return True

    def admit_one(self, message: Any) -> list[Any]:
        """``admit`` for one message queued for a proxy (pending: sent, not yet done)."""
        pending = self.sent - self.done
        if pending < self.limit and not self.overflowed:
            self.sent += 1
            return [message]
        return self.admit([message], pending)


def admit_to_proxy(messages: list[Any]) -> list[Any]:
    """The messages of a proxy batch (several handles, maybe) that their bounds admit."""
    admitted: list[Any] = []
    for message in messages:
        bound: Bound | None = getattr(message[1], "_bound", None)
        if bound is None:
            admitted.append(message)
        else:
            admitted.extend(bound.admit_one(message))
    return admitted


def handed_over(message: Any) -> None:
    """The proxy is done with ``message`` (delivered or skipped)."""
    bound: Bound | None = getattr(message[1], "_bound", None)
    if bound is not None:
        bound.done += 1
