"""Endpoints: the client side of one connection, in memory or over a WebSocket."""

from __future__ import annotations

import abc
import socket
from typing import TYPE_CHECKING

from exmcp_actors._transport._base import FrameSink
from exmcp_actors.testing._codec import Wire, decode_frame

if TYPE_CHECKING:
    from websockets.sync.server import ServerConnection


class Endpoint(abc.ABC):
    """The client side of one connection, as its delivery thread sees it."""

    @abc.abstractmethod
    def deliver(self, frames: list[Wire]) -> None:
        """Hand one push (one or more frames) to the client."""

    @abc.abstractmethod
    def lose(self, reason: str, *, graceful: bool) -> None:
        """End the connection from the server side."""


class MemoryEndpoint(Endpoint):
    """A client's :class:`FrameSink`: frames are decoded as a real transport would."""

    def __init__(self, sink: FrameSink, max_frame_bytes: int) -> None:
        self._sink = sink
        self._max_frame_bytes = max_frame_bytes

    def deliver(self, frames: list[Wire]) -> None:
        self._sink.frames_received([decode_frame(frame, self._max_frame_bytes) for frame in frames])

    def lose(self, reason: str, *, graceful: bool) -> None:
        # In memory a server shutdown and an abrupt drop look the same to the client.
        self._sink.transport_lost(reason)


class WebSocketEndpoint(Endpoint):
    """A client across a real WebSocket: one text frame per wire frame."""

    def __init__(self, ws: ServerConnection) -> None:
        self._ws = ws

    def deliver(self, frames: list[Wire]) -> None:
        for frame in frames:
            # text=True sends bytes as an unvalidated text frame: the point of send_raw.
            self._ws.send(frame, text=True)

    def lose(self, reason: str, *, graceful: bool) -> None:
        if graceful:
            self._ws.close(1001, reason[:100])
            return
        # No close frame: shut the TCP socket so the client reads EOF mid-stream.
        try:
            self._ws.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._ws.close_socket()
