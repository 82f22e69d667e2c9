"""Sampling with tools against real peers: the Python SDK server (mcp 2.3.0, both eras) runs a
two-round tool loop through its resolvers; the npm server-everything (legacy only, no tools in its
sampling) shows that every sampling answer is checked before it is sent."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from sdk_helpers import ClientPool, TapTransport, once

import exmcp_actors as mcp
from tests.peers.everything import everything_argv, missing_tools

TIMEOUT = 20.0
PEER = str(Path(__file__).parent / "peers" / "host_server.py")


def blocks(content: Any) -> list[dict[str, Any]]:
    return content if isinstance(content, list) else [content]


class Model:
    """A host's model stand-in: calls ``get_weather`` while it may, then answers from the results."""

    def __init__(self, tool: str = "get_weather") -> None:
        self.tool = tool
        self.asked: list[dict[str, Any]] = []

    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(params)
        last = blocks(params["messages"][-1]["content"])
        results = [block for block in last if block.get("type") == "tool_result"]
        if results:
            said = "; ".join(part["text"] for block in results for part in block["content"])
            return {
                "role": "assistant",
                "content": {"type": "text", "text": said},
                "model": "m",
                "stopReason": "endTurn",
            }
        city = last[0]["text"].removeprefix("weather in ").rstrip("?")
        use = {"type": "tool_use", "id": "call_1", "name": self.tool, "input": {"city": city}}
        return {"role": "assistant", "content": [use], "model": "m", "stopReason": "toolUse"}


def sdk_client(pool: ClientPool, era: str, model: Model, tools: bool = True) -> tuple[mcp.Client, TapTransport]:
    tap = TapTransport(mcp.StdioTransport([sys.executable, PEER]))
    client = pool.connect(tap, protocol=era, sampling=model, sampling_tools=tools, **once(TIMEOUT))
    return client, tap


def capabilities_sent(tap: TapTransport, era: str) -> dict[str, Any]:
    """The client capabilities of the handshake (legacy) or of the first tools/call (modern)."""
    if era == "legacy":
        caps: dict[str, Any] = tap.sent_messages("initialize")[0]["params"]["capabilities"]
        return caps
    meta = tap.sent_messages("tools/call")[0]["params"]["_meta"]
    caps = meta["io.modelcontextprotocol/clientCapabilities"]
    return caps


def answers(tap: TapTransport) -> list[Any]:
    """What the client answered the server's sampling with, whichever the era."""
    found: list[Any] = []
    for message in tap.sent_messages():
        if "result" in message or "error" in message:
            found.append(message.get("result", message.get("error")))
        found.extend(((message.get("params") or {}).get("inputResponses") or {}).values())
    return found


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_tool_loop_runs_against_the_sdk_server(era: str, client_pool: ClientPool) -> None:
    model = Model()
    client, tap = sdk_client(client_pool, era, model)
    assert client.era == era
    result = client.call_tool("ask_llm_tools", {"city": "Lyon"}, timeout=TIMEOUT)
    assert not result.get("isError"), result
    assert capabilities_sent(tap, era)["sampling"] == {"tools": {}}
    assert json.loads(result["content"][0]["text"]) == {"text": "sunny in Lyon", "stopReason": "endTurn", "model": "m"}
    first, second = model.asked
    # The server's tools and toolChoice reached the handler, as sent.
    assert [tool["name"] for tool in first["tools"]] == ["get_weather"] and first["toolChoice"] == {"mode": "auto"}
    assert first["tools"][0]["inputSchema"]["required"] == ["city"]
    assert second["toolChoice"] == {"mode": "none"}
    assert blocks(second["messages"][-1]["content"])[0]["toolUseId"] == "call_1"
    # The tool_use answer went out as the handler gave it.
    sent = [answer for answer in answers(tap) if answer.get("stopReason") == "toolUse"]
    assert sent[0]["content"][0] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "get_weather",
        "input": {"city": "Lyon"},
    }


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_sdk_server_sends_no_tools_to_a_client_without_sampling_tools(era: str, client_pool: ClientPool) -> None:
    model = Model()
    client, tap = sdk_client(client_pool, era, model, tools=False)
    # The SDK refuses the call with -32021 (a missing client capability), in both eras.
    with pytest.raises(mcp.RequestError, match=r"-32021.*sampling\.tools"):
        client.call_tool("ask_llm_tools", {"city": "Lyon"}, timeout=TIMEOUT)
    assert model.asked == []  # the server asked nothing: it read the capabilities we sent
    assert capabilities_sent(tap, era)["sampling"] == {}


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_tool_use_of_a_tool_not_offered_is_never_sent(
    era: str, client_pool: ClientPool, caplog: pytest.LogCaptureFixture
) -> None:
    model = Model(tool="rm_rf")
    client, tap = sdk_client(client_pool, era, model)
    why = "uses tool 'rm_rf', which the request did not offer (offered: get_weather)"
    # Legacy: the server got -32603 and fails the call with it; modern: the embedded request is
    # answered in the call, so the call fails here and nothing is retried.
    raised = mcp.RequestError if era == "legacy" else mcp.Error
    with caplog.at_level("ERROR", logger="exmcp_actors"), pytest.raises(raised, match=re.escape(why)) as caught:
        client.call_tool("ask_llm_tools", {"city": "Lyon"}, timeout=TIMEOUT)
    assert ("-32603" in str(caught.value)) == (era == "legacy")
    assert why in caplog.text
    assert not any(isinstance(answer, dict) and answer.get("stopReason") == "toolUse" for answer in answers(tap))
    if era == "legacy":
        assert any(answer.get("code") == -32603 for answer in answers(tap))


# -- server-everything ----------------------------------------------------------------------

everything = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(block.get("text", "") for block in result["content"])


@everything
def test_server_everything_sampling_with_tools_advertised(client_pool: ClientPool) -> None:
    def sampling(params: dict[str, Any]) -> dict[str, Any]:
        assert "tools" not in params  # this server offers none
        return {
            "role": "assistant",
            "content": {"type": "text", "text": "plain"},
            "model": "m",
            "stopReason": "endTurn",
        }

    tap = TapTransport(mcp.StdioTransport(everything_argv()))
    client = client_pool.connect(tap, sampling=sampling, sampling_tools=True, **once(TIMEOUT))
    assert tap.sent_messages("initialize")[0]["params"]["capabilities"]["sampling"] == {"tools": {}}
    sampled = text_of(client.call_tool("trigger-sampling-request", {"prompt": "otters"}, timeout=TIMEOUT))
    assert '"text": "plain"' in sampled and '"stopReason": "endTurn"' in sampled


@everything
@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"role": "user", "content": {"type": "text", "text": "x"}, "model": "m"}, "role 'assistant'"),
        ({"role": "assistant", "content": {"type": "text", "text": "x"}}, "'model'"),
        (
            {
                "role": "assistant",
                "content": {"type": "tool_use", "id": "1", "name": "get_weather", "input": {}},
                "model": "m",
                "stopReason": "toolUse",
            },
            "did not offer (offered: none",
        ),
    ],
    ids=["user-role", "no-model", "tool-use-unasked"],
)
def test_server_everything_gets_internal_error_for_a_bad_sampling_answer(
    answer: dict[str, Any], why: str, client_pool: ClientPool, caplog: pytest.LogCaptureFixture
) -> None:
    tap = TapTransport(mcp.StdioTransport(everything_argv()))
    client = client_pool.connect(tap, sampling=lambda params: answer, **once(TIMEOUT))
    with caplog.at_level("ERROR", logger="exmcp_actors"):
        result = client.call_tool("trigger-sampling-request", {"prompt": "otters"}, timeout=TIMEOUT)
    assert result["isError"] and "MCP error -32603: internal error" in text_of(result) and why in text_of(result)
    assert why in caplog.text
    errors = [m for m in tap.sent_messages() if "error" in m]
    assert errors and errors[0]["error"]["code"] == -32603 and why in errors[0]["error"]["message"]
    assert not [m for m in tap.sent_messages() if "result" in m]  # the bad result never left
    assert client.ping() is None  # and the client goes on


def test_sampling_tools_is_checked_at_connect() -> None:
    with pytest.raises(TypeError, match="sampling_tools must be a bool"):
        mcp.connect(["unused"], sampling=lambda p: {}, sampling_tools="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sampling_tools=True needs a sampling handler"):
        mcp.connect(["unused"], sampling_tools=True)
