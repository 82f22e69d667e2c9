"""The official Python SDK 1.x (``mcp`` 1.9.0, MCP 2025-03-26), pinned with its whole tree, in a
virtualenv of its own under ``.venv-sdk1/`` in the repository (ignored by git), driven by
``tests/peers/sdk1_server.py``. Most Python servers in the field are built on 1.x: it keeps URIs
as pydantic ``AnyUrl`` values, so what it sends back is its own spelling of what it was given.

``python tests/peers/sdk1_peer.py`` installs it (some 20 s with pip's cache warm); tests call
:func:`sdk1_argv`, which installs it on first use and skips only when no virtualenv with pip
can be made.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Started by path: make the repo root importable so `tests.peers` resolves.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.peers._install import ROOT, install_main, missing_venv, venv_install

VENV = ROOT / ".venv-sdk1"
REQUIREMENTS = ROOT / "tests" / "peers" / "sdk1-requirements.txt"
SCRIPT = ROOT / "tests" / "peers" / "sdk1_server.py"
CHECK = "import mcp.server.lowlevel, importlib.metadata as m; assert m.version('mcp') == '1.9.0'"


def missing_tools() -> str | None:
    """Why the peer cannot run here (no virtualenv with pip), else None."""
    why = missing_venv()
    return None if why is None else f"{why}: the Python SDK 1.x peer cannot be installed"


def install(timeout: float = 900.0) -> Path:
    """Install the pinned virtualenv unless it is there; returns its interpreter."""
    return venv_install(VENV, REQUIREMENTS, CHECK, timeout)


def sdk1_argv(*flags: str) -> list[str]:
    """The stdio command line of the peer."""
    return [str(install()), str(SCRIPT), *flags]


if __name__ == "__main__":
    install_main(missing_tools, install)
