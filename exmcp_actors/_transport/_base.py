"""The one small interface every transport implements.

A transport moves JSON-RPC messages between this process and one peer. It
owns its threads (a reader, usually a writer) and never touches actors: it
hands what it reads to a :class:`FrameSink` in batches, so a burst of frames
costs one hand-off instead of one per frame.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, Protocol

from .._protocol._jsonrpc import Frame, InvalidFrame, RequestFailed

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "Frame",
    "FrameSink",
    "InvalidFrame",
    "RequestFailed",
    "Transport",
]

#: Frames larger than this many bytes are refused (logged and skipped).
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024


class FrameSink(Protocol):
    """Where a transport delivers what it reads. One sink per opened connection.

    Both methods are called from the transport's own threads and must not block.
    """

    def frames_received(self, frames: list[Frame]) -> None:
        """A batch of frames in wire order: decoded JSON values, InvalidFrame, and (from a
        transport with one exchange per request, HTTP) RequestFailed where a request's
        exchange failed; never a made-up JSON-RPC error in its place."""

    def transport_lost(self, reason: str) -> None:
        """The connection ended (peer closed, process exited, I/O error). Called at most once."""

    def peer_reading(self) -> None:
        """The peer has read what was sent to it so far: it is up and reading its input. Called at
        most once per connection, and only by a transport whose ``reports_reading`` is true."""


class Transport(abc.ABC):
    """A reconnectable link to one MCP peer.

    Lifecycle: ``open`` starts a fresh connection; ``close`` ends it. After a
    loss or a close, ``open`` may be called again to reconnect (a new process
    for stdio, a new socket for WebSocket and HTTP). Frames and the loss of
    one connection go to the sink given to that ``open`` call only.
    """

    #: Largest frame accepted from the peer, in bytes.
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    #: Whether each connection calls ``sink.peer_reading()`` once the peer has read what it was
    #: sent (stdio, where the pipe tells). The ``server/discover`` probe's clock then starts
    #: there: a server still starting up has not heard the probe, so its silence proves nothing.
    reports_reading: bool = False

    @abc.abstractmethod
    def open(self, sink: FrameSink, *, timeout: float) -> None:
        """Open a new connection within ``timeout`` seconds and start reading.

        Raises:
            TransportError: the connection could not be opened.
        """

    @abc.abstractmethod
    def send(self, message: dict[str, Any]) -> None:
        """Queue one JSON-RPC message for sending. Thread-safe; does not wait for I/O.

        Raises:
            TransportError: the transport is not open.
        """

    def cancel_stream(self, request_id: Any) -> bool:
        """Close the response stream of an in-flight request, if the transport has one.

        HTTP returns True (closing the stream is how a client ends a
        ``subscriptions/listen``); stdio and WebSocket return False, and the
        client sends ``notifications/cancelled`` instead.
        """
        return False

    def server_capabilities(self, capabilities: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Told the server's capabilities after the handshake, just before :meth:`negotiated`;
        HTTP warns when a server that cannot push advertises notifications."""

    def negotiated(self, protocol_version: str, era: str) -> None:  # noqa: B027 - optional hook
        """Told after the handshake; HTTP uses it for headers and the GET stream."""

    def abort_open(self) -> None:  # noqa: B027 - optional hook
        """Make an ``open()`` in progress on another thread fail now, and any other until the
        next ``close()``; called without the lock ``open`` runs under, so that a client that
        is shutting down does not wait out the open's timeout. Nothing by default: an open
        that cannot block for long needs nothing here (WebSocket implements it)."""

    def mirror_tool_arguments(self, headers_for: Callable[[str, Any], dict[str, str]]) -> bool:
        """Take ``headers_for(tool_name, arguments)``, the ``Mcp-Param-*`` headers of a
        ``tools/call``, and whether this transport sends them.

        MCP 2026-07-28 asks it of Streamable HTTP (HTTP returns True and adds them to each
        modern ``tools/call``); other transports may ignore ``x-mcp-header`` and return False.
        Called once, before ``open``.
        """
        return False

    def auth_context(self) -> str:
        """Who this transport makes requests as, for caches that must never serve one
        principal's answers to another: an opaque digest of the credentials it sends (HTTP:
        the OAuth token last sent), "" when those cannot change while the client lives."""
        return ""

    @abc.abstractmethod
    def close(self) -> None:
        """End the current connection and join its threads. Idempotent, bounded in time.

        Does not call ``transport_lost``: the client knows it closed.
        """

    def describe(self) -> str:
        """A short human-readable name for logs and errors."""
        return type(self).__name__
