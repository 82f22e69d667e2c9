"""A subscriber that is a Qt object emitting a signal per message (PySide6, imported on first use)."""

from __future__ import annotations

import ctypes
import sys
import weakref
from typing import Any, Final

from .._delivery._bound import check_max_pending
from ._common import Backlog, ratelog

#: The QObject class, built by the first QtSubscriber(): importing this module imports no Qt.
_qt_class: type[Any] | None = None
#: Emits of the probe that tells whether ``emit()`` takes a reference to True away.
_PROBES: Final = 16


def _give_back_true() -> None:
    """Add the reference to True that a faulty ``emit()`` took away."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(True))


def _emit_takes_true(cls: type[Any]) -> bool:
    """Whether ``cls().message.emit()`` returns True without owning a reference to it.

    PySide6 6.12 does: each call takes one reference to True away, and on a CPython whose bools
    are not immortal (3.11) the interpreter aborts (``bool_dealloc``) a few hundred messages
    later. Measured, not assumed from a version, so a fixed PySide6 (or an immortal True)
    costs nothing; the probe's own losses are given back.
    """
    probe = cls(1_000_000)
    relay = probe._relay
    relay.relay.disconnect(relay._take)  # the probe's emits reach nothing
    before = sys.getrefcount(True)
    for _ in range(_PROBES):
        relay.relay.emit(None)
    takes = before - sys.getrefcount(True) >= _PROBES // 2
    if takes:
        for _ in range(_PROBES):
            _give_back_true()
    return takes


def _build() -> type[Any]:
    global _qt_class
    if _qt_class is not None:
        return _qt_class
    try:
        import shiboken6
        from PySide6.QtCore import QObject, Signal, Slot
    except ImportError as exc:
        raise ImportError(
            f"QtSubscriber needs PySide6 (pip install PySide6-Essentials), which could not be imported: {exc}"
        ) from exc

    def emit(signal: Any, message: Any) -> None:
        if signal.emit(message) is True and _takes_true:
            _give_back_true()

    def dropped_for_deletion(backlog: Backlog, why: str) -> None:
        backlog.drop()
        ratelog.warning("qt-deleted", "QtSubscriber: its Qt object is gone (%s); a message was dropped", why)

    class _Relay(QObject):
        """Carries put()'s messages to the subscriber's thread. An object of its own, which
        the host never deletes: a library thread's emit of a signal of the subscriber itself
        could run while the host deletes it (shiboken6.delete, deleteLater) on its thread, a
        crash; this one lives as long as the subscriber's Python object, which put() holds."""

        relay = Signal(object)

        def __init__(self, subscriber: Any, backlog: Backlog) -> None:
            super().__init__()
            self._subscriber = weakref.ref(subscriber)
            self._backlog = backlog
            # Queued when put() runs on another thread (Qt's auto connection), so the backlog is
            # counted down where the messages are taken, and put() never waits for that thread.
            self.relay.connect(self._take)

        @Slot(object)
        def _take(self, message: Any) -> None:
            """On the subscriber's thread, where it is deleted too: emit ``message`` if it stands."""
            self._backlog.taken()
            subscriber = self._subscriber()
            if subscriber is None or not shiboken6.isValid(subscriber):
                dropped_for_deletion(self._backlog, "deleted while the message waited for its thread")
                return
            emit(subscriber.message, message)

    class _Emitter:
        """``put()``: what the library calls, on its own thread."""

        message: Any
        _relay: _Relay
        _backlog: Backlog

        def put(self, message: Any) -> None:
            """Hand ``message`` to this object's thread (any thread; never blocks, never
            raises): queued by Qt to that thread, where ``message`` is emitted."""
            if not self._backlog.admit(message):
                return
            try:
                emit(self._relay.relay, message)
            except RuntimeError as exc:  # the relay's C++ object was deleted (by a host reaching in)
                self._backlog.taken()
                dropped_for_deletion(self._backlog, str(exc))

        @property
        def dropped(self) -> int:
            return self._backlog.dropped

        @property
        def pending(self) -> int:
            return self._backlog.pending

        @property
        def max_pending(self) -> int:
            return self._backlog.max_pending

    class QtSubscriberObject(_Emitter, QObject):
        message = Signal(object)

        def __init__(self, max_pending: int) -> None:
            super().__init__()
            self._backlog = Backlog("QtSubscriber", max_pending)
            self._relay = _Relay(self, self._backlog)

    QtSubscriberObject.__name__ = QtSubscriberObject.__qualname__ = "QtSubscriber"
    _takes_true = _emit_takes_true(QtSubscriberObject)
    _qt_class = QtSubscriberObject
    return QtSubscriberObject


class _BuiltOnFirstUse(type):
    """Makes ``QtSubscriber()`` build the QObject class (importing PySide6) at its first call,
    and ``isinstance(obj, QtSubscriber)`` recognize that class's objects."""

    def __call__(cls, *, max_pending: int = 10_000) -> Any:
        bound = check_max_pending(max_pending)  # before PySide6 is imported: a bad value says so first
        return _build()(bound)

    def __instancecheck__(cls, obj: Any) -> bool:
        return _qt_class is not None and isinstance(obj, _qt_class)


class QtSubscriber(metaclass=_BuiltOnFirstUse):
    """A ``put()`` subscriber that is a ``QObject`` with the signal ``message = Signal(object)``.

    ``QtSubscriber(*, max_pending=10_000)``. ``put()`` (the library's thread) hands each message
    to the object's own thread through a queued signal, and never waits for that thread; there
    ``message`` is emitted, so a slot of an object living in that thread (the GUI's) runs
    there, one message after another. At most ``max_pending`` messages wait for that thread;
    past that a new one is dropped and counted in ``dropped`` with one warning per burst (a
    handle's closing message never is). Construct it on the thread whose objects should own it
    (the GUI thread); PySide6 is imported then, and its absence is an ImportError naming it.
    ``dropped`` also counts messages put after the Qt object was deleted (dropped with a
    rate-limited log). A slot that raises is Qt's to report and hurts no other subscriber.
    """

    message: Any
    dropped: int
    pending: int
    max_pending: int

    def put(self, message: Any) -> None:
        """Hand ``message`` over (declared for readers and type checkers: the built class's runs)."""
