"""Stage deadlines in the sans-IO core: every stage of a connect and of a reconnect ends in
time, and one that runs out is a failed attempt (no threads: timers are effects fed back)."""

from __future__ import annotations

from typing import Any

import pytest
from test_protocol_session import (
    BACKOFF,
    STAGE_TIMEOUT,
    Driver,
    acknowledgment,
    only,
    sent,
    uris,
)

from exmcp_actors._protocol import _messages as m
from exmcp_actors._protocol._errors import ConnectError
from exmcp_actors._protocol._events import (
    ArmTimer,
    DisarmTimers,
    Lost,
    Opened,
    OpenFailed,
    OpenTransport,
    ProbeTimeout,
    ResubscribeReport,
    StageTimeout,
    Stop,
    ToWorker,
)
from exmcp_actors._protocol._stages import timeout_error
from exmcp_actors._protocol._state import Pause, Stage


def timer(driver: Driver, stage: Stage) -> ArmTimer:
    """The deadline the last input armed for ``stage``."""
    [armed] = [t for t in driver.stage_timers if isinstance(t, ArmTimer) and t.event.stage is stage]
    return armed


def run_out(driver: Driver, armed: ArmTimer) -> list[Any]:
    """The timer fires."""
    return driver.feed(armed.event)


def reconnect_without_answer(driver: Driver) -> ArmTimer:
    """After a loss: the transport opens again, ``initialize`` is sent and never answered."""
    [initialize] = sent(driver.opened())
    assert initialize["method"] == "initialize"
    return timer(driver, Stage.INITIALIZE)


def test_every_stage_of_the_first_connect_runs_under_a_deadline_and_the_whole_connect_too() -> None:
    driver = Driver("legacy")
    driver.start()
    assert {t.event.stage for t in driver.stage_timers} == {Stage.CONNECT, Stage.OPEN}
    assert {t.delay for t in driver.stage_timers} == {STAGE_TIMEOUT}
    driver.opened()
    assert timer(driver, Stage.INITIALIZE) == ArmTimer(STAGE_TIMEOUT, StageTimeout(1, Stage.INITIALIZE, 2))


@pytest.mark.parametrize("mode", ["legacy", "modern", "auto"])
def test_a_settled_connect_disarms_its_stage_and_probe_timers_so_an_idle_client_does_not_wake_for_them(
    mode: Any,
) -> None:
    driver = Driver(mode)
    driver.start()
    effects = driver.answer_handshake(driver.opened())
    assert driver.session.ready
    assert DisarmTimers((StageTimeout, ProbeTimeout)) in driver.stage_timers
    assert not [e for e in effects if isinstance(e, ArmTimer) and isinstance(e.event, (StageTimeout, ProbeTimeout))]
    driver.lose()
    driver.reconnect()  # a reconnect settles too, and disarms what it armed
    if driver.session.life.stages.stage is Stage.RESUBSCRIBE:  # a legacy one, once resubscribed
        driver.feed(ResubscribeReport(driver.generation, frozenset(), {}))
    assert DisarmTimers((StageTimeout, ProbeTimeout)) in driver.stage_timers


def test_the_overall_connect_deadline_stops_the_first_connect_naming_the_stage_in_words() -> None:
    driver = Driver("legacy")
    driver.start()
    [overall] = [t for t in driver.stage_timers if t.event.stage is Stage.CONNECT]
    driver.opened()
    effects = run_out(driver, overall)
    [stop] = only(effects, Stop)
    error = driver.session.life.connect_error
    assert isinstance(error, ConnectError)
    assert error.reason == ("timeout", "initialize")
    assert str(error) == (
        "gave up after 10.0s waiting for an answer to initialize; check it speaks MCP, or raise connect_timeout"
    )
    assert stop.reason == ("transport_closed", str(error))
    assert driver.session.status == "disconnected"


def test_an_open_that_ran_out_of_its_time_ends_the_first_connect_like_the_open_stages_timer() -> None:
    driver = Driver("legacy")
    driver.start()
    effects = driver.feed(OpenFailed(driver.generation, TimeoutError("no TCP connection"), out_of_time=True))
    [stop] = only(effects, Stop)
    error = driver.session.life.connect_error
    assert isinstance(error, ConnectError)
    assert error.reason == ("timeout", "open")
    assert str(error) == str(timeout_error(Stage.OPEN, STAGE_TIMEOUT))
    assert stop.reason == ("transport_closed", str(error))


def test_a_reconnect_whose_initialize_is_never_answered_is_a_failed_attempt_and_the_backoff_goes_on() -> None:
    driver = Driver("legacy", attempts=3).connect()
    listener = driver.listener(uris("file:///a"))
    driver.lose()
    effects = run_out(driver, reconnect_without_answer(driver))
    assert only(effects, OpenTransport) == [OpenTransport(driver.generation, BACKOFF.delay(2))]
    assert driver.session.status == "reconnecting"
    assert driver.session.life.attempts == 1
    assert driver.session.life.last_error == str(timeout_error(Stage.INITIALIZE, STAGE_TIMEOUT))
    # The next attempt works: the listener hears Reconnected once the resubscription reports.
    driver.reconnect()
    driver.feed(ResubscribeReport(driver.generation, frozenset({"file:///a"}), {}))
    assert driver.received(listener) == [
        m.Reconnected(m.RECONNECTED, listener, {"resubscribed": ["file:///a"], "failed": []})
    ]


def test_stages_that_keep_running_out_exhaust_the_attempts_and_close_every_listener() -> None:
    driver = Driver("legacy", attempts=2).connect()
    driver.listener(uris("file:///a"))
    driver.lose()
    run_out(driver, reconnect_without_answer(driver))
    effects = run_out(driver, reconnect_without_answer(driver))
    [stop] = only(effects, Stop)
    assert stop.reason == ("reconnect_exhausted", str(timeout_error(Stage.INITIALIZE, STAGE_TIMEOUT)))


def test_a_transport_that_never_opens_runs_out_after_the_backoff_delay_plus_the_stage_timeout() -> None:
    driver = Driver("legacy").connect()
    effects = driver.lose()
    [reopen] = only(effects, OpenTransport)
    armed = timer(driver, Stage.OPEN)
    assert armed.delay == reopen.delay + STAGE_TIMEOUT
    effects = run_out(driver, armed)
    assert only(effects, OpenTransport) == [OpenTransport(driver.generation, BACKOFF.delay(2))]
    assert driver.session.life.last_error == str(timeout_error(Stage.OPEN, STAGE_TIMEOUT))


def test_a_deadline_of_a_finished_stage_or_an_earlier_connection_changes_nothing() -> None:
    driver = Driver("legacy")
    driver.start()
    opening, overall = timer(driver, Stage.OPEN), timer(driver, Stage.CONNECT)
    effects = driver.opened()
    initializing = timer(driver, Stage.INITIALIZE)
    assert run_out(driver, opening) == []  # the transport opened in time
    driver.answer_handshake(effects)
    assert driver.session.ready
    assert run_out(driver, initializing) == []
    assert run_out(driver, overall) == []
    assert driver.session.status == "ready"
    driver.lose()
    assert driver.feed(StageTimeout(driver.generation - 1, Stage.OPEN, 99)) == []
    assert driver.session.status == "reconnecting"


def test_a_resubscription_that_never_reports_drops_the_connection_and_tries_again() -> None:
    driver = Driver("legacy", attempts=3).connect()
    listener = driver.listener(uris("file:///a"))
    driver.lose()
    effects = driver.reconnect()
    [to_worker] = only(effects, ToWorker)
    assert to_worker.message.timeout == STAGE_TIMEOUT  # each wire call is bounded too
    armed = timer(driver, Stage.RESUBSCRIBE)
    assert armed.delay == 2 * STAGE_TIMEOUT
    assert driver.session.status == "ready"
    effects = run_out(driver, armed)
    assert only(effects, OpenTransport) == [OpenTransport(driver.generation, BACKOFF.delay(2))]
    assert driver.session.status == "reconnecting"
    assert driver.session.listeners.pause is Pause.HELD  # still held: nobody was told Reconnected yet
    driver.reconnect()
    driver.feed(ResubscribeReport(driver.generation, frozenset({"file:///a"}), {}))
    assert [message[0] for message in driver.received(listener)] == [m.RECONNECTED]
    assert driver.session.life.stages.settled


def test_a_resubscription_reported_in_time_settles_the_reconnect() -> None:
    driver = Driver("legacy").connect()
    driver.listener(uris("file:///a"))
    driver.lose()
    driver.reconnect()
    armed = timer(driver, Stage.RESUBSCRIBE)
    driver.feed(ResubscribeReport(driver.generation, frozenset({"file:///a"}), {}))
    assert run_out(driver, armed) == []
    assert driver.session.status == "ready"
    assert driver.session.life.attempts == 0


def test_a_loss_before_the_resubscription_reported_counts_as_a_failed_attempt() -> None:
    driver = Driver("legacy", attempts=2).connect()
    driver.listener(uris("file:///a"))
    driver.lose()
    driver.reconnect()
    effects = driver.feed(Lost(driver.generation, "reset again"))
    assert only(effects, OpenTransport) == [OpenTransport(driver.generation, BACKOFF.delay(2))]
    driver.reconnect()
    [stop] = only(driver.feed(Lost(driver.generation, "and again")), Stop)
    assert stop.reason[0] == "reconnect_exhausted"


def test_a_relisten_never_acknowledged_after_a_reconnect_is_a_failed_attempt() -> None:
    driver = Driver("modern", attempts=3).connect()
    driver.live(uris("file:///a"))
    driver.lose()
    driver.reconnect()
    armed = timer(driver, Stage.RELISTEN)
    effects = run_out(driver, armed)
    assert only(effects, OpenTransport) == [OpenTransport(driver.generation, BACKOFF.delay(2))]
    assert driver.session.status == "reconnecting"


def test_a_relisten_acknowledged_in_time_settles_the_reconnect() -> None:
    driver = Driver("modern").connect()
    driver.live(uris("file:///a"))
    driver.lose()
    effects = driver.reconnect()
    [listen] = [message for message in sent(effects) if message["method"] == "subscriptions/listen"]
    armed = timer(driver, Stage.RELISTEN)
    driver.frames(acknowledgment(listen["id"], uris("file:///a")))
    assert driver.session.life.stages.settled
    assert run_out(driver, armed) == []
    assert driver.session.status == "ready"


@pytest.mark.parametrize("stage", ["open", "discover", "initialize", "resubscribe", "relisten"])
def test_each_timeout_error_names_its_stage_in_a_sentence_and_keeps_a_machine_reason(stage: str) -> None:
    error = timeout_error(Stage(stage), 2.5)
    assert error.reason == ("timeout", stage)
    text = str(error)
    assert text.startswith("gave up after 2.5s waiting for ") and text.endswith("or raise connect_timeout")
    words = {
        "open": "the transport to open",
        "discover": "server/discover",
        "initialize": "initialize",
        "resubscribe": "resources/subscribe",
        "relisten": "subscriptions/listen",
    }
    assert words[stage] in text


def test_opened_of_a_timed_out_attempt_is_ignored() -> None:
    driver = Driver("legacy").connect()
    driver.lose()
    run_out(driver, timer(driver, Stage.OPEN))
    assert driver.feed(Opened(driver.generation - 1)) == []
