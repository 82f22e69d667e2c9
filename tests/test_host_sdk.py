"""The host side against the official Python SDK server (mcp 2.3.0, ``MCPServer``), both eras.

The peer (tests/peers/host_server.py) asks through the SDK's resolvers: on a legacy
connection as standalone server requests mid-call, on a 2026-07-28 connection as an
``input_required`` result the client answers and retries. One client per era serves
the whole module (a stdio peer takes seconds to start on a busy machine).
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sdk_helpers import TapTransport

import exmcp_actors as mcp

TIMEOUT = 20.0
PEER = str(Path(__file__).parent / "peers" / "host_server.py")
ROOTS = [{"uri": "file:///workspace", "name": "workspace"}]


@dataclass
class Host:
    client: mcp.Client
    tap: TapTransport
    era: str
    asked: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def call_json(self, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        result = self.client.call_tool(tool, arguments or {}, timeout=TIMEOUT)
        return json.loads(result["content"][0]["text"])

    def sent_answers(self) -> list[dict[str, Any]]:
        """What the client answered the server's host requests with, whichever the era."""
        answers: list[dict[str, Any]] = []
        for message in [m for _, m in self.tap.sent]:
            params = message.get("params") or {}
            if "result" in message:
                answers.append(message["result"])
            answers.extend((params.get("inputResponses") or {}).values())
        return answers


@pytest.fixture(params=["legacy", "modern"])
def host(request: pytest.FixtureRequest) -> Iterator[Host]:
    asked: list[tuple[str, dict[str, Any]]] = []

    def sampling(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(("sampling", params))
        text = params["messages"][0]["content"]["text"]
        return {"role": "assistant", "content": {"type": "text", "text": text.upper()}, "model": "test-llm"}

    def elicitation(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(("elicitation", params))
        return {"action": "accept", "content": {"name": "Ann"}}  # age and city left to the defaults

    tap = TapTransport(mcp.StdioTransport([sys.executable, PEER]))
    client = mcp.connect(
        tap,
        protocol=request.param,
        sampling=sampling,
        elicitation=elicitation,
        roots=ROOTS,
        connect_timeout=TIMEOUT,
        probe_timeout=TIMEOUT,
    )
    yield Host(client, tap, request.param, asked)
    client.disconnect()


def test_every_host_feature_works_against_the_sdk_server(host: Host) -> None:
    """One connection per era (a peer start costs seconds): requests, then notifications, then helpers."""
    assert host.client.era == host.era
    # sampling
    answer = host.call_json("ask_llm", {"topic": "otters"})
    assert answer == {"text": "TELL ME ABOUT OTTERS", "model": "test-llm"}
    kind, params = host.asked[-1]
    assert kind == "sampling" and params["maxTokens"] == 64
    # elicitation: the client fills the schema's defaults (SEP-1034), not only the server's model
    answer = host.call_json("ask_person")
    assert answer == {"action": "accept", "content": {"name": "Ann", "age": 42, "city": "Lyon"}}
    accepted = [a for a in host.sent_answers() if a.get("action") == "accept"]
    assert accepted and accepted[-1]["content"] == {"name": "Ann", "age": 42, "city": "Lyon"}
    # roots, then replaced
    assert host.call_json("show_roots") == ["file:///workspace"]
    host.client.set_roots([{"uri": "file:///elsewhere"}])
    assert host.call_json("show_roots") == ["file:///elsewhere"]
    if host.era == "legacy":  # 2026-07-28 has no roots notification: the server asks each time
        assert host.call_json("heard")["roots_changed"] == 1
    # progress, only this call's, in order
    seen: list[dict[str, Any]] = []
    result = host.client.call_tool("count", {"n": 5}, progress=seen.append, timeout=TIMEOUT)
    assert result["content"][0]["text"] == "counted to 5"
    assert [(p["progress"], p["total"], p["message"]) for p in seen] == [(i, 5, f"step {i}") for i in range(1, 6)]
    assert len({p["progressToken"] for p in seen}) == 1
    # logs: none before a level is set, then every one in order
    with host.client.watch({"logMessages": True}, timeout=TIMEOUT) as logs:
        host.client.set_logging_level("info", timeout=TIMEOUT)
        host.client.call_tool("count", {"n": 3}, timeout=TIMEOUT)
        got = [logs.get(timeout=TIMEOUT) for _ in range(3)]
    assert [(n.method, n.params["level"], n.params["data"]) for n in got] == [
        ("notifications/message", "info", f"counted {i}") for i in (1, 2, 3)
    ]
    if host.era == "legacy":
        assert host.call_json("heard")["levels"] == ["info"]
    # helpers
    templates = host.client.list_resource_templates(timeout=TIMEOUT)
    assert [t["uriTemplate"] for t in templates] == ["city://{name}"]
    completion = host.client.complete(
        {"type": "ref/resource", "uri": "city://{name}"}, {"name": "name", "value": "l"}, timeout=TIMEOUT
    )
    assert completion["values"] == ["Lisbon", "London", "Lyon"]
