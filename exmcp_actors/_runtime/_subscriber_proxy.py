"""Subscribers: who receives a handle's messages, and whose death removes it.

One :class:`SubscriberProxy` actor per subscriber serializes delivery to it
(so its messages keep wire order) and, when it stops for any reason, tells
the client that the subscriber is gone. pykka has no monitors, so a
:class:`LivenessWatcher` per client polls the subscribers' liveness
(``Thread.is_alive()``, ``ActorRef.is_alive()``) on the shared scheduler
thread and stops the proxies of the dead ones, without waiting for traffic.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import pykka

from .._delivery._bound import handed_over
from .._delivery._inbox import Inbox, land
from .._protocol._messages import FINAL_TAGS
from .._util._scheduler import TimerSlot

logger = logging.getLogger("exmcp_actors")

#: How often the liveness watcher looks at subscribers (seconds).
LIVENESS_INTERVAL = 0.05


@dataclass(frozen=True, slots=True)
class Subscriber:
    """A resolved ``subscriber=`` argument.

    Attributes:
        key: identity shared by every handle of the same subscriber.
        target: what the handle's messages are delivered to (None: the handle's own inbox).
        alive: the liveness check (always true for ``put()`` objects).
        watched: whether the liveness watcher must poll it.
        owner: the original object, for ``handle.subscriber``.
    """

    key: Any
    target: Any
    alive: Callable[[], bool]
    watched: bool
    owner: Any


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
        return Subscriber(("thread", id(subscriber)), None, subscriber.is_alive, True, subscriber)
    if isinstance(subscriber, pykka.ActorRef):
        return Subscriber(("actor", subscriber.actor_urn), subscriber, subscriber.is_alive, True, subscriber)
    put = getattr(subscriber, "put", None)
    if callable(put) and not isinstance(subscriber, type):  # a class (queue.Queue) is not a mailbox
        return Subscriber(("put", id(subscriber)), PutTarget(subscriber), _always_alive, False, subscriber)
    raise TypeError(
        "subscriber must be None (the calling thread), a threading.Thread, a pykka.ActorRef "
        f"or an object with a put() method, got {type(subscriber).__name__}"
    )


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


#: ``handle._cut`` levels: what may still start being delivered to a handle's subscriber.
LIVE: Final = 0
#: Only its closing message (cancel(), disconnect(): the backlog is dropped).
FINAL_ONLY: Final = 1
#: Nothing (unsubscribe(), a dead subscriber, a disconnect() that has returned).
CUT: Final = 2


def cut(handle: Any, level: int) -> None:
    """Stop new deliveries to ``handle`` from ``level`` on (levels only rise)."""
    if getattr(handle, "_cut", LIVE) < level:
        handle._cut = level


def _stopped(message: Any) -> bool:
    """Whether ``message`` must not start being delivered any more (see :func:`cut`)."""
    level: int = getattr(message[1], "_cut", LIVE)
    return level == CUT or (level == FINAL_ONLY and message[0] not in FINAL_TAGS)


class PutTarget:
    """A ``put()`` subscriber. After its ``put()`` raised once it is never called again:
    the failure is logged once and its handles are removed (see :class:`SubscriberProxy`)."""

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
    what was cut meanwhile; False if the subscriber is dead or its ``put()`` raised."""
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


class SubscriberProxy(pykka.ThreadingActor):
    """One per subscriber: reports the subscriber's death to the client (its stop hook),
    and delivers in order to an actor (``tell``) or a ``put()`` object.

    Inbox subscribers (threads) get their messages from the client actor directly, since an
    inbox never blocks; their proxy is there for the stop hook.
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


def _next_poll() -> float:
    """Seconds to the next multiple of the interval: every client's poll falls due at the same
    instant, so the shared scheduler wakes once per interval however many clients watch."""
    return LIVENESS_INTERVAL - time.monotonic() % LIVENESS_INTERVAL


class LivenessWatcher:
    """Polls watched subscribers and stops the proxies of dead ones.

    The polls run on the process-wide scheduler (``_scheduler``), and only while
    something is watched: no thread of its own, and no wake-up with nothing to look at.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._watched: dict[Any, tuple[Callable[[], bool], pykka.ActorRef[Any]]] = {}
        self._timer = TimerSlot()

    def watch(self, key: Any, alive: Callable[[], bool], proxy: pykka.ActorRef[Any]) -> None:
        with self._lock:
            self._watched[key] = (alive, proxy)
            if not self._timer.armed:
                self._timer.arm(_next_poll(), self._poll)

    def unwatch(self, key: Any) -> None:
        with self._lock:
            self._watched.pop(key, None)

    def _poll(self) -> None:
        with self._lock:
            dead = [(key, proxy) for key, (alive, proxy) in self._watched.items() if not alive()]
            for key, _ in dead:
                del self._watched[key]
            # Armed again only while there is something to watch (and once: watch() may have).
            if self._watched and not self._timer.armed:
                self._timer.arm(_next_poll(), self._poll)
        for _, proxy in dead:
            try:
                proxy.tell(SubscriberGone())
            except pykka.ActorDeadError:
                pass

    def close(self) -> None:
        self._timer.stop()
