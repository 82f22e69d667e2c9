"""A real MCP peer for the checked-results tests: the official SDK's low-level ``Server``
(mcp 2.3.0) over stdio, in both eras, with tools that declare an ``outputSchema``.

Run it as ``python tests/peers/structured_server.py [--era both|legacy]``. The low-level
server sends what its handler returns unchecked (only the SDK's high-level ``MCPServer``
builds structured results from a function's types), so the bad tools reach the client as
they are:

* ``forecast {city}``: ``structuredContent`` that conforms (``{"city", "celsius"}``);
* ``forecast_bad {city}``: ``celsius`` as a string, against ``"type": "number"``;
* ``forecast_bare``: declares the schema, answers text only (no ``structuredContent``);
* ``forecast_error``: declares the schema, answers ``isError`` without ``structuredContent``;
* ``plain``: no ``outputSchema``; answers ``structuredContent`` of any shape.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from tests.peers.sdk_server import run_stdio

FORECAST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
    "required": ["city", "celsius"],
}
_CITY = {"type": "object", "properties": {"city": {"type": "string"}}}

TOOLS = [
    types.Tool(name=name, input_schema=_CITY, output_schema=FORECAST_SCHEMA)
    for name in ("forecast", "forecast_bad", "forecast_bare", "forecast_error")
] + [types.Tool(name="plain", input_schema=_CITY)]


def _answer(name: str, city: str) -> types.CallToolResult:
    text = [types.TextContent(type="text", text=f"{name} {city}")]
    if name == "forecast":
        return types.CallToolResult(content=text, structured_content={"city": city, "celsius": 21.5})
    if name == "forecast_bad":
        return types.CallToolResult(content=text, structured_content={"city": city, "celsius": "warm"})
    if name == "forecast_bare":
        return types.CallToolResult(content=text)
    if name == "forecast_error":
        return types.CallToolResult(content=text, is_error=True)
    if name == "plain":
        return types.CallToolResult(content=text, structured_content={"anything": [1, "two"]})
    raise MCPError(INVALID_PARAMS, f"Unknown tool: {name}")


def build_server() -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return _answer(params.name, str((params.arguments or {}).get("city", "")))

    return Server("exmcp-structured-peer", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--era", choices=["both", "legacy"], default="both")
    args = parser.parse_args(argv)
    anyio.run(run_stdio, build_server(), argparse.Namespace(era=args.era, silent_probe=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
