"""How the tests wait, in one place.

- :func:`wait_until`: a bounded poll of a condition no event marks (a count in another
  process, a queue's size, the process table). Anything an event, a queue or a condition
  variable marks is waited on directly instead.
- :func:`assert_next_is_marker`: "nothing arrives". After the action whose message must not
  arrive, the test has a marker sent that travels the same path behind it (the same listener or
  subscriber, in the same order); reading up to the marker and finding nothing before it proves
  nothing came, without watching a quiet queue for a while.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Any

#: Generous bound for anything that should happen soon; tests finish far sooner when things work.
WAIT = 10.0
#: Seconds between two looks at a polled condition.
POLL = 0.01


def wait_until(
    predicate: Callable[[], object], timeout: float = WAIT, what: str = "the condition", *, every: float = POLL
) -> None:
    """Return once ``predicate()`` is true, looking every ``every`` seconds; AssertionError
    naming ``what`` if it is still false after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(every)


def assert_next_is_marker(get: Callable[[float], Any], is_marker: Callable[[Any], bool], timeout: float = WAIT) -> Any:
    """The next message ``get(timeout)`` returns is the marker: nothing arrived before it. Returns it."""
    try:
        message = get(timeout)
    except queue.Empty:
        raise AssertionError(f"the marker did not arrive within {timeout}s") from None
    assert is_marker(message), f"unexpected message before the marker: {message!r}"
    return message
