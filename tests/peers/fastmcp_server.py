"""A real MCP peer for tests: fastmcp 4.1.6 with the tasks extension of fastmcp-tasks 4.1.4
(``io.modelcontextprotocol/tasks``, SEP-2663, on 2026-07-28 connections only).

Runs in the virtualenv ``tests/peers/fastmcp_peer.py`` makes, never in the test's own::

    .venv-fastmcp/bin/python tests/peers/fastmcp_server.py --transport stdio|http [--port N]

http prints exactly one line ``LISTENING <port>`` on stdout once it accepts connections
(port 0 picks a free port); everything else goes to stderr. Like most fastmcp servers it
advertises no change notifications and answers ``subscriptions/listen`` with -32601.

Tools: ``echo {text}``; ``touch {uri}`` (bumps the version ``read_resource`` shows);
``crunch {n, delay}`` (may run as a task: it does, for a client that declares the tasks
extension); ``must_task {n}`` (runs only as a task); ``ask_name`` (a task that asks the
client's elicitation handler for a name, through ``tasks/get`` and ``tasks/update``);
``shape_tool {name, properties, title?, read_only?}`` (adds or reshapes a tool: string
properties, a title, a ``readOnlyHint`` annotation) and ``drop_tool {name}``, each followed by
``notifications/tools/list_changed`` on the calling request (what fastmcp's own visibility
changes send; a 2026-07-28 connection has no standing channel, so it rides the call's stream).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from datetime import timedelta
from typing import Any

import mcp_types as types
from fastmcp import Context, FastMCP
from fastmcp.tools.function_tool import FunctionTool
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension

VERSIONS: dict[str, int] = {"demo://a": 0}
#: Task tools ask to be polled this often (fastmcp's default, 5 s, would slow every test).
POLL = timedelta(milliseconds=100)

mcp = FastMCP("fastmcp-peer")
mcp.add_extension(TasksExtension())


@mcp.tool
def echo(text: str) -> str:
    """Returns its text."""
    return text


@mcp.tool
def touch(uri: str) -> str:
    """Bumps a resource's version."""
    VERSIONS[uri] = VERSIONS.get(uri, 0) + 1
    return f"{uri} v{VERSIONS[uri]}"


@mcp.resource("demo://a")
def resource_a() -> str:
    return f"demo://a v{VERSIONS['demo://a']}"


@mcp.tool(task=TaskConfig(mode="optional", poll_interval=POLL))
async def crunch(n: int, delay: float = 0.0) -> str:
    """Squares n after delay seconds; may run as a task."""
    await asyncio.sleep(delay)
    return f"{n * n}"


@mcp.tool(task=TaskConfig(mode="required", poll_interval=POLL))
async def must_task(n: int) -> str:
    """Doubles n; runs only as a task."""
    return f"{2 * n}"


NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@mcp.tool(task=TaskConfig(mode="optional", poll_interval=POLL))
async def ask_name(ctx: Context) -> Any:
    """Asks the client for a name (an elicitation, the guard pattern), then greets it."""
    answer = (ctx.input_responses or {}).get("name")
    if answer is None:
        ask = types.ElicitRequest(
            params=types.ElicitRequestFormParams(message="Your name?", requested_schema=NAME_SCHEMA)
        )
        return types.InputRequiredResult(input_requests={"name": ask})
    content = getattr(answer, "content", None) or {}
    return f"hello {content.get('name', 'nobody')}"


def _shaped(name: str) -> str:
    return name


@mcp.tool
async def shape_tool(
    name: str, properties: list[str], ctx: Context, title: str | None = None, read_only: bool | None = None
) -> str:
    """Adds or reshapes a tool, then says tools/list_changed."""
    try:
        mcp.local_provider.remove_tool(name)
    except KeyError:
        pass
    annotations = None if read_only is None else types.ToolAnnotations(read_only_hint=read_only)
    tool = FunctionTool.from_function(_shaped, name=name, title=title, annotations=annotations)
    schema = {"type": "object", "properties": {p: {"type": "string"} for p in properties}}
    mcp.add_tool(tool.model_copy(update={"parameters": schema}))
    await ctx.send_notification(types.ToolListChangedNotification())
    return f"shaped {name}"


@mcp.tool
async def drop_tool(name: str, ctx: Context) -> str:
    """Removes a tool, then says tools/list_changed."""
    mcp.local_provider.remove_tool(name)
    await ctx.send_notification(types.ToolListChangedNotification())
    return f"dropped {name}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["stdio", "http"], required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.transport == "stdio":
        mcp.run(transport="stdio", show_banner=False, log_level="WARNING")
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(64)
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    asyncio.run(
        mcp.run_http_async(show_banner=False, host="127.0.0.1", port=args.port, log_level="WARNING", sockets=[sock])
    )


if __name__ == "__main__":
    sys.exit(main())
