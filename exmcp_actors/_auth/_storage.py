"""Where an :class:`~exmcp_actors.OAuth` keeps what it obtained: tokens and
the client registration, one record per MCP server URL.

The interface is two methods, so a host can keep records in its own vault::

    class MyStorage:
        def load(self, server: str) -> dict | None: ...
        def save(self, server: str, record: dict) -> None: ...

A record is a JSON-able dict (``{"tokens": {...}, "client": {...}}``); the
library reads and writes it whole.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["FileTokenStorage", "MemoryTokenStorage", "TokenStorage"]


@runtime_checkable
class TokenStorage(Protocol):
    """What :class:`~exmcp_actors.OAuth` needs of a token store."""

    def load(self, server: str) -> dict[str, Any] | None:
        """The record saved for ``server``, or None."""

    def save(self, server: str, record: dict[str, Any]) -> None:
        """Replace the record for ``server``."""


class MemoryTokenStorage:
    """Records kept in this process only (the default)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, dict[str, Any]] = {}

    def load(self, server: str) -> dict[str, Any] | None:
        """The record saved for ``server``, or None."""
        with self._lock:
            record = self._records.get(server)
            return json.loads(json.dumps(record)) if record is not None else None

    def save(self, server: str, record: dict[str, Any]) -> None:
        """Replace the record for ``server``."""
        with self._lock:
            self._records[server] = json.loads(json.dumps(record))


class FileTokenStorage:
    """Records kept in one JSON file across runs, readable by its owner only (mode 0600).

    Args:
        path: the file; created (with its missing parent folders) on the first save.

    Example:
        >>> storage = FileTokenStorage("~/.config/my-host/mcp-tokens.json")
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()

    def load(self, server: str) -> dict[str, Any] | None:
        """The record saved for ``server``, or None (also when the file is missing or unreadable)."""
        with self._lock:
            record = self._read().get(server)
        return record if isinstance(record, dict) else None

    def save(self, server: str, record: dict[str, Any]) -> None:
        """Replace the record for ``server``; the file is rewritten whole, atomically, mode 0600."""
        with self._lock:
            records = self._read()
            records[server] = record
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            # Created 0600 from the start: the tokens are never readable by others, not even briefly.
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                json.dump(records, file)
            os.chmod(temp, 0o600)
            os.replace(temp, self.path)

    def _read(self) -> dict[str, Any]:
        try:
            value = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def __repr__(self) -> str:
        return f"FileTokenStorage({str(self.path)!r})"
