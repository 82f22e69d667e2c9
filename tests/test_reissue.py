"""A request whose response stream dropped before the answer (MCP 2026-07-28 changelog: the
client MUST re-issue it under a new request id).

The peer is the official Python SDK 2.3.0 server over Streamable HTTP, behind a cut
(``drop_next`` in tests/peers/sdk_server.py): the request reaches the server and runs, then
its response stream ends before the answer, as a proxy or an instance leaving a pool would
do it. No real server drops its own streams on cue; that is the gap the cut fills.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

import exmcp_actors as mcp
from exmcp_actors._protocol._jsonrpc import RequestFailed
from exmcp_actors._protocol._reissue import MAX_REISSUES, why_not_reissued
from exmcp_actors._transport._base import FrameSink
from exmcp_actors.testing import FakeServer, FakeTasks
from exmcp_actors.testing._transport import MemoryTransport
from tests.peers.launch import Peer
from tests.sdk_helpers import WAIT, TapTransport, server_stats, tool_text

EXTRA = ("--extra-tools",)


@pytest.fixture(scope="module")
def http_peer() -> Iterator[Peer]:
    with Peer("http", "both", EXTRA).start() as peer:
        yield peer


class Connected(NamedTuple):
    client: mcp.Client
    tap: TapTransport


@pytest.fixture
def connected(http_peer: Peer) -> Iterator[Connected]:
    tap = TapTransport(mcp.HttpTransport(http_peer.url))
    client = mcp.connect(tap)
    yield Connected(client, tap)
    client.disconnect()


def cut_next(client: mcp.Client, target: str, count: int = 1) -> None:
    client.call_tool("drop_next", {"target": target, "count": count}, timeout=WAIT)


def posts(client: mcp.Client, target: str) -> int:
    return int(server_stats(client)["posts"].get(target, 0))


def runs(client: mcp.Client, tool: str) -> int:
    return int(server_stats(client)["runs"].get(tool, 0))


def test_a_listing_whose_stream_dropped_is_reissued_under_a_new_id(connected: Connected) -> None:
    client, tap = connected
    cut_next(client, "tools/list")
    before = posts(client, "tools/list")
    names = [tool["name"] for tool in client.list_tools(cache=False)]
    assert "peek" in names and "echo" in names
    first_pages = [m for m in tap.sent_messages("tools/list") if "cursor" not in (m.get("params") or {})]
    assert len(first_pages) == 2 and first_pages[0]["id"] != first_pages[1]["id"]
    assert posts(client, "tools/list") - before == len(tap.sent_messages("tools/list"))


@pytest.mark.parametrize(
    ("target", "call"),
    [
        ("resources/read", lambda c: c.read_resource("file:///a.txt", timeout=WAIT)["contents"][0]["uri"]),
        ("prompts/get", lambda c: c.get_prompt("greet", {"name": "Ada"}, timeout=WAIT)["messages"][0]["role"]),
        ("resources/list", lambda c: len(c.list_resources(timeout=WAIT))),
    ],
)
def test_reads_whose_stream_dropped_are_reissued(connected: Connected, target: str, call: Any) -> None:
    client = connected.client
    cut_next(client, target)
    before = posts(client, target)
    assert call(client)
    assert posts(client, target) - before >= 2


def test_an_idempotent_tool_is_reissued(connected: Connected) -> None:
    client, tap = connected
    cut_next(client, "tools/call:peek")
    client.list_tools()  # its idempotentHint comes from its listing
    before = runs(client, "peek")
    result = client.call_tool("peek", timeout=WAIT)
    assert int(tool_text(result)) == before + 2  # it ran twice: the lost answer, and this one
    calls = [m for m in tap.sent_messages("tools/call") if m["params"]["name"] == "peek"]
    assert len(calls) == 2 and calls[0]["id"] != calls[1]["id"]


def test_a_plain_tool_is_not_reissued_and_the_error_says_it_may_have_run(connected: Connected) -> None:
    client, tap = connected
    client.list_tools()
    cut_next(client, "tools/call:bump")
    before = runs(client, "bump")
    with pytest.raises(mcp.OutcomeUnknown) as raised:
        client.call_tool("bump", timeout=WAIT)
    error = raised.value
    assert isinstance(error, mcp.ExchangeFailed) and isinstance(error, mcp.ConnectionLost)
    assert "tools/call 'bump' may or may not have run on the server" in str(error)
    assert "idempotent" in str(error) and error.reissued == 0 and error.request == "tools/call 'bump'"
    assert runs(client, "bump") == before + 1  # it did run, once
    assert len([m for m in tap.sent_messages("tools/call") if m["params"]["name"] == "bump"]) == 1
    assert client.status == "ready"


def test_a_tool_never_listed_is_not_reissued(connected: Connected) -> None:
    client = connected.client
    cut_next(client, "tools/call:peek")
    with pytest.raises(mcp.OutcomeUnknown):
        client.call_tool("peek", timeout=WAIT)


def test_reissues_stop_after_two(connected: Connected) -> None:
    client = connected.client
    cut_next(client, "prompts/list", 5)
    before = posts(client, "prompts/list")
    with pytest.raises(mcp.OutcomeUnknown) as raised:
        client.list_prompts(cache=False, timeout=WAIT)
    assert raised.value.reissued == MAX_REISSUES == 2
    assert "sent 3 times" in str(raised.value)
    assert posts(client, "prompts/list") - before == 3
    cut_next(client, "prompts/list", 0)


def test_a_legacy_connection_is_not_reissued() -> None:
    # 2025-11-25 resumes a stream that carried event ids; without them the answer is simply lost.
    with Peer("http", "legacy", EXTRA).start() as peer:
        client = mcp.connect(mcp.HttpTransport(peer.url))
        try:
            cut_next(client, "tools/list")
            with pytest.raises(mcp.OutcomeUnknown) as raised:
                client.list_tools(timeout=WAIT)
            assert "2026-07-28" in str(raised.value)
            assert json.loads(tool_text(client.call_tool("stats", timeout=WAIT)))["posts"]["tools/list"] == 1
        finally:
            client.disconnect()


@pytest.mark.parametrize(
    ("method", "params", "safe"),
    [
        ("tools/list", None, True),
        ("resources/templates/list", {"cursor": "x"}, True),
        ("server/discover", None, True),
        ("resources/read", {"uri": "file:///a"}, True),
        ("prompts/get", {"name": "greet"}, True),
        ("tasks/get", {"taskId": "t-1"}, True),
        ("tools/call", {"name": "peek"}, True),
        ("tools/call", {"name": "bump"}, False),
        ("tools/call", {}, False),
        ("completion/complete", {}, False),
        ("resources/subscribe", {"uri": "file:///a"}, False),
    ],
)
def test_only_what_is_safe_to_run_twice_is_reissued(method: str, params: Any, safe: bool) -> None:
    assert (why_not_reissued(method, params, lambda name: name == "peek") is None) is safe


class LosingAnswers(MemoryTransport):
    """A memory transport on which the first request of ``method`` loses its answer: the
    client hears what a dropped response stream makes HTTP report (OutcomeUnknown)."""

    def __init__(self, server: FakeServer, method: str) -> None:
        super().__init__(server)
        self.method = method
        self.lost: list[Any] = []
        self._sink: FrameSink | None = None

    def open(self, sink: FrameSink, *, timeout: float) -> None:
        self._sink = sink
        super().open(sink, timeout=timeout)

    def send(self, message: dict[str, Any]) -> None:
        if message.get("method") == self.method and "id" in message and not self.lost:
            self.lost.append(message["id"])
            failure = RequestFailed(message["id"], mcp.OutcomeUnknown("the response stream dropped before the answer"))
            sink = self._sink
            assert sink is not None
            # Delivered off the sending thread, as a transport's reader would.
            threading.Thread(target=sink.frames_received, args=([failure],), daemon=True).start()
            return
        super().send(message)


def test_a_task_poll_whose_answer_was_lost_is_polled_again() -> None:
    # SEP-2663: tasks/get is a pure, idempotent read, so a lost answer is simply asked again.
    with FakeServer(era="modern") as server:
        tasks = FakeTasks(server, poll_interval_ms=20)
        transport = LosingAnswers(server, "tasks/get")
        client = mcp.connect(transport, reconnect=False)
        try:
            task = client.call_tool("echo", {}, task=True, timeout=WAIT)
            assert isinstance(task, mcp.Task)
            tasks.complete(task.task_id, {"content": [{"type": "text", "text": "done"}]})
            assert task.result(timeout=WAIT) == {"content": [{"type": "text", "text": "done"}]}
            assert len(transport.lost) == 1 and server.count("tasks/get") >= 1
        finally:
            client.disconnect()


def test_a_probe_whose_answer_was_lost_probes_again_rather_than_fall_back(http_peer: Peer) -> None:
    # A dropped server/discover stream says nothing of the server's era: the probe is
    # re-issued under a new id (2026-07-28 changelog), not taken for a legacy server.
    with mcp.connect(mcp.HttpTransport(http_peer.url)) as armer:
        cut_next(armer, "server/discover")
        before = posts(armer, "server/discover")
        tap = TapTransport(mcp.HttpTransport(http_peer.url))
        with mcp.connect(tap, connect_timeout=WAIT) as client:
            assert client.era == "modern"
            probes = tap.sent_messages("server/discover")
            assert len(probes) == 2 and probes[0]["id"] != probes[1]["id"]
            assert not tap.sent_messages("initialize")
        assert posts(armer, "server/discover") - before == 2
