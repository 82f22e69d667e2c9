"""The host side against a second widely used server: the npm reference server
``@modelcontextprotocol/server-everything`` 2026.8.31 (TypeScript SDK, MCP 2025-11-25),
whose tools send sampling, elicitation, roots, log and progress traffic and run tasks
in both directions. It speaks the legacy era only; over stdio, and over Streamable HTTP
for the last test."""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sdk_helpers import ClientPool, TapTransport, once

import exmcp_actors as mcp
from tests.peers.everything import everything_argv, missing_tools

TIMEOUT = 20.0
ROOTS = [{"uri": "file:///workspace", "name": "workspace"}]

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))


@pytest.fixture(scope="module")
def argv() -> list[str]:
    return everything_argv()


@pytest.fixture
def connect(argv: list[str], client_pool: ClientPool) -> Callable[..., mcp.Client]:
    def make(target: Any = None, **kwargs: Any) -> mcp.Client:
        return client_pool.connect(target or argv, **once(TIMEOUT), **kwargs)

    return make


def sampling(params: dict[str, Any]) -> dict[str, Any]:
    text = params["messages"][0]["content"]["text"]
    return {"role": "assistant", "content": {"type": "text", "text": f"echo: {text}"}, "model": "test-llm"}


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(block.get("text", "") for block in result["content"])


def test_sampling_elicitation_and_roots_requests_of_the_npm_server_are_answered(
    connect: Callable[..., mcp.Client],
) -> None:
    asked: list[dict[str, Any]] = []

    def elicitation(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"action": "accept", "content": {"name": "Ann"}}

    tap = TapTransport(mcp.StdioTransport(everything_argv()))
    client = connect(tap, sampling=sampling, elicitation=elicitation, roots=ROOTS)
    assert client.era == "legacy"
    sampled = text_of(client.call_tool("trigger-sampling-request", {"prompt": "otters"}, timeout=TIMEOUT))
    assert "echo: Resource trigger-sampling-request context: otters" in sampled and "test-llm" in sampled
    elicited = text_of(client.call_tool("trigger-elicitation-request", {}, timeout=TIMEOUT))
    # Ann from the handler; the rest from the schema's defaults, filled by the client.
    assert '"name": "Ann"' in elicited and '"integer": 42' in elicited and '"number": 3.14' in elicited
    assert asked[0]["requestedSchema"]["required"] == ["name"]
    answers = [m["result"] for _, m in tap.sent if m.get("result", {}).get("action") == "accept"]
    assert answers[0]["content"]["name"] == "Ann" and answers[0]["content"]["integer"] == 42
    assert "file:///workspace" in text_of(client.call_tool("get-roots-list", {}, timeout=TIMEOUT))

    def roots_asked() -> int:
        return sum(1 for _, m in tap.received if isinstance(m, dict) and m.get("method") == "roots/list")

    asked_before = roots_asked()
    client.set_roots([{"uri": "file:///elsewhere", "name": "elsewhere"}])
    # The server fetches the roots again when told they changed; wait for that answer to go out.
    tap.wait_for(lambda: roots_asked() > asked_before and len(tap.sent) > 0, TIMEOUT, "roots/list again")
    tap.wait_for(lambda: any("file:///elsewhere" in str(m) for _, m in tap.sent), TIMEOUT, "the new roots sent")
    assert "file:///elsewhere" in text_of(client.call_tool("get-roots-list", {}, timeout=TIMEOUT))


def test_progress_and_log_messages_of_the_npm_server_reach_the_host(connect: Callable[..., mcp.Client]) -> None:
    client = connect()
    seen: list[dict[str, Any]] = []
    client.call_tool(
        "trigger-long-running-operation", {"duration": 0.3, "steps": 3}, progress=seen.append, timeout=TIMEOUT
    )
    assert [(p["progress"], p["total"]) for p in seen] == [(1, 3), (2, 3), (3, 3)]
    logs = client.subscribe_notifications({"logMessages": True}, timeout=TIMEOUT)
    client.set_logging_level("debug", timeout=TIMEOUT)
    client.call_tool("toggle-simulated-logging", {}, timeout=TIMEOUT)  # sends one at once, then every 5 s
    try:
        message = logs.get(timeout=TIMEOUT)
    finally:
        client.call_tool("toggle-simulated-logging", {}, timeout=TIMEOUT)
    assert message.method == "notifications/message" and "message" in str(message.params["data"])


def test_a_task_that_asks_for_input(connect: Callable[..., mcp.Client]) -> None:
    def elicitation(params: dict[str, Any]) -> dict[str, Any]:
        choices = params["requestedSchema"]["properties"]["interpretation"]["oneOf"]
        return {"action": "accept", "content": {"interpretation": choices[0]["const"]}}

    client = connect(elicitation=elicitation)
    task = client.call_tool("simulate-research-query", {"topic": "python", "ambiguous": True}, task=True)
    assert isinstance(task, mcp.Task) and task.status == "working"
    result = task.result(timeout=TIMEOUT)
    assert "Clarification**: programming" in text_of(result)
    statuses = [note.params["status"] for note in task]
    assert statuses[0] == "input_required" and statuses[-1] == "completed"
    with pytest.raises(queue.Empty):
        task.get(timeout=0.01)


@pytest.mark.parametrize("listed_first", [True, False])
def test_a_tool_whose_listing_forbids_tasks_runs_plainly_when_asked_as_a_task(
    connect: Callable[..., mcp.Client], listed_first: bool
) -> None:
    # 2025-11-25: a tool whose execution.taskSupport is "forbidden" (or absent) MUST NOT be
    # invoked as a task, whatever the server's tasks capability says; this server refuses it.
    tap = TapTransport(mcp.StdioTransport(everything_argv()))
    client = connect(tap)
    assert "tools" in client.server_capabilities["tasks"]["requests"]
    if listed_first:
        [echo] = [tool for tool in client.list_tools() if tool["name"] == "echo"]
        assert echo["execution"] == {"taskSupport": "forbidden"}
    answer = client.call_tool("echo", {"message": "plain"}, task=True, timeout=TIMEOUT)
    assert isinstance(answer, dict) and text_of(answer) == "Echo: plain"
    [call] = tap.sent_messages("tools/call")
    assert "task" not in call["params"]
    required = client.call_tool("simulate-research-query", {"topic": "otters"}, task=True, timeout=TIMEOUT)
    assert isinstance(required, mcp.Task)  # "required": still asked as a task
    assert "Research Report" in text_of(required.result(timeout=TIMEOUT))


def test_the_server_runs_sampling_and_elicitation_as_client_tasks(connect: Callable[..., mcp.Client]) -> None:
    client = connect(sampling=sampling, elicitation=lambda params: {"action": "decline"})
    sampled = text_of(client.call_tool("trigger-sampling-request-async", {"prompt": "otters"}, timeout=TIMEOUT))
    assert "[COMPLETED]" in sampled and "echo: Resource trigger-sampling-request-async context: otters" in sampled
    declined = text_of(client.call_tool("trigger-elicitation-request-async", {}, timeout=TIMEOUT))
    assert "decline" in declined.lower()


def test_resource_templates_are_listed_and_completion_is_answered(connect: Callable[..., mcp.Client]) -> None:
    client = connect()
    templates = {t["uriTemplate"] for t in client.list_resource_templates(timeout=TIMEOUT)}
    assert "demo://resource/dynamic/text/{resourceId}" in templates
    completion = client.complete(
        {"type": "ref/prompt", "name": "completable-prompt"},
        {"name": "name", "value": ""},
        {"arguments": {"department": "Engineering"}},
        timeout=TIMEOUT,
    )
    assert completion["values"] and all(isinstance(v, str) for v in completion["values"])


@pytest.fixture
def everything_http(argv: list[str]) -> Iterator[str]:
    """The same server over Streamable HTTP, on a free port; its URL."""
    # It takes a port number, not 0: one free now may be taken (by another xdist worker)
    # before it binds, and then it says so and exits; the next try picks another.
    for _ in range(3):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        proc = subprocess.Popen(
            [argv[0], argv[1], "streamableHttp"],
            env={**os.environ, "PORT": str(port)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        started: queue.Queue[bool] = queue.Queue()
        reader = threading.Thread(target=_read_start, args=(proc, started), daemon=True)
        reader.start()
        try:
            if started.get(timeout=TIMEOUT):
                yield f"http://127.0.0.1:{port}/mcp"
                return
        finally:
            proc.terminate()
            proc.wait(TIMEOUT)
            reader.join(TIMEOUT)
    pytest.fail("server-everything did not start over HTTP")


def _read_start(proc: subprocess.Popen[str], started: queue.Queue[bool]) -> None:
    """Puts True once the server listens, False if it ends first; drains stderr to the end,
    so the server never blocks on it."""
    assert proc.stderr is not None
    told = False
    for line in proc.stderr:
        if not told and "listening on port" in line:
            started.put(True)
            told = True
    if not told:
        started.put(False)


def test_host_requests_and_progress_work_over_streamable_http(
    everything_http: str, connect: Callable[..., mcp.Client]
) -> None:
    client = connect(everything_http, sampling=sampling, roots=ROOTS)
    sampled = text_of(client.call_tool("trigger-sampling-request", {"prompt": "otters"}, timeout=TIMEOUT))
    assert "echo: Resource trigger-sampling-request context: otters" in sampled
    assert "file:///workspace" in text_of(client.call_tool("get-roots-list", {}, timeout=TIMEOUT))
    seen: list[dict[str, Any]] = []
    client.call_tool(
        "trigger-long-running-operation", {"duration": 0.3, "steps": 3}, progress=seen.append, timeout=TIMEOUT
    )
    assert [p["progress"] for p in seen] == [1, 2, 3]
