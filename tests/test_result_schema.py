"""Checked results: a ``tools/call`` result's ``structuredContent`` against the tool's
``outputSchema`` (``exmcp_actors._protocol._result_schema``).

Against the official Python SDK 2.3.0 low-level server (tests/peers/structured_server.py,
both eras), which sends its handlers' results unchecked; the npm server-everything's
``get-structured-content`` (a zod-made draft-07 schema) for the happy path; a FakeServer for
what no real server sends: a schema too big, a remote ``$ref``, a catastrophic pattern.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors._protocol._result_schema import MAX_RESULT_BYTES, MAX_SCHEMA_BYTES
from exmcp_actors.testing import NO_REPLY, FakeServer, FakeTasks
from tests.peers.everything import everything_argv, missing_tools
from tests.sdk_helpers import ClientPool, TapTransport, once

PEER = str(Path(__file__).resolve().parent / "peers" / "structured_server.py")
TIMEOUT = 20.0
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "items": {"type": "array", "items": {"type": "string"}}},
    "required": ["n"],
}


def tool(name: str, output: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "inputSchema": {"type": "object"}}
    if output is not None:
        spec["outputSchema"] = output
    return spec


# --------------------------------------------------------------------------- the SDK server


@pytest.mark.parametrize("era", ["both", "legacy"])
def test_sdk_server_results_are_checked_against_their_output_schema(era: str, client_pool: ClientPool) -> None:
    client = client_pool.connect([sys.executable, PEER, "--era", era], **once(TIMEOUT))
    assert client.era == ("modern" if era == "both" else "legacy")
    # Not listed yet: the first result with structuredContent lists the tools, then is checked.
    good = client.call_tool("forecast", {"city": "Oslo"})
    assert good["structuredContent"] == {"city": "Oslo", "celsius": 21.5}
    with pytest.raises(mcp.InvalidToolResult) as bad:
        client.call_tool("forecast_bad", {"city": "Oslo"})
    assert bad.value.tool == "forecast_bad"
    assert bad.value.violation == "at $.celsius: 'warm' is not of type 'number'"
    assert "'forecast_bad'" in str(bad.value) and bad.value.reason == ("invalid_tool_result", "forecast_bad")
    assert bad.value.result["structuredContent"]["celsius"] == "warm"
    assert isinstance(bad.value, mcp.Error)
    with pytest.raises(mcp.InvalidToolResult, match="declares an outputSchema but its result has no structuredContent"):
        client.call_tool("forecast_bare")
    assert client.call_tool("forecast_error")["isError"] is True  # an error result is not checked
    assert client.call_tool("plain")["structuredContent"] == {"anything": [1, "two"]}  # no schema: as it came
    taken = client.call_tool("forecast_bad", {"city": "Oslo"}, validate=False)
    assert taken["structuredContent"]["celsius"] == "warm"


@pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))
def test_server_everything_structured_content_passes_its_draft_07_schema(client_pool: ClientPool) -> None:
    tap = TapTransport(mcp.StdioTransport(everything_argv()))
    client = client_pool.connect(tap, **once(TIMEOUT))
    result = client.call_tool("get-structured-content", {"location": "Chicago"})
    assert result["structuredContent"] == {"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82}
    listings = [message for _, message in tap.sent if message.get("method") == "tools/list"]
    assert len(listings) >= 1  # the check listed the tools first
    listed = {item["name"]: item for item in client.list_tools()}
    assert "outputSchema" in listed["get-structured-content"]
    # It was checked, by a compiled validator (not a reason the schema cannot check).
    book = client._shared.tools
    assert book is not None
    output = book.output_schema("get-structured-content")
    assert output is not None and not isinstance(output.validator(), str)


# --------------------------------------------------------------------------- FakeServer


@pytest.fixture
def fake() -> Iterator[tuple[FakeServer, dict[str, Any]]]:
    """A legacy FakeServer whose every ``tools/call`` answers ``answer["result"]``."""
    answer: dict[str, Any] = {"result": {"content": []}}
    with FakeServer(era="legacy", tools=[tool("t", SCHEMA), tool("free")]) as server:
        server.on("tools/call", lambda params, ctx: answer["result"])
        yield server, answer


def connect_fake(server: FakeServer, client_pool: ClientPool) -> mcp.Client:
    return client_pool.connect(server.transport())


def test_a_bad_structured_content_names_the_first_violation_escaped(
    fake: tuple[FakeServer, dict[str, Any]], client_pool: ClientPool
) -> None:
    server, answer = fake
    client = connect_fake(server, client_pool)
    answer["result"] = {"content": [], "structuredContent": {"n": 1, "items": ["ok", 7, "\x1b[2J" * 500]}}
    with pytest.raises(mcp.InvalidToolResult) as bad:
        client.call_tool("t")
    assert bad.value.violation is not None and bad.value.violation.startswith("at $.items[1]: 7 is not of type")
    answer["result"] = {"content": [], "structuredContent": {"n": "\x1b[2J\u202e" * 5000}}
    with pytest.raises(mcp.InvalidToolResult) as escaped:
        client.call_tool("t")
    text = str(escaped.value)
    assert "\x1b" not in text and "\u202e" not in text and "\\x1b[2J" in text
    assert len(text) < 600  # bounded: the instance is cut, not quoted whole
    answer["result"] = {"content": [], "structuredContent": {"n": 1}}
    assert client.call_tool("t")["structuredContent"] == {"n": 1}
    assert client.call_tool("free")["content"] == []  # no outputSchema: nothing required
    with pytest.raises(TypeError, match="validate must be True or False"):
        client.call_tool("t", validate="yes")  # type: ignore[arg-type]


def test_an_unknown_tool_costs_one_listing_until_the_next(
    fake: tuple[FakeServer, dict[str, Any]], client_pool: ClientPool
) -> None:
    server, answer = fake
    client = connect_fake(server, client_pool)
    answer["result"] = {"content": [], "structuredContent": {"anything": True}}
    for _ in range(3):
        assert client.call_tool("ghost")["structuredContent"] == {"anything": True}
    assert server.count("tools/list") == 1  # fetched once, then remembered as unlisted
    answer["result"] = {"content": []}
    client.call_tool("other")  # no structuredContent: no listing wanted
    assert server.count("tools/list") == 1
    server.set_items("tools", [tool("t", SCHEMA), tool("ghost", SCHEMA)])
    client.list_tools()  # a new listing forgets the unlisted names, and names the ghost now
    answer["result"] = {"content": [], "structuredContent": {"anything": True}}
    with pytest.raises(mcp.InvalidToolResult, match="'n' is a required property"):
        client.call_tool("ghost")
    assert server.count("tools/list") == 2


def test_a_huge_schema_or_result_is_refused_saying_so(client_pool: ClientPool) -> None:
    huge = {"type": "object", "description": "x" * (MAX_SCHEMA_BYTES + 1)}
    with FakeServer(era="legacy", tools=[tool("huge", huge), tool("t", SCHEMA)]) as server:
        answer: dict[str, Any] = {"content": [], "structuredContent": {}}
        server.on("tools/call", lambda params, ctx: answer)
        client = connect_fake(server, client_pool)
        client.list_tools()
        with pytest.raises(mcp.InvalidToolResult, match="larger than 256 KiB, more than the client compiles"):
            client.call_tool("huge")
        answer["structuredContent"] = {"n": 1, "items": ["y" * 1024] * (MAX_RESULT_BYTES // 1024 + 1)}
        with pytest.raises(mcp.InvalidToolResult, match="larger than 4 MiB, more than the client checks"):
            client.call_tool("t")
        assert client.call_tool("t", validate=False)["structuredContent"]["n"] == 1


def test_a_remote_ref_is_never_fetched(client_pool: ClientPool) -> None:
    fetched = threading.Event()
    remote = {"type": "object", "properties": {"n": {"$ref": "https://schemas.example.invalid/n.json"}}}
    local = {"type": "object", "$defs": {"n": {"type": "integer"}}, "properties": {"n": {"$ref": "#/$defs/n"}}}
    with FakeServer(era="legacy", tools=[tool("remote", remote), tool("local", local)]) as server:
        server.on("tools/call", lambda params, ctx: {"content": [], "structuredContent": {"n": "1"}})
        client = connect_fake(server, client_pool)
        client.list_tools()
        import urllib.request

        real = urllib.request.urlopen

        def spy(*args: Any, **kwargs: Any) -> Any:
            fetched.set()
            return real(*args, **kwargs)

        urllib.request.urlopen = spy  # type: ignore[assignment]
        try:
            with pytest.raises(mcp.InvalidToolResult, match=r"does not resolve within it \(none is fetched\)"):
                client.call_tool("remote")
        finally:
            urllib.request.urlopen = real
        assert not fetched.is_set()
        with pytest.raises(mcp.InvalidToolResult, match="is not of type 'integer'"):
            client.call_tool("local")  # a $ref within the schema resolves


def test_pattern_is_not_applied_and_format_is_not_asserted(client_pool: ClientPool) -> None:
    # (a+)+$ against 40 a's and a b: about 2**40 steps in Python's re, were it run.
    catastrophic = {
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}, "when": {"type": "string", "format": "date"}},
    }
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "required": ["n"]}
    bad_schema = {"type": "object", "properties": {"n": {"type": 5}}}
    tools = [tool("slow", catastrophic), tool("old", draft7), tool("broken", bad_schema)]
    with FakeServer(era="legacy", tools=tools) as server:
        content = {"s": "a" * 40 + "b", "when": "not a date"}
        server.on("tools/call", lambda params, ctx: {"content": [], "structuredContent": content})
        client = connect_fake(server, client_pool)
        client.list_tools()
        assert client.call_tool("slow")["structuredContent"] == content
        with pytest.raises(mcp.InvalidToolResult, match="'n' is a required property"):
            client.call_tool("old")
        with pytest.raises(mcp.InvalidToolResult, match="its outputSchema is no valid JSON Schema"):
            client.call_tool("broken")


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_tasks_result_is_checked_as_a_plain_calls(era: str, client_pool: ClientPool) -> None:
    with FakeServer(era=era, tools=[tool("t", SCHEMA)]) as server:  # type: ignore[arg-type]
        tasks = FakeTasks(server)
        client = connect_fake(server, client_pool)
        client.list_tools()
        bad = {"content": [], "structuredContent": {"n": 1.5}}
        checked, unchecked = client.call_tool("t", task=True), client.call_tool("t", task=True, validate=False)
        assert isinstance(checked, mcp.Task) and isinstance(unchecked, mcp.Task)
        tasks.complete(tasks.wait_created(1), bad)
        tasks.complete(tasks.wait_created(2), bad)
        with pytest.raises(mcp.InvalidToolResult, match=r"at \$\.n: 1\.5 is not of type 'integer'"):
            checked.result(timeout=TIMEOUT)
        assert unchecked.result(timeout=TIMEOUT)["structuredContent"] == {"n": 1.5}


def test_an_unanswered_lookup_spends_only_the_calls_timeout(
    fake: tuple[FakeServer, dict[str, Any]], client_pool: ClientPool
) -> None:
    server, answer = fake
    server.on("tools/list", lambda params, ctx: NO_REPLY)
    client = connect_fake(server, client_pool)
    answer["result"] = {"content": [], "structuredContent": {"n": "unchecked"}}
    # The listing never comes: the call ends within its own timeout, its result unchecked.
    assert client.call_tool("t", timeout=4.0)["structuredContent"] == {"n": "unchecked"}
    assert server.count("tools/list") == 1
    assert client.call_tool("t", timeout=4.0)["structuredContent"] == {"n": "unchecked"}
    assert server.count("tools/list") == 1  # remembered: not asked again until a listing comes


def test_threads_calling_an_unlisted_tool_at_once_cost_one_listing(
    fake: tuple[FakeServer, dict[str, Any]], client_pool: ClientPool
) -> None:
    server, _ = fake
    client = connect_fake(server, client_pool)
    listing = server.default_handler("tools/list")
    assert listing is not None
    calls = 4
    answered: list[None] = []
    all_called = threading.Event()

    @server.on("tools/call", concurrent=True)
    def call(params: dict[str, Any], ctx: Any) -> Any:
        answered.append(None)
        if len(answered) == calls:
            all_called.set()
        return {"content": [], "structuredContent": {"n": "bad"}}

    @server.on("tools/list", concurrent=True)
    def held(params: dict[str, Any], ctx: Any) -> Any:
        ctx.wait(all_called)  # every caller is past its call, at its lookup, while this is out
        return listing(params, ctx)

    outcomes: queue.SimpleQueue[str] = queue.SimpleQueue()
    threads = [threading.Thread(target=lambda: outcomes.put(call_t(client))) for _ in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert [outcomes.get(timeout=TIMEOUT) for _ in range(calls)] == ["invalid"] * calls
    assert server.count("tools/list") == 1


def call_t(client: mcp.Client) -> str:
    try:
        client.call_tool("t")
    except mcp.InvalidToolResult:
        return "invalid"
    return "valid"
