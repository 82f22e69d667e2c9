"""Pipe I/O for the stdio transport: a reader that also notices the child's exit, and a
write that never blocks."""

from __future__ import annotations

import array
import functools
import os
import select
import threading
from collections.abc import Callable
from typing import Any, Final

from ..._util._scheduler import TimerSlot

try:  # POSIX only
    import fcntl
    import termios
except ImportError:  # pragma: no cover - Windows
    fcntl = termios = None  # type: ignore[assignment]

#: Bytes asked of one os.read: the default pipe capacity on Linux.
READ_CHUNK: Final = 65536
#: Writes up to this size are atomic on a pipe: when poll() says it is writable, they fit whole.
_ATOMIC: Final = getattr(select, "PIPE_BUF", 512)
#: Seconds between two looks at a child's stdin until it has read what it was sent.
READING_POLL: Final = 0.01


def open_pidfd(pid: int) -> int | None:
    """A pidfd for ``pid``, or None where unsupported (not Linux >= 5.3)."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None or not hasattr(select, "poll"):
        return None
    try:
        fd: int = pidfd_open(pid)
    except OSError:
        return None
    return fd


def close_fd(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


class PipeReader:
    """Reads a child's pipe until EOF, or until the child has exited and the pipe is drained."""

    def __init__(self, fd: int, pidfd: int | None) -> None:
        self.fd = fd
        self.pidfd = pidfd
        self._poll: Any = None
        if pidfd is not None:
            self._poll = select.poll()
            self._poll.register(fd, select.POLLIN)
            self._poll.register(pidfd, select.POLLIN)

    def read(self) -> bytes | None:
        """The next chunk; b"" at EOF; None if the child exited but the pipe stays open."""
        if self._poll is not None:
            ready = self._poll.poll()
            if not any(fd == self.fd for fd, _ in ready):
                return None  # only the pidfd: the child is gone, a grandchild holds the pipe
        return os.read(self.fd, READ_CHUNK)

    def close(self) -> None:
        close_fd(self.pidfd)
        self.pidfd = None


def pipe_write_now(fd: int) -> Callable[[bytes], int] | None:
    """A write to a pipe that never blocks: the bytes written now (0 when the pipe is full,
    the data is longer than one atomic write, or the write failed: the caller queues them for
    its writer thread, which reports any failure). None where poll() is missing (Windows)."""
    if not hasattr(select, "poll"):
        return None
    poller = select.poll()
    poller.register(fd, select.POLLOUT)

    def write_now(data: bytes) -> int:
        if len(data) > _ATOMIC or not poller.poll(0):
            return 0
        try:
            return os.write(fd, data)
        except OSError:
            return 0

    return write_now


def unread_bytes(fd: int) -> int:
    """How many bytes written to the pipe ``fd`` its reader has not read yet (FIONREAD).

    Raises:
        OSError: ``fd`` is closed, or the platform cannot tell.
    """
    if fcntl is None:
        raise OSError("FIONREAD is not available here")
    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count, True)
    return count[0]


@functools.cache
def unread_bytes_known() -> bool:
    """Whether a pipe's write end tells what its reader has not read yet (it does on Linux, where
    both ends share one buffer; elsewhere the check says)."""
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return False
    try:
        os.write(write_end, b"x")
        return unread_bytes(write_end) == 1
    except OSError:
        return False
    finally:
        close_fd(read_end)
        close_fd(write_end)


class FirstRead:
    """Calls ``reading()`` once, when the child has read everything written to its stdin (the
    pipe's unread count falls to 0), looking every READING_POLL seconds from the first write on.

    No event tells when a reader takes bytes out of a pipe, hence the short poll; it ends at
    the first read, and :meth:`stop` ends it with the connection."""

    def __init__(self, fd: int, reading: Callable[[], None]) -> None:
        self._fd = fd
        self._reading = reading
        self._slot = TimerSlot()
        self._lock = threading.Lock()
        self._watching = False

    def written(self) -> None:
        """Bytes went into the pipe (from any thread): start looking, if not started yet."""
        if self._watching:
            return  # every later write: no lock on the way out
        with self._lock:
            if self._watching:
                return
            self._watching = True
        self._slot.arm(0.0, self._look)

    def counting(self, write_now: Callable[[bytes], int]) -> Callable[[bytes], int]:
        """``write_now`` that also counts as a write here when it wrote something."""

        def write(data: bytes) -> int:
            written = write_now(data)
            if written:
                self.written()
            return written

        return write

    def _look(self) -> None:
        try:
            unread = unread_bytes(self._fd)
        except OSError:
            return  # stdin is closed: the connection is ending, there is no one to tell
        if unread:
            self._slot.arm(READING_POLL, self._look)
            return
        self._slot.stop()
        self._reading()

    def stop(self) -> None:
        self._slot.stop()
