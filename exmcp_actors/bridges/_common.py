"""What the bridges share: one rate-limited log, and the tests of a message and a callback."""

from __future__ import annotations

import logging
from typing import Any, Final

from .._protocol._messages import FINAL_TAGS
from .._protocol._ratelog import RateLimitedLog

logger = logging.getLogger("exmcp_actors.bridges")

#: Every bridge's drops and callback failures: a host's loop or window gone for good would
#: otherwise cost a record per message.
ratelog: Final = RateLimitedLog(logger)


def is_final(message: Any) -> bool:
    """Whether ``message`` is a handle's closing message (nothing follows it for that handle)."""
    return isinstance(message, tuple) and bool(message) and message[0] in FINAL_TAGS


def check_callable(name: str, value: Any) -> None:
    """TypeError naming ``name`` unless ``value`` can be called."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__} {value!r}")
