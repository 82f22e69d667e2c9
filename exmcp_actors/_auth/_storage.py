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

import contextlib
import json
import os
import secrets
import threading
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

__all__ = ["FileTokenStorage", "MemoryTokenStorage", "TokenStorage"]

_TEMP_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
#: Names drawn before giving up (each is 64 random bits: a clash means someone is planting).
_TEMP_ATTEMPTS: Final = 8


def _temp_suffix() -> str:
    return secrets.token_hex(8)


#: One lock per token file in this process, whichever :class:`FileTokenStorage` writes it: a
#: save reads the file, changes one record and writes it whole, so two objects on one path
#: (an OAuth each) that took turns only among themselves would drop each other's records.
_FILE_LOCKS: dict[str, threading.Lock] = {}
_FILE_LOCKS_LOCK: Final = threading.Lock()


def _file_lock(path: Path) -> threading.Lock:
    with _FILE_LOCKS_LOCK:
        return _FILE_LOCKS.setdefault(os.path.realpath(path), threading.Lock())


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
    Objects on the same path in one process take turns with each other.

    Args:
        path: the file; created (with its missing parent folders) on the first save.

    Example:
        >>> storage = FileTokenStorage("~/.config/my-host/mcp-tokens.json")
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        self._lock = _file_lock(self.path)

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
            # A new folder is the owner's only: whoever can write it can swap files in it.
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, temp = self._create_temp()
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as file:
                    json.dump(records, file)
                    file.flush()
                    os.fsync(file.fileno())  # the rename below must not publish an empty file after a crash
                os.replace(temp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
                raise

    def _create_temp(self) -> tuple[int, Path]:
        """A new file beside the target, under a name nobody can plant a link at beforehand.

        O_EXCL: a file (or link) already at the name is an error, never opened, and another
        name is drawn; O_NOFOLLOW: not even a dangling link is followed. Created 0600 from
        the start: the tokens are never readable by others, not even briefly.
        """
        for _ in range(_TEMP_ATTEMPTS):
            temp = self.path.with_name(f".{self.path.name}.{_temp_suffix()}.tmp")
            try:
                return os.open(temp, _TEMP_FLAGS, 0o600), temp
            except FileExistsError:
                continue
        raise FileExistsError(f"could not create a temporary file beside {self.path} in {_TEMP_ATTEMPTS} attempts")

    def _read(self) -> dict[str, Any]:
        try:
            value = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def __repr__(self) -> str:
        return f"FileTokenStorage({str(self.path)!r})"
