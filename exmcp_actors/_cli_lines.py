"""What every ``exmcp-watch`` view writes: its stderr lines, and the printers' shared tail.

Nothing a server says reaches the terminal raw: a text line has its unsafe characters
escaped as a whole (the parts were bounded where they were made), a JSON line is
``json.dumps`` with ``ensure_ascii`` (so it stays JSON a reader can parse), a number JSON has
no form for (``NaN``, ``Infinity``: our reader accepts them, strict parsers do not) as a string.
"""

from __future__ import annotations

import json
import math
from typing import IO, Any, Final

from ._protocol._peer_text import escape_unsafe, peer_text

PROG: Final = "exmcp-watch"
#: Characters of the repr that stands for a value too deep to print as JSON.
_REPR_CHARS: Final = 2000


def say(err: IO[str], text: str) -> None:
    """One line on stderr: what a server said may be in it, so no control character is left raw."""
    print(escape_unsafe(f"{PROG}: {text}"), file=err, flush=True)


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity as its JSON-ish name (``"NaN"``, ``"-Infinity"``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def _json_line(value: Any) -> str | None:
    """``value`` as one line of strict JSON; None when it nests too deep to encode here."""
    try:
        try:
            return json.dumps(value, default=str, separators=(",", ":"), allow_nan=False)
        except ValueError:  # a server's NaN or Infinity: rare, so only then the walk
            return json.dumps(_finite(value), default=str, separators=(",", ":"))
    except RecursionError:
        return None


class LinePrinter:
    """One line per event on ``out``: JSON, or text prefixed ``[server]`` when there are several."""

    def __init__(self, out: IO[str], *, as_json: bool, several: bool) -> None:
        self._out = out
        self._json = as_json
        self._several = several

    def _write_json(self, record: dict[str, Any]) -> None:
        line = _json_line(record)
        if line is None:
            # Nested deeper than this stack lets the encoder go (the reader decoded it higher
            # up its own): each such value as the string of its shortened repr.
            line = _json_line(
                {
                    key: value if _json_line(value) else peer_text(value, _REPR_CHARS, quote=True)
                    for key, value in record.items()
                }
            )
        print(line, file=self._out, flush=True)

    def _write_text(self, server: str, text: str) -> None:
        if self._several:
            text = f"[{peer_text(server, 80)}] {text}"
        print(escape_unsafe(text), file=self._out, flush=True)
