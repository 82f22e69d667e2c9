"""A real MCP peer whose tools ask the host: the official SDK's ``MCPServer`` (mcp 2.3.0).

Run it as ``python tests/peers/host_server.py [--era both|legacy]`` (stdio). Its
tools use the SDK's resolvers, so the SDK picks the wire per era: a legacy
connection gets standalone ``sampling/createMessage``, ``elicitation/create`` and
``roots/list`` requests mid-call; a 2026-07-28 connection gets an
``input_required`` result and the client retries with ``inputResponses``.

Tools: ``ask_llm(topic)`` (sampling), ``ask_person()`` (elicitation; the schema has
defaults), ``show_roots()`` (roots/list), ``count(n)`` (progress and a log message
per step), ``slow_sample(topic)`` (sampling, with a log before and after),
``ask_llm_tools(city)`` (a two-round sampling tool loop: the model is offered ``get_weather``;
each ``tool_use`` it answers gets a ``tool_result`` in a second request).
``connect_account(url)`` (a URL-mode ``elicitation/create``, then
``notifications/elicitation/complete`` once accepted; legacy era), ``needs_auth()``
(answers -32042 URL elicitation required until called again, then completes it).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Annotated

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import anyio
import mcp_types as types
from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, ListRoots, Resolve, Sample
from mcp.server.runner import serve_dual_era_loop, serve_loop
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp_types import (
    CreateMessageResult,
    CreateMessageResultWithTools,
    ElicitRequestURLParams,
    ListRootsResult,
    SamplingMessage,
    TextContent,
    Tool,
    ToolChoice,
    ToolResultContent,
    ToolUseContent,
)
from pydantic import BaseModel

warnings.simplefilter("ignore")  # the SDK flags logging as deprecated in 2026-07-28; legacy hosts use it
app = MCPServer("exmcp-host-peer")
#: What the host told this process: the log levels it set, how often its roots changed.
HEARD: dict[str, list[str]] = {"levels": [], "roots_changed": [], "auth_asked": []}
CITIES = ["Lisbon", "London", "Lyon", "Madrid"]


def _ask(topic: str) -> Sample:
    return Sample(
        [SamplingMessage(role="user", content=TextContent(type="text", text=f"tell me about {topic}"))], max_tokens=64
    )


WEATHER = Tool(
    name="get_weather",
    description="The weather in a city",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def _ask_tools(city: str) -> Sample:
    question = SamplingMessage(role="user", content=TextContent(type="text", text=f"weather in {city}?"))
    return Sample([question], max_tokens=64, tools=[WEATHER], tool_choice=ToolChoice(mode="auto"))


def _tool_loop(city: str, first: Annotated[CreateMessageResultWithTools, Resolve(_ask_tools)]) -> Sample:
    """The second round: the history, and a tool_result for each tool_use of the first answer."""
    uses = [block for block in first.content_as_list if isinstance(block, ToolUseContent)]
    results = [
        ToolResultContent(
            tool_use_id=use.id, content=[TextContent(type="text", text=f"sunny in {use.input.get('city')}")]
        )
        for use in uses
    ]
    question = SamplingMessage(role="user", content=TextContent(type="text", text=f"weather in {city}?"))
    history = [question, SamplingMessage(role="assistant", content=first.content_as_list)]
    if results:
        history.append(SamplingMessage(role="user", content=results))
    # The last round offers the tool with toolChoice none, so the model must answer in text.
    return Sample(history, max_tokens=64, tools=[WEATHER], tool_choice=ToolChoice(mode="none"))


class Person(BaseModel):
    name: str
    age: int = 42
    city: str = "Lyon"


def _who() -> Elicit[Person]:
    return Elicit("Who are you?", Person)


def _roots() -> ListRoots:
    return ListRoots()


@app.tool()
async def ask_llm(topic: str, answer: Annotated[CreateMessageResult, Resolve(_ask)]) -> str:
    """Sample the host's LLM; return what it said and which model."""
    content = answer.content
    text = content.text if isinstance(content, TextContent) else repr(content)
    return json.dumps({"text": text, "model": answer.model})


@app.tool()
async def ask_llm_tools(city: str, answer: Annotated[CreateMessageResultWithTools, Resolve(_tool_loop)]) -> str:
    """Run a sampling tool loop; return the final text, its stop reason and model."""
    texts = [block.text for block in answer.content_as_list if isinstance(block, TextContent)]
    return json.dumps({"text": " ".join(texts), "stopReason": answer.stop_reason, "model": answer.model})


@app.tool()
async def ask_person(person: Annotated[ElicitationResult[Person], Resolve(_who)]) -> str:
    """Elicit a person; return the action and the validated content."""
    if isinstance(person, AcceptedElicitation):
        return json.dumps({"action": "accept", "content": person.data.model_dump()})
    return json.dumps({"action": person.action})


@app.tool()
async def show_roots(roots: Annotated[ListRootsResult, Resolve(_roots)]) -> str:
    """The host's roots, as uri list."""
    return json.dumps([str(root.uri) for root in roots.roots])


@app.tool()
async def count(n: int, ctx: Context) -> str:
    """Report progress n times, with a log message per step."""
    for step in range(1, n + 1):
        await ctx.report_progress(step, n, f"step {step}")
        await ctx.info(f"counted {step}")
    return f"counted to {n}"


@app.tool()
async def connect_account(url: str, ctx: Context) -> str:
    """Send the user to ``url`` (URL-mode elicitation); once accepted, report it complete."""
    answer = await ctx.elicit_url("Connect your account to continue.", url, "acct-1")
    if answer.action == "accept":
        await ctx.session.send_elicit_complete("acct-1")
    return json.dumps({"action": answer.action})


@app.tool()
async def needs_auth(ctx: Context) -> str:
    """-32042 on the first call (a URL elicitation must come first); the next call completes it."""
    if not HEARD["auth_asked"]:
        HEARD["auth_asked"].append("x")
        elicitation = ElicitRequestURLParams(
            mode="url",
            message="Authorize access to your files.",
            url="https://auth.example.com/connect?e=auth-1",
            elicitation_id="auth-1",
        )
        raise UrlElicitationRequiredError([elicitation])
    await ctx.session.send_elicit_complete("auth-1")
    return "authorized"


@app.tool()
async def heard() -> str:
    """What the host told the server: log levels set, roots/list_changed count."""
    return json.dumps({"levels": HEARD["levels"], "roots_changed": len(HEARD["roots_changed"])})


@app.resource("city://{name}")
def city(name: str) -> str:
    """A city by name (a resource template)."""
    return f"the city of {name}"


@app.completion()
async def complete_city(ref: object, argument: types.CompletionArgument, context: object) -> types.Completion:
    values = [c for c in CITIES if c.lower().startswith(argument.value.lower())]
    return types.Completion(values=values, total=len(values), has_more=False)


async def _set_level(ctx: object, params: types.SetLevelRequestParams) -> types.EmptyResult:
    HEARD["levels"].append(params.level)
    return types.EmptyResult()


async def _roots_changed(ctx: object, params: object) -> None:
    HEARD["roots_changed"].append("x")


async def main(era: str) -> None:
    server = app._lowlevel_server
    # MCPServer leaves logging/setLevel out (deprecated in 2026-07-28); legacy hosts still send it.
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, _set_level)  # type: ignore[arg-type]
    server._notification_handlers["notifications/roots/list_changed"] = type(
        server._request_handlers["logging/setLevel"]
    )(types.NotificationParams, _roots_changed)
    options = server.create_initialization_options()
    async with server.lifespan(server) as state, stdio_server() as (read_stream, write_stream):
        if era == "both":
            await serve_dual_era_loop(server, read_stream, write_stream, lifespan_state=state, init_options=options)
        else:
            await serve_loop(server, read_stream, write_stream, lifespan_state=state, init_options=options)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--era", choices=("both", "legacy"), default="both")
    anyio.run(main, parser.parse_args().era)
