"""A real MCP peer for tests: the official SDK's low-level ``Server`` (mcp 2.3.0).

Run it as::

    python -m tests.peers.sdk_server --transport stdio|ws|http [--port N] [--era both|legacy]
                                     [--silent-probe] [--refuse-subscribe URI]... [--subscribe-delay URI=SECONDS]...
                                     [--event-store] [--retry-ms MS] [--listen-buffer N]
                                     [--unknown-session-400] [--bind-on-stdin]
                                     [--extra-tools] [--runtime-tools]
                                     [--cache-ttl-ms MS] [--cache-scope public|private]

or by path (``python tests/peers/sdk_server.py ...``), which works from any cwd.

ws/http print exactly one line ``LISTENING <port>`` on stdout once accepting
connections (port 0 picks a free port); everything else goes to stderr.
See tests/peers/FRAMES.md for the frames it produces and ``TOOLS`` below for
the test-control tools (notify, flood, stats, ...).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Started by path: make the repo root importable so `tests.peers` resolves.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.runner import serve_dual_era_loop, serve_loop
from mcp.server.streamable_http import (
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamId,
)
from mcp.server.subscriptions import (
    SUBSCRIPTION_ID_META_KEY,
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp.shared.subscriptions import event_to_notification
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, JSONRPCMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from tests.peers.sdk_extras import Extras, cutting_streams
from tests.peers.ws_adapter import websocket_app

logger = logging.getLogger("sdk_peer")

PAGE_SIZE = 2  # small on purpose: clients must follow nextCursor
RESOURCE_NOT_FOUND = -32002  # the spec's code for resources/read of an unknown URI
LISTEN_ENDED_KEEP = 1000  # bounded history for stats
METAS_KEEP = 200  # the last requests whose _meta carried a key of the client's (stats "metas")

RESOURCES: dict[str, str] = {
    "file:///a.txt": "a.txt",
    "file:///b.txt": "b.txt",
    "file:///c.txt": "c.txt",
}

PROMPTS: dict[str, types.Prompt] = {
    "greet": types.Prompt(
        name="greet",
        description="Greets someone by name",
        arguments=[types.PromptArgument(name="name", required=True)],
    ),
    "summarize": types.Prompt(
        name="summarize",
        description="Asks for a summary of a resource",
        arguments=[types.PromptArgument(name="uri", required=False)],
    ),
    "farewell": types.Prompt(name="farewell", description="Says goodbye"),
}


def _schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


_KINDS = ["resource_updated", "tools", "prompts", "resources"]

TOOLS: list[types.Tool] = [
    types.Tool(
        name="echo",
        description="Returns its text argument.",
        input_schema=_schema({"text": {"type": "string"}}, ["text"]),
    ),
    types.Tool(
        name="notify",
        description=(
            "Sends `count` notifications of `kind` to every live session: legacy sessions get plain "
            "notifications (resource_updated only if that session subscribed `uri`, unless "
            "unsubscribed_too), modern listen streams get them via the subscription bus (filtered by "
            "their acknowledged filter, unless unsubscribed_too, which writes to every open listen "
            "stream directly)."
        ),
        input_schema=_schema(
            {
                "kind": {"type": "string", "enum": _KINDS},
                "uri": {"type": "string"},
                "count": {"type": "integer", "minimum": 0, "default": 1},
                "unsubscribed_too": {"type": "boolean", "default": False},
            },
            ["kind"],
        ),
    ),
    types.Tool(
        name="flood",
        description=(
            "Sends `count` resources/updated for `uri` as fast as possible (benchmarks), pausing while "
            "a listen's buffer is over half full so the SDK does not end it."
        ),
        input_schema=_schema(
            {"uri": {"type": "string"}, "count": {"type": "integer", "minimum": 0}},
            ["uri", "count"],
        ),
    ),
    types.Tool(
        name="sleep",
        description="Waits `seconds` then returns (timeout / cancellation tests).",
        input_schema=_schema({"seconds": {"type": "number", "minimum": 0}}, ["seconds"]),
    ),
    types.Tool(
        name="stats",
        description=(
            "JSON text: subscribe/unsubscribe counters, per-session subscriptions, open listens."
            " With `mine`, the counters, subscriptions and ops are the calling legacy session's only,"
            " so tests can share one long-lived peer."
        ),
        input_schema=_schema({"mine": {"type": "boolean"}}),
    ),
    types.Tool(
        name="close_listens",
        description="Gracefully ends every open subscriptions/listen stream (the server answers each listen).",
        input_schema=_schema({}),
    ),
    types.Tool(
        name="configure",
        description=(
            "Changes subscribe behaviour at runtime: `refuse_subscribe` URIs make resources/subscribe "
            "fail with -32602; `subscribe_delay` {uri: seconds} slows it down; `allow_subscribe` "
            "removes URIs from the refused set."
        ),
        input_schema=_schema(
            {
                "refuse_subscribe": {"type": "array", "items": {"type": "string"}},
                "allow_subscribe": {"type": "array", "items": {"type": "string"}},
                "subscribe_delay": {
                    "type": "object",
                    "additionalProperties": {"type": "number"},
                },
            }
        ),
    ),
]


# --------------------------------------------------------------------------- state


@dataclass
class SessionRecord:
    """One legacy (initialize-based) connection as the server sees it."""

    key: str
    connection: Connection
    protocol_version: str
    subscribed: list[str] = field(default_factory=list)  # ordered set
    subscribe_calls: dict[str, int] = field(default_factory=dict)
    unsubscribe_calls: dict[str, int] = field(default_factory=dict)
    closed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "protocol_version": self.protocol_version,
            "subscribed": list(self.subscribed),
            "subscribe_calls": dict(self.subscribe_calls),
            "unsubscribe_calls": dict(self.unsubscribe_calls),
            "closed": self.closed,
        }


@dataclass
class ListenRecord:
    """One open subscriptions/listen stream (modern era)."""

    listen_id: types.RequestId
    requested: dict[str, Any]
    ctx: ServerRequestContext[Any, Any]


@dataclass
class PeerState:
    era: str
    listen_buffer: int = 1024  # the SDK's default max_buffered_events per listen
    refuse_subscribe: set[str] = field(default_factory=set)
    subscribe_delay: dict[str, float] = field(default_factory=dict)
    sessions: dict[str, SessionRecord] = field(default_factory=dict)
    subscribe_calls: dict[str, int] = field(default_factory=dict)
    unsubscribe_calls: dict[str, int] = field(default_factory=dict)
    # Every wire subscribe/unsubscribe in arrival order, for pairing/ordering checks.
    ops: list[dict[str, Any]] = field(default_factory=list)
    #: ``{"method", "meta"}`` of the last requests whose ``_meta`` had a key outside the MCP envelope.
    metas: list[dict[str, Any]] = field(default_factory=list)
    versions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RESOURCES, 1))
    listens: dict[types.RequestId, ListenRecord] = field(default_factory=dict)
    listens_total: int = 0
    listens_ended: list[dict[str, Any]] = field(default_factory=list)
    next_conn: int = 0
    #: --extra-tools and --cache-ttl-ms (tests/peers/sdk_extras.py).
    extras: Extras = field(default_factory=Extras)
    #: ``ping`` and ``server/discover`` requests received (a client's keepalive probes among them).
    status_probes: dict[str, int] = field(default_factory=dict)

    def tools(self) -> list[types.Tool]:
        return self.extras.tools(TOOLS)

    def hinted(self, result: Any) -> Any:
        return self.extras.hinted(result)

    def live_sessions(self) -> list[SessionRecord]:
        return [s for s in self.sessions.values() if not s.closed]

    def stats(self, mine: SessionRecord | None = None) -> dict[str, Any]:
        """The counters; with ``mine``, those of that session alone (as if it were the only one)."""
        sessions = [mine] if mine is not None else list(self.sessions.values())
        currently: dict[str, int] = {}
        for s in sessions:
            for uri in s.subscribed if not s.closed else ():
                currently[uri] = currently.get(uri, 0) + 1
        return {
            "era": self.era,
            "subscribe_calls": dict(mine.subscribe_calls if mine is not None else self.subscribe_calls),
            "unsubscribe_calls": dict(mine.unsubscribe_calls if mine is not None else self.unsubscribe_calls),
            "subscribed": currently,  # URI -> number of live sessions holding it
            "sessions": {s.key: s.to_json() for s in sessions},
            "ops": [op for op in self.ops if mine is None or op["session"] == mine.key],
            "listens": {str(k): r.requested for k, r in self.listens.items()},
            "listen_ids": [r.listen_id for r in self.listens.values()],
            "listens_total": self.listens_total,
            "listens_ended": list(self.listens_ended),
            "versions": dict(self.versions),
            "metas": list(self.metas),
            "runs": dict(self.extras.runs),
            "posts": dict(self.extras.posts),
            "status_probes": dict(self.status_probes),
        }


def _session_of(ctx: ServerRequestContext[Any, Any]) -> Connection:
    # The low-level context exposes the per-connection object only through the
    # session proxy; it is stable for the life of a legacy connection.
    return ctx.session._connection


class SessionTracker:
    """Server middleware: registers every legacy connection on its first message, and records
    the requests whose ``_meta`` carries keys of the client's own (``stats`` "metas")."""

    def __init__(self, state: PeerState) -> None:
        self.state = state

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            self.record(ctx)
        if ctx.method in ("ping", "server/discover"):
            self.state.status_probes[ctx.method] = self.state.status_probes.get(ctx.method, 0) + 1
        meta = ctx.params.get("_meta") if ctx.params is not None else None
        if isinstance(meta, Mapping) and any(not str(key).startswith("io.modelcontextprotocol/") for key in meta):
            # What arrived, as it arrived: the tests of a client's meta= read it back from stats.
            self.state.metas.append({"method": ctx.method, "meta": dict(meta)})
            del self.state.metas[:-METAS_KEEP]
        return await call_next(ctx)

    def record(self, ctx: ServerRequestContext[Any, Any]) -> SessionRecord:
        connection = _session_of(ctx)
        key = connection.state.get("peer_key")
        if key is None:
            if connection.session_id is not None:
                # HTTP: the Mcp-Session-Id, so tests can correlate.
                key = connection.session_id
            else:
                self.state.next_conn += 1
                key = f"conn-{self.state.next_conn}"
            connection.state["peer_key"] = key
            record = SessionRecord(key=key, connection=connection, protocol_version=ctx.protocol_version)
            self.state.sessions[key] = record
            connection.exit_stack.callback(self._closed, key)
        record = self.state.sessions[key]
        record.protocol_version = connection.protocol_version
        return record

    def _closed(self, key: str) -> None:
        record = self.state.sessions.get(key)
        if record is not None:
            record.closed = True


class RecordingListen:
    """Wraps the SDK's ListenHandler to record open listens (and reach them directly)."""

    def __init__(self, state: PeerState, inner: ListenHandler) -> None:
        self.state = state
        self.inner = inner

    async def __call__(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: types.SubscriptionsListenRequestParams,
    ) -> types.SubscriptionsListenResult:
        listen_id = ctx.request_id
        requested = params.notifications.model_dump(by_alias=True, mode="json", exclude_none=True)
        if listen_id is not None:
            self.state.listens[listen_id] = ListenRecord(listen_id, requested, ctx)
        self.state.listens_total += 1
        how = "cancelled"
        try:
            result = await self.inner(ctx, params)
            how = "complete"
            return result
        except MCPError:
            how = "error"
            raise
        finally:
            if listen_id is not None:
                self.state.listens.pop(listen_id, None)
            self.state.listens_ended.append({"id": listen_id, "how": how})
            del self.state.listens_ended[:-LISTEN_ENDED_KEEP]


# --------------------------------------------------------------------------- server


def _page(items: list[Any], cursor: str | None) -> tuple[list[Any], str | None]:
    start = 0
    if cursor is not None:
        try:
            start = int(cursor.removeprefix("offset-"))
        except ValueError:
            raise MCPError(INVALID_PARAMS, f"Invalid cursor: {cursor!r}") from None
        if not cursor.startswith("offset-") or not 0 <= start <= len(items):
            raise MCPError(INVALID_PARAMS, f"Invalid cursor: {cursor!r}")
    end = start + PAGE_SIZE
    return items[start:end], (f"offset-{end}" if end < len(items) else None)


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


class _PeerServer(Server[Any]):
    """Advertises every listChanged flag by default.

    The SDK's streamable-HTTP manager calls serve_loop() without init options,
    so the runner falls back to create_initialization_options() with no
    NotificationOptions (all listChanged false). Defaulting here keeps the
    legacy initialize result identical on every transport.
    """

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options
            or NotificationOptions(prompts_changed=True, resources_changed=True, tools_changed=True),
            experimental_capabilities,
            extensions,
        )


def build_server(
    state: PeerState,
) -> tuple[Server[Any], ListenHandler | None, InMemorySubscriptionBus]:
    bus = InMemorySubscriptionBus()
    tracker = SessionTracker(state)
    modern = state.era == "both"
    listen_handler = ListenHandler(bus, max_buffered_events=state.listen_buffer) if modern else None

    async def pace_listens() -> None:
        """Back-pressure for `flood`: the SDK ends a listen whose backlog fills up,
        so wait while any open listen's buffer is more than half full."""
        streams = getattr(listen_handler, "_streams", ())  # SDK-private, best effort
        while any(
            st.current_buffer_used * 2 > st.max_buffer_size for st in (stream.statistics() for stream in list(streams))
        ):
            await anyio.sleep(0.001)

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        items = [types.Resource(uri=uri, name=name, mime_type="text/plain") for uri, name in RESOURCES.items()]
        page, next_cursor = _page(items, params.cursor if params else None)
        return state.hinted(types.ListResourcesResult(resources=page, next_cursor=next_cursor))

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri not in RESOURCES:
            raise MCPError(RESOURCE_NOT_FOUND, "Resource not found", {"uri": uri})
        text = f"{RESOURCES[uri]} version {state.versions[uri]}"
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="text/plain", text=text)]
        )

    async def subscribe(ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams) -> types.EmptyResult:
        uri = str(params.uri)
        session = tracker.record(ctx)
        # Counted on arrival, so `ops` is wire order even when a delay reorders completions.
        ok = uri not in state.refuse_subscribe
        state.ops.append({"op": "subscribe", "uri": uri, "session": session.key, "ok": ok})
        session.subscribe_calls[uri] = session.subscribe_calls.get(uri, 0) + 1
        state.subscribe_calls[uri] = state.subscribe_calls.get(uri, 0) + 1
        delay = state.subscribe_delay.get(uri)
        if delay:
            # Lets tests prove a slow subscribe never stalls delivery.
            await anyio.sleep(delay)
        if not ok:
            raise MCPError(INVALID_PARAMS, f"Subscription refused: {uri}", {"uri": uri})
        if uri not in session.subscribed:
            session.subscribed.append(uri)
        return types.EmptyResult()

    async def unsubscribe(
        ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        uri = str(params.uri)
        session = tracker.record(ctx)
        state.ops.append({"op": "unsubscribe", "uri": uri, "session": session.key, "ok": True})
        session.unsubscribe_calls[uri] = session.unsubscribe_calls.get(uri, 0) + 1
        state.unsubscribe_calls[uri] = state.unsubscribe_calls.get(uri, 0) + 1
        if uri in session.subscribed:
            session.subscribed.remove(uri)
        return types.EmptyResult()

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        page, next_cursor = _page(state.tools(), params.cursor if params else None)
        return state.hinted(types.ListToolsResult(tools=page, next_cursor=next_cursor))

    async def list_prompts(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        page, next_cursor = _page(list(PROMPTS.values()), params.cursor if params else None)
        return state.hinted(types.ListPromptsResult(prompts=page, next_cursor=next_cursor))

    async def get_prompt(
        ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        prompt = PROMPTS.get(params.name)
        if prompt is None:
            raise MCPError(INVALID_PARAMS, f"Unknown prompt: {params.name}")
        args = params.arguments or {}
        if params.name == "greet":
            if "name" not in args:
                raise MCPError(INVALID_PARAMS, "Missing required argument: name")
            text = f"Hello, {args['name']}!"
        elif params.name == "summarize":
            text = f"Please summarize {args.get('uri', 'file:///a.txt')}."
        else:
            text = "Goodbye."
        return types.GetPromptResult(
            description=prompt.description,
            messages=[types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))],
        )

    async def deliver(event: ServerEvent, *, unsubscribed_too: bool) -> None:
        """One event to everyone who should hear it (see the notify tool's description)."""
        for session in state.live_sessions():
            conn = session.connection
            if isinstance(event, ResourceUpdated):
                if unsubscribed_too or event.uri in session.subscribed:
                    await conn.send_resource_updated(event.uri)
            elif isinstance(event, ToolsListChanged):
                await conn.send_tool_list_changed()
            elif isinstance(event, PromptsListChanged):
                await conn.send_prompt_list_changed()
            else:
                await conn.send_resource_list_changed()
        if not modern:
            return
        if unsubscribed_too:
            # Bypass the bus's per-stream filter so client-side filtering can be tested.
            for listen in list(state.listens.values()):
                meta = {SUBSCRIPTION_ID_META_KEY: listen.listen_id}
                await listen.ctx.session.send_notification(
                    event_to_notification(event, meta),
                    related_request_id=listen.listen_id,
                )
        else:
            await bus.publish(event)

    def event_for(kind: str, uri: str | None) -> ServerEvent:
        if kind == "resource_updated":
            if not uri:
                raise MCPError(INVALID_PARAMS, "notify kind=resource_updated needs a uri")
            return ResourceUpdated(uri=uri)
        if kind == "tools":
            return ToolsListChanged()
        if kind == "prompts":
            return PromptsListChanged()
        if kind == "resources":
            return ResourcesListChanged()
        raise MCPError(INVALID_PARAMS, f"Unknown notify kind: {kind!r}")

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args: Mapping[str, Any] = params.arguments or {}
        name = params.name
        if name == "echo":
            return _text(str(args.get("text", "")))
        if name == "notify":
            event = event_for(str(args.get("kind")), args.get("uri"))
            count = int(args.get("count", 1))
            unsubscribed_too = bool(args.get("unsubscribed_too", False))
            if isinstance(event, ResourceUpdated) and event.uri in state.versions:
                # A refetch after the event sees new content.
                state.versions[event.uri] += 1
            for _ in range(count):
                await deliver(event, unsubscribed_too=unsubscribed_too)
            return _text(json.dumps({"sent": count}))
        if name == "flood":
            uri, count = str(args["uri"]), int(args["count"])
            started = time.perf_counter()
            event = ResourceUpdated(uri=uri)
            for _ in range(count):
                await deliver(event, unsubscribed_too=False)
                await pace_listens()
            return _text(json.dumps({"sent": count, "seconds": time.perf_counter() - started}))
        if name == "sleep":
            await anyio.sleep(float(args.get("seconds", 0)))
            return _text("slept")
        if name == "stats":
            mine = tracker.record(ctx) if args.get("mine") else None
            return _text(json.dumps(state.stats(mine), sort_keys=True))
        if name == "close_listens":
            open_ids = [r.listen_id for r in state.listens.values()]
            if listen_handler is not None:
                listen_handler.close()
            return _text(json.dumps({"closed": open_ids}))
        if state.extras.serves(name):
            text = await state.extras.call(name, args, state.listens.values(), listen_handler, ctx)
            if state.extras.changes_tools(name):
                await deliver(ToolsListChanged(), unsubscribed_too=False)
            return _text(text)
        if name == "configure":
            state.refuse_subscribe.update(args.get("refuse_subscribe") or [])
            state.refuse_subscribe.difference_update(args.get("allow_subscribe") or [])
            state.subscribe_delay.update({k: float(v) for k, v in (args.get("subscribe_delay") or {}).items()})
            return _text(
                json.dumps(
                    {
                        "refuse_subscribe": sorted(state.refuse_subscribe),
                        "subscribe_delay": state.subscribe_delay,
                    }
                )
            )
        raise MCPError(INVALID_PARAMS, f"Unknown tool: {name}")

    server: Server[Any] = _PeerServer(
        "exmcp-test-peer",
        version="1.0.0",
        instructions="Test peer for exmcp_actors (mcp SDK low-level server).",
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_subscriptions_listen=RecordingListen(state, listen_handler) if listen_handler is not None else None,
    )
    server.middleware.append(tracker)
    if not modern:
        # A pre-2026 server has no such method at all (the legacy loop already
        # refuses it at its version; removing it keeps that true everywhere).
        server._request_handlers.pop("server/discover", None)
    return server, listen_handler, bus


def init_options(server: Server[Any]) -> InitializationOptions:
    # Every listChanged flag on (see _PeerServer): legacy clients see a fully capable server.
    return server.create_initialization_options()


# --------------------------------------------------------------------------- transports

ReadS = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteS = MemoryObjectSendStream[SessionMessage]


async def _drop_discover(source: Any, sink: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
    """--silent-probe: forward everything except `server/discover`, which is never answered."""
    async with sink:
        try:
            async for item in source:
                if (
                    isinstance(item, SessionMessage)
                    and isinstance(item.message, types.JSONRPCRequest)
                    and item.message.method == "server/discover"
                ):
                    logger.info("silent-probe: dropped server/discover id=%r", item.message.id)
                    continue
                await sink.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass


def make_serve(
    server: Server[Any], era: str, lifespan_state: Any, silent_probe: bool
) -> Callable[[Any, Any], Awaitable[None]]:
    """The per-connection driver for duplex transports (stdio, ws)."""
    options = init_options(server)

    async def serve(read_stream: Any, write_stream: Any) -> None:
        async with anyio.create_task_group() as tg:
            if silent_probe:
                send, recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
                tg.start_soon(_drop_discover, read_stream, send)
                read_stream = recv
            if era == "both":
                # The SDK picks the era from the first request: a request whose
                # params._meta carries the protocolVersion key opens a modern connection.
                await serve_dual_era_loop(
                    server,
                    read_stream,
                    write_stream,
                    lifespan_state=lifespan_state,
                    init_options=options,
                )
            else:
                try:
                    await serve_loop(
                        server,
                        read_stream,
                        write_stream,
                        lifespan_state=lifespan_state,
                        init_options=options,
                    )
                finally:
                    await write_stream.aclose()
            tg.cancel_scope.cancel()

    return serve


async def run_stdio(server: Server[Any], args: argparse.Namespace) -> None:
    from mcp.server.stdio import stdio_server

    async with anyio.create_task_group() as tg:

        async def on_sigterm() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    # The SDK reads stdin in a worker thread that cancellation
                    # cannot interrupt, so a clean unwind would wait for EOF.
                    # Nothing is buffered on our side: exit now.
                    logger.info("signal received; exiting")
                    sys.stderr.flush()
                    os._exit(0)

        tg.start_soon(on_sigterm)
        async with (
            server.lifespan(server) as lifespan_state,
            stdio_server() as (read_stream, write_stream),
        ):
            serve = make_serve(server, args.era, lifespan_state, args.silent_probe)
            await serve(read_stream, write_stream)
        tg.cancel_scope.cancel()


class _ListeningServer:
    """uvicorn.Server that announces `LISTENING <port>` once it accepts connections."""

    @staticmethod
    def make(config: Any, port: int) -> Any:
        import uvicorn

        class Announcing(uvicorn.Server):
            async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                await super().startup(sockets=sockets)
                if self.started:
                    print(f"LISTENING {port}", flush=True)

            async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
                # Open SSE/WebSocket streams get cancelled after the grace period;
                # uvicorn logs that (with tracebacks) as errors. Expected here.
                for name in ("uvicorn.error", "uvicorn", "sse_starlette"):
                    logging.getLogger(name).setLevel(logging.CRITICAL)
                await super().shutdown(sockets=sockets)

            def handle_exit(self, sig: int, frame: Any) -> None:
                super().handle_exit(sig, frame)
                # uvicorn re-raises the signal after its graceful shutdown (exit
                # status -15); a test peer that stopped cleanly should exit 0.
                self._captured_signals.clear()

        return Announcing(config)


def bind_socket(port: int, backlog: int = 128) -> socket.socket:
    """Bind 127.0.0.1:port ourselves, with SO_REUSEADDR so a restart can reuse the port at once
    (``backlog``: a benchmark's hundreds of clients connect at once)."""
    # IPPROTO_TCP named explicitly: asyncio sets TCP_NODELAY on accepted sockets only then,
    # and without it every small HTTP response waits ~40 ms for delayed ACKs.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


async def run_uvicorn(app: Any, sock: socket.socket) -> None:
    import uvicorn

    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        ws="websockets-sansio",
        # Open SSE / WebSocket streams never finish on their own: cap the
        # graceful phase so SIGTERM stops the peer quickly.
        # uvicorn hands this to asyncio.wait_for, so a float works.
        timeout_graceful_shutdown=0.5,  # type: ignore[arg-type]
    )
    server = _ListeningServer.make(config, sock.getsockname()[1])
    await server.serve(sockets=[sock])


def legacy_only_http(app: Any) -> Any:
    """ASGI wrapper that answers modern-version requests like a pre-2026 server would: 400."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            version = next(
                (v.decode("latin-1") for k, v in scope["headers"] if k == b"mcp-protocol-version"),
                None,
            )
            if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
                body = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {
                            "code": INVALID_REQUEST,
                            "message": f"Bad Request: Unsupported protocol version: {version}. Supported versions: "
                            + ", ".join(HANDSHAKE_PROTOCOL_VERSIONS),
                        },
                    },
                    separators=(",", ":"),
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return wrapped


def unknown_session_400(app: Any) -> Any:
    """ASGI wrapper that answers an unknown session id as the Python SDK 1.x (and servers built
    like it) do after a restart: 400 "Bad Request: No valid session ID provided", not 404."""
    body = b"Bad Request: No valid session ID provided"

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not any(k == b"mcp-session-id" for k, _ in scope["headers"]):
            await app(scope, receive, send)
            return
        rewritten = False

        async def rewrite(message: Any) -> None:
            nonlocal rewritten
            if message["type"] == "http.response.start" and message["status"] == 404:
                rewritten = True
                headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 400, "headers": headers})
                await send({"type": "http.response.body", "body": body})
            elif not rewritten:
                await send(message)

        await app(scope, receive, rewrite)

    return wrapped


class MemoryEventStore(EventStore):
    """Minimal in-memory EventStore (enables SSE `id:` + Last-Event-ID resumption)."""

    def __init__(self) -> None:
        self.events: list[tuple[StreamId, EventId, JSONRPCMessage | None]] = []
        self.counter = 0

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        self.counter += 1
        event_id = str(self.counter)
        self.events.append((stream_id, event_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        index = next((i for i, e in enumerate(self.events) if e[1] == last_event_id), None)
        if index is None:
            return None
        stream_id = self.events[index][0]
        for sid, eid, message in self.events[index + 1 :]:
            if sid == stream_id and message is not None:
                await send_callback(EventMessage(message, eid))
        return stream_id


def build_app(server: Server[Any], state: PeerState, args: argparse.Namespace) -> Any:
    if args.transport == "http":
        app = server.streamable_http_app(
            event_store=MemoryEventStore() if args.event_store else None,
            retry_interval=args.retry_ms,
            session_idle_timeout=None,
        )
        app = unknown_session_400(app) if args.unknown_session_400 else app
        app = cutting_streams(app, state.extras) if args.extra_tools else app
        return legacy_only_http(app) if args.era == "legacy" else app

    holder: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        # Enter the server lifespan once for the process, like the SDK's HTTP manager does.
        async with server.lifespan(server) as lifespan_state:
            holder["serve"] = make_serve(server, args.era, lifespan_state, args.silent_probe)
            yield

    async def serve(read_stream: Any, write_stream: Any) -> None:
        await holder["serve"](read_stream, write_stream)

    return websocket_app(serve, lifespan=lifespan)


def _delay_arg(text: str) -> tuple[str, float]:
    uri, _, seconds = text.rpartition("=")
    if not uri:
        raise argparse.ArgumentTypeError("expected URI=SECONDS")
    return uri, float(seconds)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--transport", choices=["stdio", "ws", "http"], required=True)
    p.add_argument(
        "--port",
        type=int,
        default=0,
        help="ws/http port on 127.0.0.1; 0 picks a free one",
    )
    p.add_argument("--era", choices=["both", "legacy"], default="both")
    p.add_argument(
        "--silent-probe",
        action="store_true",
        help="never answer server/discover (stdio/ws)",
    )
    p.add_argument("--refuse-subscribe", action="append", default=[], metavar="URI")
    p.add_argument(
        "--subscribe-delay",
        action="append",
        default=[],
        type=_delay_arg,
        metavar="URI=SECONDS",
    )
    p.add_argument(
        "--event-store",
        action="store_true",
        help="http: in-memory event store (SSE ids, resumption)",
    )
    p.add_argument(
        "--retry-ms",
        type=int,
        default=None,
        help="http: SSE retry field (with --event-store)",
    )
    p.add_argument(
        "--listen-buffer",
        type=int,
        default=1024,
        help="events buffered per listen before the SDK ends it (SDK default 1024)",
    )
    p.add_argument(
        "--unknown-session-400",
        action="store_true",
        help="http: answer an unknown session id with 400 (as the Python SDK 1.x does), not 404",
    )
    p.add_argument(
        "--bind-on-stdin",
        action="store_true",
        help="ws/http: import everything, print WARM, then bind and serve once a line arrives on stdin",
    )
    p.add_argument(
        "--extra-tools",
        action="store_true",
        help="add the tools of the 2026-07-28 client tests (x-mcp-header, idempotent, drop_next, teardown_listens)",
    )
    p.add_argument(
        "--runtime-tools",
        action="store_true",
        help="add add_tool / remove_tool, which change the tools list at run time (then tools/list_changed)",
    )
    p.add_argument("--cache-ttl-ms", type=int, default=None, help="ttlMs on every list result")
    p.add_argument("--cache-scope", choices=["public", "private"], default="public", help="cacheScope with it")
    p.add_argument("--log-level", default="WARNING")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="peer %(levelname)s %(name)s: %(message)s",
    )
    state = PeerState(
        era=args.era,
        listen_buffer=args.listen_buffer,
        refuse_subscribe=set(args.refuse_subscribe),
        subscribe_delay=dict(args.subscribe_delay),
        extras=Extras(
            enabled=args.extra_tools,
            runtime=args.runtime_tools,
            cache_ttl_ms=args.cache_ttl_ms,
            cache_scope=args.cache_scope,
        ),
    )
    server, _listen, _bus = build_server(state)

    if args.transport == "stdio":
        try:
            anyio.run(run_stdio, server, args)
        except KeyboardInterrupt:
            pass
        sys.stderr.flush()
        # The SDK's stdin reader is a non-daemon worker thread that may still be
        # blocked in read(); don't let it keep a stopped peer alive.
        os._exit(0)

    app = build_app(server, state, args)
    if args.bind_on_stdin:
        # A warm standby: everything is imported; it binds the port only when told to, so a
        # test can bring a "restarted" server back within milliseconds.
        import uvicorn  # noqa: F401

        print("WARM", flush=True)
        if not sys.stdin.readline():
            return 0
    sock = bind_socket(args.port)
    try:
        anyio.run(run_uvicorn, app, sock)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
