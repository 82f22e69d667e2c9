"""The backlog held across a legacy reconnect is bounded like a handle's pending messages:
change signals coalesce at the bound, a signal of a new key is held up to twice the bound,
and a listener that would miss anything else ends with ("overflow", bound)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from test_protocol_session import Driver, event, notice, only, thread_subscriber, uris

from exmcp_actors._api._handle import Handle
from exmcp_actors._protocol import _messages as m
from exmcp_actors._protocol._events import Release, ResubscribeReport, ToWorker
from exmcp_actors._protocol._listeners import MAX_HELD_NOTIFICATIONS
from exmcp_actors._protocol._state import Pause

BOUND = MAX_HELD_NOTIFICATIONS
UPDATED = "notifications/resources/updated"
TOOLS_CHANGED = "notifications/tools/list_changed"
LOG = "notifications/message"


def updated(uri: str, n: int) -> dict[str, Any]:
    return notice(UPDATED, {"uri": uri, "n": n})


def tools_changed(n: int) -> dict[str, Any]:
    return notice(TOOLS_CHANGED, {"n": n})


def log_line(n: int) -> dict[str, Any]:
    return notice(LOG, {"level": "info", "data": f"line {n}"})


def paused(*filters: dict[str, Any]) -> tuple[Driver, list[Handle]]:
    """A legacy session reconnected after a loss with a listener per filter, the report not in yet."""
    driver = Driver("legacy").connect()
    handles = [driver.listener(flt, thread_subscriber()) for flt in filters]
    driver.lose()
    driver.reconnect()
    assert driver.session.listeners.pause is Pause.HELD
    return driver, handles


def report(driver: Driver) -> list[Any]:
    return driver.feed(ResubscribeReport(driver.generation, frozenset(), {}))


def after_reconnected(driver: Driver, handle: Handle) -> list[Any]:
    received = driver.received(handle)
    assert received[0].tag == m.RECONNECTED
    return received[1:]


def test_below_the_bound_every_notification_is_held_in_wire_order_duplicates_too() -> None:
    driver, [listener] = paused(uris("file:///a"))
    driver.frames(updated("file:///a", 1), updated("file:///a", 2), updated("file:///a", 3))
    report(driver)
    assert after_reconnected(driver, listener) == [
        event(listener, UPDATED, {"uri": "file:///a", "n": n}) for n in (1, 2, 3)
    ]


def test_fifty_thousand_held_signals_stay_within_the_bound_and_keep_the_latest_per_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    keys = [f"file:///{i}" for i in range(100)]
    driver, [listener] = paused({"toolsListChanged": True, "resourceSubscriptions": keys})
    latest: dict[Any, int] = {}
    frames = []
    for n in range(50_000):
        if n % 101 == 0:
            frames.append(tools_changed(n))
            latest[TOOLS_CHANGED] = n
        else:
            uri = keys[n % len(keys)]
            frames.append(updated(uri, n))
            latest[uri] = n
    with caplog.at_level(logging.WARNING, logger="exmcp_actors"):
        driver.frames(*frames)
    listeners = driver.session.listeners
    assert listeners.held_count == BOUND  # every key was held already: each later one coalesced
    assert listeners.pause is Pause.FULL
    [warning] = [r for r in caplog.records if "held across the reconnect" in r.getMessage()]
    assert "10000 notifications held" in warning.getMessage()
    report(driver)
    delivered = after_reconnected(driver, listener)
    assert len(delivered) == BOUND
    last_seen: dict[Any, int] = {}
    for message in delivered:
        key = message.method if message.method == TOOLS_CHANGED else message.params["uri"]
        last_seen[key] = message.params["n"]
    assert last_seen == latest
    assert listeners.pause is Pause.NONE and listeners.held_count == 0
    assert driver.session.registry.entries[listener.id].handle is listener  # not closed


def test_signals_of_new_keys_past_the_bound_are_held_up_to_twice_the_bound_then_overflow_their_listener() -> None:
    late = "file:///late"
    driver, [early, reached_late] = paused({"toolsListChanged": True}, uris(late))
    driver.frames(*(tools_changed(n) for n in range(BOUND)))
    driver.frames(*(updated(f"file:///{n}", n) for n in range(BOUND)))  # new keys, held
    assert driver.session.listeners.held_count == 2 * BOUND
    driver.frames(updated(late, 0), tools_changed(BOUND))  # a new key past twice the bound; a held key
    assert driver.session.listeners.held_count == 2 * BOUND
    effects = report(driver)
    assert len(after_reconnected(driver, early)) == BOUND
    assert after_reconnected(driver, reached_late) == [m.Closed(m.CLOSED, reached_late, ("overflow", BOUND))]
    assert ToWorker(Release(reached_late.id)) in only(effects, ToWorker)
    assert reached_late.id not in driver.session.registry.entries
    assert early.id in driver.session.registry.entries


def test_a_non_signal_past_the_bound_closes_each_listener_it_would_have_reached_when_the_pause_ends() -> None:
    driver, [logs, other] = paused(
        {"logMessages": True, "resourceSubscriptions": ["file:///b"]}, {"resourceSubscriptions": ["file:///a"]}
    )
    driver.frames(*(log_line(n) for n in range(BOUND)))
    assert driver.session.listeners.pause is Pause.FULL
    driver.frames(log_line(BOUND), updated("file:///a", 1), updated("file:///b", 2))
    effects = report(driver)
    got = after_reconnected(driver, logs)
    # What was held before the one it missed, then its end: nothing after the gap.
    assert got[:-1] == [event(logs, LOG, {"level": "info", "data": f"line {n}"}) for n in range(BOUND)]
    assert got[-1] == m.Closed(m.CLOSED, logs, ("overflow", BOUND))
    # Dropped as an overflowed handle is: its URIs released, the entry gone.
    assert ToWorker(Release(logs.id)) in only(effects, ToWorker)
    assert logs.id not in driver.session.registry.entries
    # A listener the dropped message would not have reached misses nothing.
    assert after_reconnected(driver, other) == [event(other, UPDATED, {"uri": "file:///a", "n": 1})]
    assert other.id in driver.session.registry.entries


def test_a_listener_removed_before_the_pause_ends_gets_no_overflow() -> None:
    driver, [logs] = paused({"logMessages": True})
    driver.frames(*(log_line(n) for n in range(BOUND + 1)))
    driver.session.registry.forget(logs.id)
    report(driver)
    assert driver.received(logs) == []


def test_the_next_pause_starts_with_an_empty_backlog_below_its_bound() -> None:
    driver, [logs] = paused({"logMessages": True, "toolsListChanged": True})
    driver.frames(*(tools_changed(n) for n in range(BOUND + 5)))
    report(driver)
    listeners = driver.session.listeners
    assert listeners.pause is Pause.NONE
    driver.lose()
    driver.reconnect()
    assert listeners.pause is Pause.HELD and listeners.held_count == 0
    driver.frames(log_line(0), tools_changed(0), tools_changed(1))
    report(driver)
    assert [message.method for message in after_reconnected(driver, logs)] == [LOG, TOOLS_CHANGED, TOOLS_CHANGED]


def test_a_flood_of_events_before_a_subscriptions_acknowledgment_is_held_to_its_bound_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from test_protocol_session import acknowledgment, modern, updated

    from exmcp_actors._protocol._subscriptions import MAX_HELD_EVENTS

    driver = modern()
    handle, _, listen = driver.subscribe({"resourceSubscriptions": ["file:///a"]})
    flood = [updated("file:///a", stamp=listen["id"]) for _ in range(MAX_HELD_EVENTS + 5_000)]
    with caplog.at_level(logging.INFO, logger="exmcp_actors"):
        driver.frames(*flood)
    entry = driver.session.registry.entries[handle.id]
    assert entry.held is not None and len(entry.held) == MAX_HELD_EVENTS
    assert len([r for r in caplog.records if "events held" in r.getMessage()]) == 1
    driver.frames(acknowledgment(listen["id"], {"resourceSubscriptions": ["file:///a"]}))
    assert len(driver.received(handle)) == MAX_HELD_EVENTS


def test_events_outside_the_acknowledged_filter_are_logged_at_a_bounded_rate(caplog: pytest.LogCaptureFixture) -> None:
    from test_protocol_session import modern, updated

    driver = modern()
    handle, listen_id = driver.live({"resourceSubscriptions": ["file:///a"]})
    with caplog.at_level(logging.INFO, logger="exmcp_actors"):
        driver.frames(*[updated("file:///elsewhere", stamp=listen_id) for _ in range(5_000)])
    assert driver.received(handle) == []
    assert len([r for r in caplog.records if "outside the acknowledged filter" in r.getMessage()]) == 1


def test_raw_notifications_are_held_across_the_reconnect_and_follow_the_report_in_wire_order() -> None:
    custom, progress = "com.example/ping", "notifications/progress"
    driver, [listener] = paused({"toolsListChanged": True, "methods": [custom, progress]})
    driver.frames(
        notice(custom, {"n": 1}),
        tools_changed(2),
        notice(progress, {"progressToken": "t", "progress": 3}),
        notice("com.example/unnamed", {"n": 4}),
    )
    report(driver)
    raw = [m.RawNotification(m.RAW_NOTIFICATION, listener, custom, {"n": 1})]
    assert after_reconnected(driver, listener) == [
        *raw,
        event(listener, TOOLS_CHANGED, {"n": 2}),
        m.RawNotification(m.RAW_NOTIFICATION, listener, progress, {"progressToken": "t", "progress": 3}),
    ]


def test_a_completion_of_an_unknown_elicitation_held_across_the_reconnect_is_still_ignored() -> None:
    # The session consumed it (no such id): only a listener naming the method raw may get it.
    complete = "notifications/elicitation/complete"
    driver, [plain, raw] = paused({"elicitationComplete": True}, {"methods": [complete]})
    driver.frames(notice(complete, {"elicitationId": "never-handed-out"}), tools_changed(1))
    report(driver)
    assert after_reconnected(driver, plain) == []
    assert after_reconnected(driver, raw) == [
        m.RawNotification(m.RAW_NOTIFICATION, raw, complete, {"elicitationId": "never-handed-out"})
    ]


def test_consumed_notifications_held_at_the_bound_overflow_no_listener_that_would_not_get_them() -> None:
    complete = "notifications/elicitation/complete"
    driver, [listener] = paused({"elicitationComplete": True})
    driver.frames(*[notice(complete, {"elicitationId": f"unknown-{n}"}) for n in range(BOUND + 10)])
    report(driver)
    assert after_reconnected(driver, listener) == []
