"""Stage deadlines (sans-IO): every stage of a connect or a reconnect ends in time.

A connection goes through stages until it is settled (the stages and their moves:
:class:`~._state.Stage` and :data:`~._state.STAGE_MOVES`): the transport opens
(``open``), the era probe is answered (``discover``), ``initialize`` is
answered (``initialize``; ``notifications/initialized`` goes out right
after it and is covered by what follows it), then after a reconnect every
held URI is subscribed again (``resubscribe``, legacy) or every dropped
subscription is acknowledged again (``relisten``, modern). Entering a stage
arms one timer, stamped with the connection's generation and a serial
number, so only the timer of the stage in hand counts; settling disarms
them all. A stage that runs out is a failed attempt (the lifecycle decides
whether to retry or give up).

The first connect also runs under one overall deadline (``connect``), so
``connect_timeout`` bounds the whole ``connect()`` call; its error names the
stage that was running.
"""

from __future__ import annotations

from typing import Final

from ._errors import ConnectError
from ._events import ArmTimer, DisarmTimers, Effects, ProbeTimeout, StageTimeout
from ._state import STAGE_MOVES, Stage, checked_move

_WAITING_FOR: Final[dict[Stage, str]] = {
    Stage.OPEN: "the transport to open",
    Stage.DISCOVER: "an answer to server/discover",
    Stage.INITIALIZE: "an answer to initialize",
    Stage.RESUBSCRIBE: "the answers to resources/subscribe after the reconnect",
    Stage.RELISTEN: "the acknowledgments of subscriptions/listen after the reconnect",
}

_ADVICE: Final[dict[Stage, str]] = {
    Stage.OPEN: "check the server is running and reachable",
    Stage.DISCOVER: "check it speaks MCP",
    Stage.INITIALIZE: "check it speaks MCP",
    Stage.RESUBSCRIBE: "check the server answers resources/subscribe",
    Stage.RELISTEN: "check the server answers subscriptions/listen",
}


def timeout_error(stage: Stage, seconds: float) -> ConnectError:
    """The error of a stage that ran out: in words, which stage and what to try; ``.reason`` is
    ``("timeout", stage)`` with the stage's name (``"open"``, ``"initialize"``, ...)."""
    waiting = _WAITING_FOR.get(stage, stage.value)
    advice = _ADVICE.get(stage, "check the server")
    return ConnectError(
        f"gave up after {seconds:.1f}s waiting for {waiting}; {advice}, or raise connect_timeout",
        reason=("timeout", stage.value),
    )


class StageClock:
    """The stage in hand and its timer. One per session."""

    def __init__(self, effects: Effects, timeout: float) -> None:
        self._fx = effects
        self.timeout = timeout
        #: The stage in hand; SETTLED once the connection settled (and before the first).
        self.stage = Stage.SETTLED
        #: The connection the stage in hand belongs to.
        self._generation = 0
        self._serial = 0

    @property
    def settled(self) -> bool:
        return self.stage is Stage.SETTLED

    def enter(self, stage: Stage, generation: int, extra: float = 0.0) -> None:
        """Begin ``stage`` (unless it runs already for this connection): it must end within the
        timeout (plus ``extra``)."""
        if stage is self.stage and generation == self._generation:
            return
        self.stage = checked_move(STAGE_MOVES, self.stage, stage)
        self._generation = generation
        self._serial += 1
        self._fx.do(ArmTimer(extra + self.timeout, StageTimeout(generation, stage, self._serial)))

    def arm_connect(self, generation: int) -> None:
        """The overall deadline of the first connect."""
        self._fx.do(ArmTimer(self.timeout, StageTimeout(generation, Stage.CONNECT, 0)))

    def settle(self) -> None:
        """Every stage is done: timers still running would change nothing, so they go."""
        self.stage = checked_move(STAGE_MOVES, self.stage, Stage.SETTLED)
        self._serial += 1
        # The discover probe's timer too: a settled connection has finished its handshake.
        self._fx.do(DisarmTimers((StageTimeout, ProbeTimeout)))

    def owns(self, message: StageTimeout) -> bool:
        """Whether a timer is the one of the stage in hand (the overall one: while a stage runs)."""
        if message.stage is Stage.CONNECT:
            return not self.settled
        return message.serial == self._serial and message.stage is self.stage

    def error(self, message: StageTimeout) -> ConnectError:
        stage = self.stage if message.stage is Stage.CONNECT and not self.settled else message.stage
        return timeout_error(stage, self.timeout)
