"""Being told that a thread has ended, without polling it.

Python frees a thread's ``threading.local`` storage as the thread ends. An object kept
there is finalized then, in the ending thread, and so can run callbacks: the subscriber
liveness watch uses this to notice a subscriber thread's end the moment it happens,
instead of asking ``is_alive()`` on a timer.

It works only for a thread that asks from inside itself (so ``current_thread_end()`` is
called from the subscriber's own thread), and only for threads Python started itself:
a thread started outside Python (a ``_DummyThread``) never frees its storage before the
process ends, so for it :func:`current_thread_end` answers None and the caller polls.

Python frees that storage at two other moments, on a thread that is not the one ending:
at interpreter exit (the finalizing thread clears the daemon threads still running) and in
a child made by ``os.fork()`` (inside the fork, for every thread but the forking one). Then
no callback runs: the process is ending, or it is a copy in which neither the thread nor
the client that asked exist, and the locks a callback would take may be held for good by
a thread that is gone (a poll, a delivery caught at that instant), which would hang the
exit or the fork. A callback runs only in the process that registered it.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections.abc import Callable

_tokens = itertools.count(1)


class ThreadEnd:
    """The end of one thread: its callbacks run once, as it ends (one that has ended takes none)."""

    __slots__ = ("__weakref__", "_callbacks", "_ended", "_ident", "_lock", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        #: The thread it is the end of (made only by that thread: see current_thread_end).
        self._ident = threading.get_ident()
        self._lock = threading.Lock()
        #: token -> (the pid of the process that registered it, the callback)
        self._callbacks: dict[int, tuple[int, Callable[[], None]]] = {}
        self._ended = False

    @property
    def ended(self) -> bool:
        return self._ended

    def on_end(self, callback: Callable[[], None]) -> int | None:
        """Run ``callback()`` when the thread ends, in whichever thread finalizes its storage
        (it must be short and must not block); a token for :meth:`cancel`. None when the
        thread has ended already: the caller acts at once, as it knows the thread is gone."""
        with self._lock:
            if self._ended:
                return None
            token = next(_tokens)
            self._callbacks[token] = (os.getpid(), callback)
            return token

    def cancel(self, token: int) -> None:
        """Forget a callback (harmless once it ran): a watch that ends before its thread
        leaves nothing behind in a thread that lives on."""
        with self._lock:
            self._callbacks.pop(token, None)

    def pending(self) -> int:
        """How many callbacks wait for the end (for tests and diagnostics)."""
        with self._lock:
            return len(self._callbacks)

    def _end(
        self,
        _finalizing: Callable[[], bool] = sys.is_finalizing,
        _getpid: Callable[[], int] = os.getpid,
        _get_ident: Callable[[], int] = threading.get_ident,
    ) -> None:
        """Run every callback, even after one raised; then raise the first failure, which
        Python reports through ``sys.unraisablehook`` (a finalizer's errors go there). Not
        through logging: the ending thread is gone from threading's books by now, and
        logging's ``current_thread()`` would leave a dummy thread behind it. (What it calls
        is bound at import: at exit, module globals may be cleared before it runs.)"""
        if _finalizing() or _get_ident() != self._ident:
            # At exit, or in a forked child for a thread of the parent: not even our own lock
            # is taken, since a thread gone for good may hold it.
            self._ended = True
            return
        with self._lock:
            self._ended = True
            registered, self._callbacks = list(self._callbacks.values()), {}
        pid = _getpid()  # in a forked child, only what the child itself registered
        callbacks = [callback for owner, callback in registered if owner == pid]
        failure: BaseException | None = None
        for callback in callbacks:
            try:
                callback()
            except BaseException as error:  # each callback runs whatever another did
                failure = failure or error
        if failure is not None:
            raise failure


class _Sentinel:
    """Kept in the thread's local storage; its finalizer is the thread's end."""

    __slots__ = ("end",)

    def __init__(self, end: ThreadEnd) -> None:
        self.end = end

    def __del__(self) -> None:
        self.end._end()


_local = threading.local()


def current_thread_end() -> ThreadEnd | None:
    """The calling thread's :class:`ThreadEnd` (made on first use); None for a thread Python
    did not start, whose end cannot be seen this way."""
    thread = threading.current_thread()
    if isinstance(thread, threading._DummyThread):
        return None
    sentinel: _Sentinel | None = getattr(_local, "sentinel", None)
    if sentinel is None:
        sentinel = _Sentinel(ThreadEnd(thread.name))
        _local.sentinel = sentinel
    return sentinel.end
