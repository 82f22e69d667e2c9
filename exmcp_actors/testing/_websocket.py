"""Serving the fake over a real WebSocket: the listening socket, the upgrade, one reader per connection."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Final

from exmcp_actors._protocol._errors import TransportError
from exmcp_actors.testing._endpoints import WebSocketEndpoint
from exmcp_actors.testing._gate import Gate
from exmcp_actors.testing._registry import Registry
from exmcp_actors.testing._shared import Shared

if TYPE_CHECKING:
    from websockets.http11 import Request, Response
    from websockets.sync.server import Server, ServerConnection

#: How long an upgrade may wait on a hung refuse() before it gets HTTP 503.
_ADMIT_TIMEOUT: Final = 30.0


class _Listening:
    """A running ``websockets`` server and its accept thread."""

    def __init__(self, server: Server, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    def stop(self, timeout: float) -> None:
        self._server.shutdown()
        self._thread.join(timeout)


class WebSocketServing:
    """The WebSocket face of a :class:`FakeServer` (see :meth:`FakeServer.serve_websocket`).

    Args:
        shared: what the server shares with its connections (its lock, whether it is closing).
        gate: admits or refuses each upgrade.
        registry: opens a connection for each upgrade admitted.
    """

    def __init__(self, shared: Shared, gate: Gate, registry: Registry) -> None:
        self._shared = shared
        self._gate = gate
        self._registry = registry
        self._listening: _Listening | None = None
        self._url: str | None = None

    def serve(self) -> str:
        """Start serving (once); returns the ``ws://`` URL."""
        from websockets.sync.server import serve
        from websockets.typing import Subprotocol

        with self._shared.lock:
            if self._shared.closing.is_set():
                raise RuntimeError("FakeServer is closed")
            if self._url is not None:
                return self._url
            ws_server = serve(
                self._handle,
                "127.0.0.1",
                0,
                subprotocols=[Subprotocol("mcp")],
                process_request=self._process_request,
                compression=None,
                ping_interval=None,  # no keepalive traffic: tests stay deterministic
                close_timeout=1.0,
                max_size=None,
                logger=logging.getLogger("exmcp_actors.testing.websockets"),
            )
            port = ws_server.socket.getsockname()[1]
            thread = threading.Thread(target=ws_server.serve_forever, name="exmcp-fake-ws-accept", daemon=True)
            thread.start()
            self._listening = _Listening(ws_server, thread)
            self._url = f"ws://127.0.0.1:{port}"
            return self._url

    def detach(self) -> _Listening | None:
        """Forget the running server, for the caller to stop; the caller holds the server's lock."""
        listening, self._listening = self._listening, None
        return listening

    def _process_request(self, ws: ServerConnection, request: Request) -> Response | None:
        try:
            self._gate.admit(timeout=_ADMIT_TIMEOUT)
        except TransportError as exc:
            return ws.respond(503, f"{exc}\n")
        return None

    def _handle(self, ws: ServerConnection) -> None:
        from websockets.exceptions import ConnectionClosed

        headers = {key.lower(): value for key, value in ws.request.headers.raw_items()} if ws.request else {}
        conn = self._registry.open(headers, WebSocketEndpoint(ws))
        if conn is None:
            return
        # This websockets-owned thread is the connection's reader: name it like ours.
        threading.current_thread().name = f"exmcp-fake-{conn.number}-ws-reader"
        ws.recv_events_thread.name = f"exmcp-fake-{conn.number}-ws-events"
        try:
            while True:
                data = ws.recv()
                conn._receive(data if isinstance(data, str) else data.decode("utf-8", "replace"))
        except ConnectionClosed:
            pass
        finally:
            conn._end("client")
