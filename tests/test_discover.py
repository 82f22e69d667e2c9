"""The ``server/discover`` probe and result, against the FakeServer and a small HTTP endpoint.

* A 2026-only error (-32020 HeaderMismatch, -32021 MissingRequiredClientCapability), also at
  HTTP 400, shows a modern server: the probe's failure is reported, never hidden behind an
  ``initialize`` fallback. No real peer here answers a well-formed probe that way (the
  TypeScript SDK v2 does for mismatched headers, which this client never sends).
* A discover result the host kept (``client.discover_result``) connects with no round trip.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from http_fakes import serving
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import exmcp_actors as mcp
from exmcp_actors.testing import FakeConnection, FakeError, FakeServer
from tests.waiting import wait_until

TIMEOUT = 5.0
FAST = mcp.Backoff(initial=0.01, factor=1, maximum=0.01, jitter=0)
MISSING = {"requiredCapabilities": {"extensions": {"io.example/needed": {}}}}


@pytest.fixture
def modern() -> Iterator[FakeServer]:
    with FakeServer(era="both") as fake:
        yield fake


@pytest.mark.parametrize(("code", "data"), [(-32020, None), (-32021, MISSING)])
def test_a_2026_error_answering_the_probe_is_reported_not_hidden_by_initialize(
    modern: FakeServer, code: int, data: Any
) -> None:
    def refuse(params: dict[str, Any], ctx: FakeConnection) -> Any:
        raise FakeError(code, "refused", data)

    modern.on("server/discover", refuse)
    with pytest.raises(mcp.ConnectError) as raised:
        mcp.connect(modern.transport(), reconnect=False, connect_timeout=TIMEOUT)
    assert raised.value.reason == ("discover_failed", code)
    assert f"server/discover failed: {code}" in str(raised.value)
    if data is not None:
        assert "io.example/needed" in str(raised.value)
    assert modern.count("initialize") == 0


def test_a_2026_error_at_http_400_is_evidence_of_a_modern_server() -> None:
    initialized: list[Any] = []

    async def endpoint(request: Request) -> Response:
        message = await request.json()
        if message.get("method") == "initialize":  # a legacy fallback would connect here
            initialized.append(message)
            result = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "x"}}
            return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": result})
        if "id" not in message:
            return Response(status_code=202)
        error = {"code": -32020, "message": "Bad Request: the request headers and body disagree"}
        return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "error": error}, status_code=400)

    with serving(Route("/mcp", endpoint, methods=["POST", "GET", "DELETE"])) as server:
        with pytest.raises(mcp.ConnectError) as raised:
            mcp.connect(server.url, reconnect=False, connect_timeout=TIMEOUT)
    assert raised.value.reason == ("discover_failed", -32020)
    assert initialized == []


def test_a_kept_discover_result_connects_with_no_round_trip_and_a_reconnect_probes(modern: FakeServer) -> None:
    with mcp.connect(modern.transport()) as first:
        kept = first.discover_result
    assert kept is not None and kept["supportedVersions"][0] == "2026-07-28"
    kept = {**kept, "capabilities": {"tools": {"listChanged": True}}, "instructions": "from before"}
    with mcp.connect(modern.transport(), discover_result=kept, backoff=FAST) as client:
        assert (client.era, client.protocol_version) == ("modern", "2026-07-28")
        assert client.server_capabilities == {"tools": {"listChanged": True}}
        assert client.instructions == "from before" and client.discover_result == kept
        client.list_tools()
        assert [m["method"] for n, m in modern.received if n == 2] == ["tools/list"]
        modern.drop(connection=2)
        modern.wait_for("server/discover", connection=3, timeout=TIMEOUT)  # a reconnect asks afresh
        wait_until(lambda: client.status == "ready", TIMEOUT, "the reconnect")
        assert client.discover_result is not None and client.discover_result.get("instructions") is None


def test_a_kept_discover_result_is_checked_before_anything_starts(modern: FakeServer) -> None:
    with pytest.raises(TypeError, match="discover_result"):
        mcp.connect(modern.transport(), discover_result=["2026-07-28"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="supportedVersions"):
        mcp.connect(modern.transport(), discover_result={"supportedVersions": ["2025-11-25"]})
    with pytest.raises(ValueError, match="protocol"):
        mcp.connect(modern.transport(), protocol="legacy", discover_result={"supportedVersions": ["2026-07-28"]})
    assert modern.connections == 0
