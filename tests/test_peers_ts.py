"""Against the official TypeScript SDK v2 server (npm ``@modelcontextprotocol/server`` 2.4.0,
tests/peers/ts_server.mjs), a server written elsewhere, over stdio and Streamable HTTP in
both eras: plain answers to calls asked as tasks, a kept ``server/discover`` result reused
with no round trip, and its default HTTP setup, which serves 2025 traffic statelessly (GET
answers 405) while it advertises resource subscriptions.

One Streamable HTTP peer serves the module; each stdio client starts its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sdk_helpers import TapTransport

import exmcp_actors as mcp
from tests.peers.launch import Peer
from tests.peers.ts_peer import missing_tools, ts_argv, ts_http_peer
from tests.waiting import wait_until

TIMEOUT = 20.0
HTTP_LOGGER = "exmcp_actors.http"

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    started = ts_http_peer()
    yield started
    started.stop()


@pytest.fixture
def connect(peer: Peer) -> Iterator[Callable[..., mcp.Client]]:
    clients: list[mcp.Client] = []

    def make(target: Any, protocol: str = "auto", **kwargs: Any) -> mcp.Client:
        where = {"http": peer.url, "stdio": ts_argv()}.get(target, target) if isinstance(target, str) else target
        client = mcp.connect(
            where, protocol=protocol, reconnect=False, connect_timeout=TIMEOUT, probe_timeout=TIMEOUT, **kwargs
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.disconnect()


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(block.get("text", "") for block in result["content"])


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_plain_answer_to_a_call_asked_as_a_task_is_returned(
    connect: Callable[..., mcp.Client], transport: str, protocol: str
) -> None:
    client = connect(transport, protocol)
    assert client.era == ("modern" if protocol == "auto" else "legacy")
    answer = client.call_tool("touch", {"uri": "demo://b"}, task=True, timeout=TIMEOUT)
    assert isinstance(answer, dict), answer  # the tool ran: its result is the answer
    assert client.read_resource("demo://b")["contents"][0]["text"] == text_of(answer)


def test_a_kept_discover_result_connects_with_no_round_trip(connect: Callable[..., mcp.Client]) -> None:
    first = connect("stdio")
    kept = first.discover_result
    assert kept is not None and "2026-07-28" in kept["supportedVersions"]
    assert kept["capabilities"] == first.server_capabilities
    tap = TapTransport(mcp.StdioTransport(ts_argv()))
    again = connect(tap, discover_result=kept)
    assert (again.era, again.server_capabilities, again.discover_result) == ("modern", first.server_capabilities, kept)
    assert {tool["name"] for tool in again.list_tools()} >= {"echo", "touch"}
    assert [message["method"] for _, message in tap.sent] == ["tools/list"]  # no server/discover
    over_http = connect("http", "modern", discover_result=kept)
    assert text_of(over_http.call_tool("echo", {"text": "hi"}, timeout=TIMEOUT)) == "hi"
    assert connect("http", "legacy").discover_result is None
    with pytest.raises(ValueError, match="protocol"):
        mcp.connect(ts_argv(), protocol="legacy", discover_result=kept)
    with pytest.raises(ValueError, match="supportedVersions"):
        mcp.connect(ts_argv(), discover_result={**kept, "supportedVersions": ["2025-11-25"]})


def test_a_legacy_watch_of_a_server_serving_2025_statelessly_is_warned_about_once(
    connect: Callable[..., mcp.Client], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, HTTP_LOGGER)

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == HTTP_LOGGER and "405" in r.getMessage()]

    modern = connect("http")
    modern.watch({"resourceSubscriptions": ["demo://a"]}, timeout=TIMEOUT)
    client = connect("http", "legacy")
    first = client.watch({"resourceSubscriptions": ["demo://a"]}, timeout=TIMEOUT)
    wait_until(lambda: len(warnings()) == 1, TIMEOUT, "the warning about a server that cannot push")
    [warning] = warnings()
    assert "resource subscriptions" in warning and "no session" in warning and "hears nothing" in warning
    client.watch({"toolsListChanged": True}, timeout=TIMEOUT).unsubscribe()
    first.unsubscribe()
    client.call_tool("touch", {"uri": "demo://a"}, timeout=TIMEOUT)  # a request after: no second warning
    assert len(warnings()) == 1
