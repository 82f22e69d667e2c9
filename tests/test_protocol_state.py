"""The connection state table, sans-IO: every move, every refusal, and the host's status words."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import pytest

from exmcp_actors._protocol._state import TRANSITIONS, ConnectionState, Move, Phase, TransitionError

P, M = Phase, Move

#: The table as the module docstring draws it, one line per phase, written out here so a
#: changed table is noticed.
BY_PHASE: dict[Phase, dict[Move, Phase]] = {
    P.OPENING: {M.PROBE: P.PROBING, M.INITIALIZE: P.INITIALIZING, M.RETRY: P.RECONNECTING, M.CLOSE: P.CLOSED},
    P.PROBING: {M.INITIALIZE: P.INITIALIZING, M.NEGOTIATED: P.READY, M.RETRY: P.RECONNECTING, M.CLOSE: P.CLOSED},
    P.INITIALIZING: {M.PROBE: P.PROBING, M.NEGOTIATED: P.READY, M.RETRY: P.RECONNECTING, M.CLOSE: P.CLOSED},
    P.READY: {M.LOST: P.RECONNECTING, M.CLOSE: P.CLOSED},
    P.RECONNECTING: {M.PROBE: P.PROBING, M.INITIALIZE: P.INITIALIZING, M.RETRY: P.RECONNECTING, M.CLOSE: P.CLOSED},
    P.CLOSED: {M.CLOSE: P.CLOSED},
}
DOCUMENTED: dict[tuple[Phase, Move], Phase] = {
    (phase, move): to for phase, moves in BY_PHASE.items() for move, to in moves.items()
}

READY_ONCE = [M.PROBE, M.NEGOTIATED]

#: Allowed paths into each phase: before the first READY, and (where the phase recurs) after it.
PATHS: dict[Phase, list[list[Move]]] = {
    P.OPENING: [[]],
    P.PROBING: [[M.PROBE], [M.RETRY, M.PROBE], [*READY_ONCE, M.LOST, M.PROBE]],
    P.INITIALIZING: [[M.INITIALIZE], [M.PROBE, M.INITIALIZE], [*READY_ONCE, M.LOST, M.INITIALIZE]],
    P.READY: [READY_ONCE, [M.INITIALIZE, M.NEGOTIATED], [*READY_ONCE, M.LOST, M.INITIALIZE, M.NEGOTIATED]],
    P.RECONNECTING: [[M.RETRY], [M.PROBE, M.RETRY], [*READY_ONCE, M.LOST], [*READY_ONCE, M.LOST, M.PROBE, M.RETRY]],
    P.CLOSED: [[M.CLOSE], [*READY_ONCE, M.CLOSE]],
}

START_POINTS = [(phase, path) for phase, paths in PATHS.items() for path in paths]


def walked(path: list[Move]) -> ConnectionState:
    state = ConnectionState()
    for move in path:
        state.move(move)
    return state


def path_id(value: object) -> str | None:
    """A test id for a path of moves (other parameters keep pytest's own ids)."""
    if not isinstance(value, list):
        return None
    return "-".join(move.value for move in value) or "fresh"


def test_the_table_is_the_documented_one() -> None:
    assert dict(TRANSITIONS) == DOCUMENTED


def test_a_new_connection_is_opening_and_has_never_been_ready() -> None:
    state = ConnectionState()
    assert state.phase is P.OPENING
    assert not state.was_ready


@pytest.mark.parametrize(("phase", "path"), START_POINTS, ids=[path_id(path) for _, path in START_POINTS])
def test_every_path_used_here_lands_in_its_phase(phase: Phase, path: list[Move]) -> None:
    assert walked(path).phase is phase


def from_every_path(pairs: Iterable[tuple[Phase, Move]]) -> list[Any]:
    """(phase, move, path) for each pair and each path into its phase, named by path and move."""
    return [
        pytest.param(phase, move, path, id=f"{path_id(path)}+{move.value}")
        for phase, move in pairs
        for path in PATHS[phase]
    ]


@pytest.mark.parametrize(("phase", "move", "path"), from_every_path(DOCUMENTED))
def test_every_allowed_move_lands_where_the_table_says(phase: Phase, move: Move, path: list[Move]) -> None:
    state = walked(path)
    assert state.move(move) is DOCUMENTED[phase, move]
    assert state.phase is DOCUMENTED[phase, move]


FORBIDDEN = [(phase, move) for phase, move in itertools.product(Phase, Move) if (phase, move) not in DOCUMENTED]


@pytest.mark.parametrize(("phase", "move", "path"), from_every_path(FORBIDDEN))
def test_a_move_not_in_the_table_raises_and_leaves_the_phase_alone(phase: Phase, move: Move, path: list[Move]) -> None:
    state = walked(path)
    was_ready = state.was_ready
    with pytest.raises(TransitionError, match=f"no move '{move.value}' from the {phase.value} phase"):
        state.move(move)
    assert state.phase is phase
    assert state.was_ready is was_ready


def test_a_transition_error_is_the_librarys_bug_not_a_peer_error() -> None:
    assert issubclass(TransitionError, RuntimeError)


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ([], "connecting"),
        ([M.PROBE], "connecting"),
        ([M.INITIALIZE], "connecting"),
        ([M.PROBE, M.INITIALIZE], "connecting"),
        ([M.RETRY], "connecting"),
        ([M.RETRY, M.PROBE], "connecting"),
        (READY_ONCE, "ready"),
        ([M.CLOSE], "disconnected"),
        ([M.RETRY, M.CLOSE], "disconnected"),
    ],
    ids=path_id,
)
def test_the_status_before_the_first_ready_follows_the_moves(path: list[Move], status: str) -> None:
    state = walked(path)
    assert state.status == status
    assert state.was_ready is (status == "ready")


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ([M.LOST], "reconnecting"),
        ([M.LOST, M.PROBE], "reconnecting"),
        ([M.LOST, M.INITIALIZE], "reconnecting"),
        ([M.LOST, M.PROBE, M.INITIALIZE], "reconnecting"),
        ([M.LOST, M.RETRY], "reconnecting"),
        ([M.LOST, M.PROBE, M.NEGOTIATED], "ready"),
        ([M.CLOSE], "disconnected"),
        ([M.LOST, M.CLOSE], "disconnected"),
    ],
    ids=path_id,
)
def test_the_status_after_the_first_ready_follows_the_moves(path: list[Move], status: str) -> None:
    state = walked([*READY_ONCE, *path])
    assert state.status == status
    assert state.was_ready


@pytest.mark.parametrize(("phase", "path"), START_POINTS, ids=[path_id(path) for _, path in START_POINTS])
def test_close_ends_every_phase_for_good(phase: Phase, path: list[Move]) -> None:
    state = walked(path)
    assert state.move(M.CLOSE) is P.CLOSED
    assert state.status == "disconnected"
    assert state.move(M.CLOSE) is P.CLOSED  # closing twice is harmless
    for move in Move:
        if move is not M.CLOSE:
            with pytest.raises(TransitionError):
                state.move(move)
    assert state.phase is P.CLOSED


def test_a_refused_move_does_not_make_a_connection_ready_once() -> None:
    state = ConnectionState()
    with pytest.raises(TransitionError):
        state.move(M.NEGOTIATED)
    assert not state.was_ready
    assert state.status == "connecting"
