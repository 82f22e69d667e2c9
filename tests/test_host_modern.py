"""The host side on a 2026-07-28 FakeServer: input_required rounds, the log level in ``_meta``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import FakeServer

TIMEOUT = 5.0
SAMPLE = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
STATUS = "notifications/tasks/status"
ANSWER = {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"}


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(era="modern") as fake:
        yield fake


def test_input_required_is_answered_by_the_handlers_and_retried(server: FakeServer) -> None:
    @server.on("tools/call")
    def call(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if "inputResponses" not in params:
            return {
                "resultType": "input_required",
                "inputRequests": {"llm": SAMPLE, "where": {"method": "roots/list"}},
                "requestState": "opaque-1",
            }
        assert params["requestState"] == "opaque-1"
        return {"content": [{"type": "text", "text": repr(sorted(params["inputResponses"].items()))}]}

    with mcp.connect(server.transport(), sampling=lambda p: ANSWER, roots=[{"uri": "file:///w"}]) as client:
        result = client.call_tool("echo", {}, timeout=TIMEOUT)
    text = result["content"][0]["text"]
    assert "'llm', {'role': 'assistant'" in text and "'where', {'roots': [{'uri': 'file:///w'}]}" in text
    caps = server.messages("tools/call")[0]["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    assert "sampling" in caps and caps["roots"] == {"listChanged": True}


def test_input_required_the_host_cannot_answer_is_an_error(server: FakeServer) -> None:
    server.on("tools/call", lambda params, ctx: {"resultType": "input_required", "inputRequests": {"llm": SAMPLE}})
    with mcp.connect(server.transport()) as client, pytest.raises(mcp.Error, match="sampling/createMessage"):
        client.call_tool("echo", {}, timeout=TIMEOUT)


def test_endless_input_required_is_a_protocol_error(server: FakeServer) -> None:
    server.on("tools/call", lambda params, ctx: {"resultType": "input_required", "requestState": "again"})
    with mcp.connect(server.transport()) as client, pytest.raises(mcp.ProtocolError, match="input"):
        client.call_tool("echo", {}, timeout=TIMEOUT)
    assert server.count("tools/call") == 11


def test_the_log_level_rides_in_every_later_request(server: FakeServer) -> None:
    with mcp.connect(server.transport()) as client:
        client.list_tools(timeout=TIMEOUT)
        client.set_logging_level("warning", timeout=TIMEOUT)
        client.list_tools(timeout=TIMEOUT)
        watch = client.watch({"logMessages": True, "toolsListChanged": True}, timeout=TIMEOUT)
        server.notify("notifications/message", {"level": "warning", "data": "disk low"})
        assert watch.get(timeout=TIMEOUT).params == {"level": "warning", "data": "disk low"}
    metas = [m["params"]["_meta"] for m in server.messages("tools/list")]
    assert "io.modelcontextprotocol/logLevel" not in metas[0]
    assert metas[1]["io.modelcontextprotocol/logLevel"] == "warning"
    assert server.count("logging/setLevel") == 0
    listen = server.messages("subscriptions/listen")[0]["params"]["notifications"]
    assert listen == {"toolsListChanged": True}


def test_task_status_reaches_listen_subscriptions_naming_the_task(server: FakeServer) -> None:
    with mcp.connect(server.transport()) as client:
        subscription = client.listen({"taskIds": ["task-7"]}, timeout=TIMEOUT)
        listen = server.messages("subscriptions/listen")[0]
        caps = listen["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
        assert caps["extensions"] == {"io.modelcontextprotocol/tasks": {}}
        server.event(
            subscription.subscription_id, "notifications/tasks/status", {"taskId": "task-9", "status": "working"}
        )
        server.event(
            subscription.subscription_id, "notifications/tasks/status", {"taskId": "task-7", "status": "failed"}
        )
        event = subscription.get(timeout=TIMEOUT)
        assert (event.method, event.params["taskId"], event.params["status"]) == (
            "notifications/tasks/status",
            "task-7",
            "failed",
        )
        assert subscription.pending() == 0
