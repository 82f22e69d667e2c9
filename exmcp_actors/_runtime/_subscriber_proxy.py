"""Subscriber proxies: ordered delivery to a subscriber, and the death that removes it.

One :class:`SubscriberProxy` actor per actor or ``put()`` subscriber serializes
delivery to it (so its messages keep wire order) and, when it stops for any
reason, tells the client that the subscriber is gone; a thread subscriber's
stand-in, :class:`InboxStopHook`, only tells (its inboxes need no thread). pykka has no monitors, so a
:class:`LivenessWatcher` per client stops the proxies of dead subscribers without
waiting for traffic: told by a thread's end where Python allows it, polling the rest.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pykka

from .._delivery._targets import deliver
from .._util._scheduler import TimerSlot
from .._util._thread_end import ThreadEnd

logger = logging.getLogger("exmcp_actors")

#: How often the liveness watcher looks at subscribers (seconds).
LIVENESS_INTERVAL = 0.05

#: A subscriber's stop hook: its :class:`SubscriberProxy` (an ``ActorRef``), or for a thread
#: subscriber an :class:`InboxStopHook`. Both take ``tell``, ``stop``, ``is_alive``, ``actor_urn``.
ProxyRef = Any


@dataclass(frozen=True, slots=True)
class Deliver:
    """Proxy message: deliver these messages to the subscriber, in order."""

    messages: list[Any]


@dataclass(frozen=True, slots=True)
class SubscriberGone:
    """Proxy message: the subscriber died; stop."""


@dataclass(frozen=True, slots=True)
class SubscriberDown:
    """Client message: a proxy stopped, because its subscriber died or because it was stopped."""

    key: Any
    proxy_urn: str
    #: True: the subscriber died (the proxy saw it). False: the proxy was stopped by someone.
    died: bool = True


class SubscriberProxy(pykka.ThreadingActor):
    """One per subscriber: reports the subscriber's death to the client (its stop hook),
    and delivers in order to an actor (``tell``) or a ``put()`` object.

    Inbox subscribers (threads) get their messages straight in their inboxes, since an inbox
    never blocks, and need only the stop hook: an :class:`InboxStopHook`, with no thread.
    """

    use_daemon_thread = True

    def __init__(self, key: Any, target: Any, client_ref: pykka.ActorRef[Any], on_thread: Callable[[], None]) -> None:
        super().__init__()
        self._key = key
        self._target = target
        self._client_ref = client_ref
        self._on_thread = on_thread
        self._subscriber_died = False

    def on_start(self) -> None:
        self._on_thread()  # lets the client join this thread on disconnect

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Deliver):
            if not deliver(self._target, message.messages):
                self._subscriber_died = True
                self.stop()
        elif isinstance(message, SubscriberGone):
            self._subscriber_died = True
            self.stop()
        return None

    def _report_down(self) -> None:
        try:
            self._client_ref.tell(SubscriberDown(self._key, self.actor_urn, self._subscriber_died))
        except pykka.ActorDeadError:
            pass  # the client is gone already: nobody left to tell

    def on_stop(self) -> None:
        self._report_down()

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        # deliver() catches what a subscriber raises: this is a bug of ours.
        logger.error("subscriber proxy failed delivering: %r", exception_value)
        self._subscriber_died = True
        self._report_down()


class InboxStopHook:
    """The proxy of a thread subscriber, with no thread: its messages go to its handles' inboxes
    (never through a proxy), so all it does is the proxy's stop hook. Told ``SubscriberGone``
    (by the liveness watcher, in the dying thread or on the scheduler) or stopped (retired),
    it tells the client :class:`SubscriberDown` once, as a proxy's ``on_stop`` would. Like a
    dead actor's ref, a ``tell`` after that raises ``ActorDeadError``."""

    _numbers = itertools.count(1)

    def __init__(self, key: Any, client_ref: pykka.ActorRef[Any]) -> None:
        self._key = key
        self._client_ref = client_ref
        #: Unique like an actor's: the client matches SubscriberDown to the slot's hook by it.
        self.actor_urn = f"inbox-stop-hook-{next(self._numbers)}"
        self._lock = threading.Lock()
        self._alive = True

    def is_alive(self) -> bool:
        return self._alive

    def tell(self, message: Any) -> None:
        if not isinstance(message, SubscriberGone):  # a bug of ours: inboxes are never routed here
            logger.error("stop hook of %s told %r; only SubscriberGone is expected", self._key, message)
            return
        if not self._end(died=True):
            raise pykka.ActorDeadError(f"{self.actor_urn} is stopped")

    def stop(self, block: bool = True, timeout: float | None = None) -> bool:
        return self._end(died=False)

    def _end(self, *, died: bool) -> bool:
        with self._lock:
            if not self._alive:
                return False
            self._alive = False
        try:
            self._client_ref.tell(SubscriberDown(self._key, self.actor_urn, died))
        except pykka.ActorDeadError:
            pass  # the client is gone already: nobody left to tell
        return True


def _next_poll() -> float:
    """Seconds to the next multiple of the interval: every client's poll falls due at the same
    instant, so the shared scheduler wakes once per interval however many clients poll."""
    return LIVENESS_INTERVAL - time.monotonic() % LIVENESS_INTERVAL


class LivenessWatcher:
    """Notices the death of watched subscribers and stops their proxies.

    A thread that registered itself is *told*: its :class:`~.._util._thread_end.ThreadEnd`
    runs our callback as the thread ends, so watching it costs no wake-up at all. What
    cannot tell (an actor, a thread named by another thread, a thread Python did not start)
    is *polled* on the process-wide scheduler, and only while such a subscriber is watched.
    Either way a death is seen within about :data:`LIVENESS_INTERVAL`.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._polled: dict[Any, tuple[Callable[[], bool], ProxyRef]] = {}
        self._told: dict[Any, tuple[ThreadEnd, int]] = {}
        self._timer = TimerSlot()
        #: Set by close(): a watch asked for later (a handle made as its client disconnects)
        #: is not taken, or it would outlive the client in a thread that lives on.
        self._closed = False

    def watch(self, key: Any, alive: Callable[[], bool], proxy: ProxyRef, end: ThreadEnd | None = None) -> None:
        """Watch one subscriber's proxy: told by ``end`` when given, else polled with ``alive``
        (nothing once closed: the client is down, and ends its handles itself)."""
        self.unwatch(key)  # a proxy started again for the same subscriber replaces the last
        if end is not None:
            with self._lock:
                if self._closed:
                    return
                token = end.on_end(partial(self._ended, key, end, proxy))
                if token is not None:
                    self._told[key] = (end, token)
                    return
            _stop(proxy)  # its thread ended before the watch began
            return
        with self._lock:
            if self._closed:
                return
            self._polled[key] = (alive, proxy)
            if not self._timer.armed:
                self._timer.arm(_next_poll(), self._poll)

    def unwatch(self, key: Any) -> None:
        with self._lock:
            self._polled.pop(key, None)
            told = self._told.pop(key, None)
        if told is not None:
            told[0].cancel(told[1])

    def counts(self) -> dict[str, int]:
        """How many subscribers are told of and how many polled (for ``inspect()``)."""
        with self._lock:
            return {"told": len(self._told), "polled": len(self._polled), "polling": int(self._timer.armed)}

    def _ended(self, key: Any, end: ThreadEnd, proxy: ProxyRef) -> None:
        """In the ending thread (so it only tells): its subscriber is gone. The key's watch is
        forgotten only if it is still this thread's: a callback taken by an ending thread just
        before its watch was dropped may run after the key (an ``id()``) names another thread."""
        with self._lock:
            told = self._told.get(key)
            if told is not None and told[0] is end:
                del self._told[key]
        _stop(proxy)

    def _poll(self) -> None:
        with self._lock:
            dead = [(key, proxy) for key, (alive, proxy) in self._polled.items() if not alive()]
            for key, _ in dead:
                del self._polled[key]
            # Armed again only while there is something to poll (and once: watch() may have).
            if self._polled and not self._timer.armed:
                self._timer.arm(_next_poll(), self._poll)
        for _, proxy in dead:
            _stop(proxy)

    def close(self) -> None:
        self._timer.stop()
        with self._lock:
            self._closed = True
            told, self._told = list(self._told.values()), {}
            self._polled.clear()
        for end, token in told:
            end.cancel(token)  # a long-lived thread keeps nothing of a closed client


def _stop(proxy: ProxyRef) -> None:
    try:
        proxy.tell(SubscriberGone())
    except pykka.ActorDeadError:
        pass
