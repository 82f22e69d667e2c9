"""A broadcast peer for the scale benchmark: the official SDK's low-level ``Server`` (mcp 2.3.0).

It serves one resource, ``file:///bench/broadcast``, which every client
subscribes to (``resources/subscribe``, legacy era). On ``SIGUSR1`` it sends
``notifications/resources/updated`` for it to every session that subscribed,
all at once (one task each); each carries ``params._meta.round``, how many
broadcasts this process has made (1, 2, ...), so a reader tells one broadcast
from the next and a late update is never counted in the wrong round.

Transports:

- ``--transport http``: Streamable HTTP on ``/mcp`` (the SDK's session
  manager under uvicorn), every session in this one process; prints
  ``LISTENING <port>`` once it accepts connections. The updates go to each
  session's standalone GET stream; a session without one yet loses them (the
  SDK keeps no event store here), so a reader warms up until one arrives.
- ``--transport stdio``: one session on stdin/stdout, a process per client;
  it exits when stdin closes.

It imports nothing from this repository, so it runs by path from any cwd;
SIGTERM stops it.

Run: ``python benchmarks/broadcast_server.py --transport stdio|http [--port N]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

# Started by path: the repository's root, so ``tests.peers`` (the SDK peer's HTTP serving) imports.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio
import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.runner import serve_loop

URI = "file:///bench/broadcast"
logger = logging.getLogger("broadcast_server")


class Broadcaster:
    """The subscribed sessions, and one update to each of them per broadcast."""

    def __init__(self) -> None:
        self.round = 0
        #: Insertion-ordered set of the connections that subscribed ``URI``.
        self.subscribed: dict[Connection, None] = {}

    def add(self, ctx: ServerRequestContext[Any, Any]) -> None:
        # The low-level context reaches the per-connection object only through the session
        # proxy (as tests/peers/sdk_server.py does); it is stable for a legacy connection.
        connection: Connection = ctx.session._connection
        if connection not in self.subscribed:
            self.subscribed[connection] = None
            connection.exit_stack.callback(self.subscribed.pop, connection, None)

    def remove(self, ctx: ServerRequestContext[Any, Any]) -> None:
        self.subscribed.pop(ctx.session._connection, None)

    async def broadcast(self) -> None:
        self.round += 1
        meta = {"round": self.round}
        async with anyio.create_task_group() as tg:
            for connection in list(self.subscribed):
                tg.start_soon(self._send, connection, meta)

    @staticmethod
    async def _send(connection: Connection, meta: dict[str, Any]) -> None:
        try:
            await connection.send_resource_updated(URI, meta=meta)
        except Exception as exc:  # a session ending under the broadcast is not the broadcast's failure
            logger.info("update not sent: %r", exc)

    async def on_signals(self, signals: AsyncIterator[int]) -> None:
        async for _ in signals:
            await self.broadcast()


def build_server(broadcaster: Broadcaster) -> Server[Any]:
    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[types.Resource(uri=URI, name="broadcast", mime_type="text/plain")])

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        text = f"round {broadcaster.round}"
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=str(params.uri), mime_type="text/plain", text=text)]
        )

    async def subscribe(ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams) -> types.EmptyResult:
        if str(params.uri) == URI:
            broadcaster.add(ctx)
        return types.EmptyResult()

    async def unsubscribe(
        ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        if str(params.uri) == URI:
            broadcaster.remove(ctx)
        return types.EmptyResult()

    return Server(
        "exmcp-bench-broadcast",
        version="1.0.0",
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
    )


async def run_stdio(server: Server[Any], broadcaster: Broadcaster) -> None:
    from mcp.server.stdio import stdio_server

    # Installed before the first message is read: a SIGUSR1 can only come after a subscribe.
    with (
        anyio.open_signal_receiver(signal.SIGUSR1) as updates,
        anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as stops,
    ):
        async with anyio.create_task_group() as tg:
            tg.start_soon(broadcaster.on_signals, updates)

            async def on_stop() -> None:
                async for _ in stops:
                    # The SDK reads stdin in a worker thread that cancellation cannot
                    # interrupt, so a clean unwind would wait for EOF: exit now.
                    os._exit(0)

            tg.start_soon(on_stop)
            async with server.lifespan(server) as lifespan_state, stdio_server() as (read_stream, write_stream):
                await serve_loop(
                    server,
                    read_stream,
                    write_stream,
                    lifespan_state=lifespan_state,
                    init_options=server.create_initialization_options(),
                )
            tg.cancel_scope.cancel()


async def run_http(server: Server[Any], broadcaster: Broadcaster, port: int) -> None:
    # The SDK peer's socket and announcing uvicorn server (``LISTENING <port>``, a quiet stop).
    from tests.peers.sdk_server import bind_socket, run_uvicorn

    app = server.streamable_http_app(session_idle_timeout=None)
    sock = bind_socket(port, backlog=1024)  # hundreds of clients connect at once
    try:
        with anyio.open_signal_receiver(signal.SIGUSR1) as updates:
            async with anyio.create_task_group() as tg:
                tg.start_soon(broadcaster.on_signals, updates)
                await run_uvicorn(app, sock)
                tg.cancel_scope.cancel()
    finally:
        sock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["stdio", "http"], required=True)
    parser.add_argument("--port", type=int, default=0, help="http: port on 127.0.0.1; 0 picks a free one")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="broadcast %(levelname)s: %(message)s")
    broadcaster = Broadcaster()
    server = build_server(broadcaster)
    if args.transport == "stdio":
        try:
            anyio.run(run_stdio, server, broadcaster)
        except KeyboardInterrupt:
            pass
        sys.stderr.flush()
        os._exit(0)  # the SDK's stdin reader thread may still be blocked in read()
    try:
        anyio.run(run_http, server, broadcaster, args.port)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
