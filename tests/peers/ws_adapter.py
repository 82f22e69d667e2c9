"""WebSocket transport for the SDK's 2.x server: one JSON-RPC message per text frame.

MCP has no WebSocket transport in any revision; the 1.x SDK shipped a small
ASGI adapter (subprotocol ``"mcp"``, one message per text frame). The 2.x SDK
dropped it, so this is the same idea rebuilt over the 2.x server's memory
streams: each accepted WebSocket gets a pair of anyio memory streams and a
``serve(read_stream, write_stream)`` coroutine (the caller decides which era
loop drives them). Runs under uvicorn.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.types import ASGIApp
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

logger = logging.getLogger(__name__)

SUBPROTOCOL = "mcp"

# What the adapter hands the server: it reads SessionMessage | Exception (an
# Exception stands for an unparseable frame, as the SDK's stdio transport does)
# and writes SessionMessage.
ServeFn = Callable[
    [
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
    ],
    Awaitable[None],
]


async def _serve_websocket(websocket: WebSocket, serve: ServeFn) -> None:
    # Refuse clients that did not offer "mcp": a library that forgets the
    # subprotocol must fail loudly here rather than work by accident.
    if SUBPROTOCOL not in websocket.scope.get("subprotocols", []):
        await websocket.close(code=1002, reason="subprotocol 'mcp' required")
        return
    await websocket.accept(subprotocol=SUBPROTOCOL)

    # Unbuffered like the SDK's stdio transport: back-pressure reaches the socket.
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        # Socket -> server. A client disconnect closes read_send, which the
        # server loop sees as EOF and ends the session.
        async with read_send:
            try:
                while True:
                    text = await websocket.receive_text()
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
                    except (ValidationError, ValueError) as exc:
                        await read_send.send(exc)
                        continue
                    await read_send.send(SessionMessage(message))
            except (
                WebSocketDisconnect,
                RuntimeError,
                anyio.ClosedResourceError,
                anyio.BrokenResourceError,
            ):
                # RuntimeError: starlette raises it when receiving after close.
                pass

    async def writer() -> None:
        # Server -> socket, same serialisation as the SDK's stdio transport.
        async with write_recv:
            try:
                async for session_message in write_recv:
                    text = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await websocket.send_text(text)
            except (
                WebSocketDisconnect,
                RuntimeError,
                anyio.ClosedResourceError,
                anyio.BrokenResourceError,
            ):
                pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            # serve() owns both server-side stream ends and closes them when done.
            await serve(read_recv, write_send)
        finally:
            # The session is over (client left or server loop ended): stop
            # pumping and close the socket if it is still open.
            tg.cancel_scope.cancel()
    if websocket.application_state == WebSocketState.CONNECTED and websocket.client_state == WebSocketState.CONNECTED:
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            try:
                await websocket.close(code=1000)
            except Exception:  # the peer may vanish while we close; nothing left to do
                logger.debug("websocket close failed", exc_info=True)


def websocket_app(
    serve: ServeFn,
    lifespan: Callable[[Starlette], AbstractAsyncContextManager[None]] | None = None,
) -> ASGIApp:
    """An ASGI app serving MCP over WebSocket at ``/`` and ``/mcp``."""

    async def endpoint(websocket: WebSocket) -> None:
        await _serve_websocket(websocket, serve)

    return Starlette(
        routes=[WebSocketRoute("/", endpoint), WebSocketRoute("/mcp", endpoint)],
        lifespan=lifespan,
    )
