"""A subscriber whose callback runs on the Tk main loop."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from .._delivery._bound import check_max_pending
from ._common import check_callable, is_final, ratelog


class TkSubscriber:
    """A ``put()`` subscriber that runs ``callback(message)`` on ``root``'s Tk thread.

    Where Tk can watch a file (every platform but Windows), ``put()`` calls nothing of Tk:
    it queues the message and writes a byte to a pipe the Tk thread watches
    (``createfilehandler``), so a library thread never waits for the Tk thread, not even
    while that thread is in a call to the client (a ``disconnect()`` that waits for this
    subscriber's closing message) or runs no ``mainloop()`` yet (the messages wait for it).
    At most ``max_pending`` messages wait; past that a new one is dropped and counted (a
    handle's closing message never is). Elsewhere ``put()`` calls ``root.after(0, ...)``,
    which tkinter carries over to the thread running ``mainloop()`` and waits until that
    thread takes it, so a busy Tk thread slows this subscriber's deliveries (and with no
    ``mainloop()`` running each call waits up to a second, then the message is dropped).
    Either way the library's thread calls Tk only in a Tcl built with threads (anything
    else raises ValueError here). Once ``root`` is destroyed (seen through its
    ``<Destroy>`` event) or :meth:`close` was called, messages are dropped with no call to
    Tk at all. A callback that raises is logged (rate-limited) and called again for the
    next message.

    Construct it on the Tk thread: it binds ``<Destroy>`` on ``root`` and watches its pipe there.
    """

    def __init__(self, root: Any, callback: Callable[[Any], Any], *, max_pending: int = 10_000) -> None:
        import tkinter  # here, not at import: a Python built without Tk still has the other bridges

        if not isinstance(root, tkinter.Misc):
            raise TypeError(f"root must be a tkinter widget (tkinter.Tk), got {type(root).__name__} {root!r}")
        check_callable("callback", callback)
        self._max_pending = check_max_pending(max_pending)
        threaded = root.tk.eval("expr {[info exists tcl_platform(threaded)] && $tcl_platform(threaded)}")
        if threaded != "1":
            raise ValueError("root's Tcl is not built with threads: its after() cannot be called from another thread")
        #: Dropped once the root is destroyed or this is closed: Tk objects live in reference
        #: cycles, and Tcl aborts the process when one is freed on a thread other than its own,
        #: so a library thread must never hold the last reference.
        self._root: Any = root
        self._callback = callback
        self._gone = False
        self._dropped = 0
        # Guards the queue, the wake flag and the pipe (closed on the Tk thread): held only
        # for a deque operation or one non-blocking write, never around Tk or the callback.
        self._lock = threading.Lock()
        self._queue: deque[Any] = deque()
        self._woken = False
        self._in_burst = False
        #: The pipe's (read, write) ends, and the interpreter that watches the read end; None
        #: where Tk cannot watch a file (then put() calls after()), and once released.
        self._pipe: tuple[int, int] | None = None
        self._tk: Any = None
        if hasattr(root.tk, "createfilehandler"):
            read_end, write_end = os.pipe()
            os.set_blocking(read_end, False)
            os.set_blocking(write_end, False)
            root.tk.createfilehandler(read_end, tkinter.READABLE, self._drain)
            self._pipe, self._tk = (read_end, write_end), root.tk
        root.bind("<Destroy>", self._destroyed, add="+")

    @property
    def callback(self) -> Callable[[Any], Any]:
        return self._callback

    @property
    def max_pending(self) -> int:
        return self._max_pending

    @property
    def dropped(self) -> int:
        """Messages dropped so far: over the bound, root destroyed, no main loop running
        (``after()`` only), or after :meth:`close`."""
        return self._dropped

    def _destroyed(self, event: Any) -> None:
        # Children's <Destroy> reach the toplevel's binding too; only root's own ends this.
        if event.widget is self._root:
            self._gone = True
            self._root = None
            self._release()

    def put(self, message: Any) -> None:
        """Hand ``message`` to the Tk thread (any thread; never raises)."""
        if self._gone or self._root is None:
            self._dropped += 1
            ratelog.warning("tk-gone", "TkSubscriber: its Tk root is destroyed or closed; a message was dropped")
            return
        with self._lock:
            pipe = self._pipe
            if pipe is not None:
                admitted = len(self._queue) < self._max_pending or is_final(message)
                if admitted:
                    self._queue.append(message)
                    if not self._woken:
                        self._woken = True
                        _wake(pipe[1])
                    return
                self._dropped += 1
                burst_starts, self._in_burst = not self._in_burst, True
        if pipe is None:
            self._put_after(message)
        elif burst_starts:
            ratelog.warning(
                "tk-overflow",
                "TkSubscriber: %d messages wait for the Tk thread (max_pending); dropping new ones until it catches up",
                self._max_pending,
            )

    def _put_after(self, message: Any) -> None:
        root = self._root
        if root is None:
            self._dropped += 1
            return
        try:
            root.after(0, self._run, message)
        except Exception as exc:  # TclError, RuntimeError("main thread is not in main loop")
            self._dropped += 1
            ratelog.warning("tk-after", "TkSubscriber: Tk refused after() (%s); a message was dropped", exc)

    def _drain(self, fd: int, mask: int) -> None:
        """On the Tk thread, when the pipe is readable: run the callback for each waiting
        message, in order (one at a time from the queue's head, so a callback that runs the
        event loop itself, ``update()``, keeps the order too)."""
        try:
            os.read(fd, 4096)
        except OSError:
            pass  # drained already (a nested drain), or closed: the queue says what is left
        with self._lock:
            self._woken = False  # a put() from now on writes again
        while not self._gone:
            with self._lock:
                if not self._queue:
                    self._in_burst = False  # caught up: the next overflow is logged again
                    break
                message = self._queue.popleft()
            self._run(message)
        if self._gone:
            self._release()

    def _run(self, message: Any) -> None:
        """On the Tk thread."""
        if self._gone:
            return
        try:
            self._callback(message)
        except Exception:  # the host's code: it must reach neither Tk's error report nor us
            ratelog.error("tk-callback", "TkSubscriber: callback %r raised", self._callback, exc_info=True)

    def _release(self) -> None:
        """On the Tk thread: stop watching the pipe and close it; what waited is dropped."""
        with self._lock:
            pipe, self._pipe = self._pipe, None
            self._dropped += len(self._queue)
            self._queue.clear()
        tk, self._tk = self._tk, None
        if pipe is None:
            return
        try:
            tk.deletefilehandler(pipe[0])
        except Exception:  # the interpreter is being torn down: nothing left to stop
            pass
        for end in pipe:
            os.close(end)

    def close(self) -> None:
        """Deliver nothing more, not even what was already handed over (any thread)."""
        self._gone = True
        self._root = None
        with self._lock:
            if self._pipe is not None:
                _wake(self._pipe[1])  # the Tk thread releases the pipe (only it may stop watching it)


def _wake(write_end: int) -> None:
    try:
        os.write(write_end, b"\0")
    except OSError:  # full (a wake-up is pending anyway)
        pass
