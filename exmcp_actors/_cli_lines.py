"""What every ``exmcp-watch`` view writes: its stderr lines, and the printers' shared tail.

Nothing a server says reaches the terminal raw: a text line has its unsafe characters
escaped as a whole (the parts were bounded where they were made), a JSON line is
``json.dumps`` with ``ensure_ascii`` (so it stays JSON a reader can parse).
"""

from __future__ import annotations

import json
from typing import IO, Any, Final

from ._protocol._peer_text import escape_unsafe, peer_text

PROG: Final = "exmcp-watch"


def say(err: IO[str], text: str) -> None:
    """One line on stderr: what a server said may be in it, so no control character is left raw."""
    print(escape_unsafe(f"{PROG}: {text}"), file=err, flush=True)


class LinePrinter:
    """One line per event on ``out``: JSON, or text prefixed ``[server]`` when there are several."""

    def __init__(self, out: IO[str], *, as_json: bool, several: bool) -> None:
        self._out = out
        self._json = as_json
        self._several = several

    def _write_json(self, record: dict[str, Any]) -> None:
        print(json.dumps(record, default=str, separators=(",", ":")), file=self._out, flush=True)

    def _write_text(self, server: str, text: str) -> None:
        if self._several:
            text = f"[{peer_text(server, 80)}] {text}"
        print(escape_unsafe(text), file=self._out, flush=True)
