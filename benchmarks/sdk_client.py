"""Drive the official MCP SDK client (mcp 2.3.0) the way a host would.

``ClientSession`` over ``stdio_client`` or ``streamable_http_client``; the
benchmark counts (or timestamps) ``notifications/resources/updated`` in the
session's ``message_handler``. The SDK has no WebSocket client in 2.x.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from .common import UPDATED, WAIT, Flow, Stopwatch


class Counter:
    """What the message handler does with each update: count it, time the first and the n-th."""

    def __init__(self, on_update: Callable[[Any], None] | None = None) -> None:
        self.count = 0
        self.target = 0
        self.watch = Stopwatch()
        self.done = anyio.Event()
        self.on_update = on_update

    def arm(self, target: int) -> None:
        self.count = 0
        self.target = target
        self.done = anyio.Event()

    async def handler(self, message: Any) -> None:
        if getattr(message, "method", None) != UPDATED:
            return
        if self.on_update is not None:
            self.on_update(message)
        self.count += 1
        if self.count == 1:
            self.watch.start()
        if self.count == self.target:
            self.watch.stop()
            self.done.set()


@asynccontextmanager
async def sdk_session(kind: str, target: Any, counter: Counter) -> AsyncIterator[Any]:
    """An initialized ``ClientSession``: ``kind`` is "stdio" (``target`` = argv) or "http" (a URL)."""
    from mcp.client.session import ClientSession

    if kind == "stdio":
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=target[0], args=list(target[1:]))
        transport = stdio_client(params)
    elif kind == "http":
        from mcp.client.streamable_http import streamable_http_client

        transport = streamable_http_client(target)
    else:
        raise ValueError(f"the SDK client has no {kind!r} transport")
    async with transport as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write, message_handler=counter.handler) as session:
            with anyio.fail_after(WAIT):
                await session.initialize()
            yield session


async def warm_up(session: Any, counter: Counter, uri: str) -> None:
    """HTTP: flood 1 until one arrives, so the standalone GET stream is surely open."""
    counter.arm(1)
    for _ in range(100):
        await session.call_tool("flood", {"uri": uri, "count": 1})
        with anyio.move_on_after(0.2):
            await counter.done.wait()
        if counter.done.is_set():
            return
    raise RuntimeError("the SDK client never received a notification during warm-up")


def sdk_flood_rate(kind: str, target: Any, uri: str, count: int, *, warm: bool) -> Flow:
    """Notifications per second the SDK client's message handler sees (first to last)."""

    async def main() -> Flow:
        counter = Counter()
        async with sdk_session(kind, target, counter) as session:
            await session.subscribe_resource(uri)
            if warm:
                await warm_up(session, counter, uri)
            counter.arm(count)
            with anyio.fail_after(WAIT * 3):
                await session.call_tool("flood", {"uri": uri, "count": count})
                await counter.done.wait()
        return counter.watch.result(count - 1)

    return anyio.run(main)


def sdk_latencies(kind: str, target: Any, uri: str, count: int, rate: float) -> tuple[list[float], float]:
    """Wire-to-handler latencies (microseconds) of stamped, paced updates, and CPU microseconds per update."""
    samples: list[float] = []

    def on_update(message: Any) -> None:
        meta = message.params.meta or {}
        sent = meta.get("sentNs") if isinstance(meta, dict) else getattr(meta, "sentNs", None)
        if sent is None and hasattr(meta, "model_extra"):
            sent = (meta.model_extra or {}).get("sentNs")
        if sent is not None:
            samples.append((time.monotonic_ns() - int(sent)) / 1000)

    async def main() -> float:
        counter = Counter(on_update)
        async with sdk_session(kind, target, counter) as session:
            await session.subscribe_resource(uri)
            counter.arm(count)
            with anyio.fail_after(WAIT * 3):
                await session.call_tool("flood", {"uri": uri, "count": count, "rate": rate, "stamp": True})
                await counter.done.wait()
        return counter.watch.cpu

    cpu = anyio.run(main)
    return samples, cpu / count * 1e6
