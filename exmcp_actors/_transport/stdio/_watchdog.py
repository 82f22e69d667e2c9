"""The stdio servers' watchdog: they never outlive their host, however it ends.

A host that exits normally closes its clients (see ``_shutdown``), and a
server sees EOF on stdin when the host dies. But SIGTERM's default action and
SIGKILL end the host without any cleanup, and a server may ignore both EOF
and SIGTERM. So each stdio server runs in its own process group, and one
small watchdog process per host (started with the first server, in its own
session so a terminal's Ctrl-C does not end it first) holds a pipe from the
host. The host writes ``+pgid``/``-pgid`` as servers start and end; when the
pipe reaches EOF (the host is gone, whatever the way), the watchdog sends
SIGTERM to every group still listed, then SIGKILL to those alive after
``KILL_AFTER`` seconds, and exits.

Why not ``prctl(PR_SET_PDEATHSIG)``: it fires when the *thread* that started
the child ends (our connector threads are short-lived), needs ``preexec_fn``
(unsafe with threads), and is Linux only.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from typing import Final

logger = logging.getLogger("exmcp_actors.transport")

#: Seconds between the watchdog's SIGTERM and its SIGKILL.
KILL_AFTER: Final = 2.0

_SCRIPT: Final = r"""
import os, signal, sys, time
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
live = set()
for line in sys.stdin.buffer:
    try:
        (live.add if line[:1] == b"+" else live.discard)(int(line[1:]))
    except ValueError:
        pass
def send(sig):
    for group in list(live):
        try:
            os.killpg(group, sig)
        except OSError:
            live.discard(group)
send(signal.SIGTERM)
deadline = time.monotonic() + float(sys.argv[1])
while live and time.monotonic() < deadline:
    time.sleep(0.02)
    send(0)
send(signal.SIGKILL)
"""


class Watchdog:
    """The host side: starts the watchdog process on first use, tells it of each server."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner = 0  # the pid that started it: a forked host needs its own
        self._broken = False

    @property
    def pid(self) -> int | None:
        """The watchdog process, once started (it lives as long as this process)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def pipe(self) -> int | None:
        """This process's end of the pipe to the watchdog, once started (it stays open as long)."""
        stdin = self._proc.stdin if self._proc is not None else None
        return stdin.fileno() if stdin is not None and not stdin.closed else None

    def watch(self, pgid: int) -> None:
        """Kill group ``pgid`` if this process dies before :meth:`release`."""
        self._write(b"+%d\n" % pgid)

    def release(self, pgid: int) -> None:
        """Group ``pgid`` ended (its leader was reaped): forget it."""
        self._write(b"-%d\n" % pgid)

    def _write(self, line: bytes) -> None:
        with self._lock:
            proc = self._proc
            if proc is None or self._owner != os.getpid() or proc.poll() is not None:
                proc = self._start()
            if proc is None or proc.stdin is None:
                return
            try:
                os.write(proc.stdin.fileno(), line)
            except OSError as exc:
                logger.warning("stdio watchdog unreachable (%r): servers may outlive a killed host", exc)

    def _start(self) -> subprocess.Popen[bytes] | None:
        if self._broken or not sys.executable:
            return None
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _SCRIPT, str(KILL_AFTER)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            self._broken = True
            logger.warning("cannot start the stdio watchdog (%r): servers may outlive a killed host", exc)
            return None
        self._owner = os.getpid()
        return self._proc


#: The one watchdog of this process (POSIX only: elsewhere servers rely on stdin EOF).
WATCHDOG: Final = Watchdog() if os.name == "posix" else None
