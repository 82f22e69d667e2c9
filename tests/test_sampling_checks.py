"""Sampling with tools on the FakeServer, for what no real peer sends: malformed ``tools`` /
``toolChoice`` and broken tool_use/tool_result turns (-32602, the handler never runs), and bad
host results (-32603, never sent, logged at a bounded rate), in both eras and as a task."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors._protocol._host_checks import HostAbilities
from exmcp_actors.testing import FakeServer
from tests.sdk_helpers import ClientPool

TIMEOUT = 5.0
ASK = {"role": "user", "content": {"type": "text", "text": "weather in Lyon?"}}
WEATHER = {"name": "get_weather", "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}
USE = {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Lyon"}}
USE2 = {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "Rome"}}
RESULT = {"type": "tool_result", "toolUseId": "call_1", "content": [{"type": "text", "text": "sunny"}]}
RESULT2 = {"type": "tool_result", "toolUseId": "call_2", "content": [{"type": "text", "text": "rain"}]}
TOOLS = {"messages": [ASK], "maxTokens": 50, "tools": [WEATHER]}
TEXT = {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m", "stopReason": "endTurn"}
TOOL_USE = {"role": "assistant", "content": [USE], "model": "m", "stopReason": "toolUse"}


def turns(*messages: Any) -> dict[str, Any]:
    return {**TOOLS, "messages": list(messages)}


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as fake:
        yield fake


class Handler:
    """Answers what it is given, recording the params it saw."""

    def __init__(self, answer: Any = TEXT) -> None:
        self.answer = answer
        self.asked: list[dict[str, Any]] = []

    def __call__(self, params: dict[str, Any]) -> Any:
        self.asked.append(params)
        return self.answer


@pytest.fixture
def connect(server: FakeServer, client_pool: ClientPool) -> Callable[..., mcp.Client]:
    def make(**kwargs: Any) -> mcp.Client:
        return client_pool.connect(server.transport(), reconnect=False, **kwargs)

    return make


def answer_of(server: FakeServer, params: dict[str, Any]) -> dict[str, Any]:
    return server.wait_response(server.request("sampling/createMessage", params), TIMEOUT)


def test_sampling_tools_is_advertised_in_both_eras(connect: Callable[..., mcp.Client], server: FakeServer) -> None:
    connect(sampling=Handler(), sampling_tools=True)
    assert server.messages("initialize")[-1]["params"]["capabilities"]["sampling"] == {"tools": {}}
    with FakeServer(era="modern") as modern:
        modern.on("tools/call", lambda params, ctx: {"content": []})
        with mcp.connect(modern.transport(), sampling=Handler(), sampling_tools=True) as client:
            client.call_tool("echo", {}, timeout=TIMEOUT)
        meta = modern.messages("tools/call")[0]["params"]["_meta"]
        assert meta["io.modelcontextprotocol/clientCapabilities"]["sampling"] == {"tools": {}}
    assert HostAbilities(sampling=True).capabilities()["sampling"] == {}


def test_tools_and_tool_choice_reach_the_handler(connect: Callable[..., mcp.Client], server: FakeServer) -> None:
    handler = Handler(TOOL_USE)
    connect(sampling=handler, sampling_tools=True)
    params = {**TOOLS, "toolChoice": {"mode": "required"}}
    assert answer_of(server, params)["result"] == TOOL_USE
    assert handler.asked == [params]
    # The loop's next round: the results of both uses, then a text answer.
    handler.answer = TEXT
    follow = turns(ASK, {"role": "assistant", "content": [USE, USE2]}, {"role": "user", "content": [RESULT2, RESULT]})
    assert answer_of(server, follow)["result"] == TEXT


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({**TOOLS, "tools": {"get_weather": WEATHER}}, "'tools' must be a list"),
        ({**TOOLS, "tools": ["get_weather"]}, "tools[0] must be an object with a 'name'"),
        ({**TOOLS, "tools": [{"inputSchema": {}}]}, "tools[0] must be an object with a 'name'"),
        ({**TOOLS, "tools": [{"name": "w"}]}, "'w' needs 'inputSchema', an object"),
        ({**TOOLS, "tools": [{"name": "w", "inputSchema": "object"}]}, "'w' needs 'inputSchema', an object"),
        ({**TOOLS, "toolChoice": "auto"}, "'toolChoice' must be an object"),
        ({**TOOLS, "toolChoice": {"mode": "sometimes"}}, "mode must be one of auto, required, none, got 'sometimes'"),
        ({**TOOLS, "toolChoice": {"mode": ["auto"]}}, "mode must be one of"),
        (turns(ASK, {"role": "assistant", "content": [USE]}), "ends with tool uses whose results are missing"),
        (turns(ASK, {"role": "user", "content": [RESULT]}), "a tool_result for 'call_1', no tool use of the message"),
        (
            turns(
                ASK, {"role": "assistant", "content": [USE]}, {"role": "user", "content": {**RESULT, "toolUseId": "x"}}
            ),
            "a tool_result for 'x'",
        ),
        (
            turns(ASK, {"role": "assistant", "content": [USE, USE2]}, {"role": "user", "content": [RESULT]}),
            "lacks the tool results of 'call_2'",
        ),
        (
            turns(ASK, {"role": "assistant", "content": [USE]}, {"role": "user", "content": [RESULT, ASK["content"]]}),
            "tool results must come alone in a user message",
        ),
        (
            turns(ASK, {"role": "assistant", "content": [USE]}, {"role": "assistant", "content": [RESULT]}),
            "tool results must come alone in a user message",
        ),
        (turns(ASK, {"role": "assistant", "content": [USE]}, ASK), "must carry the tool results of the tool uses"),
        (turns(ASK, {"role": "assistant", "content": [{**USE, "id": 7}]}), "a tool_use without an 'id' string"),
        (turns({"role": "user", "content": [RESULT | {"toolUseId": None}]}), "without a 'toolUseId' string"),
        (turns({"role": "user", "content": ["hi"]}), "content must be a content block or a list of them"),
        (turns({"content": ASK["content"]}), "messages[0] needs role 'user' or 'assistant'"),
        (turns({**ASK, "role": "system"}), "messages[0] needs role 'user' or 'assistant'"),
        (turns(ASK, {"role": "user", "content": [USE]}, {"role": "user", "content": [RESULT]}), "only in an assistant"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_malformed_tool_requests_get_invalid_params(
    params: dict[str, Any], why: str, connect: Callable[..., mcp.Client], server: FakeServer
) -> None:
    handler = Handler()
    client = connect(sampling=handler, sampling_tools=True)
    error = answer_of(server, params)["error"]
    assert error["code"] == -32602 and why in error["message"], error
    assert handler.asked == []
    assert client.ping() is None


@pytest.mark.parametrize("offered", [{"tools": [WEATHER]}, {"toolChoice": {"mode": "auto"}}])
def test_tools_to_a_client_without_sampling_tools_get_invalid_params(
    offered: dict[str, Any], connect: Callable[..., mcp.Client], server: FakeServer
) -> None:
    handler = Handler()
    connect(sampling=handler)
    error = answer_of(server, {"messages": [ASK], "maxTokens": 5, **offered})["error"]
    assert error == {
        "code": -32602,
        "message": "sampling/createMessage offered tools, but this client did not advertise sampling.tools",
    }
    assert handler.asked == []


BAD_RESULTS = [
    ({**TEXT, "role": "user"}, "needs role 'assistant', got 'user'"),
    ({key: value for key, value in TEXT.items() if key != "model"}, "needs 'model', a string"),
    ({**TEXT, "stopReason": 1}, "'stopReason' must be a string, got int"),
    ({**TEXT, "content": []}, "'content' must be a content block or a non-empty list"),
    ({**TEXT, "content": "hello"}, "'content' must be a content block or a non-empty list"),
    ({**TEXT, "content": {"type": "text"}}, "content[0] is text without a 'text' string"),
    ({**TEXT, "content": {"type": "image", "data": "AA=="}}, "content[0] is image without 'data' and 'mimeType'"),
    ({**TEXT, "content": {"type": "audio", "mimeType": "audio/wav"}}, "is audio without 'data' and 'mimeType'"),
    ({**TEXT, "content": {**RESULT}}, "content[0] has type 'tool_result'; a sampled message may hold text, image"),
    ({**TOOL_USE, "content": [{**USE, "id": None}]}, "is tool_use without 'id' and 'name' strings"),
    ({**TOOL_USE, "content": [{**USE, "input": "Lyon"}]}, "is tool_use without 'input', an object"),
    ({**TOOL_USE, "content": [{**USE, "name": "rm"}]}, "uses tool 'rm', which the request did not offer"),
    ({**TOOL_USE, "stopReason": "endTurn"}, "has tool_use blocks, so its stopReason must be 'toolUse', got 'endTurn'"),
    ({**TOOL_USE, "stopReason": None}, "so its stopReason must be 'toolUse', got None"),
    ({**TEXT, "stopReason": "toolUse"}, "has stopReason 'toolUse' but no tool_use block"),
]


@pytest.mark.parametrize(("result", "why"), BAD_RESULTS, ids=[why[:40] for _, why in BAD_RESULTS])
def test_a_bad_result_is_never_sent(
    result: dict[str, Any],
    why: str,
    connect: Callable[..., mcp.Client],
    server: FakeServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = connect(sampling=Handler(result), sampling_tools=True)
    with caplog.at_level(logging.ERROR, logger="exmcp_actors"):
        answer = answer_of(server, TOOLS)
    assert "result" not in answer
    assert answer["error"]["code"] == -32603 and why in answer["error"]["message"], answer
    assert [r for r in caplog.records if why in r.getMessage() and "answering -32603" in r.getMessage()]
    assert client.ping() is None


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({"messages": [ASK], "maxTokens": 5}, "which the request did not offer (offered: none (no tools"),
        ({**TOOLS, "toolChoice": {"mode": "none"}}, "which the request did not offer (offered: none (no tools"),
    ],
    ids=["no-tools", "tool-choice-none"],
)
def test_a_tool_use_where_no_tool_may_be_used_is_never_sent(
    params: dict[str, Any], why: str, connect: Callable[..., mcp.Client], server: FakeServer
) -> None:
    connect(sampling=Handler(TOOL_USE), sampling_tools=True)
    error = answer_of(server, params)["error"]
    assert error["code"] == -32603 and why in error["message"]


@pytest.mark.parametrize(
    "result",
    [
        {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"},  # stopReason is optional
        {**TOOL_USE, "content": [{"type": "text", "text": "let me look"}, USE, USE2]},
        {**TEXT, "content": [{"type": "image", "data": "AA==", "mimeType": "image/png"}], "_meta": {"k": 1}},
    ],
    ids=["no-stop-reason", "text-and-two-uses", "image-list"],
)
def test_good_results_are_sent_as_given(
    result: dict[str, Any], connect: Callable[..., mcp.Client], server: FakeServer
) -> None:
    connect(sampling=Handler(result), sampling_tools=True)
    assert answer_of(server, TOOLS)["result"] == result


def test_bad_results_are_logged_at_a_bounded_rate(
    connect: Callable[..., mcp.Client], server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    connect(sampling=Handler({**TEXT, "role": "user"}))
    with caplog.at_level(logging.ERROR, logger="exmcp_actors"):
        for _ in range(5):
            assert answer_of(server, {"messages": [ASK], "maxTokens": 5})["error"]["code"] == -32603
    assert len([r for r in caplog.records if "role 'assistant'" in r.getMessage()]) == 1


def test_malformed_requests_are_logged_at_a_bounded_rate(
    connect: Callable[..., mcp.Client], server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    connect(sampling=Handler(), sampling_tools=True)
    with caplog.at_level(logging.WARNING, logger="exmcp_actors"):
        for _ in range(5):
            assert answer_of(server, {**TOOLS, "toolChoice": {"mode": "\x1b[2J"}})["error"]["code"] == -32602
    records = [r.getMessage() for r in caplog.records if "refused a malformed sampling" in r.getMessage()]
    assert len(records) == 1 and "\\x1b[2J" in records[0] and "\x1b" not in records[0]


def test_a_bad_result_of_a_sampling_task_fails_the_task(connect: Callable[..., mcp.Client], server: FakeServer) -> None:
    release = threading.Event()

    def sampling(params: dict[str, Any]) -> dict[str, Any]:
        release.wait(TIMEOUT)
        return {**TOOL_USE, "content": [{**USE, "name": "rm"}]}

    connect(sampling=sampling, sampling_tools=True)
    created = server.wait_response(server.request("sampling/createMessage", {**TOOLS, "task": {}}), TIMEOUT)
    task_id = created["result"]["task"]["taskId"]
    waiting = server.request("tasks/result", {"taskId": task_id})
    release.set()
    error = server.wait_response(waiting, TIMEOUT)["error"]
    assert "uses tool 'rm', which the request did not offer" in error["message"]
    server.wait_for("notifications/tasks/status", taskId=task_id, status="failed", timeout=TIMEOUT)


# -- 2026-07-28: the requests come embedded in input_required -----------------------------


@pytest.mark.parametrize(
    ("tools", "params", "answer", "why"),
    [
        (False, TOOLS, TEXT, "this client did not advertise sampling.tools"),
        (True, {**TOOLS, "toolChoice": {"mode": "maybe"}}, TEXT, "toolChoice mode must be one of"),
        (True, TOOLS, {**TOOL_USE, "stopReason": "endTurn"}, "so its stopReason must be 'toolUse'"),
    ],
    ids=["not-advertised", "bad-tool-choice", "bad-result"],
)
def test_modern_input_requests_are_checked_the_same(tools: bool, params: dict[str, Any], answer: Any, why: str) -> None:
    with FakeServer(era="modern") as server:
        request = {"method": "sampling/createMessage", "params": params}
        server.on("tools/call", lambda p, ctx: {"resultType": "input_required", "inputRequests": {"llm": request}})
        handler = Handler(answer)
        with mcp.connect(server.transport(), sampling=handler, sampling_tools=tools) as client:
            with pytest.raises(mcp.Error, match="input request 'llm' could not be answered") as caught:
                client.call_tool("echo", {}, timeout=TIMEOUT)
        assert why in str(caught.value)
        assert server.count("tools/call") == 1  # no retry carried the bad answer
        assert len(handler.asked) == (1 if answer is not TEXT else 0)


def test_modern_tool_loop_round_is_answered() -> None:
    with FakeServer(era="modern") as server:
        request = {"method": "sampling/createMessage", "params": {**TOOLS, "toolChoice": {"mode": "auto"}}}

        @server.on("tools/call")
        def call(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
            if "inputResponses" not in params:
                return {"resultType": "input_required", "inputRequests": {"llm": request}}
            return {"content": [{"type": "text", "text": repr(params["inputResponses"]["llm"])}]}

        with mcp.connect(server.transport(), sampling=Handler(TOOL_USE), sampling_tools=True) as client:
            result = client.call_tool("echo", {}, timeout=TIMEOUT)
        assert result["content"][0]["text"] == repr(TOOL_USE)


@pytest.mark.parametrize("version", ["2025-06-18", "2025-03-26"])
def test_an_older_server_gets_a_sampled_message_as_one_block(version: str, client_pool: ClientPool) -> None:
    # Before 2025-11-25 CreateMessageResult.content is one block, never a list.
    plain = {"messages": [ASK], "maxTokens": 5}
    with FakeServer() as server:
        card = {"protocolVersion": version, "capabilities": {}, "serverInfo": {"name": "old", "version": "1"}}

        def initialize(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
            ctx.era = "legacy"
            return card

        server.on("initialize", initialize)
        handler = Handler({**TEXT, "content": [TEXT["content"]]})
        client = client_pool.connect(server.transport(), reconnect=False, sampling=handler)
        assert client.protocol_version == version
        assert answer_of(server, plain)["result"] == TEXT
        handler.answer = {**TEXT, "content": [TEXT["content"], TEXT["content"]]}
        error = answer_of(server, plain)["error"]
        assert error["code"] == -32603 and f"MCP {version} takes one content block" in error["message"], error
