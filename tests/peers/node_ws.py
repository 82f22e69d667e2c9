"""The Node ``ws`` library, pinned, installed under ``.cache/node-ws/`` in the repository
(ignored by git), and the bridge (``ws_bridge.js``) that serves a stdio MCP server over it.

:func:`ws_module` installs it on first use; tests skip only when node or npm is missing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

VERSION = "8.23.0"
PREFIX = Path(__file__).resolve().parents[2] / ".cache" / "node-ws"
MODULE = PREFIX / "node_modules" / "ws"
BRIDGE = Path(__file__).resolve().parent / "ws_bridge.js"


def ws_module(timeout: float = 600.0) -> Path:
    """Install the pinned ``ws`` unless it is there; returns its folder (what ``require`` takes)."""
    installed = MODULE / "package.json"
    if installed.exists() and f'"version": "{VERSION}"' in installed.read_text(encoding="utf-8"):
        return MODULE
    PREFIX.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(PREFIX), f"ws@{VERSION}"],
        check=True,
        timeout=timeout,
        stdout=subprocess.DEVNULL,
    )
    return MODULE
