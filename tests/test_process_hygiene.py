"""A stdio server never outlives its host, whichever way the host ends, even a server that
ignores stdin EOF and SIGTERM (and its own child); a host thread blocked in listener.get()
never keeps the interpreter from exiting. Each host runs in a subprocess; psutil checks after."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from exmcp_actors._transport.stdio._watchdog import KILL_AFTER
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals and process groups")

ROOT = Path(__file__).resolve().parent.parent
HOST = ROOT / "tests" / "hosts" / "host.py"
#: The host must end within this (a blocked thread would keep it alive for 30 s or forever).
HOST_EXIT_BOUND = 15.0
#: ... and leave no process behind within this after it ended.
CHILDREN_GONE_BOUND = KILL_AFTER + 5.0


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


WAYS = ("normal", "sys.exit", "exception", "sigint", "sigterm", "sigkill")
#: Ways the host's own exit hook closes the client (the others rely on the watchdog).
CLEAN_WAYS = ("normal", "sys.exit", "exception", "sigint")


def test_a_stubborn_stdio_server_and_its_child_never_outlive_the_host() -> None:
    """One host per way out, all at once (each takes seconds to import and connect)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    hosts = {
        way: subprocess.Popen(
            [sys.executable, str(HOST), way],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )
        for way in WAYS
    }
    started: dict[str, list[psutil.Process]] = {}
    exit_times: dict[str, float] = {}
    try:
        for way, host in hosts.items():
            assert host.stdout is not None and host.stderr is not None
            line = host.stdout.readline().decode()
            assert line.startswith("server "), (way, line, host.stderr.read())
            # Everything the host started: the server, its child, the watchdog.
            wait_until(lambda host=host: len(_descendants(host.pid)) >= 3, 10, f"{way}: its three processes")
            started[way] = _descendants(host.pid)
            assert len(started[way]) >= 3, (way, started[way])
        begun = time.monotonic()
        for host in hosts.values():
            assert host.stdin is not None
            host.stdin.write(b"go\n")
            host.stdin.flush()
        for way, host in hosts.items():
            host.wait(max(0.1, begun + HOST_EXIT_BOUND - time.monotonic()))
            exit_times[way] = time.monotonic() - begun

        _, still = psutil.wait_procs([p for procs in started.values() for p in procs], timeout=CHILDREN_GONE_BOUND)
        assert _alive(still) == [], [p.cmdline() for p in _alive(still)]
    finally:
        for host in hosts.values():
            if host.poll() is None:
                host.kill()
                host.wait()
        for procs in started.values():
            for proc in _alive(procs):
                proc.kill()
    for way in CLEAN_WAYS:
        # Closed by the exit hook: the blocked thread released, close() escalated to SIGKILL.
        assert exit_times[way] < 8.0, exit_times
