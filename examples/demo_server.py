"""A small real MCP server for the examples: the official SDK's low-level server over stdio.

It speaks both eras (legacy ``initialize`` sessions and MCP 2026-07-28) and has
one resource, ``demo://counter``, whose value the ``bump`` tool increments.
After each bump it tells legacy sessions that subscribed (``resources/updated``)
and modern listen streams (through the subscription bus). ``pid`` returns the
server's process id, so the example can kill it to show a reconnect.

Run by the examples themselves; needs ``pip install -e '.[examples]'`` (mcp 2.3.0).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.runner import serve_dual_era_loop
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated

COUNTER = "demo://counter"


def build() -> Server[Any]:
    bus = InMemorySubscriptionBus()
    value = {"n": 0}
    subscribed: dict[int, tuple[Any, set[str]]] = {}  # legacy connections and their URIs

    def connection_of(ctx: Any) -> Any:
        return ctx.session._connection  # the low-level context reaches the connection only here

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[types.Resource(uri=COUNTER, name="counter", mime_type="text/plain")]
        )

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        text = str(value["n"])
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=str(params.uri), mime_type="text/plain", text=text)]
        )

    async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        conn = connection_of(ctx)
        subscribed.setdefault(id(conn), (conn, set()))[1].add(str(params.uri))
        return types.EmptyResult()

    async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        entry = subscribed.get(id(connection_of(ctx)))
        if entry is not None:
            entry[1].discard(str(params.uri))
        return types.EmptyResult()

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        schema = {"type": "object", "properties": {}}
        return types.ListToolsResult(
            tools=[
                types.Tool(name="bump", description="Increment demo://counter", input_schema=schema),
                types.Tool(name="pid", description="This server's process id", input_schema=schema),
            ]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "pid":
            text = str(os.getpid())
        elif params.name == "bump":
            value["n"] += 1
            for conn, uris in list(subscribed.values()):
                if COUNTER in uris:
                    await conn.send_resource_updated(COUNTER)
            await bus.publish(ResourceUpdated(uri=COUNTER))
            text = str(value["n"])
        else:
            return types.CallToolResult(content=[types.TextContent(type="text", text="unknown tool")], is_error=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    return Server(
        "exmcp-demo",
        version="1.0.0",
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=ListenHandler(bus),
    )


async def main() -> None:
    server = build()
    options = server.create_initialization_options(NotificationOptions(resources_changed=True))
    async with server.lifespan(server) as lifespan_state, stdio_server() as (read_stream, write_stream):
        await serve_dual_era_loop(
            server, read_stream, write_stream, lifespan_state=lifespan_state, init_options=options
        )


if __name__ == "__main__":
    try:
        anyio.run(main)
    finally:
        sys.stderr.flush()
        os._exit(0)  # the SDK's stdin reader thread may still block in read()
