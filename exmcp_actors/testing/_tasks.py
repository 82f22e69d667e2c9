"""Tasks on a FakeServer, the server as the receiver, in both eras' shapes.

:class:`FakeTasks` installs itself on a :class:`FakeServer`; the test moves each task with
:meth:`FakeTasks.set_status`, :meth:`FakeTasks.ask`, :meth:`FakeTasks.complete` or
:meth:`FakeTasks.fail`.

* MCP 2025-11-25 (the tasks utility): ``tools/list`` marks each tool that says nothing
  ``execution.taskSupport: "optional"``; a ``tools/call`` that carries ``task`` creates a
  task; ``tasks/get``, ``tasks/result`` (held until the task ends), ``tasks/cancel`` and
  ``tasks/list`` are answered, and each status change is pushed as
  ``notifications/tasks/status``.
* MCP 2026-07-28 (the ``io.modelcontextprotocol/tasks`` extension, SEP-2663): a
  ``tools/call`` whose ``_meta`` client capabilities declare the extension gets a
  ``resultType: "task"`` answer; ``tasks/get`` inlines the result, the error or the
  ``inputRequests``, ``tasks/update`` takes ``inputResponses`` and ``tasks/cancel`` acks.
  Nothing is pushed: the test sends :meth:`FakeTasks.detailed` on a listen with
  ``server.event(listen_id, "notifications/tasks", ...)``.

::

    tasks = FakeTasks(server)
    task = client.call_tool("echo", {}, task=True)
    tasks.fail(tasks.wait_created(), "it broke")
    task.result(timeout=5)        # raises RequestError
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import TYPE_CHECKING, Any

from exmcp_actors.testing._protocol import FakeError

if TYPE_CHECKING:
    from exmcp_actors.testing._connection import FakeConnection
    from exmcp_actors.testing._server import FakeServer

TERMINAL = ("completed", "failed", "cancelled")
CREATED_AT = "2026-01-01T00:00:00Z"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"


def _declares_tasks(params: dict[str, Any]) -> bool:
    """Whether a 2026-07-28 request declares the tasks extension in its client capabilities."""
    meta = params.get("_meta")
    capabilities = meta.get(CLIENT_CAPABILITIES) if isinstance(meta, dict) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


class FakeTasks:
    """Serve tasks on ``server``; see the module docstring. Thread-safe."""

    def __init__(self, server: FakeServer, *, poll_interval_ms: int = 100) -> None:
        self.server = server
        self.poll_interval_ms = poll_interval_ms
        self._ids = itertools.count(1)
        self._changed = threading.Condition()
        self._tasks: dict[str, dict[str, Any]] = {}
        self._results: dict[str, Any] = {}
        self._order: list[str] = []
        #: 2026-07-28: the ``inputResponses`` of each task's ``tasks/update`` requests, in order.
        self.updates: dict[str, list[dict[str, Any]]] = {}
        #: When each task's ``tasks/get`` requests came (``time.monotonic()``), in order.
        self.polls: dict[str, list[float]] = {}
        extensions = {**server.capabilities.get("extensions", {}), TASKS_EXTENSION: {}}
        server.capabilities = {
            **server.capabilities,
            "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
            "extensions": extensions,
        }
        self._plain_call = server.default_handler("tools/call")
        self._plain_list = server.default_handler("tools/list")
        server.on("tools/list", self._list)
        server.on("tools/call", self._call)
        server.on("tasks/get", self._get)
        server.on("tasks/result", self._result, concurrent=True)
        server.on("tasks/cancel", self._cancel)
        server.on("tasks/update", self._update)
        server.on("tasks/list", lambda params, ctx: {"tasks": [dict(t) for t in self._tasks.values()]})

    # -- what the test does ----------------------------------------------------------------

    def wait_created(self, n: int = 1, timeout: float = 5.0) -> str:
        """The id of the ``n``-th task created (waits for it)."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._order) >= n, timeout):
                raise AssertionError(f"no task #{n} was created within {timeout}s")
            return self._order[n - 1]

    def status(self, task_id: str) -> str:
        with self._changed:
            return str(self._tasks[task_id]["status"])

    def set_status(self, task_id: str, status: str, message: str | None = None) -> None:
        """Move a task; a 2025-11-25 task's change is pushed as ``notifications/tasks/status``."""
        with self._changed:
            task = self._tasks[task_id]
            task["status"] = status
            if message is not None:
                task["statusMessage"] = message
            if status != "input_required":
                task.pop("inputRequests", None)
            info = {key: value for key, value in task.items() if key != "inputRequests"}
            self._changed.notify_all()
        if "ttlMs" not in info:  # the extension pushes only on a listen, through the test
            self.server.notify("notifications/tasks/status", info)

    def ask(self, task_id: str, input_requests: dict[str, Any]) -> None:
        """2026-07-28: the task needs these requests answered (``input_required``)."""
        with self._changed:
            self._tasks[task_id]["inputRequests"] = dict(input_requests)
        self.set_status(task_id, "input_required")

    def detailed(self, task_id: str) -> dict[str, Any]:
        """2026-07-28: the task as ``tasks/get`` (and ``notifications/tasks``) carry it."""
        with self._changed:
            detailed = dict(self._task({"taskId": task_id}))
            outcome = self._results.get(task_id)
        if detailed["status"] == "completed" and isinstance(outcome, dict):
            detailed["result"] = outcome
        elif detailed["status"] == "failed":
            error = outcome if isinstance(outcome, FakeError) else FakeError(-32603, str(detailed.get("statusMessage")))
            detailed["error"] = {"code": error.code, "message": error.message}
        return detailed

    def complete(self, task_id: str, result: dict[str, Any] | None = None) -> None:
        """End a task with this CallToolResult (default: one text block ``"done"``)."""
        with self._changed:
            self._results[task_id] = result or {"content": [{"type": "text", "text": "done"}]}
        self.set_status(task_id, "completed")

    def fail(self, task_id: str, message: str, *, error: FakeError | None = None) -> None:
        """Fail a task: ``tasks/result`` answers an error result, or raises ``error`` if given."""
        with self._changed:
            self._results[task_id] = error or {"content": [{"type": "text", "text": message}], "isError": True}
        self.set_status(task_id, "failed", message)

    # -- handlers --------------------------------------------------------------------------

    def _list(self, params: dict[str, Any], ctx: FakeConnection) -> Any:
        """The tools, each marked as running as a task on request (``execution.taskSupport``
        "optional" where a tool says nothing), as a 2025-11-25 server that serves tool tasks
        lists them: a client may not ask a tool that says nothing."""
        listed = self._plain_list(params, ctx) if self._plain_list is not None else {"tools": []}
        tools = [{"execution": {"taskSupport": "optional"}, **tool} for tool in listed.get("tools", [])]
        return {**listed, "tools": tools}

    def _call(self, params: dict[str, Any], ctx: FakeConnection) -> Any:
        modern = ctx.era == "modern"
        if not (_declares_tasks(params) if modern else isinstance(params.get("task"), dict)):
            return self._plain_call(params, ctx) if self._plain_call is not None else {}
        task_id = f"fake-task-{next(self._ids)}"
        task: dict[str, Any] = {"taskId": task_id, "status": "working", "createdAt": CREATED_AT}
        task["lastUpdatedAt"] = CREATED_AT
        if modern:
            task.update(ttlMs=60_000, pollIntervalMs=self.poll_interval_ms)
        else:
            task.update(ttl=params["task"].get("ttl", 60_000), pollInterval=self.poll_interval_ms)
        with self._changed:
            self._tasks[task_id] = task
            self._order.append(task_id)
            self._changed.notify_all()
        return {"resultType": "task", **task} if modern else {"task": dict(task)}

    def _task(self, params: dict[str, Any]) -> dict[str, Any]:
        task = self._tasks.get(params.get("taskId"))  # type: ignore[arg-type]
        if task is None:
            raise FakeError(-32602, f"no task {params.get('taskId')!r}")
        return task

    def _get(self, params: dict[str, Any], ctx: FakeConnection) -> Any:
        with self._changed:
            self.polls.setdefault(self._task(params)["taskId"], []).append(time.monotonic())
        if ctx.era == "modern":
            return {"resultType": "complete", **self.detailed(self._task(params)["taskId"])}
        with self._changed:
            return dict(self._task(params))

    def _update(self, params: dict[str, Any], ctx: FakeConnection) -> Any:
        with self._changed:
            task = self._task(params)
            responses = params.get("inputResponses")
            self.updates.setdefault(task["taskId"], []).append(responses if isinstance(responses, dict) else {})
            asked = task.get("inputRequests", {})
            if isinstance(responses, dict) and asked and set(asked) <= set(responses):
                del task["inputRequests"]
                task["status"] = "working"
            self._changed.notify_all()
        return {"resultType": "complete"}

    def _result(self, params: dict[str, Any], ctx: FakeConnection) -> Any:
        with self._changed:
            task = self._task(params)
            while task["status"] not in TERMINAL and not ctx.closed:
                self._changed.wait(0.05)
            outcome = self._results.get(task["taskId"])
        if isinstance(outcome, FakeError):
            raise outcome
        if outcome is None:
            raise FakeError(-32603, f"task {task['taskId']} was {task['status']}")
        return outcome

    def _cancel(self, params: dict[str, Any], ctx: FakeConnection) -> Any:
        with self._changed:
            task_id = self._task(params)["taskId"]
        self.set_status(task_id, "cancelled", "cancelled by the client")
        if ctx.era == "modern":
            return {"resultType": "complete"}  # an empty acknowledgment (SEP-2663)
        with self._changed:
            return dict(self._tasks[task_id])
