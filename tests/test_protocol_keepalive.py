"""The keepalive and the status messages in the sans-IO session: which probe each era sends
and when, what an answer, a late timer or the transport's failure means, and the statuses a
handle is queued across a loss. Plain calls, no threads."""

from __future__ import annotations

import dataclasses
from typing import Any

from exmcp_actors._protocol import _messages as m
from exmcp_actors._protocol._errors import ExchangeFailed, ProtocolError
from exmcp_actors._protocol._events import (
    ArmTimer,
    Effect,
    IdleFor,
    KeepaliveTimeout,
    OpenTransport,
    ResubscribeReport,
    Stop,
    WatchIdle,
)
from exmcp_actors._protocol._handshake import META_CLIENT_INFO
from exmcp_actors._protocol._jsonrpc import RequestBuilder, RequestFailed
from exmcp_actors._protocol._keepalive import MAX_PROBE_WAIT, probe_bound
from exmcp_actors._protocol._session import Session
from tests.test_protocol_session import BACKOFF, Driver, result, sent

KEEPALIVE = 5.0


def probing(mode: str = "legacy", *, reconnect: bool = True) -> Driver:
    driver = Driver(mode, reconnect=reconnect)  # type: ignore[arg-type]
    config = dataclasses.replace(driver.session.config, keepalive=KEEPALIVE)
    driver.session = Session(config, RequestBuilder())
    return driver


def counts(driver: Driver) -> tuple[int, int]:
    """Probes sent, and answered."""
    keepalive = driver.session.life.keepalive
    return keepalive.sent, keepalive.answered


def watched(effects: list[Effect]) -> list[WatchIdle]:
    return [e for e in effects if isinstance(e, WatchIdle)]


def probe_of(driver: Driver) -> tuple[dict[str, Any], ArmTimer]:
    effects = driver.feed(IdleFor(driver.generation))
    [probe] = sent(effects)
    [timer] = [e for e in effects if isinstance(e, ArmTimer)]
    return probe, timer


def test_the_probe_bound_is_the_keepalive_up_to_ten_seconds() -> None:
    assert probe_bound(0.5) == 0.5 and probe_bound(60.0) == MAX_PROBE_WAIT == 10.0


def test_a_ready_connection_is_watched_and_a_lost_one_no_more() -> None:
    driver = probing()
    driver.start()
    effects = driver.answer_handshake(driver.opened())
    assert watched(effects) == [WatchIdle(driver.generation, KEEPALIVE)]
    assert [w.seconds for w in watched(driver.lose())] == [None]


def test_without_a_keepalive_nothing_is_watched_and_idleness_sends_nothing() -> None:
    driver = Driver("legacy")
    driver.start()
    assert watched(driver.answer_handshake(driver.opened())) == []
    assert driver.feed(IdleFor(driver.generation)) == []


def test_a_legacy_connection_is_pinged_once_at_a_time() -> None:
    driver = probing().connect()
    probe, timer = probe_of(driver)
    assert probe["method"] == "ping" and "params" not in probe
    assert timer.delay == KEEPALIVE and timer.event == KeepaliveTimeout(driver.generation, probe["id"])
    assert driver.feed(IdleFor(driver.generation)) == []  # its answer is still to come
    driver.frames(result(probe["id"], {}))
    assert driver.feed(timer.event) == []  # answered: its timer is stale
    again, _ = probe_of(driver)
    assert again["id"] != probe["id"]
    assert counts(driver) == (2, 1)


def test_a_modern_connection_is_probed_with_server_discover() -> None:
    driver = probing("modern").connect()
    probe, _ = probe_of(driver)
    assert probe["method"] == "server/discover" and META_CLIENT_INFO in probe["params"]["_meta"]
    driver.frames({"jsonrpc": "2.0", "id": probe["id"], "error": {"code": -32601, "message": "no"}})
    assert counts(driver) == (1, 1)  # any answer, an error too, says the peer is there
    assert driver.session.ready


def test_an_unanswered_probe_is_a_loss_and_the_client_reconnects() -> None:
    driver = probing().connect()
    watch = driver.listener({"toolsListChanged": True, "status": True}, kind="watch")
    assert [msg.state for msg in driver.received(watch)] == ["ready"]
    _, timer = probe_of(driver)
    effects = driver.feed(timer.event)
    [reopen] = [e for e in effects if isinstance(e, OpenTransport)]
    assert reopen.delay == BACKOFF.delay(1) and not driver.session.ready
    [status] = driver.received(watch)
    assert status == m.Status(
        m.STATUS, watch, "reconnecting", {"attempt": 1, "delay": 0.5, "reason": ("keepalive_timeout", KEEPALIVE)}
    )
    driver.opened()
    assert [msg.detail for msg in driver.received(watch)] == [{"attempt": 1}]


def test_statuses_of_a_legacy_reconnect_come_around_the_reconnected() -> None:
    driver = probing().connect()
    watch = driver.listener({"toolsListChanged": True, "status": True}, kind="watch")
    driver.lose()
    assert [msg.state for msg in driver.received(watch)] == ["reconnecting"]
    driver.reconnect()
    assert driver.received(watch) == []  # resubscribing: not ready yet
    driver.feed(ResubscribeReport(driver.generation, frozenset(), {}))
    assert [msg[0] for msg in driver.received(watch)] == [m.RECONNECTED, m.STATUS]
    assert driver.received(watch)[1].detail == {"era": "legacy", "protocolVersion": "2025-11-25"}


def test_without_reconnect_an_unanswered_probe_stops_the_client_with_its_reason() -> None:
    driver = probing(reconnect=False).connect()
    _, timer = probe_of(driver)
    assert [e for e in driver.feed(timer.event) if isinstance(e, Stop)] == [Stop(("keepalive_timeout", KEEPALIVE))]


def test_a_probe_the_transport_fails_is_a_loss_and_a_bad_reply_is_not() -> None:
    driver = probing(reconnect=False).connect()
    probe, _ = probe_of(driver)
    driver.frames(RequestFailed(probe["id"], ProtocolError("not json")))
    assert driver.session.ready
    probe, _ = probe_of(driver)
    effects = driver.frames(RequestFailed(probe["id"], ExchangeFailed("connection refused")))
    [stop] = [e for e in effects if isinstance(e, Stop)]
    assert stop.reason[0] == "keepalive_failed" and "connection refused" in stop.reason[1]


def test_idleness_and_timeouts_of_an_earlier_connection_are_ignored() -> None:
    driver = probing().connect()
    _, timer = probe_of(driver)
    earlier = driver.generation
    driver.lose()
    driver.reconnect()
    assert driver.feed(IdleFor(earlier)) == []
    assert [e for e in driver.feed(timer.event) if isinstance(e, OpenTransport)] == []
    assert driver.session.ready
