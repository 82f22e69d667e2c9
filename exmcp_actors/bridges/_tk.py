"""A subscriber whose callback runs on the Tk main loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._common import check_callable, ratelog


class TkSubscriber:
    """A ``put()`` subscriber that runs ``callback(message)`` on ``root``'s Tk thread.

    The library's thread calls nothing of Tk but ``root.after(0, ...)``, which is safe from
    another thread only in a Tcl built with threads (the usual build; anything else raises
    ValueError here). Tkinter carries that call over to the thread running ``mainloop()`` and
    waits until that thread takes it, so a busy Tk thread slows this subscriber's deliveries
    (no other subscriber's). While no ``mainloop()`` runs, tkinter makes each call wait up to
    a second, then fails: the message is dropped with a rate-limited log. Once ``root`` is
    destroyed (seen through its ``<Destroy>`` event) or :meth:`close` was called, messages are
    dropped with no call to Tk at all. A callback that raises is logged (rate-limited) and
    called again for the next message.

    Construct it on the Tk thread: it binds ``<Destroy>`` on ``root``.
    """

    def __init__(self, root: Any, callback: Callable[[Any], Any]) -> None:
        import tkinter  # here, not at import: a Python built without Tk still has the other bridges

        if not isinstance(root, tkinter.Misc):
            raise TypeError(f"root must be a tkinter widget (tkinter.Tk), got {type(root).__name__} {root!r}")
        check_callable("callback", callback)
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
        root.bind("<Destroy>", self._destroyed, add="+")

    @property
    def callback(self) -> Callable[[Any], Any]:
        return self._callback

    @property
    def dropped(self) -> int:
        """Messages dropped so far: root destroyed, no main loop running, or after :meth:`close`."""
        return self._dropped

    def _destroyed(self, event: Any) -> None:
        # Children's <Destroy> reach the toplevel's binding too; only root's own ends this.
        if event.widget is self._root:
            self._gone = True
            self._root = None

    def put(self, message: Any) -> None:
        """Schedule ``callback(message)`` on the Tk thread (any thread; never raises)."""
        root = self._root
        if self._gone or root is None:
            self._dropped += 1
            ratelog.warning("tk-gone", "TkSubscriber: its Tk root is destroyed or closed; a message was dropped")
            return
        try:
            root.after(0, self._run, message)
        except Exception as exc:  # TclError, RuntimeError("main thread is not in main loop")
            self._dropped += 1
            ratelog.warning("tk-after", "TkSubscriber: Tk refused after() (%s); a message was dropped", exc)

    def _run(self, message: Any) -> None:
        """On the Tk thread."""
        if self._gone:
            return
        try:
            self._callback(message)
        except Exception:  # the host's code: it must reach neither Tk's error report nor us
            ratelog.error("tk-callback", "TkSubscriber: callback %r raised", self._callback, exc_info=True)

    def close(self) -> None:
        """Deliver nothing more, not even what was already scheduled (any thread)."""
        self._gone = True
        self._root = None
