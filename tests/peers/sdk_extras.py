"""What the SDK peer (tests/peers/sdk_server.py) adds for the MCP 2026-07-28 client tests,
each behind a flag so the default peer stays as every other test knows it.

``--extra-tools`` adds these tools:

* ``route``: arguments marked ``x-mcp-header`` (nested, of every allowed type); the SDK's
  HTTP server refuses a call whose ``Mcp-Param-*`` headers are missing or differ (-32020).
  ``rename_header {name}`` changes the header its ``region`` is mirrored as.
* ``bad_header``: ``x-mcp-header`` on a number, an invalid annotation.
* ``bump`` (not idempotent) and ``peek`` (``idempotentHint: true``): count their runs.
* ``drop_next {target, count}`` (HTTP): the next ``count`` POSTs of ``target`` (a method,
  or ``tools/call:<tool>``) reach the server and run, then their response stream is cut
  before the answer, as a proxy or an instance leaving a pool would (:func:`cutting_streams`).
* ``teardown_listens {reason, answer}``: the server tears every open listen down:
  ``notifications/cancelled`` naming it, then (unless ``answer`` is false) its graceful answer.
* ``raw_notify {method, params?, count?}``: sends that notification (any method) ``count`` times,
  through the SDK's ``session.send_notification``.
* ``raw_request {method, params?}``: sends that request (any method) through
  ``session.send_request``; its text is the client's result, or ``{"error": {code, message}}``.

``--runtime-tools`` adds ``add_tool {name}`` and ``remove_tool {name}``, which register or
drop a tool ``name`` (calling it answers its name) and then send ``tools/list_changed``.
``add_tool``'s optional ``catdiff_properties`` (an object) becomes that tool's inputSchema
``properties``, also for a tool it added before (a reshape).

``stats`` then also reports ``runs`` (per extra tool) and ``posts`` (per target, HTTP).
``--cache-ttl-ms MS`` (with ``--cache-scope``) puts those cache hints on every list result.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import BaseModel, ConfigDict


class _Raw(BaseModel):
    """A notification or request of any method: the SDK's session sends what it dumps to."""

    method: str
    params: dict[str, Any] | None = None


class _AnyResult(BaseModel):
    model_config = ConfigDict(extra="allow")


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def _route(region: str) -> types.Tool:
    properties = {
        "region": {"type": "string", "x-mcp-header": region},
        "shard": {"type": "integer", "x-mcp-header": "Shard"},
        "dry": {"type": "boolean", "x-mcp-header": "Dry"},
        "target": _object({"zone": {"type": "string", "x-mcp-header": "Zone"}}),
        "note": {"type": "string"},
    }
    return types.Tool(name="route", description="Echoes its arguments as JSON.", input_schema=_object(properties))


EXTRA_TOOLS: list[types.Tool] = [
    types.Tool(
        name="bad_header",
        description="x-mcp-header on a number: an invalid annotation, so HTTP clients leave it out.",
        input_schema=_object({"ratio": {"type": "number", "x-mcp-header": "Ratio"}}),
    ),
    types.Tool(name="bump", description="Counts its runs (not idempotent).", input_schema=_object({})),
    types.Tool(
        name="peek",
        description="Counts its runs; marked idempotent.",
        input_schema=_object({}),
        annotations=types.ToolAnnotations(idempotent_hint=True),
    ),
    types.Tool(
        name="rename_header",
        description="route's `region` is mirrored as Mcp-Param-<name> from now on.",
        input_schema=_object({"name": {"type": "string"}}),
    ),
    types.Tool(
        name="drop_next",
        description="http: the next `count` POSTs of `target` run, then their response stream is cut.",
        input_schema=_object({"target": {"type": "string"}, "count": {"type": "integer"}}),
    ),
    types.Tool(
        name="raw_notify",
        description="Sends the notification `method` with `params`, `count` times.",
        input_schema=_object(
            {"method": {"type": "string"}, "params": {"type": "object"}, "count": {"type": "integer"}}
        ),
    ),
    types.Tool(
        name="raw_request",
        description="Sends the request `method` with `params`; returns the client's result or error.",
        input_schema=_object({"method": {"type": "string"}, "params": {"type": "object"}}),
    ),
    types.Tool(
        name="teardown_listens",
        description="notifications/cancelled for every open listen, then (unless `answer` is false) its answer.",
        input_schema=_object({"reason": {"type": "string"}, "answer": {"type": "boolean"}}),
    ),
    types.Tool(
        name="progress_steps",
        description="Sends `steps` progress notifications `interval` seconds apart, then answers.",
        input_schema=_object({"steps": {"type": "integer"}, "interval": {"type": "number"}}),
    ),
    types.Tool(
        name="hang",
        description="Waits up to `seconds`; a cancellation of it is recorded under `key` (see was_aborted).",
        input_schema=_object({"key": {"type": "string"}, "seconds": {"type": "number"}}),
    ),
    types.Tool(
        name="was_aborted",
        description="JSON: whether the hang call under `key` was cancelled, and whether it started.",
        input_schema=_object({"key": {"type": "string"}}),
    ),
]
_NAMES = frozenset(["route", *(tool.name for tool in EXTRA_TOOLS)])
RUNTIME_TOOLS: list[types.Tool] = [
    types.Tool(
        name="add_tool",
        description="Registers a tool `name`, then tools/list_changed.",
        input_schema=_object({"name": {"type": "string"}}),
    ),
    types.Tool(
        name="remove_tool",
        description="Drops the tool `name` add_tool made, then tools/list_changed.",
        input_schema=_object({"name": {"type": "string"}}),
    ),
]
_RUNTIME_NAMES = frozenset(tool.name for tool in RUNTIME_TOOLS)


@dataclass
class Extras:
    """The peer's state for these additions."""

    enabled: bool = False
    #: --runtime-tools: add_tool / remove_tool, and the tools they added (in order).
    runtime: bool = False
    added: list[str] = field(default_factory=list)
    #: add_tool's catdiff_properties: tool -> its inputSchema properties.
    catdiff_shapes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Cache hints put on every list result (None: the SDK's default, ttlMs 0).
    cache_ttl_ms: int | None = None
    cache_scope: str = "public"
    region_header: str = "Region"
    #: Runs of each extra tool, and the POSTs received of each target.
    runs: dict[str, int] = field(default_factory=dict)
    posts: dict[str, int] = field(default_factory=dict)
    #: drop_next: target -> how many more response streams to cut.
    drops: dict[str, int] = field(default_factory=dict)
    #: hang: key -> "running", "aborted" or "finished".
    hangs: dict[str, str] = field(default_factory=dict)

    def tools(self, base: list[types.Tool]) -> list[types.Tool]:
        tools = [*base, _route(self.region_header), *EXTRA_TOOLS] if self.enabled else list(base)
        if self.runtime:
            added = [
                types.Tool(
                    name=name, description="Added at run time.", input_schema=_object(self.catdiff_shapes.get(name, {}))
                )
                for name in self.added
            ]
            tools += [*RUNTIME_TOOLS, *added]
        return tools

    def hinted(self, result: Any) -> Any:
        """``result`` with the configured cache hints."""
        if self.cache_ttl_ms is None:
            return result
        return result.model_copy(update={"ttl_ms": self.cache_ttl_ms, "cache_scope": self.cache_scope})

    def serves(self, name: str) -> bool:
        return (self.enabled and name in _NAMES) or (self.runtime and (name in _RUNTIME_NAMES or name in self.added))

    def changes_tools(self, name: str) -> bool:
        """Calling ``name`` changed the tools list (the caller sends tools/list_changed)."""
        return self.runtime and name in _RUNTIME_NAMES

    async def call(
        self, name: str, args: Mapping[str, Any], listens: Iterable[Any], listen_handler: Any, ctx: Any = None
    ) -> str:
        """Run an extra tool; returns its text. ``listens``: the open listen records
        (``listen_id``, ``ctx``); ``listen_handler``: the SDK's ``ListenHandler``; ``ctx``: the call's."""
        self.runs[name] = self.runs.get(name, 0) + 1
        session = ctx.session if ctx is not None else None
        if name in self.added:
            return name
        if name == "add_tool" or name == "remove_tool":
            tool = str(args["name"])
            if name == "add_tool" and isinstance(args.get("catdiff_properties"), dict):
                self.catdiff_shapes[tool] = dict(args["catdiff_properties"])
            if name == "add_tool" and tool not in self.added:
                self.added.append(tool)
            elif name == "remove_tool" and tool in self.added:
                self.added.remove(tool)
            return json.dumps(self.added)
        if name == "raw_notify":
            for _ in range(int(args.get("count", 1))):
                await session.send_notification(_Raw(method=str(args["method"]), params=args.get("params")))
            return "sent"
        if name == "raw_request":
            try:
                result = await session.send_request(
                    _Raw(method=str(args["method"]), params=args.get("params")), _AnyResult
                )
            except MCPError as error:
                return json.dumps({"error": {"code": error.error.code, "message": error.error.message}})
            return json.dumps(result.model_dump(mode="json"), sort_keys=True)
        if name == "progress_steps":
            token = (ctx.meta or {}).get("progress_token") if ctx is not None else None
            steps = int(args.get("steps", 3))
            for step in range(1, steps + 1):
                if token is not None:
                    await ctx.session.send_progress_notification(
                        token, step, steps, f"step {step}", related_request_id=ctx.request_id
                    )
                await anyio.sleep(float(args.get("interval", 0.05)))
            return f"done after {steps}"
        if name == "hang":
            key = str(args["key"])
            self.hangs[key] = "running"
            try:
                await anyio.sleep(float(args.get("seconds", 30)))
            except anyio.get_cancelled_exc_class():
                self.hangs[key] = "aborted"
                raise
            self.hangs[key] = "finished"
            return "finished"
        if name == "was_aborted":
            return json.dumps({"state": self.hangs.get(str(args["key"]))})
        if name == "route":
            return json.dumps(dict(args), sort_keys=True)
        if name in ("bump", "peek"):
            return str(self.runs[name])
        if name == "rename_header":
            self.region_header = str(args["name"])
            return self.region_header
        if name == "drop_next":
            self.drops[str(args["target"])] = int(args.get("count", 1))
            return "armed"
        if name == "teardown_listens":
            reason = str(args.get("reason", "server shutting down"))
            open_listens = list(listens)
            for listen in open_listens:
                cancelled = types.CancelledNotification(
                    params=types.CancelledNotificationParams(request_id=listen.listen_id, reason=reason)
                )
                await listen.ctx.session.send_notification(cancelled, related_request_id=listen.listen_id)
            if listen_handler is not None and args.get("answer", True):
                listen_handler.close()  # then each listen's graceful answer (the spec's SHOULD)
            return json.dumps({"cancelled": [listen.listen_id for listen in open_listens]})
        raise MCPError(INVALID_PARAMS, f"Unknown tool: {name}")


def cutting_streams(app: Any, extras: Extras) -> Any:
    """ASGI wrapper (HTTP, --extra-tools): counts the POSTs of each target, and for one that
    ``drop_next`` armed lets the server run it, then cuts its response stream before the
    answer: the client sees an SSE body end early."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        target = _post_target(body)
        if target is not None:
            extras.posts[target] = extras.posts.get(target, 0) + 1
        given = False

        async def replay() -> Any:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if target is None or extras.drops.get(target, 0) <= 0:
            await app(scope, replay, send)
            return
        extras.drops[target] -= 1

        async def swallow(message: Any) -> None:
            pass

        await app(scope, replay, swallow)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b": the answer is on its way\n\n", "more_body": True})
        # Returning mid-body: uvicorn drops the connection, and the answer never comes.

    return wrapped


def _post_target(body: bytes) -> str | None:
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or not isinstance(message.get("method"), str) or "id" not in message:
        return None
    params = message.get("params") if isinstance(message.get("params"), dict) else {}
    if message["method"] == "tools/call":
        return f"tools/call:{params.get('name')}"
    return str(message["method"])
