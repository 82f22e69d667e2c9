"""Tasks on a FakeServer (the MCP 2025-11-25 tasks utility, the server as the receiver).

:class:`FakeTasks` installs itself on a :class:`FakeServer`: a ``tools/call`` that
carries ``task`` creates a task the test then moves with :meth:`FakeTasks.set_status`,
:meth:`FakeTasks.complete` or :meth:`FakeTasks.fail`; ``tasks/get``, ``tasks/result``
(held until the task ends), ``tasks/cancel`` and ``tasks/list`` are answered, and each
status change is pushed as ``notifications/tasks/status``::

    tasks = FakeTasks(server)
    task = client.call_tool("echo", {}, task=True)
    tasks.fail(tasks.wait_created(), "it broke")
    task.result(timeout=5)        # raises RequestError
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Any

from exmcp_actors.testing._protocol import FakeError

if TYPE_CHECKING:
    from exmcp_actors.testing._connection import FakeConnection
    from exmcp_actors.testing._server import FakeServer

TERMINAL = ("completed", "failed", "cancelled")
CREATED_AT = "2026-01-01T00:00:00Z"


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
        server.capabilities = {
            **server.capabilities,
            "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
        }
        self._plain_call = server.default_handler("tools/call")
        server.on("tools/call", self._call)
        server.on("tasks/get", self._get)
        server.on("tasks/result", self._result, concurrent=True)
        server.on("tasks/cancel", self._cancel)
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
        """Move a task and push ``notifications/tasks/status``."""
        with self._changed:
            task = self._tasks[task_id]
            task["status"] = status
            if message is not None:
                task["statusMessage"] = message
            info = dict(task)
            self._changed.notify_all()
        self.server.notify("notifications/tasks/status", info)

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

    def _call(self, params: dict[str, Any], ctx: FakeConnection) -> Any:
        if not isinstance(params.get("task"), dict):
            return self._plain_call(params, ctx) if self._plain_call is not None else {}
        task_id = f"fake-task-{next(self._ids)}"
        task = {
            "taskId": task_id,
            "status": "working",
            "createdAt": CREATED_AT,
            "lastUpdatedAt": CREATED_AT,
            "ttl": params["task"].get("ttl", 60_000),
            "pollInterval": self.poll_interval_ms,
        }
        with self._changed:
            self._tasks[task_id] = task
            self._order.append(task_id)
            self._changed.notify_all()
        return {"task": dict(task)}

    def _task(self, params: dict[str, Any]) -> dict[str, Any]:
        task = self._tasks.get(params.get("taskId"))  # type: ignore[arg-type]
        if task is None:
            raise FakeError(-32602, f"no task {params.get('taskId')!r}")
        return task

    def _get(self, params: dict[str, Any], ctx: FakeConnection) -> Any:
        with self._changed:
            return dict(self._task(params))

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
        with self._changed:
            return dict(self._tasks[task_id])
