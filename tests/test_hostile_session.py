"""A real Session, in every phase of its life, fed what a hostile server may send: whatever
arrives, the frame is the peer's fault at worst (skipped, or refused), never a bug of ours
that closes the client as crashed; what the server says reaches log records and error texts
escaped and bounded; and repeating itself costs the server more than it costs the client."""

from __future__ import annotations

import gc
import json
import logging
import re
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from hostile_frames import (
    ODD_VALUES,
    PARAMS,
    SOME_LISTEN_ID,
    STAMP_KEY,
    VALID_ERRORS,
    VALID_PARAMS,
    VALID_RESULTS,
    answers,
    every_field_made_odd,
    frames,
    notification,
    request,
    resolve,
    stamped,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_protocol_session import (
    BACKOFF,
    DISCOVER_RESULT,
    INFO,
    INITIALIZE_RESULT,
    PROBE_TIMEOUT,
    Driver,
    acknowledgment,
    failure,
    notice,
    only,
    put_subscriber,
    result,
    sent,
    stream_dropped,
    thread_subscriber,
    uris,
)

from exmcp_actors._protocol import _messages as m
from exmcp_actors._protocol._config import SessionConfig
from exmcp_actors._protocol._errors import ConnectError, RequestError
from exmcp_actors._protocol._events import (
    Effect,
    FetchSnapshot,
    HostAnswered,
    Relisten,
    ResubscribeReport,
    ResyncDone,
    RunHostHandler,
    TaskStatusNoted,
)
from exmcp_actors._protocol._handshake import META_SUBSCRIPTION_ID, ProtocolMode
from exmcp_actors._protocol._host_checks import HostAbilities
from exmcp_actors._protocol._jsonrpc import RequestBuilder
from exmcp_actors._protocol._peer_text import peer_text
from exmcp_actors._protocol._session import Session
from exmcp_actors._protocol._state import EntryState, Pause

T = TypeVar("T")
RAW_CONTROL = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")
LOG = "notifications/message"
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\r\nERROR forged line\u202e"


class StrictSession(Session):
    """A session that fails the test at our first bug, even one a closed client would hide."""

    def _internal_error(self, frame: Any, error: Exception) -> None:
        raise AssertionError(f"our bug, handling {peer_text(frame)}") from error


class HostileDriver(Driver):
    """A Driver whose host answers sampling, elicitation and roots, remembering the ids the
    client sent (for the placeholders of ``hostile_frames``); its session fails the test at
    our first bug."""

    def __init__(self, mode: ProtocolMode = "legacy") -> None:
        super().__init__(mode)
        config = SessionConfig(
            mode=mode,
            reconnect=True,
            max_reconnect_attempts=3,
            backoff=BACKOFF,
            probe_timeout=PROBE_TIMEOUT,
            client_info=INFO,
            host=HostAbilities(sampling=True, elicitation=True, roots=True, elicitation_modes=("form", "url")),
            roots=[{"uri": "file:///r"}],
        )
        self.session = StrictSession(config, RequestBuilder())
        self.request_ids: list[Any] = []
        self.listen_ids: list[Any] = []
        self.handler_runs: list[RunHostHandler] = []

    def take(self) -> list[Effect]:
        effects = super().take()
        self.handler_runs.extend(only(effects, RunHostHandler))
        for message in sent(effects):
            if "id" in message and "method" in message:
                self.request_ids.append(message["id"])
                if message["method"] == "subscriptions/listen":
                    self.listen_ids.append(message["id"])
        return effects

    def answer_handlers(self) -> None:
        runs, self.handler_runs = self.handler_runs, []
        for run in runs:
            self.feed(HostAnswered(run.request_id, run.generation, {"action": "accept", "content": {}}))


def legacy_in(phase: str) -> HostileDriver:
    driver = HostileDriver("legacy")
    driver.start()
    if phase == "initializing":
        driver.opened()
        return driver
    driver.answer_handshake(driver.opened())
    driver.listener(uris("file:///a"), thread_subscriber())
    driver.listener({"toolsListChanged": True, "logMessages": True}, put_subscriber())
    driver.listener(uris("file:///b"), thread_subscriber(), kind="watch")
    driver.request()
    if phase == "ready":
        return driver
    driver.lose()
    if phase == "reconnecting":
        return driver
    driver.opened()
    if phase == "reinitializing":
        return driver
    driver.frames(result(driver.request_ids[-1], INITIALIZE_RESULT))
    driver.request()
    assert driver.session.listeners.pause is Pause.HELD
    return driver  # resubscribing: the report is not in yet


def modern_in(phase: str, mode: ProtocolMode = "modern") -> HostileDriver:
    driver = HostileDriver(mode)
    driver.start()
    if phase == "probing":
        driver.opened()
        return driver
    if phase == "falling back":
        [probe] = sent(driver.opened())
        driver.frames(failure(probe["id"], -32601, "Method not found"))
        return driver
    driver.answer_handshake(driver.opened())
    driver.live({"resourceSubscriptions": ["file:///a"], "toolsListChanged": True})
    driver.live({"logMessages": True, "taskIds": ["t1"]})
    driver.live(uris("file:///b"), kind="watch")
    driver.subscribe({"promptsListChanged": True})  # awaiting its acknowledgment
    _, dropped = driver.live({"resourcesListChanged": True})
    driver.frames(stream_dropped(dropped))  # re-listening
    resyncing, resyncing_id = driver.live(uris("file:///c"))
    driver.frames(stream_dropped(resyncing_id))
    driver.feed(Relisten(resyncing.id, driver.generation))
    driver.frames(acknowledgment(driver.listen_ids[-1], uris("file:///c")))  # resyncing
    driver.request()
    if phase == "ready":
        return driver
    driver.lose()
    driver.opened()
    if phase == "reprobing":
        return driver
    driver.frames(result(driver.request_ids[-1], DISCOVER_RESULT))
    return driver  # re-listening after the reconnect


PHASES: dict[str, Callable[[], HostileDriver]] = {
    "legacy initializing": lambda: legacy_in("initializing"),
    "legacy ready": lambda: legacy_in("ready"),
    "legacy reconnecting": lambda: legacy_in("reconnecting"),
    "legacy reinitializing": lambda: legacy_in("reinitializing"),
    "legacy resubscribing": lambda: legacy_in("resubscribing"),
    "auto probing": lambda: modern_in("probing", "auto"),
    "modern probing": lambda: modern_in("probing"),
    "auto falling back": lambda: modern_in("falling back", "auto"),
    "modern ready": lambda: modern_in("ready"),
    "modern reprobing": lambda: modern_in("reprobing"),
    "modern re-listening": lambda: modern_in("re-listening"),
}


FUZZ = settings(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
phases = st.sampled_from(sorted(PHASES))
picks = st.lists(st.integers(0, 50), max_size=30)


def feed_hostile(driver: HostileDriver, batches: list[list[Any]], picked: list[int], answer_handlers: bool) -> None:
    """Feed each batch, its placeholders resolved against the ids the client really used."""

    def pick(size: int) -> int:
        return (picked.pop() if picked else 0) % size

    for batch in batches:
        driver.frames(*(resolve(frame, driver.request_ids, driver.listen_ids, pick) for frame in batch))
        if answer_handlers:
            driver.answer_handlers()


@pytest.mark.parametrize("method", sorted(VALID_PARAMS))
def test_no_field_of_any_message_made_odd_closes_the_client_as_crashed_in_any_phase(method: str) -> None:
    variants = every_field_made_odd({**VALID_PARAMS[method], "_meta": {STAMP_KEY: SOME_LISTEN_ID}})
    for phase in sorted(PHASES):
        driver = PHASES[phase]()
        for params in variants:
            # As a notification, as a request, and as an event of each subscription.
            sent_as = [notification(method, params), request("s1", method, params)]
            sent_as += [stamped(method, params, listen_id) for listen_id in driver.listen_ids]
            feed_hostile(driver, [sent_as], [], answer_handlers=True)


HANDSHAKING = ["legacy initializing", "legacy reinitializing", "auto probing", "modern probing", "auto falling back"]


@pytest.mark.parametrize("phase", HANDSHAKING)
def test_no_field_of_a_handshake_answer_made_odd_closes_the_client_as_crashed(phase: str) -> None:
    answers_made_odd = [{"result": odd} for valid in VALID_RESULTS for odd in every_field_made_odd(valid)]
    answers_made_odd += [{"error": odd} for valid in VALID_ERRORS for odd in every_field_made_odd(valid)]
    for answer in answers_made_odd:
        driver = PHASES[phase]()
        driver.frames({"jsonrpc": "2.0", "id": driver.request_ids[-1], **answer})


@pytest.mark.parametrize("phase", ["modern ready", "modern re-listening", "modern reprobing"])
def test_no_answer_made_odd_to_a_subscriptions_listen_closes_the_client_as_crashed(phase: str) -> None:
    answers_made_odd = [{"result": odd} for odd in ODD_VALUES]
    answers_made_odd += [{"error": odd} for valid in VALID_ERRORS for odd in every_field_made_odd(valid)]
    for answer in answers_made_odd:
        driver = PHASES[phase]()
        driver.frames(*({"jsonrpc": "2.0", "id": listen_id, **answer} for listen_id in driver.listen_ids))
        driver.frames(*(stream_dropped(listen_id) for listen_id in driver.listen_ids))


@pytest.mark.parametrize("method", sorted(PARAMS))
@settings(FUZZ, max_examples=40)
@given(phases, st.data(), picks)
def test_no_message_of_any_method_closes_the_client_as_crashed_in_any_phase(
    method: str, phase: str, data: st.DataObject, picked: list[int]
) -> None:
    params = data.draw(PARAMS[method])
    # As a notification, as an event of a subscription, as a request; each twice.
    sent_as = [notification(method, params), stamped(method, params), request("s1", method, params)]
    feed_hostile(PHASES[phase](), [sent_as * 2], picked, answer_handlers=True)


@settings(FUZZ, max_examples=100)
@given(phases, st.lists(answers, min_size=1, max_size=4), picks)
def test_no_answer_to_any_request_closes_the_client_as_crashed_in_any_phase(
    phase: str, answered: list[Any], picked: list[int]
) -> None:
    feed_hostile(PHASES[phase](), [answered], picked, answer_handlers=False)


@settings(FUZZ, max_examples=100)
@given(phases, st.lists(st.lists(frames, max_size=6), min_size=1, max_size=4), picks, st.booleans())
def test_no_mix_of_frames_closes_the_client_as_crashed_in_any_phase(
    phase: str, batches: list[list[Any]], picked: list[int], answer_handlers: bool
) -> None:
    driver = PHASES[phase]()
    feed_hostile(driver, batches, picked, answer_handlers)
    if phase == "legacy resubscribing" and driver.session.ready:
        driver.feed(ResubscribeReport(driver.generation, frozenset({"file:///a"}), {"file:///b": "refused"}))


# -- what the fuzzing found ------------------------------------------------------------------


@pytest.mark.parametrize("status", [["completed"], {"s": 1}, 7, None])
def test_a_task_status_whose_status_is_no_string_is_skipped_as_the_servers_bad_frame(status: Any) -> None:
    driver = legacy_in("ready")
    effects = driver.frames(notice("notifications/tasks/status", {"taskId": "t1", "status": status}))
    assert only(effects, TaskStatusNoted) == []
    assert driver.session.ready


def run_at_depth(depth: int, work: Callable[[], T]) -> T:
    """``work()`` called ``depth`` frames deeper than here."""
    return work() if depth == 0 else run_at_depth(depth - 1, work)


def test_an_invalid_frame_nested_as_deep_as_a_decoder_allows_is_skipped_however_deep_the_caller() -> None:
    driver = legacy_in("ready")
    # The reader decodes on a shallow stack; the session may run on a deeper one.
    nested = json.loads("[" * 900 + "]" * 900)
    headroom = sys.getrecursionlimit() - 900
    run_at_depth(headroom - 40, lambda: driver.frames({"jsonrpc": "2.0", "params": nested}))
    run_at_depth(headroom - 40, lambda: driver.frames({"jsonrpc": "2.0", "id": nested, "result": 1}))
    assert driver.session.ready


def test_a_server_acknowledging_a_subscription_over_and_over_costs_one_snapshot_fetch_in_flight() -> None:
    driver = modern_in("ready")
    handle, listen_id = driver.live(uris("file:///a"))
    again = acknowledgment(listen_id, uris("file:///a"))
    effects = driver.frames(*[again] * 1000)
    [fetch] = only(effects, FetchSnapshot)
    entry = driver.session.registry.entries[handle.id]
    assert entry.state is EntryState.RESYNCING_AGAIN
    # That snapshot answers an acknowledgment older than the last: it is fetched once more.
    effects = driver.feed(ResyncDone(handle.id, fetch.listen_id, {"stale": True}))
    assert only(effects, FetchSnapshot) == [fetch]
    assert driver.received(handle) == []
    driver.feed(ResyncDone(handle.id, fetch.listen_id, {"fresh": True}))
    assert driver.received(handle) == [
        m.SubscriptionResync(m.SUBSCRIPTION_RESYNC, handle, ("complete", {"fresh": True}))
    ]
    assert entry.state is EntryState.LIVE


def test_a_subscription_acknowledged_again_while_its_snapshot_is_fetched_can_still_drop_and_relisten() -> None:
    driver = modern_in("ready")
    handle, listen_id = driver.live(uris("file:///a"))
    driver.frames(acknowledgment(listen_id, uris("file:///a")), acknowledgment(listen_id, uris("file:///a")))
    driver.frames(stream_dropped(listen_id))
    entry = driver.session.registry.entries[handle.id]
    assert entry.state is EntryState.RELISTENING
    assert driver.feed(ResyncDone(handle.id, listen_id, {})) == []  # the stale fetch is no one's


def test_a_flood_held_across_a_reconnect_costs_the_bound_not_the_flood() -> None:
    bound = 500  # the session's is MAX_HELD_NOTIFICATIONS; a small one keeps the test quick

    def held_bytes(flood: int) -> int:
        driver = legacy_in("resubscribing")
        driver.session.listeners.bound = bound
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            for start in range(0, flood, 500):
                driver.frames(*(notice(LOG, {"level": "info", "data": f"line {n}"}) for n in range(start, start + 500)))
            gc.collect()  # garbage not yet collected is no backlog
            held = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
        assert driver.session.listeners.held_count == bound
        return held

    # tracemalloc counts every thread of the process: what another test left running in this
    # worker can only add to a measurement, so the least of three is the session's own.
    small = min(held_bytes(bound * 2) for _ in range(3))
    large = min(held_bytes(bound * 20) for _ in range(3))
    assert large < small * 1.1  # ten times the flood, the same backlog


# -- what the server says, as it reaches our records and texts -----------------------------


def records_and_texts(caplog: pytest.LogCaptureFixture, *texts: str) -> list[str]:
    return [record.getMessage() for record in caplog.records] + list(texts)


def test_what_the_server_says_reaches_log_records_and_error_texts_escaped_and_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="exmcp_actors")
    driver = modern_in("ready")
    _, listen_id = driver.live(uris("file:///a"))
    huge = HOSTILE * 10_000
    driver.frames(
        {"jsonrpc": "2.0", "method": HOSTILE, "params": {"_meta": {META_SUBSCRIPTION_ID: [HOSTILE]}}},
        notice("notifications/resources/updated", {"uri": "file:///a"}, stamp=HOSTILE),
        notice(HOSTILE, {}, stamp=listen_id),
        {"jsonrpc": "2.0", "id": "s9", "method": HOSTILE},
        {"jsonrpc": "2.0", "id": huge, "result": {}},
        {"jsonrpc": "2.0", "params": huge},
        acknowledgment(listen_id, {"resourceSubscriptions": [huge]}),
    )
    request_error = RequestError(-32000, huge)
    assert request_error.message == huge  # the attribute keeps the server's words as they came
    legacy = HostileDriver("legacy")
    legacy.start()
    [initialize] = sent(legacy.opened())
    legacy.frames(failure(initialize["id"], -32600, huge))
    connect_error = legacy.session.life.connect_error
    assert isinstance(connect_error, ConnectError)
    shown = records_and_texts(caplog, str(request_error), str(connect_error))
    assert [text for text in shown if RAW_CONTROL.search(text)] == []
    assert max(len(text) for text in shown) < 2_000
    assert any("\\x1b[2J" in text for text in shown)  # escaped, not dropped


def test_a_server_repeating_a_stray_subscription_event_is_logged_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    driver = modern_in("ready")
    with caplog.at_level(logging.WARNING, logger="exmcp_actors"):
        driver.frames(*[notice("notifications/tools/list_changed", stamp="nobody's")] * 1000)
    assert len([r for r in caplog.records if "unknown subscription id" in r.getMessage()]) == 1


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("plain words", "plain words"),
        ("a\x1bb\x07c\r\nd\x00\x7f\x9b", "a\\x1bb\\x07c\\x0d\\x0ad\\x00\\x7f\\x9b"),
        ("\u202eevil\u2028\u2066", "\\u202eevil\\u2028\\u2066"),
        ("\ud800", "\\ud800"),
        ("x" * 300, "x" * 200 + "..."),
        ({"k": "\x1b"}, "{'k': '\\x1b'}"),
        (b"\x1b", "b'\\x1b'"),
    ],
)
def test_peer_text_escapes_what_could_drive_a_terminal_or_forge_a_line_and_bounds_the_rest(
    value: Any, shown: str
) -> None:
    assert peer_text(value) == shown


def test_peer_text_quotes_an_id_and_never_recurses_past_the_stack() -> None:
    assert peer_text("7", quote=True) == "'7'" and peer_text(7, quote=True) == "7"
    nested = json.loads("[" * 900 + "]" * 900)
    assert run_at_depth(sys.getrecursionlimit() - 950, lambda: peer_text(nested)) == "[[[[[...]]]]]"
    assert len(peer_text(list(range(10**5)))) <= 203
