"""Pipe I/O for the stdio transport: a reader that also notices the child's exit, and a
write that never blocks."""

from __future__ import annotations

import os
import select
from collections.abc import Callable
from typing import Any, Final

#: Bytes asked of one os.read: the default pipe capacity on Linux.
READ_CHUNK: Final = 65536
#: Writes up to this size are atomic on a pipe: when poll() says it is writable, they fit whole.
_ATOMIC: Final = getattr(select, "PIPE_BUF", 512)


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
