"""The pending-request table, sans-IO: who waits for each answer, and what they get."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from exmcp_actors._protocol._errors import (
    ConnectionLost,
    ExchangeFailed,
    InternalError,
    NotConnected,
    ProtocolError,
    RequestError,
    TransportError,
)
from exmcp_actors._protocol._events import Effects, Settle
from exmcp_actors._protocol._jsonrpc import ErrorResponse, RequestFailed, Response
from exmcp_actors._protocol._pending import Answer, PendingTable


def table() -> tuple[PendingTable, Effects]:
    effects = Effects()
    return PendingTable(effects), effects


def one_rejection(effects: Effects, future: Future[Any]) -> BaseException:
    """The error of the single failing Settle effect collected (for ``future``), nothing else queued."""
    todo, out = effects.take()
    assert out == {}
    [effect] = todo
    assert isinstance(effect, Settle) and effect.error is not None
    assert effect.future is future
    return effect.error


def error_for(answer: ErrorResponse | RequestFailed, method: str = "resources/read") -> BaseException:
    """What the host's future of a ``method`` request fails with when ``answer`` comes back."""
    pending, effects = table()
    future: Future[Any] = Future()
    pending.add(answer.id, method, future=future)
    assert pending.answer(answer)
    assert len(pending) == 0
    return one_rejection(effects, future)


def test_a_result_resolves_the_hosts_future_through_an_effect() -> None:
    pending, effects = table()
    future: Future[Any] = Future()
    pending.add(7, "tools/list", future=future)
    assert pending.answer(Response(7, {"tools": []})) is True
    assert effects.take() == ([Settle(future, {"tools": []})], {})
    assert not future.done()  # the shell completes it, not the core
    assert len(pending) == 0


def test_an_error_answer_rejects_with_a_request_error_carrying_code_message_and_data() -> None:
    error = error_for(ErrorResponse("r1", -32602, "bad arguments", {"field": "x"}), "tools/call")
    assert type(error) is RequestError
    assert (error.code, error.message, error.data) == (-32602, "bad arguments", {"field": "x"})
    assert error.reason == ("request_error", -32602, "bad arguments")


@pytest.mark.parametrize(
    "cause",
    [
        ExchangeFailed("the response stream dropped before the answer"),
        ExchangeFailed("connection error: ConnectError: [Errno 111] Connection refused"),
        ExchangeFailed("HTTP 503 Service Unavailable", status=503, body="try later"),
    ],
    ids=["stream-dropped", "connection-refused", "http-503"],
)
def test_a_failed_exchange_rejects_with_the_transports_error_a_lost_connection_with_its_status(
    cause: ExchangeFailed,
) -> None:
    error = error_for(RequestFailed(1, cause))
    assert error is cause
    assert isinstance(error, ConnectionLost) and isinstance(error, TransportError)
    assert str(error) == f"the transport failed the request: {cause.what}"


@pytest.mark.parametrize(
    "cause",
    [ProtocolError("the server answered a request with HTTP 202 Accepted and no response"), InternalError("a bug")],
    ids=["the-servers-fault", "ours"],
)
def test_a_request_failed_for_another_reason_rejects_with_that_reason_not_a_lost_connection(
    cause: Exception,
) -> None:
    error = error_for(RequestFailed(1, cause))
    assert error is cause and not isinstance(error, ConnectionLost)


@pytest.mark.parametrize(
    ("code", "data"),
    [
        (-32001, {"streamDropped": False}),
        (-32001, None),
        (-32601, {"streamDropped": True}),
        (-32000, {"httpStatus": 499}),
        (-32000, {"httpStatus": "503"}),
        (-32000, ["transportError"]),
        (-32001, {"streamDropped": True}),
        (-32000, {"transportError": "connection refused"}),
        (-32000, {"httpStatus": 503}),
    ],
    ids=[
        "not-dropped",
        "no-data",
        "dropped-flag-on-another-code",
        "http-499",
        "status-not-an-int",
        "data-a-list",
        "shaped-like-a-dropped-stream",
        "shaped-like-a-transport-error",
        "shaped-like-an-http-503",
    ],
)
def test_an_error_the_server_sent_stays_a_request_error(code: int, data: Any) -> None:
    # Whatever its code and data look like: only a RequestFailed is the transport's failure.
    error = error_for(ErrorResponse(1, code, "refused", data))
    assert type(error) is RequestError
    assert error.code == code and error.data == data


def test_an_answer_for_an_unknown_id_returns_false_and_changes_nothing() -> None:
    pending, effects = table()
    future: Future[Any] = Future()
    pending.add(1, "ping", future=future)
    assert pending.answer(Response(2, {})) is False
    assert pending.answer(ErrorResponse(None, -32700, "parse error")) is False
    assert effects.take() == ([], {})
    assert len(pending) == 1


def test_each_request_is_answered_once() -> None:
    pending, effects = table()
    future: Future[Any] = Future()
    pending.add(1, "ping", future=future)
    assert pending.answer(Response(1, {}))
    assert pending.answer(Response(1, {})) is False
    assert effects.take() == ([Settle(future, {})], {})


@pytest.mark.parametrize(
    "answer",
    [
        Response(3, {"ok": True}),
        ErrorResponse(3, -32000, "no"),
        RequestFailed(3, ExchangeFailed("HTTP 502", status=502)),
    ],
    ids=["result", "error", "failed-exchange"],
)
def test_an_internal_callback_runs_at_once_with_the_answer_itself(answer: Answer) -> None:
    pending, effects = table()
    seen: list[Answer] = []
    pending.add(3, "initialize", callback=seen.append)
    assert pending.answer(answer)
    assert seen == [answer]
    assert effects.take() == ([], {})  # no future to complete


def test_fail_all_rejects_every_future_and_empties_the_table() -> None:
    pending, effects = table()
    futures: list[Future[Any]] = [Future() for _ in range(3)]
    for number, future in enumerate(futures):
        pending.add(number, f"method/{number}", future=future)
    seen: list[Answer] = []
    pending.add("handshake", "initialize", callback=seen.append)
    error = ConnectionLost("the connection was lost")
    pending.fail_all(error)
    assert effects.take() == ([Settle(future, None, error) for future in futures], {})
    assert len(pending) == 0
    assert seen == []  # callbacks are not answers: a drop is the session's business
    assert pending.answer(Response(0, {})) is False


def test_fail_all_on_an_empty_table_does_nothing() -> None:
    pending, effects = table()
    pending.fail_all(NotConnected("the client stopped"))
    assert effects.take() == ([], {})


def test_pop_takes_a_request_out_without_any_effect() -> None:
    pending, effects = table()
    future: Future[Any] = Future()
    pending.add(5, "tools/call", future=future)
    taken = pending.pop(5)
    assert taken is not None and (taken.method, taken.future) == ("tools/call", future)
    assert pending.pop(5) is None
    assert pending.answer(Response(5, {})) is False
    assert effects.take() == ([], {})
