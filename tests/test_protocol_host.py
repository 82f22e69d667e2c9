"""The sans-IO host part: checks, answers, cancellation, bounds (plain calls, no threads)."""

from __future__ import annotations

from typing import Any

import pytest

from exmcp_actors._protocol import _events as ev
from exmcp_actors._protocol._host_checks import (
    HostAbilities,
    check_log,
    check_progress,
    check_task_status,
    finish_answer,
)
from exmcp_actors._protocol._host_requests import MAX_IN_HANDLERS, HostRequests
from exmcp_actors._protocol._host_tasks import MAX_WAITING, ClientTasks
from exmcp_actors._protocol._jsonrpc import ServerRequest

SAMPLE = {"messages": [], "maxTokens": 5}
SCHEMA = {"properties": {"a": {"type": "string", "default": "A"}, "b": {"type": "integer", "default": 2}}}


def make() -> tuple[HostRequests, ev.Effects]:
    effects = ev.Effects()
    return HostRequests(effects, HostAbilities(sampling=True, roots=True), [{"uri": "file:///r"}], "t"), effects


def sent(effects: ev.Effects) -> list[dict[str, Any]]:
    return [e.message for e in effects.take()[0] if isinstance(e, ev.Send)]


def test_elicitation_defaults_fill_only_missing_fields_of_an_accept() -> None:
    params = {"message": "m", "requestedSchema": SCHEMA}
    accepted, why = finish_answer("elicitation/create", params, {"action": "accept", "content": {"a": "mine"}})
    assert why is None and accepted == {"action": "accept", "content": {"a": "mine", "b": 2}}
    empty, _ = finish_answer("elicitation/create", params, {"action": "accept"})
    assert empty == {"action": "accept", "content": {"a": "A", "b": 2}}
    declined, _ = finish_answer("elicitation/create", params, {"action": "decline"})
    assert declined == {"action": "decline"}
    assert finish_answer("elicitation/create", params, ["accept"]) == (
        None,
        "the elicitation/create handler returned list, not a dict",
    )


@pytest.mark.parametrize(
    ("check", "params", "ok"),
    [
        (check_progress, {"progressToken": "t", "progress": 1.5, "total": 3}, True),
        (check_progress, {"progressToken": True, "progress": 1}, False),
        (check_progress, {"progressToken": 1, "progress": "1"}, False),
        (check_progress, {"progressToken": 1, "progress": 1, "total": "3"}, False),
        (check_log, {"level": "warning", "data": {"x": 1}, "logger": "db"}, True),
        (check_log, {"level": "WARN", "data": 1}, False),
        (check_log, {"level": "info"}, False),
        (check_log, {"level": "info", "data": 1, "logger": 3}, False),
        (check_task_status, {"taskId": "t", "status": "working"}, True),
        (check_task_status, {"taskId": "t", "status": "done"}, False),
        (check_task_status, {"status": "working"}, False),
    ],
)
def test_a_notification_check_accepts_exactly_the_well_formed_params(
    check: Any, params: dict[str, Any], ok: bool
) -> None:
    assert (check(params) is None) is ok


def test_a_handler_answer_for_an_old_connection_or_a_cancelled_request_is_dropped() -> None:
    host, effects = make()
    assert host.on_request(ServerRequest(1, "sampling/createMessage", SAMPLE), generation=1)
    assert [type(e) for e in effects.take()[0]] == [ev.RunHostHandler]
    host.answered(ev.HostAnswered(1, generation=1, result={"ok": 1}), current_generation=2)
    assert sent(effects) == []
    host.on_request(ServerRequest(2, "sampling/createMessage", SAMPLE), generation=2)
    effects.take()
    assert host.on_notification("notifications/cancelled", {"requestId": 2})
    host.answered(ev.HostAnswered(2, generation=2, result={"ok": 1}), current_generation=2)
    assert sent(effects) == [] and host.in_handler == {}


def test_roots_are_answered_in_the_core_and_unknown_methods_are_not_taken() -> None:
    host, effects = make()
    assert host.on_request(ServerRequest(1, "roots/list", None), generation=1)
    assert sent(effects) == [{"jsonrpc": "2.0", "id": 1, "result": {"roots": [{"uri": "file:///r"}]}}]
    assert not host.on_request(ServerRequest(2, "elicitation/create", {"message": "m"}), generation=1)


def test_requests_waiting_for_handlers_are_bounded() -> None:
    host, effects = make()
    for n in range(MAX_IN_HANDLERS):
        host.on_request(ServerRequest(n, "sampling/createMessage", SAMPLE), generation=1)
    effects.take()
    host.on_request(ServerRequest("one-more", "sampling/createMessage", SAMPLE), generation=1)
    [answer] = sent(effects)
    assert answer["id"] == "one-more" and answer["error"]["code"] == -32603


def test_tasks_result_requests_waiting_on_one_task_are_bounded() -> None:
    effects = ev.Effects()
    tasks = ClientTasks(effects)
    task_id = tasks.create("create", {"ttl": 1000})
    effects.take()
    for n in range(MAX_WAITING):
        tasks.on_request(ServerRequest(n, "tasks/result", {"taskId": task_id}))
    assert sent(effects) == []  # all wait for the end
    tasks.on_request(ServerRequest("one-more", "tasks/result", {"taskId": task_id}))
    [refused] = sent(effects)
    assert refused["id"] == "one-more" and refused["error"]["code"] == -32603
    assert task_id is not None
    tasks.finished(task_id, {"content": []}, None)
    answers = [a for a in sent(effects) if "id" in a]  # (the status notification has none)
    assert sorted(a["id"] for a in answers) == list(range(MAX_WAITING))  # each waiting one answered once


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_a_form_answer_other_than_accept_sends_no_content(action: str) -> None:
    # ElicitResult.content is "only present when action is accept": a declined form's data stays here.
    params = {"message": "m", "requestedSchema": SCHEMA}
    answer, why = finish_answer("elicitation/create", params, {"action": action, "content": {"a": "secret"}})
    assert why is None and answer == {"action": action}
