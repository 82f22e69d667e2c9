"""Frame classification and message building, sans-IO."""

from __future__ import annotations

from typing import Any

import pytest

from exmcp_actors._protocol import _jsonrpc as rpc
from exmcp_actors._transport._base import InvalidFrame


def test_responses_errors_requests_and_notifications_are_told_apart() -> None:
    assert type(rpc.classify({"jsonrpc": "2.0", "id": 1, "result": {}})) is rpc.Response
    assert type(rpc.classify({"jsonrpc": "2.0", "method": "m"})) is rpc.Notification
    assert type(rpc.classify({"jsonrpc": "2.0", "method": "m", "params": [1]})) is rpc.Notification
    assert type(rpc.classify({"jsonrpc": "2.0", "id": 1, "method": "m"})) is rpc.ServerRequest
    assert rpc.classify({"jsonrpc": "2.0", "id": 1, "result": {"a": 1}}) == rpc.Response(1, {"a": 1})
    assert rpc.classify(
        {"jsonrpc": "2.0", "id": "x", "error": {"code": -32601, "message": "nope", "data": [1]}}
    ) == rpc.ErrorResponse("x", -32601, "nope", [1])
    assert rpc.classify({"jsonrpc": "2.0", "id": 7, "method": "ping"}) == rpc.ServerRequest(7, "ping", None)
    assert rpc.classify({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}) == rpc.Notification(
        "notifications/tools/list_changed", None
    )


@pytest.mark.parametrize(
    "frame",
    [
        [{"jsonrpc": "2.0", "id": 1, "result": {}}],
        "hello",
        42,
        None,
        {"id": 1, "result": {}},
        {"jsonrpc": "1.0", "id": 1, "result": {}},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "m"}},
        {"jsonrpc": "2.0", "id": 1, "error": "boom"},
        {"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "m"}},
        {"jsonrpc": "2.0", "id": 1, "error": {"code": True, "message": "m"}},
        {"jsonrpc": "2.0", "method": 5},
        {"jsonrpc": "2.0", "method": "x", "params": "p"},
        {"jsonrpc": "2.0", "id": 1.5, "method": "x"},
        {"jsonrpc": "2.0", "id": True, "result": {}},
        {"jsonrpc": "2.0", "id": {"a": 1}, "result": {}},
        {"jsonrpc": "2.0"},
        InvalidFrame("bad json", b"{nope"),
    ],
)
def test_anything_else_is_invalid_with_a_reason(frame: Any) -> None:
    result = rpc.classify(frame)
    assert isinstance(result, rpc.Invalid)
    assert result.why


def test_batches_are_rejected_by_name() -> None:
    result = rpc.classify([])
    assert isinstance(result, rpc.Invalid) and "batch" in result.why


def test_an_error_without_a_message_keeps_its_code() -> None:
    result = rpc.classify({"jsonrpc": "2.0", "id": 3, "error": {"code": -1}})
    assert result == rpc.ErrorResponse(3, -1, "", None)


def test_ids_come_from_the_clients_own_counter() -> None:
    first, second = rpc.RequestBuilder(), rpc.RequestBuilder()
    assert [first.next_id(), first.next_id()] == [1, 2]
    assert second.next_id() == 1
    assert rpc.RequestBuilder("p-").next_id() == "p-1"


def test_requests_keep_an_explicit_empty_params_object_and_omit_none() -> None:
    assert rpc.RequestBuilder.request("tools/list", None, 1) == {"jsonrpc": "2.0", "method": "tools/list", "id": 1}
    assert rpc.RequestBuilder.request("x", {}, 2)["params"] == {}
    assert rpc.RequestBuilder.request("x", {"a": 1}, "s")["params"] == {"a": 1}
    assert rpc.notification("notifications/initialized") == {"jsonrpc": "2.0", "method": "notifications/initialized"}


def test_answers_to_server_requests_are_result_or_error_frames() -> None:
    assert rpc.result_frame(4, {}) == {"jsonrpc": "2.0", "id": 4, "result": {}}
    assert rpc.error_frame(4, -32601, "no") == {"jsonrpc": "2.0", "id": 4, "error": {"code": -32601, "message": "no"}}
