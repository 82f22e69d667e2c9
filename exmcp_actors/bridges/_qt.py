"""A subscriber that is a Qt object emitting a signal per message (PySide6, imported on first use)."""

from __future__ import annotations

import ctypes
import sys
from typing import Any, Final

from ._common import ratelog

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
    probe = cls()
    before = sys.getrefcount(True)
    for _ in range(_PROBES):
        probe.message.emit(None)
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
        from PySide6.QtCore import QObject, Signal
    except ImportError as exc:
        raise ImportError(
            f"QtSubscriber needs PySide6 (pip install PySide6-Essentials), which could not be imported: {exc}"
        ) from exc

    class _Emitter:
        """``put()``: what the library calls, on its own thread."""

        message: Any
        dropped: int

        def put(self, message: Any) -> None:
            """Emit ``message`` (any thread; never raises). A receiver in another thread gets it
            queued to that thread by Qt's default (auto) connection."""
            try:
                if self.message.emit(message) is True and _takes_true:
                    _give_back_true()
            except RuntimeError as exc:  # the C++ object was deleted under us
                self.dropped += 1
                ratelog.warning("qt-deleted", "QtSubscriber: its Qt object is gone (%s); a message was dropped", exc)

    class QtSubscriberObject(_Emitter, QObject):
        message = Signal(object)

        def __init__(self) -> None:
            super().__init__()
            self.dropped = 0

    QtSubscriberObject.__name__ = QtSubscriberObject.__qualname__ = "QtSubscriber"
    _takes_true = _emit_takes_true(QtSubscriberObject)
    _qt_class = QtSubscriberObject
    return QtSubscriberObject


class _BuiltOnFirstUse(type):
    """Makes ``QtSubscriber()`` build the QObject class (importing PySide6) at its first call,
    and ``isinstance(obj, QtSubscriber)`` recognize that class's objects."""

    def __call__(cls) -> Any:
        return _build()()

    def __instancecheck__(cls, obj: Any) -> bool:
        return _qt_class is not None and isinstance(obj, _qt_class)


class QtSubscriber(metaclass=_BuiltOnFirstUse):
    """A ``put()`` subscriber that is a ``QObject`` with the signal ``message = Signal(object)``.

    ``put()`` emits ``message`` from the library's thread; a slot of an object living in
    another thread (the GUI's) runs there, queued by Qt's default connection. Construct it
    on the thread whose objects should own it (the GUI thread); PySide6 is imported then,
    and its absence is an ImportError naming it. ``dropped`` counts messages emitted after
    the Qt object was deleted (dropped with a rate-limited log). A slot that raises is Qt's
    to report and hurts no other subscriber.
    """

    message: Any
    dropped: int

    def put(self, message: Any) -> None:
        """Emit ``message`` (declared for readers and type checkers: the built class's runs)."""
