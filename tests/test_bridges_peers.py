"""Each bridge carries a resource watch's contents from a real server to where the host's code
runs, in both eras, across a kill and a respawn of the server: the TypeScript SDK v2 server over
stdio (tests/peers/ts_server.mjs, tool ``touch``; test_bridges.py has the Python SDK server). The
contents come first, again after a change, again after the kill (the new process starts from
its first version), and again after a change of the new process."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.bridges import AsyncioSubscriber, QtSubscriber, TkSubscriber
from tests.gui_helpers import run_tk
from tests.peers.ts_peer import missing_tools as missing_ts
from tests.sdk_helpers import ClientPool, TapTransport, kill_pid, stdio_era_argv

WAIT = 20.0
FAST = mcp.Backoff(initial=0.05, factor=2, maximum=0.5, jitter=0.1)
URI = "demo://a"
ERAS = [pytest.param("legacy", id="legacy"), pytest.param("auto", id="modern")]

pytestmark = pytest.mark.skipif(missing_ts() is not None, reason=str(missing_ts()))

#: ``pump(until)``: run the bridge's loop on this thread until ``until()`` (AssertionError after WAIT).
Pump = Callable[[Callable[[], bool]], None]


def _texts(got: list[Any]) -> list[str]:
    return [m.contents[0]["text"] for m in got if isinstance(m, mcp.ResourceChanged)]


def _follow(client: mcp.Client, tap: TapTransport, subscriber: Any, got: list[Any], pump: Pump) -> None:
    """The watch's life across a change, a kill and a change of the new process."""
    client.watch_resource(URI, subscriber=subscriber, timeout=WAIT)
    pump(lambda: _texts(got) == ["demo://a v0"])
    client.call_tool("touch", {"uri": URI}, timeout=WAIT)
    pump(lambda: _texts(got)[-1:] == ["demo://a v1"])
    pid = tap.pid
    assert pid is not None
    kill_pid(pid)
    pump(lambda: len(_texts(got)) == 3)
    assert _texts(got)[-1] == "demo://a v0" and tap.pid != pid  # read again from the new process
    client.call_tool("touch", {"uri": URI}, timeout=WAIT)
    pump(lambda: _texts(got)[-1:] == ["demo://a v1"])
    assert _texts(got) == ["demo://a v0", "demo://a v1", "demo://a v0", "demo://a v1"]


def _recorder() -> tuple[list[Any], set[int], Callable[[Any], None]]:
    """What a callback got, the threads it ran on, and the callback."""
    got: list[Any] = []
    threads: set[int] = set()

    def record(message: Any) -> None:
        got.append(message)
        threads.add(threading.get_ident())

    return got, threads, record


def _connect(pool: ClientPool, argv: list[str], protocol: str) -> tuple[mcp.Client, TapTransport]:
    tap = TapTransport(mcp.StdioTransport(argv))
    client = pool.connect(tap, protocol=protocol, backoff=FAST, connect_timeout=WAIT, max_reconnect_attempts=60)
    return client, tap


@pytest.mark.parametrize("protocol", ERAS)
def test_an_asyncio_reader_follows_a_ts_servers_resource_across_a_kill(client_pool: ClientPool, protocol: str) -> None:
    client, tap = _connect(client_pool, stdio_era_argv("ts", protocol), protocol)
    _asyncio_follow(lambda sub, got, pump: _follow(client, tap, sub, got, pump))


def _asyncio_follow(body: Callable[[Any, list[Any], Pump], None]) -> None:
    loop = asyncio.new_event_loop()
    try:
        sub = AsyncioSubscriber(loop)
        got: list[Any] = []
        arrived = asyncio.Event()

        async def read() -> None:
            async for message in sub:
                got.append(message)
                arrived.set()

        async def until(done: Callable[[], bool]) -> None:
            while not done():
                arrived.clear()
                await arrived.wait()

        reader = loop.create_task(read())

        def pump(done: Callable[[], bool]) -> None:
            loop.run_until_complete(asyncio.wait_for(until(done), WAIT))

        body(sub, got, pump)
        sub.close()
        loop.run_until_complete(asyncio.wait_for(reader, WAIT))
        assert sub.dropped == 0
    finally:
        loop.close()


@pytest.mark.parametrize("protocol", ERAS)
def test_a_tk_callback_follows_a_ts_servers_resource_across_a_kill(
    tk_root: Any, client_pool: ClientPool, protocol: str
) -> None:
    client, tap = _connect(client_pool, stdio_era_argv("ts", protocol), protocol)
    got, threads, record = _recorder()
    sub = TkSubscriber(tk_root, record)

    def pump(done: Callable[[], bool]) -> None:
        run_tk(tk_root, done, lambda: None)
        assert done(), "the Tk callback did not get what the server sent"

    _follow(client, tap, sub, got, pump)
    assert threads == {threading.get_ident()}  # every callback ran on the Tk thread
    # The client lets go of the subscriber before this thread does: a library thread must never
    # hold the last reference to a Tk object (Tcl aborts when it is freed on another thread).
    client.disconnect()
    sub.close()
    gc.collect()  # whatever cycle still holds a Tk object is freed here, on the Tk thread


@pytest.mark.parametrize("protocol", ERAS)
def test_a_qt_slot_follows_a_ts_servers_resource_across_a_kill(
    qt_app: Any, client_pool: ClientPool, protocol: str
) -> None:
    from PySide6.QtCore import QEventLoop, QTimer

    client, tap = _connect(client_pool, stdio_era_argv("ts", protocol), protocol)
    sub = QtSubscriber()
    got, threads, slot = _recorder()
    sub.message.connect(slot)

    def pump(done: Callable[[], bool]) -> None:
        loop, check = QEventLoop(), QTimer()
        deadline = time.monotonic() + WAIT
        check.timeout.connect(lambda: loop.quit() if done() or time.monotonic() > deadline else None)
        check.start(10)
        loop.exec()
        check.stop()
        assert done(), "the Qt slot did not get what the server sent"

    _follow(client, tap, sub, got, pump)
    assert threads == {threading.get_ident()}  # every slot ran on the object's thread
    # The client lets go of the subscriber before this thread does: a Qt object with messages
    # queued for its thread must be deleted on that thread, never by a library thread.
    client.disconnect()
    sub.message.disconnect(slot)
    gc.collect()  # whatever cycle still holds a Qt object is freed here, on its thread
