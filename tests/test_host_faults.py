"""The host side against the FakeServer, for faults: handlers that hang, raise or return
junk; cancelled server requests; bad params, progress and log messages; tasks that fail."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors._runtime._host_pool import HostRuntime
from exmcp_actors.testing import FakeError, FakeServer, FakeTasks
from tests.sdk_helpers import ClientPool
from tests.waiting import WAIT, wait_until

TIMEOUT = 5.0
SAMPLE = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 10}
ANSWER = {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"}
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "default": 7}, "x": {"type": "string"}},
}


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as fake:
        yield fake


@pytest.fixture
def connect(server: FakeServer, client_pool: ClientPool) -> Callable[..., mcp.Client]:
    def make(**kwargs: Any) -> mcp.Client:
        return client_pool.connect(server.transport(), reconnect=False, **kwargs)

    return make


def error_of(server: FakeServer, request_id: str) -> dict[str, Any]:
    answer = server.wait_response(request_id, TIMEOUT)
    assert "error" in answer, answer
    error: dict[str, Any] = answer["error"]
    return error


def hanging_sampling() -> tuple[threading.Event, threading.Event, Callable[[dict[str, Any]], Any]]:
    """A sampling handler that signals ``entered`` and answers once ``release`` is set."""
    entered, release = threading.Event(), threading.Event()

    def sampling(params: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        release.wait(TIMEOUT)
        return ANSWER

    return entered, release, sampling


# -- capabilities ---------------------------------------------------------------------------


def test_capabilities_follow_the_handlers_given(server: FakeServer, connect: Callable[..., mcp.Client]) -> None:
    connect()
    plain = server.messages("initialize")[-1]["params"]["capabilities"]
    assert plain == {}
    connect(sampling=lambda p: ANSWER, elicitation=lambda p: {"action": "cancel"}, roots=[])
    caps = server.messages("initialize")[-1]["params"]["capabilities"]
    assert caps["sampling"] == {} and caps["elicitation"] == {"form": {}} and caps["roots"] == {"listChanged": True}
    assert caps["tasks"]["requests"] == {"sampling": {"createMessage": {}}, "elicitation": {"create": {}}}


def test_without_a_handler_the_request_is_method_not_found(
    server: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    connect()
    assert error_of(server, server.request("sampling/createMessage", SAMPLE))["code"] == -32601
    assert error_of(server, server.request("roots/list"))["code"] == -32601


# -- handlers off the reader and the actor --------------------------------------------------


def test_a_hanging_handler_stops_neither_notifications_nor_requests(
    server: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    entered, release, sampling = hanging_sampling()
    client = connect(sampling=sampling)
    listener = client.subscribe_notifications({"toolsListChanged": True})
    hung = server.request("sampling/createMessage", SAMPLE)
    assert entered.wait(TIMEOUT)
    server.list_changed("tools")
    assert listener.get(timeout=TIMEOUT).method == "notifications/tools/list_changed"
    assert [tool["name"] for tool in client.list_tools(timeout=TIMEOUT)] == ["echo"]
    release.set()
    assert server.wait_response(hung, TIMEOUT)["result"] == ANSWER


def test_a_handler_that_raises_answers_an_error_and_the_client_stays_ready(
    server: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    def sampling(params: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("no model configured")

    client = connect(sampling=sampling)
    error = error_of(server, server.request("sampling/createMessage", SAMPLE))
    assert error["code"] == -32603 and "no model configured" in error["message"]
    assert client.status == "ready"
    client.ping(timeout=TIMEOUT)


def test_a_cancelled_request_gets_no_late_answer(server: FakeServer, connect: Callable[..., mcp.Client]) -> None:
    entered, release, sampling = hanging_sampling()
    client = connect(sampling=sampling)
    cancelled = server.request("sampling/createMessage", SAMPLE)
    assert entered.wait(TIMEOUT)
    server.notify("notifications/cancelled", {"requestId": cancelled, "reason": "user gave up"})
    wait_until(lambda: client._inspect()["in_handler"] == 0, what="the cancellation to be taken")
    release.set()
    wait_until(lambda: client._inspect()["host_answers"] == 1, what="the handler's outcome")
    server.wait_response(server.request("ping"), TIMEOUT)  # everything sent before it has arrived
    assert not [m for _, m in server.received if isinstance(m, dict) and m.get("id") == cancelled]


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "params", "word"),
    [
        ("sampling/createMessage", {"maxTokens": 5}, "messages"),
        ("sampling/createMessage", {**SAMPLE, "maxTokens": "many"}, "maxTokens"),
        ("sampling/createMessage", {"messages": ["hi"], "maxTokens": 5}, "messages"),
        ("elicitation/create", {"requestedSchema": SCHEMA}, "message"),
        ("elicitation/create", {"message": "who?"}, "requestedSchema"),
        ("elicitation/create", [1, 2], "object"),
    ],
)
def test_bad_params_get_invalid_params(
    server: FakeServer, connect: Callable[..., mcp.Client], method: str, params: Any, word: str
) -> None:
    client = connect(sampling=lambda p: ANSWER, elicitation=lambda p: {"action": "decline"})
    error = error_of(server, server.request(method, params))
    assert error["code"] == -32602 and word in error["message"]
    assert client.status == "ready"


def test_a_handler_returning_a_non_dict_is_logged_and_answered_internal_error(
    server: FakeServer, connect: Callable[..., mcp.Client], caplog: pytest.LogCaptureFixture
) -> None:
    connect(sampling=lambda p: "just text")
    with caplog.at_level(logging.ERROR, logger="exmcp_actors"):
        error = error_of(server, server.request("sampling/createMessage", SAMPLE))
    assert error["code"] == -32603
    assert any("not a dict" in record.getMessage() for record in caplog.records)


def test_bad_progress_and_log_messages_are_dropped_with_a_warning(
    server: FakeServer, connect: Callable[..., mcp.Client], caplog: pytest.LogCaptureFixture
) -> None:
    client = connect()
    logs = client.subscribe_notifications({"logMessages": True})

    @server.on("tools/call")
    def call(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        token = params["_meta"]["progressToken"]
        ctx.notify("notifications/progress", {"progressToken": token, "progress": "half"})
        ctx.notify("notifications/progress", {"progressToken": token, "progress": 1, "total": 2})
        ctx.notify("notifications/message", {"level": "loud", "data": "bad"})
        ctx.notify("notifications/message", {"level": "info", "data": "good"})
        return {"content": []}

    seen: list[dict[str, Any]] = []
    with caplog.at_level(logging.WARNING, logger="exmcp_actors"):
        client.call_tool("echo", {}, progress=seen.append, timeout=TIMEOUT)
        assert logs.get(timeout=TIMEOUT).params == {"level": "info", "data": "good"}
    assert [item["progress"] for item in seen] == [1]
    assert any("notifications/progress" in r.getMessage() and "dropped" in r.getMessage() for r in caplog.records)
    assert logs.pending() == 0


# -- progress -------------------------------------------------------------------------------


def test_progress_reaches_only_its_own_call_in_order(server: FakeServer, connect: Callable[..., mcp.Client]) -> None:
    client = connect()
    both_in = threading.Barrier(2, timeout=TIMEOUT)

    @server.on("tools/call", concurrent=True)
    def call(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        token = params["_meta"]["progressToken"]
        both_in.wait()  # both calls are in flight: their progress interleaves on the wire
        for step in range(1, 21):
            ctx.notify("notifications/progress", {"progressToken": token, "progress": step})
        ctx.notify("notifications/progress", {"progressToken": "someone-else", "progress": 99})
        return {"content": [], "tag": params["arguments"]["tag"]}

    seen: dict[str, list[Any]] = {"a": [], "b": []}
    results: dict[str, Any] = {}

    def run(tag: str) -> None:
        results[tag] = client.call_tool(
            "echo", {"tag": tag}, progress=lambda p: seen[tag].append(p["progress"]), timeout=TIMEOUT
        )

    threads = [threading.Thread(target=run, args=(tag,)) for tag in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert results["a"]["tag"] == "a" and results["b"]["tag"] == "b"
    assert seen == {"a": list(range(1, 21)), "b": list(range(1, 21))}


# -- roots ----------------------------------------------------------------------------------


def test_roots_are_answered_and_replaced(server: FakeServer, connect: Callable[..., mcp.Client]) -> None:
    client = connect(roots=[{"uri": "file:///one", "name": "one"}])
    first = server.wait_response(server.request("roots/list"), TIMEOUT)["result"]
    assert first == {"roots": [{"uri": "file:///one", "name": "one"}]}
    client.set_roots([{"uri": "file:///two"}])
    server.wait_for("notifications/roots/list_changed", timeout=TIMEOUT)
    assert server.wait_response(server.request("roots/list"), TIMEOUT)["result"] == {"roots": [{"uri": "file:///two"}]}
    with pytest.raises(ValueError, match="uri"):
        client.set_roots([{"name": "no uri"}])


# -- elicitation defaults (SEP-1034) --------------------------------------------------------


def test_an_accepted_elicitation_gets_the_schema_defaults(
    server: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    connect(elicitation=lambda p: {"action": "accept", "content": {"name": "Ann"}})
    answer = server.wait_response(server.request("elicitation/create", {"message": "who?", "requestedSchema": SCHEMA}))
    assert answer["result"] == {"action": "accept", "content": {"name": "Ann", "age": 7}}


# -- tasks ----------------------------------------------------------------------------------


def test_a_task_that_fails_raises_request_error(server: FakeServer, connect: Callable[..., mcp.Client]) -> None:
    tasks = FakeTasks(server)
    client = connect()
    task = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
    assert isinstance(task, mcp.Task) and task.status == "working"
    task_id = tasks.wait_created()
    assert task.task_id == task_id
    tasks.set_status(task_id, "input_required", "waiting for you")
    tasks.fail(task_id, "the tool broke")
    with pytest.raises(mcp.RequestError, match="the tool broke"):
        task.result(timeout=TIMEOUT)
    notes = list(task)
    assert [n.params["status"] for n in notes] == ["input_required", "failed"]
    assert all(n.method == "notifications/tasks/status" and n.listener is task for n in notes)


def test_a_task_completes_and_can_be_cancelled(server: FakeServer, connect: Callable[..., mcp.Client]) -> None:
    tasks = FakeTasks(server)
    client = connect()
    done = client.call_tool("echo", {}, task={"ttl": 1000}, timeout=TIMEOUT)
    tasks.complete(tasks.wait_created(), {"content": [{"type": "text", "text": "ok"}]})
    assert done.result(timeout=TIMEOUT) == {"content": [{"type": "text", "text": "ok"}]}
    assert done.status == "completed"
    other = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
    other.cancel(timeout=TIMEOUT)
    assert other.status == "cancelled" and tasks.status(other.task_id) == "cancelled"


def test_a_failing_tasks_result_error_is_raised(server: FakeServer, connect: Callable[..., mcp.Client]) -> None:
    tasks = FakeTasks(server)
    client = connect()
    task = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
    tasks.fail(tasks.wait_created(), "gone", error=FakeError(-32000, "store lost it"))
    with pytest.raises(mcp.RequestError, match="store lost it"):
        task.result(timeout=TIMEOUT)


def test_the_server_may_send_sampling_as_a_task(server: FakeServer, connect: Callable[..., mcp.Client]) -> None:
    release = threading.Event()

    def sampling(params: dict[str, Any]) -> dict[str, Any]:
        assert "task" not in params
        release.wait(TIMEOUT)
        if params["maxTokens"] == 13:
            raise RuntimeError("unlucky")
        return ANSWER

    connect(sampling=sampling)
    created = server.wait_response(server.request("sampling/createMessage", {**SAMPLE, "task": {"ttl": 5000}}))
    task_id = created["result"]["task"]["taskId"]
    assert created["result"]["task"]["status"] == "working"
    status = server.wait_response(server.request("tasks/get", {"taskId": task_id}))["result"]["status"]
    assert status == "working"
    waiting = server.request("tasks/result", {"taskId": task_id})
    release.set()
    result = server.wait_response(waiting)["result"]
    assert result["model"] == "m" and result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    server.wait_for("notifications/tasks/status", taskId=task_id, status="completed", timeout=TIMEOUT)
    failing = server.wait_response(server.request("sampling/createMessage", {**SAMPLE, "maxTokens": 13, "task": {}}))
    failed_id = failing["result"]["task"]["taskId"]
    assert "unlucky" in error_of(server, server.request("tasks/result", {"taskId": failed_id}))["message"]
    listed = server.wait_response(server.request("tasks/list"))["result"]["tasks"]
    assert {t["taskId"]: t["status"] for t in listed} == {task_id: "completed", failed_id: "failed"}
    assert error_of(server, server.request("tasks/get", {"taskId": "nope"}))["code"] == -32602


def test_the_log_level_is_set_again_after_a_reconnect(server: FakeServer) -> None:
    fast = mcp.Backoff(initial=0.01, factor=1, maximum=0.01, jitter=0)
    with mcp.connect(server.transport(), backoff=fast) as client:
        client.set_logging_level("error", timeout=TIMEOUT)
        server.drop()
        server.wait_for("logging/setLevel", connection=2, level="error", timeout=TIMEOUT)
        assert client.status in ("ready", "reconnecting")


def test_a_task_status_sent_before_the_call_returns_is_not_lost(server: FakeServer) -> None:
    @server.on("tools/call")
    def call(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.notify("notifications/tasks/status", {"taskId": "early-1", "status": "input_required"})
        return {"task": {"taskId": "early-1", "status": "working"}}

    with mcp.connect(server.transport()) as client:
        task = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
        assert task.get(timeout=TIMEOUT).params["status"] == "input_required"
        assert task.status == "input_required"


def test_a_task_handle_ends_when_the_client_disconnects(server: FakeServer) -> None:
    FakeTasks(server)
    client = mcp.connect(server.transport(), reconnect=False)
    task = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
    ended = threading.Event()

    def reader() -> None:
        list(task)  # blocks until the task ends
        ended.set()

    threading.Thread(target=reader, daemon=True).start()
    client.disconnect()
    assert ended.wait(TIMEOUT), "iterating a task kept blocking after disconnect()"
    with pytest.raises(queue.Empty):
        task.get(timeout=TIMEOUT)


def test_a_task_handle_made_as_the_client_disconnects_ends_too(server: FakeServer) -> None:
    FakeTasks(server)
    client = mcp.connect(server.transport(), reconnect=False)
    adopt = client._host.adopt_task

    def adopt_after_disconnect(task_id: str, feed: Any) -> None:
        client.disconnect()  # the client closes between the call's answer and the handle's adoption
        adopt(task_id, feed)

    client._host.adopt_task = adopt_after_disconnect  # type: ignore[method-assign]
    task = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
    ended = threading.Event()

    def reader() -> None:
        list(task)  # no status can come any more: this must end, not block for ever
        ended.set()

    threading.Thread(target=reader, daemon=True).start()
    assert ended.wait(TIMEOUT), "iterating a task made as the client disconnected blocked for ever"


def test_only_the_latest_early_status_of_a_task_is_kept(server: FakeServer) -> None:
    @server.on("tools/call")
    def call(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        for i in range(1000):  # a server chattering before the handle exists costs one entry, not 1,000
            status = "input_required" if i % 2 else "working"
            ctx.notify("notifications/tasks/status", {"taskId": "early-2", "status": status})
        return {"task": {"taskId": "early-2", "status": "working"}}

    with mcp.connect(server.transport()) as client:
        task = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
        assert task.get(timeout=TIMEOUT).params["status"] == "input_required"
        # The marker: a later status, behind the 1,000 on the wire, is the next message.
        server.notify("notifications/tasks/status", {"taskId": "early-2", "status": "working", "marker": 1})
        assert task.get(timeout=TIMEOUT).params == {"taskId": "early-2", "status": "working", "marker": 1}


def test_an_early_task_status_is_taken_before_a_later_one(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    @server.on("tools/call")
    def call(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.notify("notifications/tasks/status", {"taskId": "early-3", "status": "input_required"})
        return {"task": {"taskId": "early-3", "status": "working"}}

    noted = mcp.Task._status_noted
    later_noted = threading.Event()
    # The early status is handed over by the thread adopting the task (the call pool's).
    adopting = threading.local()
    adopt = HostRuntime.adopt_task

    def adopt_marked(host: HostRuntime, task_id: str, feed: Any) -> None:
        adopting.on = True
        try:
            adopt(host, task_id, feed)
        finally:
            adopting.on = False

    monkeypatch.setattr(HostRuntime, "adopt_task", adopt_marked)

    def note(task: mcp.Task, params: dict[str, Any]) -> None:
        if not getattr(adopting, "on", False):
            noted(task, params)
            later_noted.set()
            return
        if not later_noted.is_set() and params.get("marker") is None:
            # The early status is being handed over as the later one arrives: let it try to
            # pass (bounded: once the hand-over keeps the order, the later one waits for it).
            server.notify("notifications/tasks/status", {"taskId": "early-3", "status": "working", "marker": 1})
            later_noted.wait(0.5)
        noted(task, params)

    monkeypatch.setattr(mcp.Task, "_status_noted", note)
    with mcp.connect(server.transport()) as client:
        task = client.call_tool("echo", {}, task=True, timeout=TIMEOUT)
        assert later_noted.wait(TIMEOUT)  # both are taken by now
        assert task.status == "working", "the early status was taken after the later one"
        first, second = task.get(timeout=TIMEOUT), task.get(timeout=TIMEOUT)
        assert [first.params["status"], second.params["status"]] == ["input_required", "working"]
        assert second.params.get("marker") == 1


def test_task_result_names_a_wrong_typed_timeout(server: FakeServer, connect: Callable[..., mcp.Client]) -> None:
    FakeTasks(server)
    task = connect().call_tool("echo", {}, task=True, timeout=TIMEOUT)
    with pytest.raises(TypeError, match="timeout"):
        task.result(timeout="5")  # type: ignore[arg-type]


def test_set_roots_without_roots_given_at_connect_is_refused(connect: Callable[..., mcp.Client]) -> None:
    with pytest.raises(ValueError, match="roots="):
        connect().set_roots([{"uri": "file:///a"}])


def test_a_pool_that_may_start_no_thread_says_so_or_hands_the_job_to_a_worker_it_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Python 3.12.0 and 3.12.1 start no thread from the interpreter's exit hooks on, where
    # clients are closed: a failed call's answer handed to a pool that could not start its
    # worker left the host's request waiting, and the interpreter with it.
    from exmcp_actors._runtime._host_pool import WorkerPool

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    fresh = WorkerPool("fresh", 2)
    started = WorkerPool("started", 2)
    ran: queue.SimpleQueue[str] = queue.SimpleQueue()
    busy = threading.Event()
    assert started.submit(lambda: (ran.put("busy"), busy.wait(WAIT)))
    assert ran.get(timeout=WAIT) == "busy"  # its one worker is busy: the next job asks for another
    with monkeypatch.context() as patch:
        patch.setattr(threading.Thread, "start", refuse)
        assert fresh.submit(lambda: ran.put("fresh")) is False  # nothing queued: the caller runs it
        assert started.submit(lambda: ran.put("started")) is True  # the worker it has takes it
    busy.set()
    assert ran.get(timeout=WAIT) == "started"
    for pool in (fresh, started):
        pool.close()
        pool.join(WAIT)  # no thread that never started is waited for
    assert ran.empty()
