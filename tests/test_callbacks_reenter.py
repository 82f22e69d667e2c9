"""Host code that calls back into the client from inside a callback of the live picture: a
resource watch's ``put()`` (on its courier thread), a catalog's ``put()`` (on the catalog's
worker) and a status ``put()`` (on the subscriber's proxy). Each callback closes its own
handle, disconnects, opens another watch, refreshes the catalog with ``wait=True`` or calls a
tool; none may hang, and the client carries on afterwards."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import FakeServer
from tests.waiting import WAIT

URI = "file:///fake/readme.txt"
OTHER = "file:///fake/other.txt"
ACTIONS = ("close", "disconnect", "watch_resource", "refresh_wait", "call_tool")


class CallingBack:
    """A ``put()`` subscriber that runs ``action`` once, on the first message ``wanted(message)``
    accepts, in the library's thread that delivers it; ``done`` holds what it returned or raised."""

    def __init__(self, wanted: Callable[[Any], bool]) -> None:
        self.wanted = wanted
        self.action: Callable[[], Any] | None = None
        self.done: queue.SimpleQueue[tuple[str, Any, str]] = queue.SimpleQueue()
        self.messages: list[Any] = []

    def put(self, message: Any) -> None:
        self.messages.append(message)
        if not self.wanted(message):
            return
        action, self.action = self.action, None
        if action is None:
            return
        try:
            self.done.put(("returned", action(), threading.current_thread().name))
        except Exception as exc:  # the test reads what it raised
            self.done.put(("raised", exc, threading.current_thread().name))

    def outcome(self) -> tuple[str, Any, str]:
        try:
            return self.done.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError(f"the callback's call into the client did not return within {WAIT}s") from None


def _act(name: str, client: mcp.Client, own: Callable[[], Any], catalog: mcp.Catalog) -> Callable[[], Any]:
    def watch_other() -> Any:
        other = client.watch_resource(OTHER)
        try:
            return other.get(timeout=WAIT)[0]
        finally:
            other.close()

    return {
        "close": own,
        "disconnect": lambda: client.disconnect(timeout=WAIT),
        "watch_resource": watch_other,
        "refresh_wait": lambda: catalog.refresh("tools", wait=True),
        "call_tool": lambda: client.call_tool("echo", {"text": "from a callback"})["content"][0]["text"],
    }[name]


def _still_works(name: str, client: mcp.Client) -> None:
    if name == "disconnect":
        assert client.status == "disconnected"
        return
    assert "after" in client.call_tool("echo", {"text": "after"})["content"][0]["text"]


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("action", ACTIONS)
def test_a_resource_watch_put_may_call_back_into_the_client(era: str, action: str) -> None:
    with FakeServer(era=era) as server:
        server.set_resource_text(OTHER, "other")
        client = mcp.connect(server.transport())
        try:
            catalog = client.catalog()
            sub = CallingBack(lambda message: isinstance(message, mcp.ResourceChanged))
            holder: list[mcp.ResourceWatch] = []
            made = threading.Event()

            def close_own() -> None:
                assert made.wait(WAIT)  # its first message may come before watch_resource returns here
                holder[0].close()

            sub.action = _act(action, client, close_own, catalog)
            holder.append(client.watch_resource(URI, sub))
            made.set()
            how, value, thread = sub.outcome()
            assert how == "returned", value
            assert thread.startswith("exmcp-rwatch-")
            if action == "watch_resource":
                assert value == "ex_mcp_resource_changed"
            _still_works(action, client)
        finally:
            client.disconnect(timeout=WAIT)


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("action", ACTIONS)
def test_a_catalog_put_may_call_back_into_the_client(era: str, action: str) -> None:
    with FakeServer(era=era) as server:
        server.set_resource_text(OTHER, "other")
        client = mcp.connect(server.transport())
        try:
            sub = CallingBack(lambda message: isinstance(message, mcp.CatalogChanged))
            catalog = client.catalog(sub)
            sub.action = _act(action, client, catalog.close, catalog)
            server.set_items("tools", [{"name": "echo", "inputSchema": {"type": "object"}}, {"name": "new"}])
            catalog.refresh("tools")  # its CatalogChanged runs the action on the catalog's worker
            how, value, thread = sub.outcome()
            assert how == "returned", value
            assert thread.startswith("exmcp-catalog-")
            _still_works(action, client)
        finally:
            client.disconnect(timeout=WAIT)


@pytest.mark.parametrize("action", ACTIONS)
def test_a_status_put_may_call_back_into_the_client(action: str) -> None:
    with FakeServer() as server:
        server.set_resource_text(OTHER, "other")
        client = mcp.connect(server.transport())
        try:
            catalog = client.catalog()
            states: list[str] = []

            def after_a_reconnect(message: Any) -> bool:
                if isinstance(message, mcp.Status):
                    states.append(message.state)
                return states[-2:] == ["connecting", "ready"]

            sub = CallingBack(after_a_reconnect)
            handle = client.watch({"status": True, "toolsListChanged": True}, subscriber=sub)
            sub.action = _act(action, client, handle.close, catalog)
            server.drop()  # its reconnect ends in a "ready" that runs the action on the proxy
            how, value, _thread = sub.outcome()
            assert how == "returned", value
            _still_works(action, client)
        finally:
            client.disconnect(timeout=WAIT)
