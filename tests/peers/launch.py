"""Start and stop test peers (tests/peers/sdk_server.py) as subprocesses.

``start_peer("ws" | "http")`` spawns a listening peer and waits for its
``LISTENING <port>`` line; ``start_peer("stdio")`` spawns nothing (a stdio
peer is spawned by the client under test) and only carries ``argv``/``cwd``.
A :class:`Peer` given a ``command`` runs another server the same way (the
TypeScript and fastmcp peers), as long as it prints the same line.
"""

from __future__ import annotations

import atexit
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from exmcp_actors.testing._process import stop_process, wait_for_listening

ROOT = Path(__file__).resolve().parents[2]
SERVER_SCRIPT = ROOT / "tests" / "peers" / "sdk_server.py"

# A cold interpreter importing the SDK takes ~1 s, fastmcp ~3 s; on a loaded 2-core box (the
# suite's workers beside another job) over 15 s was seen. A bound on a start, not a speed check.
READY_TIMEOUT = 45.0
STOP_TIMEOUT = 5.0


def peer_argv(
    transport: str,
    era: str = "both",
    port: int | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line for a peer. Runs by script path, so any cwd works (cwd=ROOT is still fine)."""
    argv = [sys.executable, str(SERVER_SCRIPT), "--transport", transport, "--era", era]
    if port is not None:
        argv += ["--port", str(port)]
    return argv + list(extra_args)


class PeerStartError(RuntimeError):
    pass


@dataclass
class Peer:
    """A peer process (ws/http) or just the argv to spawn one (stdio)."""

    transport: str
    era: str = "both"
    extra_args: tuple[str, ...] = ()
    port: int | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: ``command(port)``: the argv of another server than sdk_server.py (None: it).
    command: Callable[[int | None], list[str]] | None = field(default=None, repr=False)

    def _argv(self, port: int | None) -> list[str]:
        if self.command is not None:
            return self.command(port)
        return peer_argv(self.transport, self.era, port, self.extra_args)

    @property
    def cwd(self) -> str:
        return str(ROOT)

    @property
    def argv(self) -> list[str]:
        # stdio: what a client should spawn. ws/http: how this peer was started.
        return self._argv(self.port if self.transport != "stdio" else None)

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError(f"{self.transport} peer has no port (not started?)")
        if self.transport == "ws":
            return f"ws://127.0.0.1:{self.port}/"
        if self.transport == "http":
            return f"http://127.0.0.1:{self.port}/mcp"
        raise RuntimeError("a stdio peer has no url; spawn .argv instead")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = READY_TIMEOUT) -> Peer:
        if self.transport == "stdio":
            return self
        if self.running:
            raise RuntimeError("peer already running")
        # Port 0 on first start; the same port on restart so reconnecting clients find it.
        argv = self._argv(self.port or 0)
        # stderr is inherited: pytest's fd capture shows the peer's log with a failing test.
        proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        self.proc = proc
        _LIVE.add(proc)
        port = wait_for_listening(proc, timeout)
        if port is None:
            self.kill()
            raise PeerStartError(f"peer {argv} did not print LISTENING within {timeout}s (rc={proc.poll()})")
        self.port = port
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM and wait (SIGKILL if it does not exit in time)."""
        proc = self.proc
        if proc is None:
            return
        stop_process(proc, timeout)
        self._reap()

    def kill(self) -> None:
        """SIGKILL: an abrupt drop, no close frames, no final responses."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            proc.wait(STOP_TIMEOUT)
        self._reap()

    def restart(self, extra_args: Sequence[str] | None = None, timeout: float = READY_TIMEOUT) -> Peer:
        """Stop if running, then start again on the same port (optionally with new extra args).

        Server state (subscription counters, sessions) starts fresh.
        """
        self.stop()
        if extra_args is not None:
            self.extra_args = tuple(extra_args)
        return self.start(timeout)

    def _reap(self) -> None:
        if self.proc is not None:
            _LIVE.discard(self.proc)
            if self.proc.stdout is not None:
                self.proc.stdout.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class WarmPeer:
    """A ws/http peer whose next incarnation waits warm (imported, not yet bound), so a test can
    kill it and bring it back on the same port within milliseconds instead of a cold start."""

    def __init__(self, transport: str, era: str = "both", extra_args: Sequence[str] = ()) -> None:
        if transport not in ("ws", "http"):
            raise ValueError(f"a warm peer is ws or http, not {transport!r}")
        self.transport, self.era, self.extra_args = transport, era, list(extra_args)
        self.port = 0
        self.running: subprocess.Popen[bytes] | None = None
        self._standby = self._warm()

    @property
    def url(self) -> str:
        return Peer(self.transport, port=self.port).url

    def _warm(self) -> subprocess.Popen[bytes]:
        argv = peer_argv(self.transport, self.era, self.port, [*self.extra_args, "--bind-on-stdin"])
        proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        _LIVE.add(proc)
        return proc

    def start(self, timeout: float = READY_TIMEOUT) -> WarmPeer:
        """The standby binds the port (the same one after the first start); a new standby warms up."""
        if self.running is not None and self.running.poll() is None:
            raise RuntimeError("peer already running")
        standby = self._standby
        assert standby.stdin is not None
        standby.stdin.write(b"go\n")
        standby.stdin.flush()
        port = wait_for_listening(standby, timeout)
        if port is None:
            raise PeerStartError(f"the standby peer did not listen within {timeout}s (rc={standby.poll()})")
        self.port, self.running = port, standby
        self._standby = self._warm()
        return self

    def kill(self) -> None:
        """SIGKILL the running peer: no close frames, every session gone."""
        if self.running is not None and self.running.poll() is None:
            self.running.kill()
            self.running.wait(STOP_TIMEOUT)

    def stop(self) -> None:
        for proc in (self.running, self._standby):
            if proc is None:
                continue
            if proc.stdin is not None:
                proc.stdin.close()  # a standby that never bound exits on EOF
            stop_process(proc, STOP_TIMEOUT)
            if proc.stdout is not None:
                proc.stdout.close()
            _LIVE.discard(proc)


# Safety net: a test run that dies early must not leave peers behind.
_LIVE: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_leftovers() -> None:
    for proc in list(_LIVE):
        if proc.poll() is None:
            proc.kill()
            proc.wait(STOP_TIMEOUT)


def start_peer(transport: str, era: str = "both", extra_args: Sequence[str] = ()) -> Peer:
    """Start a peer: ws/http wait until it listens; stdio only computes argv."""
    if transport not in ("stdio", "ws", "http"):
        raise ValueError(f"unknown transport {transport!r}")
    if era not in ("both", "legacy"):
        raise ValueError(f"unknown era {era!r}")
    return Peer(transport, era, tuple(extra_args)).start()


__all__ = ["ROOT", "SERVER_SCRIPT", "Peer", "PeerStartError", "WarmPeer", "peer_argv", "start_peer"]
