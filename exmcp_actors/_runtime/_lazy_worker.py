"""The refcount worker, started the first time it is given work.

Most clients never need it: a host thread subscribes and unsubscribes its URIs itself (the
wire turn), and the worker only takes what no host waits for (a dead subscriber's release,
a resubscription after a reconnect, an answer a host gave up on). Until then it costs no
thread. Its one lock is a leaf, held only to start the actor once (see the lock order in
``exmcp_actors._runtime``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pykka


class LazyWorker:
    """Stands for the worker's ``ActorRef``: ``tell`` starts the actor on first use."""

    def __init__(self, start: Callable[[], pykka.ActorRef[Any]], in_place: Callable[[Any], bool]) -> None:
        """``start()`` starts the actor; ``in_place(message)`` does the work of a message that
        needs no actor (see ``_refcount_worker.done_in_place``) and says whether it did."""
        self._start = start
        self._in_place = in_place
        self._lock = threading.Lock()
        self._ref: pykka.ActorRef[Any] | None = None
        self._stopped = False
        #: Stands for ``actor_stopped`` of a worker stopped before it was ever started.
        self._never_started = threading.Event()

    @property
    def started(self) -> pykka.ActorRef[Any] | None:
        """The running (or stopped) actor, or None if no work ever came."""
        return self._ref

    def tell(self, message: Any) -> None:
        """Hand the worker a message, starting it first if need be.

        Raises:
            pykka.ActorDeadError: the worker was stopped (the client is going down).
        """
        with self._lock:
            if self._ref is None and not self._stopped:
                if self._in_place(message):
                    return
                self._ref = self._start()
            ref = self._ref
        if ref is None:
            raise pykka.ActorDeadError("the refcount worker was stopped before it had any work")
        ref.tell(message)

    def stop(self) -> None:
        """Stop the worker (not blocking); one that never started is never started after this."""
        with self._lock:
            self._stopped = True
            ref = self._ref
        if ref is None:
            self._never_started.set()
        else:
            ref.stop(block=False)

    @property
    def actor_stopped(self) -> threading.Event:
        """Set once the worker has stopped (at once for one stopped before it ever started)."""
        ref = self._ref
        return self._never_started if ref is None else ref.actor_stopped
