"""The npm reference server ``@modelcontextprotocol/server-everything``, pinned, installed
under ``.npm-peers/`` in the repository (ignored by git).

``python tests/peers/everything.py`` installs it (``.ci/run`` does); tests call
:func:`everything_argv`, which installs it on first use and skips only when node or
npm is missing. Version 2026.8.31 (TypeScript SDK 1.x, MCP 2025-11-25) has every
host feature, tasks in both directions included.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no parallel workers to serialize there
    fcntl = None  # type: ignore[assignment]

PACKAGE = "@modelcontextprotocol/server-everything"
VERSION = "2026.8.31"
PREFIX = Path(__file__).resolve().parents[2] / ".npm-peers"
ENTRY = PREFIX / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"


def missing_tools() -> str | None:
    """Why the peer cannot run here (no node or npm), else None."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed, so the npm peer {PACKAGE} cannot run"
    return None


@contextlib.contextmanager
def _installing() -> Iterator[None]:
    """One installer at a time: the suite's xdist workers may all want the peer at once. (The
    lock lives in the temporary directory, named after the prefix, to leave the tree alone.)"""
    name = hashlib.sha256(str(PREFIX).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"exmcp-npm-peers-{name}.lock", "w") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def install(timeout: float = 600.0) -> Path:
    """Install the pinned version unless it is there; returns the entry script."""
    installed = PREFIX / "node_modules" / "@modelcontextprotocol" / "server-everything" / "package.json"
    with _installing():
        if ENTRY.exists() and f'"version": "{VERSION}"' in installed.read_text(encoding="utf-8"):
            return ENTRY
        PREFIX.mkdir(exist_ok=True)
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(PREFIX), f"{PACKAGE}@{VERSION}"],
            check=True,
            timeout=timeout,
            stdout=subprocess.DEVNULL,
        )
    return ENTRY


def everything_argv() -> list[str]:
    """The stdio command line of the peer."""
    return ["node", str(install()), "stdio"]


if __name__ == "__main__":
    why = missing_tools()
    if why is not None:
        print(f"skipping: {why}", file=sys.stderr)
        sys.exit(0)
    print(install())
