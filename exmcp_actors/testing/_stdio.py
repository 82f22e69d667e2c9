"""Serving the fake as a stdio MCP server does: one JSON message per line on a pair of byte streams."""

from __future__ import annotations

from typing import IO, TYPE_CHECKING

from exmcp_actors._protocol._errors import TransportError
from exmcp_actors.testing._codec import Wire
from exmcp_actors.testing._connection import FakeConnection
from exmcp_actors.testing._endpoints import Endpoint

if TYPE_CHECKING:
    from exmcp_actors.testing._server import FakeServer


class StdioEndpoint(Endpoint):
    """The client at the other end of a byte stream: one frame per line."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out

    def deliver(self, frames: list[Wire]) -> None:
        # A client gone makes this raise: the delivery thread logs it and goes on.
        self._out.write(b"".join((f.encode() if isinstance(f, str) else f) + b"\n" for f in frames))
        self._out.flush()

    def lose(self, reason: str, *, graceful: bool) -> None:
        """Nothing to send: a stdio client learns the server is gone when its process ends."""


def serve_stdio(server: FakeServer, stdin: IO[bytes], stdout: IO[bytes]) -> FakeConnection:
    """Serve one client of ``server`` on a pair of byte streams, as a stdio MCP server does.

    Each line read from ``stdin`` is one message; each frame pushed is written
    to ``stdout`` as one line. Blocks until ``stdin`` ends, then ends the
    connection (closed by the client) and returns it. ``refuse()`` does not
    apply: a stdio server is there once its process runs.

    Raises:
        TransportError: the server is closed.
    """
    conn = server._registry.open({}, StdioEndpoint(stdout))
    if conn is None:
        raise TransportError("FakeServer is closed")
    try:
        for line in stdin:
            if line.strip():
                conn._receive(line.decode("utf-8", "replace"))
    finally:
        conn._end("client")
    return conn
