"""URL-mode elicitation end to end against real servers: the npm reference server
``server-everything`` 2026.8.31 (TypeScript SDK: ``trigger-url-elicitation``, by request and
by the -32042 error) and the Python SDK 2.3.0 ``MCPServer`` (``ctx.elicit_url``,
``UrlElicitationRequiredError``, ``send_elicit_complete``; tests/peers/host_server.py)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import exmcp_actors as mcp
from tests.peers.everything import everything_argv, missing_tools

TIMEOUT = 20.0
#: A peer's start (node, or the SDK's imports) may take long on a busy machine.
START_TIMEOUT = 90.0
HOST_PEER = str(Path(__file__).parent / "peers" / "host_server.py")
TOOL = "trigger-url-elicitation"


class Person:
    """An elicitation handler answering ``action`` to URL requests; it records what it saw."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.action = "accept"
        self.asked: list[dict[str, Any]] = []
        self.completed: list[dict[str, Any]] = []
        self.completion = threading.Event()

    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(params)
        return {"action": self.action}

    def on_complete(self, params: dict[str, Any]) -> None:
        self.completed.append(params)
        self.completion.set()


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(block.get("text", "") for block in result["content"])


@pytest.fixture
def everything() -> Iterator[tuple[mcp.Client, Person]]:
    if missing_tools() is not None:
        pytest.skip(str(missing_tools()))
    person = Person()
    client = mcp.connect(
        everything_argv(),
        elicitation=person,
        elicitation_modes=("form", "url"),
        connect_timeout=START_TIMEOUT,
        probe_timeout=START_TIMEOUT,
    )
    yield client, person
    client.disconnect()


def test_the_npm_server_offers_its_url_tool_only_to_a_url_capable_client() -> None:
    if missing_tools() is not None:
        pytest.skip(str(missing_tools()))
    client = mcp.connect(
        everything_argv(), elicitation=Person(), connect_timeout=START_TIMEOUT, probe_timeout=START_TIMEOUT
    )
    try:
        assert TOOL not in [tool["name"] for tool in client.list_tools(timeout=TIMEOUT)]
    finally:
        client.disconnect()


def test_a_url_elicitation_of_the_npm_server_reaches_the_handler(everything: tuple[mcp.Client, Person]) -> None:
    client, person = everything
    assert TOOL in [tool["name"] for tool in client.list_tools(timeout=TIMEOUT)]
    url = "https://example.com/connect?step=1"
    result = client.call_tool(TOOL, {"url": url, "elicitationId": "npm-1"}, timeout=TIMEOUT)
    assert "User completed the URL elicitation flow" in text_of(result)
    assert '"action": "accept"' in text_of(result) and "content" not in text_of(result).split("Raw result")[1]
    assert person.asked == [
        {"mode": "url", "url": url, "message": person.asked[0]["message"], "elicitationId": "npm-1"}
    ]


def test_a_32042_of_the_npm_server_is_answered_and_retried_once(everything: tuple[mcp.Client, Person]) -> None:
    client, person = everything
    url = "https://example.com/connect?step=2"
    result = client.call_tool(TOOL, {"url": url, "errorPath": True}, timeout=TIMEOUT)
    # The error's prerequisite first, then (the retry takes the request path) the tool's own URL.
    assert [asked["url"] for asked in person.asked] == ["https://modelcontextprotocol.io", url]
    assert "User completed the URL elicitation flow" in text_of(result)


def test_a_declined_32042_of_the_npm_server_reaches_the_host(everything: tuple[mcp.Client, Person]) -> None:
    client, person = everything
    person.action = "decline"
    with pytest.raises(mcp.UrlElicitationRequired, match="decline") as raised:
        client.call_tool(TOOL, {"url": "https://example.com/x", "errorPath": True}, timeout=TIMEOUT)
    assert raised.value.code == -32042
    assert [item["url"] for item in raised.value.elicitations] == ["https://modelcontextprotocol.io"]
    assert len(person.asked) == 1


def test_a_hostile_url_of_the_npm_server_never_reaches_the_handler(everything: tuple[mcp.Client, Person]) -> None:
    client, person = everything
    try:
        result = client.call_tool(TOOL, {"url": "http://evil.example/login"}, timeout=TIMEOUT)
    except mcp.RequestError as error:  # the server passes our -32602 on as its tool's error
        assert "https" in str(error)
    else:
        assert result.get("isError") and "https" in text_of(result)
    assert person.asked == []


def test_url_elicitation_against_the_sdk_server() -> None:
    """One peer start (seconds on a busy machine): a URL request then its completion, a -32042
    retried and then completed, and a hostile URL refused."""
    person = Person()
    client = mcp.connect(
        [sys.executable, HOST_PEER],
        protocol="legacy",
        elicitation=person,
        elicitation_modes=("url",),
        connect_timeout=START_TIMEOUT,
    )
    with client:
        # elicitation/create in url mode, then notifications/elicitation/complete to a watch
        with client.watch({"elicitationComplete": True}, timeout=TIMEOUT) as watch:
            result = client.call_tool("connect_account", {"url": "https://auth.example.com/acct"}, timeout=TIMEOUT)
            assert json.loads(text_of(result)) == {"action": "accept"}
            done = watch.get(timeout=TIMEOUT)
        assert isinstance(done, mcp.ElicitationComplete) and done.elicitation_id == "acct-1"
        assert person.asked[0]["url"] == "https://auth.example.com/acct"
        assert person.asked[0]["elicitationId"] == "acct-1"
        assert person.completion.wait(TIMEOUT) and person.completed == [{"elicitationId": "acct-1"}]
        # UrlElicitationRequiredError: handed to the handler, retried once, completed to a listener
        person.reset()
        listener = client.subscribe_notifications({"elicitationComplete": True}, timeout=TIMEOUT)
        assert text_of(client.call_tool("needs_auth", {}, timeout=TIMEOUT)) == "authorized"
        assert [asked["elicitationId"] for asked in person.asked] == ["auth-1"]
        done = listener.get(timeout=TIMEOUT)
        assert isinstance(done, mcp.ElicitationComplete) and done.elicitation_id == "auth-1"
        # a hostile URL: the SDK passes the client's -32602 on as the tool call's error
        person.reset()
        with pytest.raises(mcp.RequestError, match="userinfo") as raised:
            client.call_tool("connect_account", {"url": "https://bank.example@evil.example/"}, timeout=TIMEOUT)
        assert raised.value.code == -32602 and person.asked == []
