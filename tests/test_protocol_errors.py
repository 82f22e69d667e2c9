"""Whose fault, sans-IO: the peer's broken frame, the transport's failed exchange and our own
bug are three types, each reported as itself and never as another."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from test_protocol_session import (
    INITIALIZE_RESULT,
    UPDATED,
    A,
    Driver,
    legacy,
    modern,
    notice,
    only,
    rejected,
    result,
    sent,
    updated,
    uris,
)

from exmcp_actors._protocol import _messages as m
from exmcp_actors._protocol._errors import (
    ConnectError,
    ConnectionLost,
    Error,
    ExchangeFailed,
    InternalError,
    ProtocolError,
    RequestError,
    TransitionError,
    TransportError,
)
from exmcp_actors._protocol._events import Stop
from exmcp_actors._protocol._index import ACK_METHOD
from exmcp_actors._protocol._jsonrpc import InvalidFrame, RequestFailed
from exmcp_actors._protocol._session import Session
from exmcp_actors._protocol._state import TransitionError as TransitionErrorOfTheStateTable
from exmcp_actors._transport.http import STREAM_DROPPED

INTERNAL = "internal error handling a frame"
INVALID = "skipped an invalid frame from the server"


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "exmcp_actors" and r.levelno == level]


def crashed(effects: list[Any]) -> list[Any]:
    return [effect.reason for effect in only(effects, Stop) if effect.reason[0] == "crashed"]


# -- the three types --------------------------------------------------------------------------


def test_the_three_faults_are_three_types_none_a_kind_of_another() -> None:
    assert issubclass(ProtocolError, Error) and issubclass(TransportError, Error)
    assert not issubclass(InternalError, Error)  # a host's `except mcp.Error` never swallows our bug
    assert issubclass(InternalError, RuntimeError)
    for one, other in [
        (ProtocolError, TransportError),
        (ProtocolError, InternalError),
        (TransportError, InternalError),
    ]:
        assert not issubclass(one, other) and not issubclass(other, one)
    assert issubclass(ExchangeFailed, TransportError) and issubclass(ExchangeFailed, ConnectionLost)
    assert issubclass(TransitionError, InternalError)
    assert TransitionErrorOfTheStateTable is TransitionError  # still importable from _state


# -- the peer's fault: logged, skipped, the client carries on --------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        42,
        {"jsonrpc": "1.0", "method": UPDATED, "params": {"uri": A}},
        {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "both"}},
        InvalidFrame("invalid JSON", b"{not json"),
    ],
    ids=["not-an-object", "wrong-version", "result-and-error", "undecodable"],
)
def test_a_peers_broken_frame_is_logged_as_its_fault_and_skipped(caplog: pytest.LogCaptureFixture, bad: Any) -> None:
    driver = legacy()
    listener = driver.listener(uris(A))
    caplog.set_level(logging.DEBUG, logger="exmcp_actors")

    effects = driver.frames(bad, updated(A))

    assert [message.params for message in driver.received(listener)] == [{"uri": A}]  # the next frame counts
    assert only(effects, Stop) == [] and driver.session.ready
    [warning] = records(caplog, logging.WARNING)
    assert INVALID in warning.getMessage() and not warning.exc_info
    assert records(caplog, logging.ERROR) == []


def test_a_subscription_stamp_that_is_no_id_is_the_peers_fault_not_a_bug(caplog: pytest.LogCaptureFixture) -> None:
    driver = modern()
    handle, listen_id = driver.live(uris(A))
    caplog.set_level(logging.DEBUG, logger="exmcp_actors")

    effects = driver.frames(notice(ACK_METHOD, {"notifications": {}}, stamp=[listen_id]), updated(A, stamp=listen_id))

    assert [message.params for message in driver.received(handle)] == [{"uri": A}]
    assert only(effects, Stop) == []
    assert any(INVALID in r.getMessage() for r in records(caplog, logging.WARNING))
    assert records(caplog, logging.ERROR) == []


def test_a_cancellation_naming_no_usable_request_id_is_dropped_as_malformed(caplog: pytest.LogCaptureFixture) -> None:
    driver = legacy()
    caplog.set_level(logging.DEBUG, logger="exmcp_actors")

    effects = driver.frames(notice("notifications/cancelled", {"requestId": ["s1"]}))

    assert only(effects, Stop) == [] and driver.session.ready
    assert any("malformed notifications/cancelled" in r.getMessage() for r in records(caplog, logging.WARNING))
    assert records(caplog, logging.ERROR) == []


# -- our own bug: reported as ours, and the client closes as crashed --------------------------


def raise_on_answer(monkeypatch: pytest.MonkeyPatch, driver: Driver, error: Exception) -> None:
    """The session trips ``error`` on the next answer it routes (a bug injected in a handler)."""

    def buggy(msg: Any) -> bool:
        raise error

    monkeypatch.setattr(driver.session.pending, "answer", buggy)


@pytest.mark.parametrize(
    "bug",
    [TransitionError("no move 'negotiated' from the ready phase"), KeyError("entries"), TypeError("bad operand")],
    ids=["transition-error", "key-error", "type-error"],
)
def test_our_own_bug_handling_a_frame_is_logged_as_internal_and_closes_the_client_as_crashed(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, bug: Exception
) -> None:
    driver = legacy()
    listener = driver.listener(uris(A))
    request_id, _ = driver.request()
    raise_on_answer(monkeypatch, driver, bug)
    caplog.set_level(logging.DEBUG, logger="exmcp_actors")

    effects = driver.frames(result(request_id, {}), updated(A))

    assert crashed(effects) == [("crashed", repr(bug))]
    assert driver.session.status == "disconnected"
    assert driver.received(listener) == []  # nothing more is handled once the client is crashing
    [error] = records(caplog, logging.ERROR)
    assert INTERNAL in error.getMessage() and error.exc_info is not None and error.exc_info[1] is bug
    assert not any(INVALID in r.getMessage() for r in caplog.records)  # never blamed on the peer


def test_a_bug_hit_while_connecting_fails_connect_with_the_crash() -> None:
    driver = Driver("legacy")
    driver.start()
    [initialize] = [message for message in sent(driver.opened()) if "id" in message]
    bug = TransitionError("no move 'negotiated' from the opening phase")

    def buggy(msg: Any) -> bool:
        raise bug

    driver.session.pending.answer = buggy  # type: ignore[method-assign]
    effects = driver.frames(result(initialize["id"], INITIALIZE_RESULT))

    assert crashed(effects) == [("crashed", repr(bug))]
    error = driver.session.life.connect_error
    assert isinstance(error, ConnectError) and error.reason == ("crashed", repr(bug))


def test_one_bug_per_frame_is_logged_once_not_once_per_frame(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = legacy()
    ids = [driver.request()[0] for _ in range(3)]
    raise_on_answer(monkeypatch, driver, TransitionError("no move"))
    caplog.set_level(logging.DEBUG, logger="exmcp_actors")

    stops = [crashed(driver.frames(result(request_id, {}))) for request_id in ids]

    assert stops == [[("crashed", "TransitionError('no move')")], [], []]  # the client closes once
    assert len(records(caplog, logging.ERROR)) == 1


def test_the_internal_error_path_is_not_the_one_a_bad_frame_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = legacy()
    seen: list[Exception] = []
    monkeypatch.setattr(Session, "_internal_error", lambda self, frame, error: seen.append(error))

    driver.frames(42, {"jsonrpc": "2.0"}, InvalidFrame("too large"))

    assert seen == []


# -- the transport's fault: the request fails with it, typed and with its status -------------


def test_a_failed_exchange_fails_the_hosts_request_with_the_transport_error_and_its_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    driver = legacy()
    request_id, future = driver.request()
    failure = ExchangeFailed("HTTP 503 Service Unavailable", status=503, body="overloaded")
    caplog.set_level(logging.DEBUG, logger="exmcp_actors")

    effects = driver.frames(RequestFailed(request_id, failure))

    assert rejected(effects) == [(future, failure)]
    assert failure.status == 503 and isinstance(failure, ConnectionLost)
    assert driver.session.ready and only(effects, Stop) == []
    assert records(caplog, logging.WARNING) == [] and records(caplog, logging.ERROR) == []


def test_a_failure_of_a_request_no_longer_pending_is_not_blamed_on_the_server(
    caplog: pytest.LogCaptureFixture,
) -> None:
    driver = legacy()
    caplog.set_level(logging.DEBUG, logger="exmcp_actors")

    driver.frames(RequestFailed("req-gone", ExchangeFailed(STREAM_DROPPED)))

    assert records(caplog, logging.WARNING) == [] and records(caplog, logging.ERROR) == []


def test_a_listen_whose_exchange_fails_before_its_acknowledgment_raises_the_transport_error() -> None:
    driver = modern()
    _, acknowledged, listen = driver.subscribe(uris(A))
    failure = ExchangeFailed(STREAM_DROPPED)

    effects = driver.frames(RequestFailed(listen["id"], failure))

    assert rejected(effects) == [(acknowledged, failure)]  # a ConnectionLost, as on any other transport


def test_a_server_error_shaped_like_a_dropped_stream_is_its_answer_not_a_transport_failure() -> None:
    driver = modern()
    handle, listen_id = driver.live(uris(A))
    term = {"code": -32001, "message": "stream dropped", "data": {"streamDropped": True}}

    effects = driver.frames({"jsonrpc": "2.0", "id": listen_id, "error": term})

    assert driver.received(handle) == [m.SubscriptionClosed(m.SUBSCRIPTION_CLOSED, handle, ("error", term))]
    assert only(effects, Stop) == []  # and no re-listen timer: the server ended it


@pytest.mark.parametrize(
    ("mode", "falls_back"), [("auto", True), ("modern", False)], ids=["auto-falls-back", "modern-fails"]
)
def test_a_probe_refused_at_the_http_level_is_a_legacy_server_in_auto_mode(mode: Any, falls_back: bool) -> None:
    driver = Driver(mode)
    driver.start()
    [probe] = [message for message in sent(driver.opened()) if "id" in message]

    effects = driver.frames(RequestFailed(probe["id"], ExchangeFailed("HTTP 405 Method Not Allowed", status=405)))

    if falls_back:
        assert [message["method"] for message in sent(effects)] == ["initialize"]
    else:
        error = driver.session.life.connect_error
        assert isinstance(error, ConnectError) and "HTTP 405" in str(error)


def test_an_initialize_whose_exchange_fails_fails_the_handshake_naming_the_transport() -> None:
    driver = Driver("legacy")
    driver.start()
    [initialize] = [message for message in sent(driver.opened()) if "id" in message]

    driver.frames(RequestFailed(initialize["id"], ExchangeFailed("HTTP 502 Bad Gateway", status=502)))

    error = driver.session.life.connect_error
    assert isinstance(error, ConnectError)
    assert error.reason == ("initialize_failed", ("transport_error", 502, "HTTP 502 Bad Gateway"))
    assert not isinstance(error, RequestError)
