"""Running ``exmcp-watch`` as a subprocess in tests: its lines as they come, signals, its children.

Every wait is bounded; the process is always reaped (SIGKILL as a last resort).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, overload

import psutil

ROOT = Path(__file__).resolve().parents[1]
WAIT = 15.0
#: The first line waits for exmcp-watch's interpreter and any server it spawns to start too
#: (cold interpreters on a loaded 2-core box took over 15 s).
START_WAIT = 45.0


def cli_env() -> dict[str, str]:
    """This process's environment with the worktree first on PYTHONPATH (children import our copy)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("NO_COLOR", None)
    return env


@overload
def run_cli(*args: str, timeout: float = ..., raw: Literal[False] = ...) -> subprocess.CompletedProcess[str]: ...
@overload
def run_cli(*args: str, timeout: float = ..., raw: Literal[True]) -> subprocess.CompletedProcess[bytes]: ...
def run_cli(*args: str, timeout: float = 30.0, raw: bool = False) -> subprocess.CompletedProcess[Any]:
    """Run ``python -m exmcp_actors watch ARGS`` to the end; with ``raw``, its stdout and stderr
    are the bytes as a terminal gets them (no decoding, no newline translation)."""
    return subprocess.run(
        [sys.executable, "-m", "exmcp_actors", "watch", *args],
        check=False,
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=not raw,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


class Cli:
    """A running ``exmcp-watch --json ...``: its stdout lines parsed, read on a thread."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exmcp_actors", "watch", "--json", *args],
            cwd=ROOT,
            env=cli_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[dict[str, Any]] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="cli-test-reader", daemon=True)
        self._reader.start()
        self.stderr = ""

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self._queue.put(json.loads(raw))
        self._queue.put(None)

    def wait_line(
        self, predicate: Callable[[dict[str, Any]], bool], what: str, timeout: float = WAIT
    ) -> dict[str, Any]:
        """The next line matching ``predicate`` (earlier ones are kept in ``lines``)."""
        if not self.lines:
            timeout = max(timeout, START_WAIT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {what} within {timeout}s; lines so far: {self.lines}") from None
            if line is None:
                raise AssertionError(f"exmcp-watch ended before {what}: {self.finish()} {self.stderr}")
            self.lines.append(line)
            if predicate(line):
                return line

    def wait_method(self, method: str, server: str | None = None, timeout: float = WAIT) -> dict[str, Any]:
        return self.wait_line(
            lambda line: line["method"] == method and (server is None or line["server"] == server),
            f"a {method!r} line" + (f" from {server}" if server else ""),
            timeout,
        )

    def children(self) -> list[psutil.Process]:
        """The servers it started (the library's stdio watchdog is left out: it is not a server)."""
        return [p for p in psutil.Process(self.proc.pid).children(recursive=True) if not _is_watchdog(p)]

    def interrupt(self) -> tuple[int, float]:
        """SIGINT; returns (exit status, seconds it took to exit)."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        rc = self.finish()
        return rc, time.monotonic() - started

    def finish(self, timeout: float = WAIT) -> int:
        """Wait for the exit (SIGKILL after ``timeout``); collects stderr."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(timeout)
        assert self.proc.stderr is not None
        if not self.proc.stderr.closed:
            self.stderr = self.proc.stderr.read()
            self.proc.stderr.close()
        self._reader.join(timeout)
        return rc

    def __enter__(self) -> Cli:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.finish()


def wait_gone(processes: list[psutil.Process], timeout: float = 5.0) -> list[psutil.Process]:
    """The processes still alive after ``timeout``."""
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    return alive


def _is_watchdog(process: psutil.Process) -> bool:
    try:
        return process.cmdline()[1:4] == ["-I", "-S", "-c"]
    except psutil.Error:
        return False
