"""The npm reference server ``@modelcontextprotocol/server-everything``, pinned, installed
under ``.npm-peers/`` in the repository (ignored by git).

``python tests/peers/everything.py`` installs it (``.ci/run`` does); tests call
:func:`everything_argv`, which installs it on first use and skips only when node or
npm is missing. Version 2026.8.31 (TypeScript SDK 1.x, MCP 2025-11-25) has every
host feature, tasks in both directions included.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Started by path (``.ci/run``): make the repo root importable so `tests.peers` resolves.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.peers._install import ROOT, install_main, missing_node, npm_install

PACKAGE = "@modelcontextprotocol/server-everything"
VERSION = "2026.8.31"
PREFIX = ROOT / ".npm-peers"
ENTRY = PREFIX / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"


def missing_tools() -> str | None:
    """Why the peer cannot run here (no node or npm), else None."""
    why = missing_node()
    return None if why is None else f"{why}, so the npm peer {PACKAGE} cannot run"


def install(timeout: float = 600.0) -> Path:
    """Install the pinned version unless it is there; returns the entry script."""
    npm_install(PREFIX, {PACKAGE: VERSION}, timeout)
    return ENTRY


def everything_argv() -> list[str]:
    """The stdio command line of the peer."""
    return ["node", str(install()), "stdio"]


if __name__ == "__main__":
    install_main(missing_tools, install)
