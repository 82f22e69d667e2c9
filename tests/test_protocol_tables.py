"""Every state of the sans-IO core is a table: the stages of a connect, the pause of legacy
delivery, the life of an entry. Each table is the documented one, each refuses a move it
does not list, and nothing in the core keeps a state as a bare string."""

from __future__ import annotations

import enum
import itertools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from test_protocol_session import (
    Driver,
    acknowledgment,
    initialize_after_a_refused_probe,
    put_subscriber,
    sent,
    uris,
)

from exmcp_actors._protocol._errors import SubscriberNotAlive
from exmcp_actors._protocol._events import ActivateListener, Effects, OpenFailed, ResyncDone, SubscriberDied
from exmcp_actors._protocol._filters import normalize_filter
from exmcp_actors._protocol._stages import StageClock
from exmcp_actors._protocol._state import (
    ENTRY_MOVES,
    ENTRY_STARTS,
    PAUSE_MOVES,
    STAGE_MOVES,
    EntryState,
    Pause,
    Phase,
    Stage,
    TransitionError,
    checked_move,
)

S, P, E = Stage, Pause, EntryState

#: The tables as their docstrings draw them, written out here so a changed table is noticed.
DOCUMENTED_STAGES: dict[Stage, set[Stage]] = {
    S.SETTLED: {S.OPEN},
    S.OPEN: {S.OPEN, S.DISCOVER, S.INITIALIZE},
    S.DISCOVER: {S.OPEN, S.INITIALIZE, S.SETTLED, S.RESUBSCRIBE, S.RELISTEN},
    S.INITIALIZE: {S.OPEN, S.DISCOVER, S.SETTLED, S.RESUBSCRIBE, S.RELISTEN},
    S.RESUBSCRIBE: {S.OPEN, S.SETTLED},
    S.RELISTEN: {S.OPEN, S.SETTLED},
    S.CONNECT: set(),
}
DOCUMENTED_PAUSES: dict[Pause, set[Pause]] = {
    P.NONE: {P.HELD},
    P.HELD: {P.FULL, P.NONE},
    P.FULL: {P.NONE},
}
DOCUMENTED_ENTRIES: dict[EntryState, set[EntryState]] = {
    E.PENDING: {E.ACTIVE, E.DEAD, E.RELISTENING},
    E.DEAD: set(),
    E.ACTIVE: {E.RELISTENING},
    E.AWAITING_ACK: {E.LIVE},
    E.LIVE: {E.RELISTENING, E.RESYNCING, E.LIVE},
    E.RELISTENING: {E.RELISTENING, E.RESYNCING, E.LIVE},
    E.RESYNCING: {E.RELISTENING, E.RESYNCING_AGAIN, E.LIVE},
    E.RESYNCING_AGAIN: {E.RELISTENING, E.RESYNCING_AGAIN, E.RESYNCING},
}
TABLES: list[tuple[Mapping[Any, frozenset[Any]], dict[Any, set[Any]]]] = [
    (STAGE_MOVES, DOCUMENTED_STAGES),
    (PAUSE_MOVES, DOCUMENTED_PAUSES),
    (ENTRY_MOVES, DOCUMENTED_ENTRIES),
]


def moves(documented: dict[Any, set[Any]], *, allowed: bool) -> list[Any]:
    states = list(documented)  # every state of its kind (each table covers them all)
    kind = type(states[0])
    return [
        pytest.param(current, to, id=f"{kind.__name__}:{current.value}->{to.value}")
        for current, to in itertools.product(states, states)
        if (to in documented[current]) is allowed
    ]


ALLOWED = [param for _, documented in TABLES for param in moves(documented, allowed=True)]
FORBIDDEN = [param for _, documented in TABLES for param in moves(documented, allowed=False)]


BY_KIND: dict[type[enum.Enum], Mapping[Any, frozenset[Any]]] = {
    Stage: STAGE_MOVES,
    Pause: PAUSE_MOVES,
    EntryState: ENTRY_MOVES,
}


def table_of(state: enum.Enum) -> Mapping[Any, frozenset[Any]]:
    return BY_KIND[type(state)]


@pytest.mark.parametrize(("table", "documented"), TABLES, ids=["stages", "pauses", "entries"])
def test_each_table_is_the_documented_one_and_covers_every_state(
    table: Mapping[Any, frozenset[Any]], documented: dict[Any, set[Any]]
) -> None:
    assert set(documented) == set(type(next(iter(documented))))
    assert {state: set(targets) for state, targets in table.items()} == documented


@pytest.mark.parametrize(("current", "to"), ALLOWED)
def test_every_move_a_table_lists_is_taken(current: enum.Enum, to: enum.Enum) -> None:
    assert checked_move(table_of(current), current, to) is to


@pytest.mark.parametrize(("current", "to"), FORBIDDEN)
def test_a_move_a_table_does_not_list_raises_a_transition_error(current: enum.Enum, to: enum.Enum) -> None:
    with pytest.raises(TransitionError, match=f"no move of {type(current).__name__} from '{current.value}'"):
        checked_move(table_of(current), current, to)


# -- the stage clock moves through its table ---------------------------------------------------


def test_the_stage_clock_refuses_a_stage_its_table_does_not_reach_and_keeps_the_one_in_hand() -> None:
    clock = StageClock(Effects(), 1.0)
    with pytest.raises(TransitionError):
        clock.enter(Stage.RESUBSCRIBE, 1)  # nothing resubscribes before a transport opened
    assert clock.settled
    with pytest.raises(TransitionError):
        clock.settle()  # settling what is settled is a bug
    clock.enter(Stage.OPEN, 1)
    with pytest.raises(TransitionError):
        clock.enter(Stage.CONNECT, 1)  # the overall deadline is never the stage in hand
    assert clock.stage is Stage.OPEN


def test_entering_the_stage_in_hand_again_for_the_same_connection_arms_nothing() -> None:
    effects = Effects()
    clock = StageClock(effects, 1.0)
    clock.enter(Stage.OPEN, 1)
    clock.enter(Stage.DISCOVER, 1)
    effects.take()
    clock.enter(Stage.DISCOVER, 1)
    assert effects.take() == ([], {})


def test_a_reconnect_whose_open_fails_again_opens_the_next_attempt_under_a_deadline_of_its_own() -> None:
    driver = Driver("legacy", attempts=5).connect()
    driver.lose()
    driver.feed(OpenFailed(driver.generation, ConnectionRefusedError("connection refused")))
    [armed] = driver.stage_timers
    assert armed.event.stage is Stage.OPEN and armed.event.generation == driver.generation
    driver.feed(armed.event)  # it counts: a hanging open is a failed attempt too
    assert driver.session.life.attempts == 2


# -- closing is the CLOSED phase ---------------------------------------------------------------


def test_a_stop_is_the_closed_phase_at_once_and_the_connection_ignores_what_comes_after() -> None:
    driver = Driver("legacy", reconnect=False).connect()
    driver.lose()
    life = driver.session.life
    assert life.closed and life.connection.phase is Phase.CLOSED
    assert driver.session.status == "disconnected"
    assert driver.opened() == []


# -- an entry's life ---------------------------------------------------------------------------


def walk(states: list[EntryState]) -> None:
    """Each step of an entry's life is a move its table lists."""
    assert states[0] in ENTRY_STARTS
    for current, to in itertools.pairwise(states):
        assert to in ENTRY_MOVES[current], f"{current} -> {to}"


def test_a_legacy_listener_walks_from_pending_to_active() -> None:
    driver = Driver("legacy").connect()
    handle, _ = driver.register(uris("file:///a"))
    entry = driver.session.registry.entries[handle.id]
    states = [entry.state]
    driver.feed(ActivateListener(handle.id))
    states.append(entry.state)
    assert states == [E.PENDING, E.ACTIVE]
    walk(states)


def test_a_registration_whose_subscriber_dies_walks_from_pending_to_dead() -> None:
    driver = Driver("legacy").connect()
    subscriber = put_subscriber()
    handle, _ = driver.register(uris("file:///a"), subscriber)
    entry = driver.session.registry.entries[handle.id]
    driver.feed(SubscriberDied(subscriber.key))
    assert entry.state is E.DEAD
    walk([E.PENDING, entry.state])


@pytest.mark.parametrize(
    ("kind", "life"),
    [
        ("subscription", [E.AWAITING_ACK, E.LIVE, E.RELISTENING, E.RESYNCING, E.LIVE]),
        ("watch", [E.AWAITING_ACK, E.LIVE, E.RELISTENING, E.LIVE]),
    ],
)
def test_a_modern_entry_walks_its_table_through_a_reconnect(kind: str, life: list[EntryState]) -> None:
    driver = Driver("modern").connect()
    flt = uris("file:///a")
    handle, _, listen = driver.subscribe(flt, kind=kind)
    entry = driver.session.registry.entries[handle.id]
    states = [entry.state]
    driver.frames(acknowledgment(listen["id"], flt))
    states.append(entry.state)
    driver.lose()
    states.append(entry.state)
    [relisten] = [message for message in sent(driver.reconnect()) if message["method"] == "subscriptions/listen"]
    driver.frames(acknowledgment(relisten["id"], flt))
    states.append(entry.state)
    if kind == "subscription":
        driver.feed(ResyncDone(handle.id, relisten["id"], {"resources": []}))
        states.append(entry.state)
    assert states == life
    walk(states)


def legacy_then_modern() -> Driver:
    """An auto-mode session whose peer speaks legacy first (it turns modern on the next connection)."""
    driver = Driver("auto")
    driver.start()
    initialize_after_a_refused_probe(driver)
    assert driver.session.era == "legacy"
    return driver


def test_a_watch_still_registering_when_the_peer_turns_modern_carries_on_modern_once_activated() -> None:
    driver = legacy_then_modern()
    watch, _ = driver.register(uris("file:///a"), kind="watch")
    entry = driver.session.registry.entries[watch.id]
    driver.lose()
    [listen] = [message for message in sent(driver.reconnect()) if message["method"] == "subscriptions/listen"]
    assert entry.state is E.RELISTENING and entry.era == "modern"
    driver.feed(ActivateListener(watch.id))  # the registering caller finishes: nothing legacy is left to do
    assert entry.state is E.RELISTENING
    assert watch.id not in driver.session.registry.index
    driver.frames(acknowledgment(listen["id"], uris("file:///a")))
    assert entry.state is E.LIVE
    walk([E.PENDING, E.RELISTENING, E.LIVE])


def test_a_watch_whose_subscriber_died_while_registering_is_not_listened_for_when_the_peer_turns_modern() -> None:
    driver = legacy_then_modern()
    subscriber = put_subscriber()
    watch, _ = driver.register(uris("file:///a"), subscriber, kind="watch")
    driver.feed(SubscriberDied(subscriber.key))
    driver.lose()
    effects = driver.reconnect()
    assert [message for message in sent(effects) if message["method"] == "subscriptions/listen"] == []
    assert watch.id not in driver.session.registry.entries
    with pytest.raises(SubscriberNotAlive):
        driver.feed(ActivateListener(watch.id))


def test_an_entry_moves_only_through_its_table() -> None:
    driver = Driver("legacy").connect()
    entry = driver.session.registry.entries[driver.listener(uris("file:///a")).id]
    with pytest.raises(TransitionError):
        entry.to(E.PENDING)  # an active listener never goes back to registering
    with pytest.raises(AttributeError):
        entry.state = E.DEAD  # type: ignore[misc]
    assert entry.state is E.ACTIVE


def test_an_entry_starts_only_in_a_starting_state() -> None:
    driver = Driver("legacy").connect()
    subscriber = put_subscriber()
    handle, _ = driver.register(uris("file:///a"), subscriber)
    with pytest.raises(TransitionError):
        driver.session.registry.add(
            handle, "listener", "legacy", normalize_filter(uris("file:///a")), subscriber, E.LIVE
        )


# -- no state left as a string -----------------------------------------------------------------

PROTOCOL = Path(__file__).resolve().parent.parent / "exmcp_actors" / "_protocol"
STRING_STATE = re.compile(r"""state\s*(==|!=|=)\s*["']|state\s+(not\s+)?in\s+\(\s*["']|\.to\(\s*["']""")
#: A state's name in quotes, other than as a dict key (``inspect()`` counts "pending" requests).
STATE_WORDS = re.compile(r"""["'](pending|dead|active|awaiting_ack|live|resyncing|relistening)["'](?!\s*:)""")


def test_no_state_in_the_core_is_a_bare_string() -> None:
    found = []
    for path in sorted(PROTOCOL.glob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if STRING_STATE.search(code) or (path.name != "_state.py" and STATE_WORDS.search(code)):
                found.append(f"{path.name}:{number}: {line.strip()}")
    assert found == []
