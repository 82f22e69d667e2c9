"""Every state of the sans-IO core, each in one table, with every move between its states.

- :class:`Phase` (:data:`TRANSITIONS`): where a connection stands.
- :class:`Stage` (:data:`STAGE_MOVES`): which step of a connect or reconnect runs under a
  deadline (the deadlines themselves: ``_stages``).
- :class:`Pause` (:data:`PAUSE_MOVES`): whether legacy delivery is held across a reconnect
  (the holding itself: ``_listeners``).
- :class:`EntryState` (:data:`ENTRY_MOVES`): where one listener, subscription or watch is in
  its life (the entries: ``_registry``).

Each table is data; each state moves only through it, and a move the table does not list
raises :class:`TransitionError`.

The connection phases. A connection is opened, negotiates an era, serves, and after a loss
is reopened, until it is closed for good::

    OPENING ─────────┬─probe──────> PROBING ──negotiated──> READY ──lost──> RECONNECTING
       │             └─initialize─> INITIALIZING ─negotiated─┘                 │
       │                 (PROBING ─fallback─> INITIALIZING ─reprobe─> PROBING)  │
       │   RECONNECTING ─probe / initialize─> (as from OPENING) <───────────────┘
       │   OPENING, PROBING, INITIALIZING, RECONNECTING ─retry─> RECONNECTING
       └─> any phase ─close─> CLOSED

``retry`` is an attempt that failed (the transport would not open, the handshake
failed, the connection dropped before it was ready) while attempts are left; the
first connect never retries (``connect()`` reports its failure). ``close`` is taken
the moment a stop is decided: from then on the client is disconnected, and every
input of the connection is ignored, whatever arrives before the shell has stopped
(so no CLOSING phase: nothing differs between "stop asked" and "closed"). What
decides between two allowed moves (the protocol mode, attempts left) lives in the
session; which moves exist lives here, and a move not in a table is a bug in this
library (:class:`TransitionError`), never the peer's fault.

Whose fault: the peer's misbehaviour is logged and skipped, or reported to the
host as :class:`~exmcp_actors.ProtocolError`; the host's misuse is an exception
that names what was wrong (``ValueError``, ``TypeError``, the library's
``Error`` subclasses); our own is :class:`TransitionError`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final, TypeVar

from ._errors import TransitionError


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


S = TypeVar("S", bound=enum.Enum)


def checked_move(table: Mapping[S, frozenset[S]], current: S, to: S) -> S:
    """``to``, if ``table`` allows the move from ``current`` to it; raises TransitionError if not."""
    if to not in table[current]:
        kind = type(current).__name__
        raise TransitionError(f"no move of {kind} from {current.value!r} to {to.value!r}")
    return to


# -- the stages of a connect or reconnect ----------------------------------------------------


class Stage(enum.Enum):
    """The step of a connect or reconnect in hand, each under a deadline (see ``_stages``)."""

    SETTLED = "settled"  # none: before the first connect, or once a connection settled
    OPEN = "open"  # the transport opens
    DISCOVER = "discover"  # server/discover is answered
    INITIALIZE = "initialize"  # initialize is answered
    RESUBSCRIBE = "resubscribe"  # legacy reconnect: every held URI is subscribed again
    RELISTEN = "relisten"  # modern reconnect: every dropped subscription is acknowledged again
    #: Never the stage in hand: the label of the first connect's overall deadline.
    CONNECT = "connect"


#: stage -> the stages it may move to::
#:
#:     SETTLED ──> OPEN ─┬─> DISCOVER ───┬─> SETTLED       (a first connect, or nothing to redo)
#:                       └─> INITIALIZE ─┼─> RESUBSCRIBE ──> SETTLED   (legacy reconnect)
#:           (DISCOVER <─> INITIALIZE:   └─> RELISTEN ─────> SETTLED   (modern reconnect)
#:            the fallback, the reprobe)
#:     every stage in hand ──> OPEN   (an attempt failed or the connection dropped: the next opens)
#:
#: Entering the stage in hand again for the same connection is no move (each answer of a
#: handshake re-enters its stage); OPEN -> OPEN is the next attempt, under a deadline of its own.
STAGE_MOVES: Final[dict[Stage, frozenset[Stage]]] = {
    Stage.SETTLED: frozenset({Stage.OPEN}),
    Stage.OPEN: frozenset({Stage.OPEN, Stage.DISCOVER, Stage.INITIALIZE}),
    **{
        handshake: frozenset({Stage.OPEN, other, Stage.SETTLED, Stage.RESUBSCRIBE, Stage.RELISTEN})
        for handshake, other in ((Stage.DISCOVER, Stage.INITIALIZE), (Stage.INITIALIZE, Stage.DISCOVER))
    },
    Stage.RESUBSCRIBE: frozenset({Stage.OPEN, Stage.SETTLED}),
    Stage.RELISTEN: frozenset({Stage.OPEN, Stage.SETTLED}),
    Stage.CONNECT: frozenset(),
}


# -- the pause of legacy delivery across a reconnect -----------------------------------------


class Pause(enum.Enum):
    """Whether legacy notifications are held across a reconnect (see ``_listeners``)."""

    NONE = "none"  # delivered as they come
    HELD = "held"  # a legacy connection was lost: held, in wire order, below the bound
    FULL = "full"  # held at the bound: change signals coalesce, a listener that misses anything else overflows


#: pause -> the pauses it may move to::
#:
#:     NONE ──lost──> HELD ──the backlog reached its bound──> FULL
#:      ^              │                                       │
#:      └───resumed────┴───────────────────────────────────────┘
#:
#: A loss while held changes nothing (the pause goes on until the resubscription reports),
#: and resuming what is not held is no move.
PAUSE_MOVES: Final[dict[Pause, frozenset[Pause]]] = {
    Pause.NONE: frozenset({Pause.HELD}),
    Pause.HELD: frozenset({Pause.FULL, Pause.NONE}),
    Pause.FULL: frozenset({Pause.NONE}),
}


# -- the life of one listener, subscription or watch -----------------------------------------


class EntryState(enum.Enum):
    """Where one entry of the registry is in its life (see ``_registry``)."""

    # legacy
    PENDING = "pending"  # registered; the worker subscribes its URIs; not delivered to yet
    DEAD = "dead"  # its subscriber died while it registered: its caller releases what it acquired
    ACTIVE = "active"  # indexed and delivered to
    # modern
    AWAITING_ACK = "awaiting_ack"  # listen sent; the host waits for the acknowledgment
    LIVE = "live"  # acknowledged: delivers the events inside the acknowledged filter
    RELISTENING = "relistening"  # its stream dropped: waiting to be acknowledged again
    RESYNCING = "resyncing"  # acknowledged again: the snapshot is refetched off the actor
    #: Acknowledged again while its snapshot was being fetched: that fetch is stale, and one
    #: more follows it (one fetch in flight per entry, however often the server acknowledges).
    RESYNCING_AGAIN = "resyncing_again"


#: The states an entry is created in (it leaves the table when it is forgotten).
ENTRY_STARTS: Final = frozenset({EntryState.PENDING, EntryState.ACTIVE, EntryState.AWAITING_ACK})

#: state -> the states it may move to::
#:
#:     legacy   PENDING ──activated──> ACTIVE
#:                 └──its subscriber died──> DEAD
#:     modern   AWAITING_ACK ──acknowledged──> LIVE ──stream dropped──> RELISTENING
#:              AWAITING_ACK or RELISTENING ──no listen (-32601)──> LIVE   (a watch, hearing nothing)
#:              RELISTENING ──acknowledged──> RESYNCING ──snapshot──> LIVE   (a subscription)
#:              RELISTENING ──acknowledged──> LIVE                          (a watch: no snapshot)
#:     PENDING or ACTIVE ──the peer turned modern──> RELISTENING   (a watch carries on modern)
#:
#: Besides: a stream that drops again before it is live re-listens again (RELISTENING,
#: RESYNCING or RESYNCING_AGAIN -> RELISTENING), and an acknowledgment that comes again
#: starts over from it (LIVE -> RESYNCING for a subscription, LIVE -> LIVE for a watch). One
#: that comes while the snapshot is fetched waits for that fetch (RESYNCING ->
#: RESYNCING_AGAIN, however many come), whose stale snapshot is then fetched once more
#: (RESYNCING_AGAIN -> RESYNCING): a server repeating its acknowledgment costs one fetch in
#: flight, not a thread and a request for each.
ENTRY_MOVES: Final[dict[EntryState, frozenset[EntryState]]] = {
    EntryState.PENDING: frozenset({EntryState.ACTIVE, EntryState.DEAD, EntryState.RELISTENING}),
    EntryState.DEAD: frozenset(),
    EntryState.ACTIVE: frozenset({EntryState.RELISTENING}),
    EntryState.AWAITING_ACK: frozenset({EntryState.LIVE}),
    EntryState.LIVE: frozenset({EntryState.RELISTENING, EntryState.RESYNCING, EntryState.LIVE}),
    EntryState.RELISTENING: frozenset({EntryState.RELISTENING, EntryState.RESYNCING, EntryState.LIVE}),
    EntryState.RESYNCING: frozenset({EntryState.RELISTENING, EntryState.RESYNCING_AGAIN, EntryState.LIVE}),
    EntryState.RESYNCING_AGAIN: frozenset({EntryState.RELISTENING, EntryState.RESYNCING_AGAIN, EntryState.RESYNCING}),
}

#: Entries their host never had delivered to (a registration or an acknowledgment under way):
#: no closing message reaches them.
UNANNOUNCED: Final = frozenset({EntryState.PENDING, EntryState.DEAD, EntryState.AWAITING_ACK})
#: Modern entries that hold their events until they are live (again).
HOLDING: Final = frozenset(
    {EntryState.AWAITING_ACK, EntryState.RELISTENING, EntryState.RESYNCING, EntryState.RESYNCING_AGAIN}
)
#: Modern entries whose snapshot is being fetched.
FETCHING: Final = frozenset({EntryState.RESYNCING, EntryState.RESYNCING_AGAIN})
#: Legacy entries whose registration is under way: not their host's to remove yet.
REGISTERING: Final = frozenset({EntryState.PENDING, EntryState.DEAD})
