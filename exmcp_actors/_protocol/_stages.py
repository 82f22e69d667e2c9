"""Stage deadlines (sans-IO): every stage of a connect or a reconnect ends in time.

A connection goes through stages until it is settled: the transport opens
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
from ._events import ArmTimer, Effects, StageTimeout

#: The overall deadline of the first connect (not a stage of its own).
CONNECT: Final = "connect"

_WAITING_FOR: Final[dict[str, str]] = {
    "open": "the transport to open",
    "discover": "an answer to server/discover",
    "initialize": "an answer to initialize",
    "resubscribe": "the answers to resources/subscribe after the reconnect",
    "relisten": "the acknowledgments of subscriptions/listen after the reconnect",
}

_ADVICE: Final[dict[str, str]] = {
    "open": "check the server is running and reachable",
    "discover": "check it speaks MCP",
    "initialize": "check it speaks MCP",
    "resubscribe": "check the server answers resources/subscribe",
    "relisten": "check the server answers subscriptions/listen",
}


def timeout_error(stage: str, seconds: float) -> ConnectError:
    """The error of a stage that ran out: in words, which stage and what to try; ``.reason`` is
    ``("timeout", stage)``."""
    waiting = _WAITING_FOR.get(stage, stage)
    advice = _ADVICE.get(stage, "check the server")
    return ConnectError(
        f"gave up after {seconds:.1f}s waiting for {waiting}; {advice}, or raise connect_timeout",
        reason=("timeout", stage),
    )


class StageClock:
    """The stage in hand and its timer. One per session."""

    def __init__(self, effects: Effects, timeout: float) -> None:
        self._fx = effects
        self.timeout = timeout
        #: The stage in hand; None once the connection settled (or before the first).
        self.stage: str | None = None
        self._serial = 0

    @property
    def settled(self) -> bool:
        return self.stage is None

    def enter(self, stage: str, generation: int, extra: float = 0.0) -> None:
        """Begin ``stage`` (unless it runs already): it must end within the timeout (plus ``extra``)."""
        if stage == self.stage:
            return
        self.stage = stage
        self._serial += 1
        self._fx.do(ArmTimer(extra + self.timeout, StageTimeout(generation, stage, self._serial)))

    def arm_connect(self, generation: int) -> None:
        """The overall deadline of the first connect."""
        self._fx.do(ArmTimer(self.timeout, StageTimeout(generation, CONNECT, 0)))

    def settle(self) -> None:
        """Every stage is done: timers still running change nothing."""
        self.stage = None
        self._serial += 1

    def owns(self, message: StageTimeout) -> bool:
        """Whether a timer is the one of the stage in hand (the overall one: while a stage runs)."""
        if message.stage == CONNECT:
            return self.stage is not None
        return message.serial == self._serial and message.stage == self.stage

    def error(self, message: StageTimeout) -> ConnectError:
        stage = self.stage if message.stage == CONNECT and self.stage is not None else message.stage
        return timeout_error(stage, self.timeout)
