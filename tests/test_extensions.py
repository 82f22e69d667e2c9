"""Extensions (SEP-2133): what ``connect(extensions=)`` declares, against the official
TypeScript SDK v2 server (tests/peers/ts_server.mjs: it declares ``com.example/ts-peer`` and
its tool ``client_extensions`` answers what the client declared, from ``initialize`` on a
2025 session, from the request's ``_meta`` on 2026-07-28), and the checks on the argument.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from sdk_helpers import ClientPool, TapTransport, once

import exmcp_actors as mcp
from exmcp_actors._protocol._extensions import TASKS_EXTENSION, check_extensions
from tests.peers.ts_peer import missing_tools, ts_argv

TIMEOUT = 20.0
DECLARED = {"com.example/client-x": {"mode": "fast", "levels": [1, 2]}, "org.example.sub/plain": {}}
needs_ts = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))


@pytest.fixture
def connect(client_pool: ClientPool) -> Callable[..., mcp.Client]:
    def make(target: Any, protocol: str, **kwargs: Any) -> mcp.Client:
        return client_pool.connect(target, protocol=protocol, **once(TIMEOUT), **kwargs)

    return make


def declared_by_client(client: mcp.Client) -> Any:
    result = client.call_tool("client_extensions", {})
    return json.loads(result["content"][0]["text"])


@needs_ts
@pytest.mark.parametrize("protocol", ["legacy", "modern"])
def test_the_server_hears_the_declared_extensions_and_the_client_reads_the_servers(
    connect: Callable[..., mcp.Client], protocol: str
) -> None:
    client = connect(ts_argv(), protocol, extensions=DECLARED)
    assert client.era == protocol
    assert declared_by_client(client) == DECLARED
    assert client.server_extensions == {"com.example/ts-peer": {"flavour": "v2"}}


@needs_ts
def test_server_extensions_is_a_copy_the_host_cannot_change(connect: Callable[..., mcp.Client]) -> None:
    client = connect(ts_argv(), "legacy")
    client.server_extensions["com.example/ts-peer"]["flavour"] = "changed"
    client.server_extensions.clear()
    assert client.server_extensions == {"com.example/ts-peer": {"flavour": "v2"}}


@needs_ts
def test_a_host_change_to_its_dicts_after_connect_changes_nothing_sent(connect: Callable[..., mcp.Client]) -> None:
    mine = {"com.example/client-x": {"mode": "fast"}}
    client = connect(ts_argv(), "modern", extensions=mine)
    mine["com.example/client-x"]["mode"] = "slow"
    mine["com.example/other"] = {}
    assert declared_by_client(client) == {"com.example/client-x": {"mode": "fast"}}


@needs_ts
def test_a_modern_client_declares_its_extensions_in_every_request_and_keeps_the_tasks_one_merged(
    connect: Callable[..., mcp.Client],
) -> None:
    tap = TapTransport(mcp.StdioTransport(ts_argv()))
    client = connect(tap, "modern", extensions={**DECLARED, TASKS_EXTENSION: {}})
    client.list_tools()
    for sent in tap.sent_messages():
        if "id" not in sent:
            continue
        capabilities = sent["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
        assert capabilities["extensions"] == {**DECLARED, TASKS_EXTENSION: {}}, sent["method"]


@needs_ts
def test_no_extensions_declares_no_extensions_field(connect: Callable[..., mcp.Client]) -> None:
    client = connect(ts_argv(), "legacy")
    assert declared_by_client(client) is None


@pytest.mark.parametrize(
    ("extensions", "error", "names"),
    [
        ([("com.example/x", {})], TypeError, "extensions must be a dict"),
        ({"no-prefix": {}}, ValueError, "'no-prefix'"),
        ({"1example/x": {}}, ValueError, "'1example/x'"),
        ({"com.example/": {}}, ValueError, "'com.example/'"),
        ({"com.example/-x": {}}, ValueError, "'com.example/-x'"),
        ({"com..example/x": {}}, ValueError, "'com..example/x'"),
        ({"com.example/x\n": {}}, ValueError, "'com.example/x\\n'"),
        ({1: {}}, ValueError, "the name 1"),
        ({"com.example/" + "x" * 250: {}}, ValueError, "no extension identifier"),
        ({"com.example/x": None}, TypeError, "extensions['com.example/x'] must be a settings dict"),
        ({"com.example/x": [1]}, TypeError, "extensions['com.example/x'] must be a settings dict"),
        ({"com.example/x": {"a": object()}}, ValueError, "extensions['com.example/x'] must be a JSON object"),
        ({"com.example/x": {"a": float("nan")}}, ValueError, "extensions['com.example/x'] must be a JSON object"),
        ({"com.example/x": {"a": {1: 2}}}, ValueError, "extensions['com.example/x'] must be a JSON object"),
        ({TASKS_EXTENSION: {"mine": True}}, ValueError, f"extensions['{TASKS_EXTENSION}'] is the library's own"),
        ({f"com.example/x{n}": {} for n in range(65)}, ValueError, "at most 64"),
    ],
)
def test_bad_extensions_are_refused_before_anything_starts_naming_the_argument_and_the_name(
    extensions: Any, error: type[Exception], names: str
) -> None:
    with pytest.raises(error) as raised:
        mcp.connect(["/nonexistent/server"], extensions=extensions)
    assert "extensions" in str(raised.value)
    assert names in str(raised.value)


def test_a_one_label_prefix_is_an_extension_identifier() -> None:
    # The _meta key rules make the prefix "a series of labels"; a reversed domain is only a SHOULD.
    declared = {"acme/x": {}, "acme.tools-2/n.v_1": {"k": 1}}
    assert check_extensions(declared) == declared
