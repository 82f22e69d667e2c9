"""The stdio transport: a child process speaking newline-delimited JSON-RPC.

Threads per connection (all daemons, all ended by ``close()`` or by the loss):

- ``exmcp-stdio-reader``: reads stdout in 64 KiB chunks, decodes every
  complete line of a chunk and hands the whole batch to the sink in one call;
- ``exmcp-stdio-writer``: writes queued messages to stdin, so ``send()``
  never blocks on a full pipe;
- ``exmcp-stdio-stderr``: logs each stderr line to ``exmcp_actors.stdio``.

On Linux the readers also watch a pidfd, so the death of the child is noticed
even when a grandchild keeps its stdout open, and the sink hears when the child
first read its stdin (``peer_reading``: the probe's clock starts there).
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..._protocol._errors import TransportError
from ..._protocol._peer_text import peer_text
from .._base import DEFAULT_MAX_FRAME_BYTES, FrameSink, Transport
from .._framing import ConnectionSlot, LineSplitter, LossLatch, QueueWriter, encode_message, join_thread
from ._pipes import FirstRead, PipeReader, close_fd, open_pidfd, pipe_write_now, unread_bytes_known
from ._watchdog import WATCHDOG

logger = logging.getLogger("exmcp_actors.transport")
#: The child's stderr, one INFO record per line, prefixed with the server's name.
stderr_logger = logging.getLogger("exmcp_actors.stdio")

#: A stderr line longer than this is logged truncated.
MAX_STDERR_LINE: Final = 8192
#: No decoded stderr line is longer (its " [truncated]" mark included): escaped, never cut again.
_STDERR_LINE_CHARS: Final = MAX_STDERR_LINE + 16
#: After stdout ends, how long the reader waits for an exit code for its report.
_EXIT_CODE_WAIT: Final = 1.0
#: ... and for the stderr thread to log the last words of the child.
_STDERR_DRAIN_WAIT: Final = 0.5
#: In close(), how long the writer may take to flush and close stdin.
_FLUSH_WAIT: Final = 0.5
#: What a child inherits by default, as in the official MCP SDKs (``get_default_environment``):
#: enough to find programs and a home, nothing that may hold a secret.
DEFAULT_INHERITED_ENV_VARS: Final = (
    (
        *("APPDATA", "HOMEDRIVE", "HOMEPATH", "LOCALAPPDATA", "PATH", "PATHEXT", "PROCESSOR_ARCHITECTURE"),
        *("PROGRAMFILES", "SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "USERNAME", "USERPROFILE"),
    )
    if os.name == "nt"
    else ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
)
_INTERPRETERS: Final = frozenset(
    {
        "python",
        "python3",
        "node",
        "npx",
        "uv",
        "uvx",
        "deno",
        "bun",
        "ruby",
        "java",
        "sh",
        "bash",
    }
)


def _default_name(argv: Sequence[str]) -> str:
    """A short name for logs: the program, or the script it runs for interpreters."""
    program = os.path.basename(argv[0])
    if program.split(".")[0].rstrip("0123456789") in _INTERPRETERS or program.startswith("python"):
        for arg in argv[1:]:
            if arg == "-c":
                return f"{program} -c"
            if not arg.startswith("-"):
                return f"{program} {os.path.basename(arg)}"
    return program


def _argv_text(argv: Sequence[str]) -> str:
    """The program and how many arguments follow: arguments may hold secrets (tokens, keys)."""
    extra = len(argv) - 1
    return argv[0] + (f" (+{extra} argument{'s' if extra != 1 else ''})" if extra else "")


def default_environment() -> dict[str, str]:
    """The allow-listed part of this process's environment (see ``DEFAULT_INHERITED_ENV_VARS``)."""
    env: dict[str, str] = {}
    for key in DEFAULT_INHERITED_ENV_VARS:
        value = os.environ.get(key)
        # "()..." is an exported shell function (the Shellshock vector): never passed on.
        if value is not None and not value.startswith("()"):
            env[key] = value
    return env


def _exit_text(returncode: int | None) -> str:
    if returncode is None:
        return "process still running"
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


class StdioTransport(Transport):
    """Runs an MCP server as a child process and talks to it over stdin/stdout.

    Each ``open()`` starts a new process; ``close()`` closes its stdin, sends
    SIGTERM, waits ``stop_timeout`` seconds, then SIGKILLs it.

    Args:
        argv: the command line, e.g. ``["python", "server.py"]``.
        env: environment variables for the child, laid over the inherited
            ones (a value may override an inherited one).
        inherit_env: pass the child this process's whole environment. By
            default it inherits only ``DEFAULT_INHERITED_ENV_VARS`` (``HOME``,
            ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``, ``USER``; their
            equivalents on Windows), as the official MCP SDKs do, so that
            secrets in the host's environment do not leak to a server.
        cwd: working directory of the child.
        max_frame_bytes: longest accepted line; a longer one becomes a single
            InvalidFrame and is skipped without being buffered.
        stop_timeout: seconds to wait for the child after SIGTERM, then after SIGKILL.
        startup_grace: seconds ``open()`` waits to see whether the child dies
            straight away (then ``open()`` raises); capped by ``open``'s timeout.
        name: the server's name in logs (default: derived from ``argv``).

    Example:
        >>> t = StdioTransport(["python", "-m", "my_server"], env={"LOG_LEVEL": "debug"})
        >>> t.describe()
        'stdio python my_server'
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        *,
        inherit_env: bool = False,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        stop_timeout: float = 2.0,
        startup_grace: float = 0.05,
        name: str | None = None,
    ) -> None:
        if isinstance(argv, str) or not argv:
            raise ValueError("argv must be a non-empty list of strings")
        self.argv = list(argv)
        self.env = dict(env) if env is not None else None
        self.inherit_env = inherit_env
        self.cwd = cwd
        self.max_frame_bytes = max_frame_bytes
        self.stop_timeout = stop_timeout
        self.startup_grace = startup_grace
        self.name = name or _default_name(self.argv)
        #: Where the pipe tells, the probe's clock starts once the child has read the probe.
        self.reports_reading = unread_bytes_known()
        self._slot: ConnectionSlot[_StdioConnection] = ConnectionSlot()

    @property
    def pid(self) -> int | None:
        """The pid of the current child process, if a connection was opened."""
        conn = self._slot.current
        return conn.proc.pid if conn is not None else None

    def open(self, sink: FrameSink, *, timeout: float) -> None:
        """Start a new child process (ending any previous one without reporting it)."""
        self._slot.close()
        conn = _StdioConnection(self, sink)
        conn.start(timeout)
        self._slot.install(conn)

    def send(self, message: dict[str, Any]) -> None:
        """Queue one message for the child's stdin."""
        conn = self._slot.current
        if conn is None:
            raise TransportError(f"{self.describe()}: not open")
        conn.send(encode_message(message) + b"\n")

    def close(self) -> None:
        """Stop the child and join the threads. Idempotent."""
        self._slot.close()

    def describe(self) -> str:
        """``stdio <name>``."""
        return f"stdio {self.name}"

    def __repr__(self) -> str:
        return f"StdioTransport({_argv_text(self.argv)!r})"


class _StdioConnection:
    """One child process and its three threads."""

    def __init__(self, transport: StdioTransport, sink: FrameSink) -> None:
        self.t = transport
        self.label = f"{transport.describe()}"
        self.latch = LossLatch(sink, self.label)
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=5)
        self.proc: subprocess.Popen[bytes]
        self.reader: threading.Thread | None = None
        self.stderr_thread: threading.Thread | None = None
        self.writer: QueueWriter | None = None
        self.first_read: FirstRead | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self, timeout: float) -> None:
        t = self.t
        env = {**(os.environ if t.inherit_env else default_environment()), **(t.env or {})}
        try:
            self.proc = subprocess.Popen(
                t.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                bufsize=0,
                env=env,
                cwd=t.cwd,
                # Its own group: signals reach its children too, a terminal's Ctrl-C
                # leaves it to us, and the watchdog can end the group if we die.
                process_group=0 if WATCHDOG is not None else None,
            )
        except (OSError, ValueError) as exc:
            raise TransportError(f"{self.label}: cannot start {_argv_text(t.argv)!r}: {exc}") from exc
        if WATCHDOG is not None:
            WATCHDOG.watch(self.proc.pid)
        try:
            self._start_threads(timeout)
        except BaseException:
            # Never leave a process or a thread behind a failed open().
            self.latch.close()
            if self.proc.poll() is None:
                self._signal(signal.SIGKILL)
                self.proc.wait()
            if WATCHDOG is not None:
                WATCHDOG.release(self.proc.pid)
            if self.writer is not None:
                self.writer.stop()
                join_thread(self.writer.thread, _FLUSH_WAIT, self.label)
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    pipe.close()
            join_thread(self.stderr_thread, _STDERR_DRAIN_WAIT, self.label)
            raise

    def _start_threads(self, timeout: float) -> None:
        t = self.t
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.label = f"{t.describe()} [pid {proc.pid}]"
        self.latch.name = self.label
        logger.debug("%s: started %s", self.label, _argv_text(t.argv))

        pidfd = open_pidfd(proc.pid)
        stderr_pidfd = os.dup(pidfd) if pidfd is not None else None
        self.stderr_thread = threading.Thread(
            target=self._stderr_loop,
            args=(PipeReader(proc.stderr.fileno(), stderr_pidfd),),
            name="exmcp-stdio-stderr",
            daemon=True,
        )
        self.stderr_thread.start()

        grace = min(t.startup_grace, timeout)
        try:
            returncode = proc.wait(grace) if grace > 0 else proc.poll()
        except subprocess.TimeoutExpired:
            returncode = None
        if returncode is not None:
            close_fd(pidfd)
            join_thread(self.stderr_thread, _STDERR_DRAIN_WAIT, self.label)
            raise TransportError(f"{self.label}: exited at once ({_exit_text(returncode)}){self._stderr_hint()}")

        write_now = pipe_write_now(proc.stdin.fileno())
        if t.reports_reading:
            self.first_read = FirstRead(proc.stdin.fileno(), self.latch.reading)
            write_now = self.first_read.counting(write_now) if write_now is not None else None
        self.writer = QueueWriter(
            "exmcp-stdio-writer",
            self._write_batch,
            on_error=self._writer_failed,
            on_exit=proc.stdin.close,
            write_now=write_now,
        )
        self.writer.start()
        self.reader = threading.Thread(
            target=self._read_loop,
            args=(PipeReader(proc.stdout.fileno(), pidfd),),
            name="exmcp-stdio-reader",
            daemon=True,
        )
        self.reader.start()

    def send(self, line: bytes) -> None:
        if not self.latch.active or self.writer is None:
            state = "closed" if self.latch.closed else f"lost ({self.latch.lost_reason})"
            raise TransportError(f"{self.label}: connection {state}")
        self.writer.put(line)

    def close(self) -> None:
        """Close stdin, SIGTERM, wait, SIGKILL, wait; join the threads."""
        self.latch.close()
        if self.first_read is not None:
            self.first_read.stop()
        proc = self.proc
        timeout = self.t.stop_timeout
        if self.writer is not None:
            # The writer flushes what is queued, then closes stdin.
            self.writer.stop()
            join_thread(self.writer.thread, min(_FLUSH_WAIT, timeout))
        if proc.poll() is None:
            try:
                self._signal(signal.SIGTERM)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                logger.warning(
                    "%s: no exit %.1fs after SIGTERM; sending SIGKILL",
                    self.label,
                    timeout,
                )
                self._signal(signal.SIGKILL)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    logger.error("%s: still alive after SIGKILL", self.label)
            except OSError:
                pass  # already gone
        if WATCHDOG is not None and proc.returncode is not None:
            WATCHDOG.release(proc.pid)
        logger.debug("%s: stopped (%s)", self.label, _exit_text(proc.returncode))
        for thread in (
            self.reader,
            self.stderr_thread,
            self.writer.thread if self.writer else None,
        ):
            join_thread(thread, timeout, self.label)

    def _signal(self, sig: int) -> None:
        """Signal the child's process group (its own children too), or the child alone."""
        if WATCHDOG is not None:
            try:
                os.killpg(self.proc.pid, sig)
                return
            except OSError:
                pass  # its group is gone (it may have left it): the child itself
        self.proc.send_signal(sig)

    # -- threads -----------------------------------------------------------

    def _write_batch(self, batch: list[bytes]) -> None:
        if not batch:
            return
        assert self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        view = memoryview(b"".join(batch) if len(batch) > 1 else batch[0])
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if self.first_read is not None:
            self.first_read.written()

    def _writer_failed(self, exc: BaseException) -> None:
        if not self.latch.active:
            return
        # Usually the child died: give the reader the chance to report that,
        # with its exit code, before reporting the write error ourselves.
        join_thread(self.reader, _EXIT_CODE_WAIT + _STDERR_DRAIN_WAIT + 0.5)
        self.latch.report_lost(f"{self.label}: writing to stdin failed: {exc!r}")

    def _read_loop(self, pipe: PipeReader) -> None:
        splitter = LineSplitter(self.t.max_frame_bytes)
        latch = self.latch
        what = "stdout closed"
        try:
            while True:
                chunk = pipe.read()
                if not chunk:
                    if chunk is None:
                        what = "process exited"
                    break
                frames = splitter.feed(chunk)
                if frames:
                    latch.deliver(frames)
                if latch.closed:
                    return
            frames = splitter.finish()
            if frames:
                latch.deliver(frames)
            if latch.active:
                latch.report_lost(self._loss_reason(what))
        except Exception as exc:  # the reader must report, not die
            if latch.active:
                latch.report_lost(f"{self.label}: reading stdout failed: {exc!r}")
        finally:
            if self.first_read is not None:
                self.first_read.stop()
            pipe.close()
            assert self.proc.stdout is not None
            self.proc.stdout.close()
            if self.writer is not None and not latch.closed:
                self.writer.stop()  # after a loss the writer ends by itself

    def _loss_reason(self, what: str) -> str:
        try:
            returncode: int | None = self.proc.wait(_EXIT_CODE_WAIT)
        except subprocess.TimeoutExpired:
            returncode = None
        if returncode is not None:
            join_thread(self.stderr_thread, _STDERR_DRAIN_WAIT)
        return f"{self.label}: {what} ({_exit_text(returncode)}){self._stderr_hint()}"

    def _stderr_hint(self) -> str:
        if not self.stderr_tail:
            return ""
        return f"; last stderr line: {peer_text(self.stderr_tail[-1], quote=True)}"

    def _stderr_loop(self, pipe: PipeReader) -> None:
        name = self.t.name
        pending = b""
        skipping = False
        try:
            while True:
                chunk = pipe.read()
                if not chunk:
                    break
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                for raw in lines:
                    if skipping:
                        skipping = False
                        continue
                    self._log_stderr(name, raw)
                if len(pending) > MAX_STDERR_LINE:
                    if not skipping:
                        self._log_stderr(name, pending[:MAX_STDERR_LINE] + b" [truncated]")
                    pending = b""
                    skipping = True
            if pending and not skipping:
                self._log_stderr(name, pending)
        except OSError as exc:
            logger.debug("%s: reading stderr failed: %r", self.label, exc)
        finally:
            pipe.close()
            assert self.proc.stderr is not None
            self.proc.stderr.close()

    def _log_stderr(self, name: str, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        self.stderr_tail.append(text)
        # The line is bounded already; raw, it could drive the terminal that shows the log.
        stderr_logger.info("[%s] %s", name, peer_text(text, _STDERR_LINE_CHARS))
