"""Checks of the arguments a host passes, shared by every layer that takes them."""

from __future__ import annotations

import math
from typing import Any


def check_timeout(name: str, value: Any) -> float:
    """``value`` as seconds: a TypeError naming ``name`` unless a number, a ValueError
    unless positive and finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__} {value!r}")
    # NaN and infinity are refused too: every wait here must end.
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return float(value)
