"""A real MCP peer for tests: the official Python SDK 1.9.0's low-level ``Server`` over stdio,
written as 1.x servers in the field write resource subscriptions: the subscribed URIs kept as
the SDK hands them over (pydantic ``AnyUrl``), notified as kept.

Runs in the virtualenv ``tests/peers/sdk1_peer.py`` makes::

    .venv-sdk1/bin/python tests/peers/sdk1_server.py [--advertise-subscribe]

1.x advertises ``resources.subscribe: false`` whatever handlers a server has (python-sdk
issue #491); ``--advertise-subscribe`` applies the workaround servers use (setting it true in
the initialization options). Every URI reads as ``"<its AnyUrl form> v<version>"``; the tool
``touch`` bumps the version of every subscribed URI and sends ``resources/updated`` for each.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from pydantic import AnyUrl

server: Server[Any] = Server("sdk1-peer")
subscribed: set[AnyUrl] = set()
versions: dict[str, int] = {}


@server.subscribe_resource()
async def subscribe(uri: AnyUrl) -> None:
    subscribed.add(uri)


@server.unsubscribe_resource()
async def unsubscribe(uri: AnyUrl) -> None:
    subscribed.discard(uri)


@server.list_resources()
async def list_resources() -> list[types.Resource]:
    return [types.Resource(uri=AnyUrl("file:///a b.txt"), name="a")]


@server.read_resource()
async def read_resource(uri: AnyUrl) -> str:
    return f"{uri} v{versions.get(str(uri), 0)}"


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    return [types.Tool(name="touch", description="Changes every subscribed resource.", inputSchema={"type": "object"})]


@server.call_tool()
async def call_tool(name: str, arguments: dict[str, Any]) -> list[types.TextContent]:
    for uri in list(subscribed):
        versions[str(uri)] = versions.get(str(uri), 0) + 1
        await server.request_context.session.send_resource_updated(uri)
    return [types.TextContent(type="text", text=f"touched {len(subscribed)}")]


async def main() -> None:
    options = server.create_initialization_options(NotificationOptions(resources_changed=True))
    if "--advertise-subscribe" in sys.argv[1:] and options.capabilities.resources is not None:
        options.capabilities.resources.subscribe = True
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


if __name__ == "__main__":
    anyio.run(main)
