"""The official TypeScript SDK v2 server (npm ``@modelcontextprotocol/server`` 2.4.0), pinned
with everything it loads, installed under ``.npm-peers-ts/`` in the repository (ignored by
git) and driven by ``tests/peers/ts_server.mjs``.

``python tests/peers/ts_peer.py`` installs it (``.ci/run`` does; some 5 s with npm's
cache warm, 21 MB); tests call :func:`ts_argv` or :func:`ts_http_peer`, which install it on
first use and skip only when node or npm is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Started by path (``.ci/run``): make the repo root importable so `tests.peers` resolves.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.peers._install import ROOT, install_main, missing_node, npm_install, script_argv
from tests.peers.launch import Peer

PREFIX = ROOT / ".npm-peers-ts"
#: The whole installed tree, every package at an exact version (the server and node
#: packages pin core; zod, hono and its node adapter are what they load).
PINS = {
    "@modelcontextprotocol/server": "2.4.0",
    "@modelcontextprotocol/core": "2.4.0",
    "@modelcontextprotocol/node": "2.1.2",
    "zod": "4.6.7",
    "hono": "4.13.19",
    "@hono/node-server": "2.1.9",
}
SCRIPT = ROOT / "tests" / "peers" / "ts_server.mjs"


def missing_tools() -> str | None:
    """Why the peer cannot run here (no node or npm), else None."""
    why = missing_node()
    return None if why is None else f"{why}, so the TypeScript SDK v2 peer cannot run"


def install(timeout: float = 600.0) -> Path:
    """Install the pinned packages unless they are there; returns the npm prefix."""
    npm_install(PREFIX, PINS, timeout)
    return PREFIX


def ts_argv(transport: str = "stdio", port: int | None = None, legacy: str = "stateless") -> list[str]:
    """The command line of the peer (stdio: what a client spawns). ``legacy`` is how HTTP
    serves 2025 traffic: ``stateless`` (the SDK's default), ``stateful`` (sessions and a GET
    stream, hand-wired as the SDK documents) or ``reject`` (modern only)."""
    argv = script_argv(["node", str(SCRIPT), str(install())], transport, port)
    return [*argv, "--legacy", legacy] if transport == "http" else argv


def ts_http_peer(legacy: str = "stateless") -> Peer:
    """A running Streamable HTTP peer (by default its default setup: both eras, 2025 traffic
    stateless; see :func:`ts_argv` for ``legacy``)."""
    install()
    return Peer("http", command=lambda port: ts_argv("http", port, legacy)).start()


if __name__ == "__main__":
    install_main(missing_tools, install)
