"""Against fastmcp 4.1.6 with fastmcp-tasks 4.1.4 (tests/peers/fastmcp_server.py), a server
written elsewhere: tasks of the ``io.modelcontextprotocol/tasks`` extension (SEP-2663) on
2026-07-28, plain answers to calls asked as tasks, and watching a server that has nothing to
listen to (no change notifications advertised, ``subscriptions/listen`` answered -32601).

One Streamable HTTP peer serves the module (both eras: ``protocol=`` picks); the stdio
tests start their own.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import exmcp_actors as mcp
from tests.cli_helpers import Cli
from tests.peers.fastmcp_peer import fastmcp_argv, fastmcp_http_peer, missing_tools
from tests.peers.launch import Peer
from tests.sdk_helpers import ClientPool, once

TIMEOUT = 20.0
TASK_TOOLS = {"crunch", "must_task", "ask_name"}

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    with fastmcp_http_peer() as started:
        yield started


@pytest.fixture
def connect(peer: Peer, client_pool: ClientPool) -> Callable[..., mcp.Client]:
    def make(protocol: str = "auto", **kwargs: Any) -> mcp.Client:
        return client_pool.connect(peer.url, protocol=protocol, **once(TIMEOUT), **kwargs)

    return make


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(block.get("text", "") for block in result["content"])


def name_answer(params: dict[str, Any]) -> dict[str, Any]:
    return {"action": "accept", "content": {"name": "Ann"}}


# -- tasks on 2026-07-28 (SEP-2663) ------------------------------------------------------------


def test_a_2026_task_is_polled_through_tasks_get_to_its_inlined_result(connect: Callable[..., mcp.Client]) -> None:
    client = connect()
    assert client.era == "modern"
    assert "io.modelcontextprotocol/tasks" in client.server_capabilities["extensions"]
    task = client.call_tool("crunch", {"n": 7, "delay": 0.2}, task=True, timeout=TIMEOUT)
    assert isinstance(task, mcp.Task) and task.task_id
    assert task.info["pollIntervalMs"] == 100 and "resultType" not in task.info
    assert text_of(task.result(timeout=TIMEOUT)) == "49"
    assert task.status == "completed"
    assert [(n.method, n.params["status"]) for n in task][-1] == ("notifications/tasks", "completed")
    # A tool that runs only as a task runs as one for a client that declares the extension.
    must = client.call_tool("must_task", {"n": 3}, task=True, timeout=TIMEOUT)
    assert isinstance(must, mcp.Task) and text_of(must.result(timeout=TIMEOUT)) == "6"


def test_a_2026_task_asking_for_input_is_answered_through_tasks_update(connect: Callable[..., mcp.Client]) -> None:
    asked: list[dict[str, Any]] = []

    def elicitation(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return name_answer(params)

    client = connect(elicitation=elicitation)
    task = client.call_tool("ask_name", {}, task=True, timeout=TIMEOUT)
    assert isinstance(task, mcp.Task)
    assert text_of(task.result(timeout=TIMEOUT)) == "hello Ann"
    assert [params["message"] for params in asked] == ["Your name?"]  # asked once, however often polled
    assert [n.params["status"] for n in task] == ["input_required", "completed"]


def test_a_cancelled_2026_task_ends_cancelled(connect: Callable[..., mcp.Client]) -> None:
    task = connect().call_tool("crunch", {"n": 2, "delay": 5}, task=True, timeout=TIMEOUT)
    assert isinstance(task, mcp.Task)
    task.cancel(timeout=TIMEOUT)
    with pytest.raises(mcp.RequestError, match="cancelled"):
        task.result(timeout=TIMEOUT)
    assert task.status == "cancelled"


# -- a plain answer to a call asked as a task ---------------------------------------------------


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
def test_a_plain_answer_to_a_call_asked_as_a_task_is_returned(
    connect: Callable[..., mcp.Client], protocol: str
) -> None:
    client = connect(protocol)
    answer = client.call_tool("touch", {"uri": "demo://a"}, task=True, timeout=TIMEOUT)
    assert isinstance(answer, dict), answer  # the tool ran, and its result is not thrown away
    version = text_of(answer)
    assert client.read_resource("demo://a")["contents"][0]["text"] == version


def test_a_legacy_server_that_advertises_no_tasks_runs_a_task_tool_plainly(connect: Callable[..., mcp.Client]) -> None:
    client = connect("legacy")
    assert "tasks" not in client.server_capabilities  # fastmcp's tasks speak only 2026-07-28
    answer = client.call_tool("crunch", {"n": 4}, task=True, timeout=TIMEOUT)
    assert isinstance(answer, dict) and text_of(answer) == "16"


# -- a server with nothing to listen to --------------------------------------------------------


def test_a_watch_and_a_catalog_of_a_server_with_nothing_to_listen_to_connect(
    connect: Callable[..., mcp.Client],
) -> None:
    client = connect()
    assert client.era == "modern"
    with pytest.raises(mcp.RequestError) as refused:  # an explicit listen still says why
        client.listen({"toolsListChanged": True}, timeout=TIMEOUT)
    assert refused.value.code == -32601
    watch = client.watch({"toolsListChanged": True, "resourceSubscriptions": ["demo://a"]}, timeout=TIMEOUT)
    assert watch.acknowledged_filter == {} and watch.subscription_id is None
    with pytest.raises(queue.Empty):
        watch.get_nowait()
    with client.catalog(timeout=TIMEOUT) as catalog:
        assert set(catalog.kinds) == {"tools", "prompts", "resources"}
        assert {tool["name"] for tool in catalog.tools} >= TASK_TOOLS
        assert [resource["uri"] for resource in catalog.resources] == ["demo://a"]
    watch.unsubscribe()


def test_a_hub_catalog_keeps_the_tools_of_a_server_with_nothing_to_listen_to(peer: Peer) -> None:
    config = {"mcpServers": {"fast": {"url": peer.url}}}
    with mcp.Hub.from_config(config, connect_timeout=TIMEOUT, probe_timeout=TIMEOUT) as hub:
        assert hub.errors == {} and hub.clients["fast"].era == "modern"
        catalog = hub.catalog(timeout=TIMEOUT)
        assert {tool["name"] for tool in catalog.tools if tool["server"] == "fast"} >= TASK_TOOLS


def test_exmcp_watch_shows_a_server_with_nothing_to_listen_to_connected(peer: Peer, tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"fast": {"url": peer.url}}}))
    for args in (["--config", str(config)], ["--", *fastmcp_argv()]):
        with Cli(*args) as cli:
            connected = cli.wait_method("connected", timeout=TIMEOUT)
            assert connected["params"]["era"] == "modern"
            rc, _ = cli.interrupt()
            assert rc in (0, 130) and "cannot watch" not in cli.stderr, cli.stderr
