"""A subscriber that is a Qt object emitting a signal per message (PySide6, imported on first use)."""

from __future__ import annotations

from typing import Any

from ._common import ratelog

#: The QObject class, built by the first QtSubscriber(): importing this module imports no Qt.
_qt_class: type[Any] | None = None


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
                self.message.emit(message)
            except RuntimeError as exc:  # the C++ object was deleted under us
                self.dropped += 1
                ratelog.warning("qt-deleted", "QtSubscriber: its Qt object is gone (%s); a message was dropped", exc)

    class QtSubscriberObject(_Emitter, QObject):
        message = Signal(object)

        def __init__(self) -> None:
            super().__init__()
            self.dropped = 0

    QtSubscriberObject.__name__ = QtSubscriberObject.__qualname__ = "QtSubscriber"
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
