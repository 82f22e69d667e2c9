"""MCP 2026-07-28 Streamable HTTP, "Custom Headers from Tool Parameters": ``x-mcp-header``.

A client MUST mirror each argument marked ``x-mcp-header`` into ``Mcp-Param-{Name}``
(encoded as the spec says), MUST leave out of ``tools/list`` a tool whose annotations are
invalid, and SHOULD re-list and retry once on -32020 (HeaderMismatch). Checked against the
official Python SDK 2.3.0: its HTTP server, which refuses a call whose headers are missing
or differ from the body, and its client's own codec and checks (``mcp.shared.inbound``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from mcp.shared.inbound import (
    decode_header_value,
    find_invalid_x_mcp_header,
    mcp_param_headers,
    validate_mcp_param_headers,
    x_mcp_header_map,
)
from mcp.shared.inbound import encode_header_value as sdk_encode

import exmcp_actors as mcp
from exmcp_actors._protocol._param_headers import encode_header_value, header_map, invalid_x_mcp_header, param_headers
from exmcp_actors._protocol._tool_book import ToolBook
from exmcp_actors.testing import FakeError, FakeServer
from tests.peers.launch import Peer, peer_argv
from tests.sdk_helpers import WAIT, ClientPool, TapTransport, tool_text

EXTRA = ("--extra-tools",)

ROUTE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "shard": {"type": "integer", "x-mcp-header": "Shard"},
        "dry": {"type": "boolean", "x-mcp-header": "Dry"},
        "target": {"type": "object", "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}}},
    },
}

STRINGS = [
    "us-west1",
    "Hello, 世界",
    " padded ",
    "line1\nline2",
    "=?base64?literal?=",
    "tab\there",
    "",
    "~!@#$%^&*()",
    "café",
    "\x1b[31m",
]


@pytest.fixture(scope="module")
def http_peer() -> Iterator[Peer]:
    with Peer("http", "both", EXTRA).start() as peer:
        yield peer


# -- the codec, against the spec and the SDK ------------------------------------------------


@pytest.mark.parametrize(
    ("value", "header"),
    [
        ("us-west1", "us-west1"),
        ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
        (" padded ", "=?base64?IHBhZGRlZCA=?="),
        ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
        ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
    ],
)
def test_values_are_encoded_as_the_spec_table_shows(value: str, header: str) -> None:
    assert encode_header_value(value) == header


@pytest.mark.parametrize("value", STRINGS)
def test_a_string_is_encoded_as_the_python_sdk_encodes_it(value: str) -> None:
    assert encode_header_value(value) == sdk_encode(value)
    assert decode_header_value(encode_header_value(value)) == value


def test_the_headers_of_a_call_are_the_python_sdk_clients_for_strings_integers_and_booleans() -> None:
    for arguments in [
        {"region": "Hello, 世界", "shard": 7, "dry": True, "target": {"zone": " z "}},
        {"region": "=?base64?x?=", "shard": -(2**60), "dry": False},
        {"shard": 0, "target": {"zone": "plain"}},
        {"region": None, "target": "not an object"},
        {},
    ]:
        ours = param_headers(header_map(ROUTE_SCHEMA), arguments)
        assert ours == mcp_param_headers(x_mcp_header_map(ROUTE_SCHEMA), arguments), arguments
        assert validate_mcp_param_headers(ROUTE_SCHEMA, arguments, ours) is None, arguments


def test_an_integral_float_is_sent_as_the_integer_both_sdk_servers_compare_equal() -> None:
    # The Python SDK's client would send "1e+16", which the TypeScript server compares as
    # text against String(1e16) = "10000000000000000" and refuses; "10000000000000000" passes both.
    for value, text in [(42.0, "42"), (1e16, "10000000000000000"), (-0.0, "0")]:
        headers = param_headers(header_map(ROUTE_SCHEMA), {"shard": value})
        assert headers == {"Mcp-Param-Shard": text}
        assert validate_mcp_param_headers(ROUTE_SCHEMA, {"shard": value}, headers) is None


INVALID_SCHEMAS: list[Any] = [
    {"type": "object", "properties": {"r": {"type": "number", "x-mcp-header": "R"}}},
    {"type": "object", "properties": {"r": {"type": "string", "x-mcp-header": ""}}},
    {"type": "object", "properties": {"r": {"type": "string", "x-mcp-header": "Re gion"}}},
    {"type": "object", "properties": {"r": {"type": "string", "x-mcp-header": "R\r\nX: y"}}},
    {"type": "object", "properties": {"r": {"type": "string", "x-mcp-header": 7}}},
    {"type": "object", "properties": {"r": {"x-mcp-header": "R"}}},
    {"type": "object", "properties": {"r": {"type": "object", "x-mcp-header": "R"}}},
    {
        "type": "object",
        "properties": {"a": {"type": "string", "x-mcp-header": "X"}, "b": {"type": "string", "x-mcp-header": "x"}},
    },
    {"type": "object", "properties": {"l": {"type": "array", "items": {"type": "string", "x-mcp-header": "L"}}}},
    {"type": "object", "anyOf": [{"properties": {"r": {"type": "string", "x-mcp-header": "R"}}}]},
    {"type": "object", "$defs": {"d": {"type": "string", "x-mcp-header": "D"}}},
    {"type": "object", "additionalProperties": {"type": "string", "x-mcp-header": "A"}},
    {"type": "string", "x-mcp-header": "Root"},
]
VALID_SCHEMAS: list[Any] = [
    ROUTE_SCHEMA,
    {"type": "object", "properties": {"r": {"type": "string"}}},
    {"type": "object", "properties": {"r": {"type": "string", "default": {"x-mcp-header": "NotASchema"}}}},
    None,
    "not a schema",
]


@pytest.mark.parametrize("schema", INVALID_SCHEMAS + VALID_SCHEMAS)
def test_invalid_annotations_are_found_where_the_python_sdk_finds_them(schema: Any) -> None:
    assert (invalid_x_mcp_header(schema) is None) == (find_invalid_x_mcp_header(schema) is None)
    assert (invalid_x_mcp_header(schema) is None) == (schema in VALID_SCHEMAS)


def test_a_rejected_tool_is_logged_once_with_its_name_escaped(caplog: pytest.LogCaptureFixture) -> None:
    book = ToolBook("c9")
    book.mirrored = True
    evil = {"name": "evil\x1b]0;pwned\x07", "inputSchema": INVALID_SCHEMAS[0]}
    fine = {"name": "fine", "inputSchema": ROUTE_SCHEMA}
    with caplog.at_level(logging.WARNING, logger="exmcp_actors"):
        assert book.learn([evil, fine], modern=True, complete=True) == [fine]
        assert book.learn([evil, fine], modern=True, complete=True) == [fine]
    records = [r.getMessage() for r in caplog.records if "x-mcp-header" in r.getMessage()]
    assert len(records) == 1, records
    assert "\x1b" not in records[0] and "\\x1b" in records[0] and "'fine'" not in records[0]
    assert book.param_headers("fine", {"region": "x"}) == {"Mcp-Param-Region": "x"}
    assert book.param_headers("evil\x1b]0;pwned\x07", {"ratio": 1}) == {}


def test_the_rejections_a_tool_book_remembers_hold_what_their_log_lines_show_not_what_the_server_sent() -> None:
    # Each rejection is remembered (to log it once), up to a bound in number: a megabyte of a
    # name and of an annotation per rejected tool must not be what each one keeps.
    book = ToolBook("c9")
    book.mirrored = True
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for n in range(10):
            bad = {"type": "object", "properties": {"p": {"type": "string", "x-mcp-header": "not a token" * 100_000}}}
            assert book.learn([{"name": f"{n}" * 1_000_000, "inputSchema": bad}], modern=True, complete=True) == []
            del bad
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert held < 1_000_000, held  # 10 rejections of 2 MB each


# -- against the SDK's HTTP server ----------------------------------------------------------


def test_a_tool_call_mirrors_its_marked_arguments_into_headers_the_sdk_server_accepts(
    http_peer: Peer, client_pool: ClientPool
) -> None:
    tap = TapTransport(mcp.HttpTransport(http_peer.url))
    client = client_pool.connect(tap)
    assert client.era == "modern"
    assert "route" in [tool["name"] for tool in client.list_tools()]
    arguments = {"region": "Hello, 世界", "shard": 2**60, "dry": True, "target": {"zone": " z "}, "note": "n"}
    # The SDK server answers -32020 to a call whose headers are missing or differ from the body.
    echoed = json.loads(tool_text(client.call_tool("route", arguments, timeout=WAIT)))
    assert echoed == arguments
    assert len(tap.sent_messages("tools/call")) == 1  # accepted the first time, not after a retry


def test_a_tool_with_invalid_annotations_is_left_out_over_http_and_logged_once(
    http_peer: Peer, client_pool: ClientPool, caplog: pytest.LogCaptureFixture
) -> None:
    client = client_pool.connect(mcp.HttpTransport(http_peer.url))
    with caplog.at_level(logging.WARNING, logger="exmcp_actors"):
        first = [tool["name"] for tool in client.list_tools()]
        second = [tool["name"] for tool in client.list_tools(cache=False)]
    assert "bad_header" not in first and "bad_header" not in second
    assert "route" in first
    rejected = [r.getMessage() for r in caplog.records if "left out of tools/list" in r.getMessage()]
    assert len(rejected) == 1 and "'bad_header'" in rejected[0] and "number" in rejected[0], rejected
    # The raw request shows what the server sent.
    names = _all_names(client)
    assert "bad_header" in names


def _all_names(client: mcp.Client) -> list[str]:
    names: list[str] = []
    cursor = None
    while True:
        page = client.request("tools/list", {"cursor": cursor} if cursor else None)
        names += [tool["name"] for tool in page["tools"]]
        cursor = page.get("nextCursor")
        if cursor is None:
            return names


@pytest.mark.parametrize("where", ["stdio-modern", "http-legacy"])
def test_stdio_and_legacy_connections_keep_a_tool_with_invalid_annotations(where: str, client_pool: ClientPool) -> None:
    # Stdio carries no headers (the spec: MAY ignore x-mcp-header); 2025-11-25 has no such annotation.
    if where == "stdio-modern":
        client = client_pool.connect(peer_argv("stdio", "both", extra_args=EXTRA))
        assert "bad_header" in [tool["name"] for tool in client.list_tools()]
        return
    with Peer("http", "legacy", EXTRA).start() as peer:
        client = client_pool.connect(mcp.HttpTransport(peer.url))
        assert client.era == "legacy"
        assert "bad_header" in [tool["name"] for tool in client.list_tools()]
        client.disconnect()


def test_a_header_mismatch_relists_the_tools_and_retries_once(http_peer: Peer, client_pool: ClientPool) -> None:
    tap = TapTransport(mcp.HttpTransport(http_peer.url))
    client = client_pool.connect(tap)
    # Never listed: no headers, so the SDK server refuses with -32020; the client lists and retries.
    assert json.loads(tool_text(client.call_tool("route", {"region": "eu"}, timeout=WAIT))) == {"region": "eu"}
    methods = [m["method"] for m in tap.sent_messages() if m["method"] in ("tools/call", "tools/list")]
    assert methods[0] == "tools/call" and methods[-1] == "tools/call" and set(methods[1:-1]) == {"tools/list"}
    assert methods.count("tools/call") == 2
    # The schema changes under a client that listed it: its stale header is refused, then fixed.
    client.call_tool("rename_header", {"name": "Area"}, timeout=WAIT)
    try:
        assert json.loads(tool_text(client.call_tool("route", {"region": "us"}, timeout=WAIT))) == {"region": "us"}
        last = tap.sent_messages("tools/call")[-2:]
        assert [m["params"]["name"] for m in last] == ["route", "route"]
    finally:
        client.call_tool("rename_header", {"name": "Region"}, timeout=WAIT)


def test_a_second_header_mismatch_reaches_the_caller() -> None:
    # The SDK server accepts a retry whose headers match; a FakeServer refuses every call.
    with FakeServer(era="modern") as server:

        def refuse(params: dict[str, Any], ctx: Any) -> Any:
            raise FakeError(-32020, "Mcp-Param-Region header is missing")

        server.on("tools/call", refuse)
        client = mcp.connect(server.transport())
        try:
            with pytest.raises(mcp.RequestError) as raised:
                client.call_tool("echo", {"text": "x"}, timeout=WAIT)
            assert raised.value.code == -32020
            assert server.count("tools/call") == 2
            assert server.count("tools/list") >= 1
        finally:
            client.disconnect()


def test_the_relisting_after_a_header_mismatch_stays_within_the_calls_timeout() -> None:
    # A server slow to page through its tools: each page in its own time, but 20 of them
    # take 4 s. The call was given 1 s, and the re-listing is part of the call.
    with FakeServer(era="modern") as server:

        def refuse(params: dict[str, Any], ctx: Any) -> Any:
            raise FakeError(-32020, "Mcp-Param-Region header is missing")

        never = threading.Event()

        def slow_pages(params: dict[str, Any] | None, ctx: Any) -> Any:
            page = int((params or {}).get("cursor") or 0)
            if page:
                never.wait(0.2)  # the server's own pace, not a wait of the test
            return {"tools": [], "nextCursor": str(page + 1)} if page < 20 else {"tools": []}

        server.on("tools/call", refuse)
        server.on("tools/list", slow_pages)
        client = mcp.connect(server.transport())
        try:
            started = time.monotonic()
            with pytest.raises(mcp.RequestError) as raised:
                client.call_tool("echo", {"text": "x"}, timeout=1.0)
            elapsed = time.monotonic() - started
            assert raised.value.code == -32020
            assert elapsed < 2.5, elapsed
            assert server.count("tools/call") == 1  # no time was left for the retry
        finally:
            client.disconnect()
