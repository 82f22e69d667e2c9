"""fastmcp 4.1.6 with fastmcp-tasks 4.1.4 (the SEP-2663 tasks extension), pinned, in a
virtualenv of its own under ``.venv-fastmcp/`` in the repository (ignored by git), driven
by ``tests/peers/fastmcp_server.py``.

fastmcp-tasks 4.1.4 declares ``fastmcp-slim==4.1.4`` while fastmcp 4.1.6 needs
fastmcp-slim 4.1.6; the pair works together, so ``fastmcp-requirements.txt`` pins the whole
tree and it is installed with ``--no-deps`` (no resolver to refuse it), then checked by
importing both.

``python tests/peers/fastmcp_peer.py`` installs it (``.ci/run`` does; some 45 s with pip's
cache warm); tests call :func:`fastmcp_argv` or :func:`fastmcp_http_peer`, which install it
on first use and skip only when no virtualenv with pip can be made.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Started by path (``.ci/run``): make the repo root importable so `tests.peers` resolves.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.peers._install import ROOT, install_main, missing_venv, script_argv, venv_install
from tests.peers.launch import Peer

VENV = ROOT / ".venv-fastmcp"
REQUIREMENTS = ROOT / "tests" / "peers" / "fastmcp-requirements.txt"
SCRIPT = ROOT / "tests" / "peers" / "fastmcp_server.py"
#: Run in the virtualenv once installed: both packages import, at their pins, and agree.
CHECK = (
    "import fastmcp, fastmcp_tasks, importlib.metadata as m; "
    "from fastmcp_tasks import TasksExtension; "
    "assert fastmcp.__version__ == '4.1.6', fastmcp.__version__; "
    "assert m.version('fastmcp-tasks') == '4.1.4'; TasksExtension()"
)


def missing_tools() -> str | None:
    """Why the peer cannot run here (no virtualenv with pip), else None."""
    why = missing_venv()
    return None if why is None else f"{why}: the fastmcp peer cannot be installed"


def install(timeout: float = 900.0) -> Path:
    """Install the pinned virtualenv unless it is there; returns its interpreter."""
    return venv_install(VENV, REQUIREMENTS, CHECK, timeout)


def fastmcp_argv(transport: str = "stdio", port: int | None = None) -> list[str]:
    """The command line of the peer (stdio: what a client spawns)."""
    return script_argv([str(install()), str(SCRIPT)], transport, port)


def fastmcp_http_peer() -> Peer:
    """A running Streamable HTTP peer (fastmcp's default: sessions, both eras)."""
    install()
    return Peer("http", command=lambda port: fastmcp_argv("http", port)).start()


if __name__ == "__main__":
    install_main(missing_tools, install)
