"""Tool calls run as tasks, against the FakeServer: the shape of the ``io.modelcontextprotocol/tasks``
extension (SEP-2663) on 2026-07-28 connections and of the tasks utility on 2025-11-25 ones, a
task asked only of a server that advertises tasks, and a plain answer to a task call returned.

What no real peer here does: push ``notifications/tasks`` (fastmcp-tasks only answers polls),
so those pushes come from the FakeServer.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import FakeError, FakeServer, FakeTasks
from tests.sdk_helpers import ClientPool
from tests.waiting import wait_until

TIMEOUT = 5.0
TASKS = "io.modelcontextprotocol/tasks"
CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
DONE = {"content": [{"type": "text", "text": "done"}]}
NAME_REQUEST = {
    "method": "elicitation/create",
    "params": {"message": "Your name?", "requestedSchema": {"type": "object", "properties": {"name": {}}}},
}


@pytest.fixture(params=["legacy", "modern"])
def server(request: pytest.FixtureRequest) -> Iterator[FakeServer]:
    with FakeServer(era=request.param) as fake:
        yield fake


@pytest.fixture
def modern() -> Iterator[FakeServer]:
    with FakeServer(era="modern") as fake:
        yield fake


@pytest.fixture
def connect(client_pool: ClientPool) -> Callable[..., mcp.Client]:
    def make(server: FakeServer, **kwargs: Any) -> mcp.Client:
        return client_pool.connect(server.transport(), reconnect=False, **kwargs)

    return make


def declared_extensions(message: dict[str, Any]) -> dict[str, Any]:
    extensions: dict[str, Any] = message["params"]["_meta"][CAPABILITIES].get("extensions", {})
    return extensions


def in_thread(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``fn`` on a thread; the returned call joins it and returns (or raises) its outcome."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(("ok", fn()))
        except BaseException as error:  # handed to the joining test
            outcome.append(("error", error))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def join() -> Any:
        thread.join(TIMEOUT * 2)
        assert outcome, "the call did not return"
        kind, value = outcome[0]
        if kind == "error":
            raise value
        return value

    return join


def test_a_2026_task_is_made_polled_and_answered_in_the_extensions_shape(
    modern: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    tasks = FakeTasks(modern, poll_interval_ms=150)
    client = connect(modern)
    task = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
    assert isinstance(task, mcp.Task) and task.task_id == tasks.wait_created()
    _, call = modern.wait_for("tools/call")
    assert "task" not in call["params"] and TASKS in declared_extensions(call)
    result = in_thread(lambda: task.result(timeout=TIMEOUT * 2))
    modern.wait_for(lambda m: m.get("method") == "tasks/get" and len(tasks.polls.get(task.task_id, [])) >= 3)
    tasks.complete(task.task_id, DONE)
    assert result() == DONE
    polls = tasks.polls[task.task_id]
    assert all(b - a >= 0.13 for a, b in itertools.pairwise(polls)), polls  # pollIntervalMs honoured
    assert modern.count("tasks/result") == 0  # the extension has none
    gets = modern.messages("tasks/get")
    assert all(TASKS in declared_extensions(m) for m in gets)  # else the server answers -32021


def test_a_2026_task_waiting_for_input_gets_it_through_tasks_update(
    modern: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    tasks = FakeTasks(modern, poll_interval_ms=20)
    asked: list[dict[str, Any]] = []

    def elicitation(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"action": "accept", "content": {"name": "Ann"}}

    task = connect(modern, elicitation=elicitation).call_tool("echo", {}, task=True, timeout=TIMEOUT)
    tasks.ask(tasks.wait_created(), {"name": NAME_REQUEST})
    result = in_thread(lambda: task.result(timeout=TIMEOUT * 2))
    _, update = modern.wait_for("tasks/update")
    assert update["params"]["inputResponses"] == {"name": {"action": "accept", "content": {"name": "Ann"}}}
    assert TASKS in declared_extensions(update)
    tasks.complete(task.task_id, DONE)
    assert result() == DONE
    assert len(asked) == 1 and tasks.updates[task.task_id] == [update["params"]["inputResponses"]]


def test_a_2026_task_hears_notifications_tasks_on_a_listen_naming_it(
    modern: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    tasks = FakeTasks(modern, poll_interval_ms=60_000)  # only the push can end it in time
    client = connect(modern)
    task = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
    assert isinstance(task, mcp.Task)
    sub = client.listen({"taskIds": [task.task_id]}, timeout=TIMEOUT)
    _, listen = modern.wait_for("subscriptions/listen")
    assert TASKS in declared_extensions(listen)
    result = in_thread(lambda: task.result(timeout=TIMEOUT))
    modern.wait_for("tasks/get")
    tasks.complete(task.task_id, DONE)
    modern.event(sub.subscription_id, "notifications/tasks", tasks.detailed(task.task_id))
    event = sub.get(timeout=TIMEOUT)
    assert (event.method, event.params["taskId"], event.params["status"]) == (
        "notifications/tasks",
        task.task_id,
        "completed",
    )
    assert result() == DONE  # taken from the push: no poll was due yet
    assert modern.count("tasks/get") == 1
    assert [(n.method, n.params["status"]) for n in task] == [("notifications/tasks", "completed")]


class StatusTakenFirst(queue.SimpleQueue[Any]):
    """A task's inbox where, the first time a thread other than the test's goes to take a
    waiting status, the test's thread takes it first (the instant between the two)."""

    def __init__(self) -> None:
        super().__init__()
        self.reaching, self.taken = threading.Event(), threading.Event()
        self._main = threading.current_thread()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if threading.current_thread() is not self._main and not self.empty() and not self.reaching.is_set():
            self.reaching.set()
            self.taken.wait(TIMEOUT)
        return super().get(block, timeout)


def test_a_2026_task_read_from_two_threads_ends_neither_read_before_the_task_ends(
    modern: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    tasks = FakeTasks(modern, poll_interval_ms=20)
    task = connect(modern).call_tool("echo", {}, task=True, timeout=TIMEOUT)
    inbox = task._inbox = StatusTakenFirst()
    waiting = in_thread(task.get)  # no timeout: a status, or the end of the task
    tasks.set_status(task.task_id, "input_required", "a question")
    assert inbox.reaching.wait(TIMEOUT)  # its poll brought the status, and it goes to take it
    assert task.get(timeout=TIMEOUT).params["status"] == "input_required"  # this thread is quicker
    inbox.taken.set()
    tasks.complete(task.task_id, DONE)
    assert waiting().params["status"] == "completed"  # the other read waited on: no early queue.Empty


class PushMeanwhile(queue.SimpleQueue[Any]):
    """A task's inbox where the first status this thread queues waits for ``push()`` to run on
    the client's side first (a push landing in the instant a poll's answer is noted), for a
    bounded time: once noting and queueing are one step, the push waits for this one."""

    def __init__(self, push: Callable[[], None], landed: threading.Event) -> None:
        super().__init__()
        self._push, self._landed = push, landed
        self._main = threading.current_thread()
        self._pushed = False

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        if threading.current_thread() is self._main and not self._pushed:
            self._pushed = True
            self._push()
            self._landed.wait(0.5)
        super().put(item, block, timeout)


def test_a_2026_task_polled_as_a_push_ends_it_reports_its_statuses_in_order_and_none_after_the_end(
    modern: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    tasks = FakeTasks(modern, poll_interval_ms=60_000)
    client = connect(modern)
    task = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
    sub = client.listen({"taskIds": [task.task_id]}, timeout=TIMEOUT)
    ended = threading.Event()
    tasks.complete(task.task_id, DONE)
    done = tasks.detailed(task.task_id)  # what the push carries
    asked = {key: value for key, value in done.items() if key != "result"} | {
        "resultType": "complete",
        "status": "input_required",
    }
    modern.on("tasks/get", lambda params, ctx: asked)  # the poll's answer, older than the push

    def push() -> None:
        modern.event(sub.subscription_id, "notifications/tasks", done)
        threading.Thread(target=lambda: ended.set() if task._ended.wait(TIMEOUT) else None, daemon=True).start()

    task._inbox = PushMeanwhile(push, ended)
    task.refresh(timeout=TIMEOUT)
    assert ended.wait(TIMEOUT) and sub.get(timeout=TIMEOUT).params["status"] == "completed"
    assert task.status == "completed"  # the push's status is final
    assert [n.params["status"] for n in task] == ["input_required", "completed"]
    with pytest.raises(queue.Empty):
        task.get(timeout=TIMEOUT)  # nothing is left behind the end


def test_a_failed_2026_task_raises_the_error_it_carries(modern: FakeServer, connect: Callable[..., mcp.Client]) -> None:
    tasks = FakeTasks(modern, poll_interval_ms=20)
    task = connect(modern).call_tool("echo", {}, task=True, timeout=TIMEOUT)
    tasks.fail(task.task_id, "broke", error=FakeError(-32000, "the store lost it"))
    with pytest.raises(mcp.RequestError, match="the store lost it") as raised:
        task.result(timeout=TIMEOUT)
    assert raised.value.code == -32000


def test_a_legacy_task_keeps_the_2025_11_25_shape(connect: Callable[..., mcp.Client]) -> None:
    with FakeServer() as legacy:
        tasks = FakeTasks(legacy)
        task = connect(legacy).call_tool("echo", {}, task={"ttl": 1000}, timeout=TIMEOUT)
        _, call = legacy.wait_for("tools/call")
        assert call["params"]["task"] == {"ttl": 1000} and "_meta" not in call["params"]
        tasks.complete(tasks.wait_created(), DONE)
        assert task.result(timeout=TIMEOUT) == DONE
        assert legacy.count("tasks/result") == 1
        assert [n.method for n in task] == ["notifications/tasks/status"]


def test_no_task_is_asked_of_a_server_that_advertises_none(
    server: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    server.on("tools/call", lambda params, ctx: DONE)
    client = connect(server)
    assert client.era == server.era
    assert client.call_tool("echo", {}, task=True, timeout=TIMEOUT) == DONE
    _, call = server.wait_for("tools/call")
    assert "task" not in call["params"]
    if server.era == "modern":
        assert TASKS not in declared_extensions(call)


def test_a_plain_answer_to_a_task_call_is_returned(server: FakeServer, connect: Callable[..., mcp.Client]) -> None:
    FakeTasks(server)  # tasks advertised, in the shape of each era
    server.on("tools/call", lambda params, ctx: DONE)  # yet this server runs the call at once
    client = connect(server)
    assert client.call_tool("echo", {}, task=True, timeout=TIMEOUT) == DONE
    _, call = server.wait_for("tools/call")
    assert ("task" in call["params"]) == (server.era == "legacy")


@pytest.mark.parametrize(
    ("method", "call"),
    [
        ("resources/read", lambda c: c.read_resource("file:///fake/readme.txt", timeout=TIMEOUT)),
        ("prompts/get", lambda c: c.get_prompt("greet", timeout=TIMEOUT)),
    ],
)
def test_a_task_answer_to_a_request_no_task_may_answer_is_a_protocol_error(
    modern: FakeServer, connect: Callable[..., mcp.Client], method: str, call: Callable[[mcp.Client], Any]
) -> None:
    # SEP-2663: only tools/call may be answered with a task; a client MUST take a
    # CreateTaskResult to any other request as an invalid answer.
    FakeTasks(modern)
    created = {"resultType": "task", "taskId": "t-1", "status": "working", "createdAt": "x", "lastUpdatedAt": "x"}
    modern.on(method, lambda params, ctx: {**created, "ttlMs": None})
    with pytest.raises(mcp.ProtocolError, match=f"{method}.*task"):
        call(connect(modern))


def legacy_task_server(tools: list[dict[str, Any]]) -> FakeServer:
    """A 2025-11-25 server that advertises ``tasks.requests.tools.call`` and makes a task of
    each call that asks for one (the tools' listings say which may)."""
    capabilities = {"tools": {}, "tasks": {"requests": {"tools": {"call": {}}}}}
    server = FakeServer(capabilities=capabilities, tools=tools)
    created = {"taskId": "t-1", "status": "working", "createdAt": "x", "lastUpdatedAt": "x", "ttl": None}
    server.on("tools/call", lambda params, ctx: {"task": created} if "task" in params else DONE)
    return server


def legacy_tool(name: str, task_support: str | None) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": name, "inputSchema": {"type": "object"}}
    if task_support is not None:
        tool["execution"] = {"taskSupport": task_support}
    return tool


@pytest.mark.parametrize(
    ("task_support", "asked"), [(None, False), ("forbidden", False), ("optional", True), ("required", True)]
)
def test_a_2025_task_is_asked_only_for_a_tool_whose_listing_allows_it(
    connect: Callable[..., mcp.Client], task_support: str | None, asked: bool
) -> None:
    # 2025-11-25 tasks, tool-level negotiation: where execution.taskSupport is absent or
    # "forbidden" a client MUST NOT invoke the tool as a task, whatever the server advertises.
    with legacy_task_server([legacy_tool("echo", task_support)]) as legacy:
        client = connect(legacy)
        client.list_tools(timeout=TIMEOUT)
        answer = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
        _, call = legacy.wait_for("tools/call")
        assert ("task" in call["params"]) is asked
        assert isinstance(answer, mcp.Task) is asked
        assert asked or answer == DONE


def test_a_2025_task_call_of_a_tool_not_listed_yet_lists_the_tools_first(
    connect: Callable[..., mcp.Client],
) -> None:
    with legacy_task_server([legacy_tool("plain", None), legacy_tool("slow", "required")]) as legacy:
        client = connect(legacy)
        assert client.call_tool("plain", {}, task=True, timeout=TIMEOUT) == DONE
        assert "task" not in legacy.messages("tools/call")[0]["params"]
        assert legacy.count("tools/list") == 1  # the listing says what each tool allows
        assert isinstance(client.call_tool("slow", {}, task=True, timeout=TIMEOUT), mcp.Task)
        assert "task" in legacy.messages("tools/call")[1]["params"]
        assert legacy.count("tools/list") == 1  # known now: not listed again


def test_a_2025_task_whose_server_pushes_no_status_is_followed_by_polling(
    connect: Callable[..., mcp.Client],
) -> None:
    # 2025-11-25: requestors MUST NOT rely on notifications/tasks/status (it is optional) and
    # SHOULD poll tasks/get: waiting on the handle polls, at the task's pollInterval.
    with legacy_task_server([legacy_tool("echo", "optional")]) as legacy:
        state = {"taskId": "t-1", "status": "working", "createdAt": "x", "lastUpdatedAt": "x", "pollInterval": 20}
        legacy.on("tools/call", lambda params, ctx: {"task": dict(state)})
        legacy.on("tasks/get", lambda params, ctx: dict(state))
        task = connect(legacy).call_tool("echo", {}, task=True, timeout=TIMEOUT)
        assert isinstance(task, mcp.Task)
        waiting = in_thread(lambda: task.get(timeout=TIMEOUT))
        legacy.wait_for("tasks/get")
        state["status"] = "completed"
        event = waiting()
        assert (event.method, event.params["status"]) == ("notifications/tasks/status", "completed")
        assert list(task) == []  # terminal: the iteration ends


def test_a_pushed_input_required_status_is_answered_without_waiting_for_the_next_poll(
    modern: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    # SEP-2663: a client that observes input_required in a notifications/tasks SHOULD
    # fulfil the input requests (through tasks/update); the next poll may be a minute away.
    tasks = FakeTasks(modern, poll_interval_ms=60_000)
    client = connect(modern, elicitation=lambda params: {"action": "accept", "content": {"name": "Ann"}})
    task = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
    assert isinstance(task, mcp.Task)
    sub = client.listen({"taskIds": [task.task_id]}, timeout=TIMEOUT)
    polls = itertools.count(1)

    def get(params: dict[str, Any], ctx: Any) -> dict[str, Any]:  # each answer numbered
        return {**tasks.detailed(params["taskId"]), "resultType": "complete", "statusMessage": f"poll {next(polls)}"}

    modern.on("tasks/get", get)
    result = in_thread(lambda: task.result(timeout=TIMEOUT))
    # The waiting call has taken its first poll's answer: it waits for the next poll now.
    wait_until(lambda: task.info.get("statusMessage") == "poll 1", what="the first poll's answer taken")
    tasks.ask(task.task_id, {"name": NAME_REQUEST})  # only the push says so
    modern.event(sub.subscription_id, "notifications/tasks", tasks.detailed(task.task_id))
    _, update = modern.wait_for("tasks/update", timeout=TIMEOUT)
    assert modern.count("tasks/get") == 2  # the push woke the waiting call, which asked at once
    assert update["params"]["inputResponses"] == {"name": {"action": "accept", "content": {"name": "Ann"}}}
    tasks.complete(task.task_id, DONE)
    modern.event(sub.subscription_id, "notifications/tasks", tasks.detailed(task.task_id))
    assert result() == DONE


# -- what a hostile server may put in a task's answers ---------------------------------------


def answer_polls_with(server: FakeServer, tasks: FakeTasks, hold_after: int | None = None, **fields: Any) -> list[Any]:
    """Answer ``tasks/get`` as ``tasks`` would, with ``fields`` laid over; the polls after the
    first ``hold_after`` are held unanswered until the test ends. Returns the polls' params."""
    polls: list[Any] = []
    release = threading.Event()

    def get(params: dict[str, Any], ctx: Any) -> Any:
        polls.append(params)
        if hold_after is not None and len(polls) > hold_after:
            release.wait(TIMEOUT * 2)
        return {"resultType": "complete", **tasks.detailed(params["taskId"]), **fields}

    server.on("tasks/get", get, concurrent=True)
    server.on("notifications/cancelled", lambda params, ctx: release.set())
    return polls


@pytest.mark.parametrize("interval", [float("inf"), 1e300, 1e13, 10**400], ids=["inf", "1e300", "1e13", "10**400"])
def test_a_2026_task_whose_server_suggests_an_endless_poll_interval_still_ends_on_its_push(
    modern: FakeServer, connect: Callable[..., mcp.Client], interval: float
) -> None:
    tasks = FakeTasks(modern)
    answer_polls_with(modern, tasks, pollIntervalMs=interval)
    client = connect(modern)
    task = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
    sub = client.listen({"taskIds": [task.task_id]}, timeout=TIMEOUT)
    result = in_thread(task.result)  # no timeout: as long as it takes, but no longer
    wait_until(lambda: task.info.get("pollIntervalMs") == interval, what="the poll's answer taken")
    tasks.complete(task.task_id, DONE)
    modern.event(sub.subscription_id, "notifications/tasks", tasks.detailed(task.task_id))
    assert result() == DONE


@pytest.mark.parametrize("interval", [float("nan"), -1, "soon", True, None])
def test_a_2026_task_whose_server_suggests_no_usable_poll_interval_polls_at_the_default_and_times_out_on_time(
    modern: FakeServer, connect: Callable[..., mcp.Client], interval: Any
) -> None:
    tasks = FakeTasks(modern)
    polls = answer_polls_with(modern, tasks, pollIntervalMs=interval)
    task = connect(modern).call_tool("echo", {}, task=True, timeout=TIMEOUT)
    outcome = in_thread(lambda: task.result(timeout=0.3))
    with pytest.raises(mcp.RequestTimeout):
        outcome()
    # NaN is no number, a negative one is the shortest wait: never a busy loop.
    assert len(polls) <= (31 if interval == -1 else 2), len(polls)


def test_a_2026_task_still_running_at_its_timeout_says_so_without_a_last_hopeless_poll(
    modern: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    tasks = FakeTasks(modern)
    polls = answer_polls_with(modern, tasks, hold_after=1, pollIntervalMs=60_000)
    client = connect(modern)
    task = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
    with pytest.raises(mcp.RequestTimeout, match=f"task {task.task_id} is still working"):
        task.result(timeout=0.3)
    client.list_tools(cache=False, timeout=TIMEOUT)  # a marker: what the call sent came before it
    assert len(polls) == 1 and modern.count("notifications/cancelled") == 0


def test_a_2026_task_asking_for_input_without_end_is_refused_after_the_rounds_a_call_gets(
    modern: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    tasks = FakeTasks(modern, poll_interval_ms=0)
    keys = itertools.count()
    asked: list[Any] = []

    def ask_again(params: dict[str, Any], ctx: Any) -> Any:
        fresh = {f"k{next(keys)}": NAME_REQUEST}  # a new key each time: never answered already
        return {
            "resultType": "complete",
            **tasks.detailed(params["taskId"]),
            "status": "input_required",
            "inputRequests": fresh,
        }

    modern.on("tasks/get", ask_again)
    client = connect(modern, elicitation=lambda params: asked.append(params) or {"action": "decline"})
    task = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
    with pytest.raises(mcp.ProtocolError, match="asked for input more than 10 times"):
        task.result(timeout=TIMEOUT)
    assert len(asked) == 10 and modern.count("tasks/update") == 10


def test_a_task_id_of_a_megabyte_reaches_reprs_and_error_texts_escaped_and_bounded(
    modern: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    FakeTasks(modern)
    huge = "\x1b[2J\u202e" + "x" * 1_000_000
    working = {"taskId": huge, "status": "working", "createdAt": "2026-01-01T00:00:00Z", "ttlMs": 60_000}
    modern.on("tools/call", lambda params, ctx: {"resultType": "task", **working})
    # Completed, yet no result inlined: a ProtocolError quoting the task.
    modern.on("tasks/get", lambda params, ctx: {"resultType": "complete", **working, "status": "completed"})
    task = connect(modern).call_tool("echo", {}, task=True, timeout=TIMEOUT)
    assert isinstance(task, mcp.Task) and task.task_id == huge
    with pytest.raises(mcp.ProtocolError) as raised:
        task.result(timeout=TIMEOUT)
    for text in (str(raised.value), repr(task)):
        assert len(text) < 2_000 and "\x1b" not in text and "\u202e" not in text, text[:300]
