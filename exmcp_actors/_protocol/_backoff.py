"""Reconnect backoff: exponential, capped, with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before reconnect attempt *n* (1-based): ``min(maximum, initial * factor**(n-1))``,
    scaled by a random factor in ``[1 - jitter, 1 + jitter]``.

    Attributes:
        initial: the first delay, in seconds.
        factor: growth per attempt.
        maximum: the cap, in seconds.
        jitter: relative spread, 0 to 1, so many clients do not reconnect in step.
    """

    initial: float = 1.0
    factor: float = 2.0
    maximum: float = 60.0
    jitter: float = 0.25

    def __post_init__(self) -> None:
        if self.initial < 0 or self.maximum < 0:
            raise ValueError("Backoff delays must be non-negative")
        if self.factor < 1:
            raise ValueError("Backoff.factor must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("Backoff.jitter must be between 0 and 1")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before attempt ``attempt`` (1-based)."""
        base = min(self.maximum, self.initial * self.factor ** max(0, attempt - 1))
        spread = (rng or random).uniform(-self.jitter, self.jitter)
        return max(0.0, base * (1.0 + spread))
