"""The connection state table (sans-IO): every phase of a connection and every move
between them, in one place.

A connection is opened, negotiates an era, serves, and after a loss is reopened,
until it is closed for good::

    OPENING ─────────┬─probe──────> PROBING ──negotiated──> READY ──lost──> RECONNECTING
       │             └─initialize─> INITIALIZING ─negotiated─┘                 │
       │                 (PROBING ─fallback─> INITIALIZING ─reprobe─> PROBING)  │
       │   RECONNECTING ─probe / initialize─> (as from OPENING) <───────────────┘
       │   OPENING, PROBING, INITIALIZING, RECONNECTING ─retry─> RECONNECTING
       └─> any phase ─close─> CLOSED

``retry`` is an attempt that failed (the transport would not open, the handshake
failed, the connection dropped before it was ready) while attempts are left; the
first connect never retries (``connect()`` reports its failure). What decides
between two allowed moves (the protocol mode, attempts left) lives in the
session; which moves exist lives here, and a move not in the table is a bug in
this library (:class:`TransitionError`), never the peer's fault.

Whose fault: the peer's misbehaviour is logged and skipped, or reported to the
host as :class:`~exmcp_actors.ProtocolError`; the host's misuse is an exception
that names what was wrong (``ValueError``, ``TypeError``, the library's
``Error`` subclasses); our own is :class:`TransitionError`.
"""

from __future__ import annotations

import enum
from typing import Final

from ._errors import TransitionError  # defined with the other errors; importable from here too


class Phase(enum.Enum):
    """Where a connection stands."""

    OPENING = "opening"  # the first transport open
    PROBING = "probing"  # server/discover sent (auto, modern)
    INITIALIZING = "initializing"  # initialize sent (legacy, or the auto fallback)
    READY = "ready"
    RECONNECTING = "reconnecting"  # lost or failed: waiting out the backoff, then reopening
    CLOSED = "closed"


class Move(enum.Enum):
    """What moves a connection from one phase to another."""

    PROBE = "probe"
    INITIALIZE = "initialize"
    NEGOTIATED = "negotiated"
    LOST = "lost"
    RETRY = "retry"
    CLOSE = "close"


_NOT_READY: Final = (Phase.OPENING, Phase.PROBING, Phase.INITIALIZING, Phase.RECONNECTING)

#: (phase, move) -> next phase. The whole life of a connection.
TRANSITIONS: Final[dict[tuple[Phase, Move], Phase]] = {
    (Phase.OPENING, Move.PROBE): Phase.PROBING,
    (Phase.OPENING, Move.INITIALIZE): Phase.INITIALIZING,
    (Phase.RECONNECTING, Move.PROBE): Phase.PROBING,
    (Phase.RECONNECTING, Move.INITIALIZE): Phase.INITIALIZING,
    (Phase.PROBING, Move.INITIALIZE): Phase.INITIALIZING,  # auto: no modern answer, fall back
    (Phase.INITIALIZING, Move.PROBE): Phase.PROBING,  # -32022: a late probe locked the peer modern
    (Phase.PROBING, Move.NEGOTIATED): Phase.READY,
    (Phase.INITIALIZING, Move.NEGOTIATED): Phase.READY,
    (Phase.READY, Move.LOST): Phase.RECONNECTING,
    **{(phase, Move.RETRY): Phase.RECONNECTING for phase in _NOT_READY},
    **{(phase, Move.CLOSE): Phase.CLOSED for phase in Phase},
}


class ConnectionState:
    """One connection's phase, moved only through :data:`TRANSITIONS`."""

    __slots__ = ("phase", "was_ready")

    def __init__(self) -> None:
        self.phase = Phase.OPENING
        #: Whether the connection has been READY once: later failures reconnect
        #: instead of failing ``connect()``.
        self.was_ready = False

    def move(self, move: Move) -> Phase:
        """Take ``move`` from the current phase; raises TransitionError if the table has no such move."""
        try:
            self.phase = TRANSITIONS[self.phase, move]
        except KeyError:
            raise TransitionError(f"no move {move.value!r} from the {self.phase.value} phase") from None
        if self.phase is Phase.READY:
            self.was_ready = True
        return self.phase

    @property
    def status(self) -> str:
        """The host's word for the phase: connecting, ready, reconnecting or disconnected."""
        if self.phase is Phase.READY:
            return "ready"
        if self.phase is Phase.CLOSED:
            return "disconnected"
        return "reconnecting" if self.was_ready else "connecting"
