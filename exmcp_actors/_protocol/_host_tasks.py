"""Tasks the client runs for the server (sans-IO): task-augmented ``sampling/createMessage``
and ``elicitation/create`` (MCP 2025-11-25 tasks, the client as the receiver).

A request whose params carry ``task`` is answered at once with a CreateTaskResult;
the host's handler runs as usual, and its outcome is kept for the server's
``tasks/result``. The server polls ``tasks/get``, lists with ``tasks/list`` and may
``tasks/cancel``. At most :data:`MAX_TASKS` are kept; the oldest finished go first.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from . import _events as ev
from . import _jsonrpc as rpc
from ._filters import TASK_STATUS
from ._host_checks import TERMINAL_TASK_STATES

MAX_TASKS = 64
#: Most ``tasks/result`` requests one task keeps waiting (a server repeating itself costs no more).
MAX_WAITING = 16
DEFAULT_TTL_MS = 300_000
POLL_INTERVAL_MS = 500
TASK_METHODS: frozenset[str] = frozenset(("tasks/get", "tasks/result", "tasks/list", "tasks/cancel"))
_numbers = itertools.count(1)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class ClientTask:
    task_id: str
    ttl: int
    created_at: str
    status: str = "working"
    updated_at: str = ""
    status_message: str | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    #: ids of the server's tasks/result requests waiting for the end.
    waiting: list[Any] = field(default_factory=list)

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.updated_at or self.created_at,
            "ttl": self.ttl,
            "pollInterval": POLL_INTERVAL_MS,
        }
        if self.status_message is not None:
            info["statusMessage"] = self.status_message
        return info


class ClientTasks:
    """The tasks the host's handlers run for the server on this client."""

    def __init__(self, effects: ev.Effects) -> None:
        self.effects = effects
        self.tasks: OrderedDict[str, ClientTask] = OrderedDict()

    def create(self, request_id: Any, task_params: Any) -> str | None:
        """Answer a task-augmented request with its CreateTaskResult; None when full."""
        if len(self.tasks) >= MAX_TASKS and not self._evict():
            return None
        ttl = task_params.get("ttl") if isinstance(task_params, dict) else None
        task_id = f"client-task-{next(_numbers)}"
        task = ClientTask(task_id, ttl if isinstance(ttl, int) and ttl > 0 else DEFAULT_TTL_MS, _now())
        self.tasks[task_id] = task
        self.effects.send(rpc.result_frame(request_id, {"task": task.info()}))
        return task_id

    def _evict(self) -> bool:
        for task_id, task in self.tasks.items():
            if task.status in TERMINAL_TASK_STATES:
                del self.tasks[task_id]
                return True
        return False

    def finished(self, task_id: str, result: dict[str, Any] | None, error: str | None) -> None:
        task = self.tasks.get(task_id)
        if task is None or task.status in TERMINAL_TASK_STATES:
            return  # cancelled meanwhile: the outcome is dropped
        task.result, task.error = result, error
        self._move(task, "completed" if error is None else "failed", error)

    def _move(self, task: ClientTask, status: str, message: str | None) -> None:
        task.status, task.updated_at, task.status_message = status, _now(), message
        waiting, task.waiting = task.waiting, []
        for request_id in waiting:
            self._send_result(task, request_id)
        self.effects.send(rpc.notification(TASK_STATUS, task.info()))

    def _send_result(self, task: ClientTask, request_id: Any) -> None:
        if task.status == "completed" and task.result is not None:
            related = {"io.modelcontextprotocol/related-task": {"taskId": task.task_id}}
            self.effects.send(rpc.result_frame(request_id, {**task.result, "_meta": related}))
        else:
            why = task.error or f"the task was {task.status}"
            self.effects.send(rpc.error_frame(request_id, rpc.INTERNAL_ERROR, why))

    def on_request(self, msg: rpc.ServerRequest) -> None:
        """``tasks/get``, ``tasks/result``, ``tasks/list`` or ``tasks/cancel`` from the server."""
        if msg.method == "tasks/list":
            self.effects.send(rpc.result_frame(msg.id, {"tasks": [task.info() for task in self.tasks.values()]}))
            return
        params = msg.params if isinstance(msg.params, dict) else {}
        task_id = params.get("taskId")
        task = self.tasks.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            self.effects.send(rpc.error_frame(msg.id, rpc.INVALID_PARAMS, f"no task with id {task_id!r}"))
        elif msg.method == "tasks/get":
            self.effects.send(rpc.result_frame(msg.id, task.info()))
        elif msg.method == "tasks/result":
            if task.status in TERMINAL_TASK_STATES:
                self._send_result(task, msg.id)
            elif len(task.waiting) < MAX_WAITING:
                task.waiting.append(msg.id)
            else:
                why = f"task {task_id} already has {MAX_WAITING} tasks/result requests waiting"
                self.effects.send(rpc.error_frame(msg.id, rpc.INTERNAL_ERROR, why))
        elif task.status in TERMINAL_TASK_STATES:
            self.effects.send(rpc.error_frame(msg.id, rpc.INVALID_PARAMS, f"task {task_id} is already {task.status}"))
        else:
            self._move(task, "cancelled", "cancelled by the server")
            self.effects.send(rpc.result_frame(msg.id, task.info()))
