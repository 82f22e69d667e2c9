"""The npm reference server ``@modelcontextprotocol/server-everything``, pinned, installed
under ``.npm-peers/`` in the repository (ignored by git).

``python tests/peers/everything.py`` installs it (``.ci/run`` does); tests call
:func:`everything_argv`, which installs it on first use and skips only when node or
npm is missing. Version 2026.8.31 (TypeScript SDK 1.x, MCP 2025-11-25) has every
host feature, tasks in both directions included.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

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


def install(timeout: float = 600.0) -> Path:
    """Install the pinned version unless it is there; returns the entry script."""
    installed = PREFIX / "node_modules" / "@modelcontextprotocol" / "server-everything" / "package.json"
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
