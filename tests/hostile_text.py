"""What a hostile server's text must never reach raw: a log record, an error's text, a terminal;
and what it must never cost: more time than in proportion to its length.

``RAW_CONTROL`` finds what could drive a terminal or forge a line: C0 controls (ESC, BEL, CR,
LF, ...), DEL, C1 controls (0x9b is a CSI on its own), the line and paragraph separators,
the bidirectional embeddings, overrides and isolates, and lone surrogates.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

RAW_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def no_raw_control(records: list[logging.LogRecord]) -> list[str]:
    """The messages of ``records`` that carry a raw control character (none, as it should be),
    and the lines of their tracebacks that do."""
    found = [record.getMessage() for record in records if RAW_CONTROL.search(record.getMessage())]
    for record in records:
        found += [line for line in (record.exc_text or "").split("\n") if RAW_CONTROL.search(line)]
    return found


def raw_in_texts(*texts: str) -> list[str]:
    """The texts (an error's str and repr, say) that carry a raw control character."""
    return [text for text in texts if RAW_CONTROL.search(text)]


def raw_in_output(output: bytes) -> list[str]:
    """The lines of a terminal's output (UTF-8) that carry a raw control character (a line
    ends in LF, and nothing else may be raw)."""
    return [line for line in output.decode("utf-8").split("\n") if RAW_CONTROL.search(line)]


#: A long server text: httpcore reads a response head of up to 100 KiB, so a hostile server can
#: put five times this in one header; this is enough to tell linear time from quadratic.
LONG = 20_000


def seconds_taken(action: Callable[[], Any]) -> float:
    """How long ``action()`` took: a hostile text must cost time in proportion to its length."""
    started = time.monotonic()
    action()
    return time.monotonic() - started
