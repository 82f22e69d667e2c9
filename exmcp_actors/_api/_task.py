"""``mcp.Task``: a tool call the server runs as a task (the MCP 2025-11-25 tasks utility).

``client.call_tool(name, arguments, task=True)`` returns one. Its status follows
``notifications/tasks/status`` (and ``tasks/get`` answers); iterating it yields each
status notification as ``Notification(task, "notifications/tasks/status", params)``
until a terminal status arrives.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from .._protocol._errors import ProtocolError, RequestError, RequestTimeout
from .._protocol._filters import TASK_STATUS
from .._protocol._host_checks import TERMINAL_TASK_STATES
from .._protocol._jsonrpc import INTERNAL_ERROR
from .._protocol._messages import NOTIFICATION, Notification
from .._protocol._peer_text import peer_text
from .._util._checks import check_timeout

_END = object()


class TaskClient(Protocol):
    """What a task uses of its client: raw requests."""

    def request(self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None) -> Any: ...


class Task:
    """A server-side task. Thread-safe.

    Attributes:
        task_id: the server's id for it.
    """

    def __init__(self, client: TaskClient, task: dict[str, Any], forget: Callable[[str], None] | None = None) -> None:
        task_id = task.get("taskId")
        if not isinstance(task_id, str) or not task_id:
            raise ProtocolError(f"the server's CreateTaskResult has no taskId string: {peer_text(task)}")
        self.task_id: str = task_id
        self._client = client
        self._lock = threading.Lock()
        self._info: dict[str, Any] = dict(task)
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ended = threading.Event()
        #: ``forget(task_id)``: the client stops routing statuses to this task once it ended.
        self._forget = forget

    def __repr__(self) -> str:
        return f"<Task {self.task_id} {self.status}>"

    @property
    def status(self) -> str:
        """``"working"``, ``"input_required"``, ``"completed"``, ``"failed"`` or ``"cancelled"`` (last known)."""
        with self._lock:
            return str(self._info.get("status", "working"))

    @property
    def info(self) -> dict[str, Any]:
        """The last known task object (``statusMessage``, ``pollInterval``, ``ttl``, ...)."""
        with self._lock:
            return dict(self._info)

    def _noted(self, info: dict[str, Any]) -> bool:
        """Take a newer task object; True if it changed the status."""
        with self._lock:
            if self._info.get("status") in TERMINAL_TASK_STATES:
                return False  # a terminal status is final
            changed = info.get("status") != self._info.get("status")
            self._info.update(info)
        return changed

    def _status_noted(self, params: dict[str, Any]) -> None:
        """A ``notifications/tasks/status`` for this task (or a ``tasks/get`` answer)."""
        if self._noted(params):
            self._inbox.put(Notification(NOTIFICATION, self, TASK_STATUS, params))
        if params.get("status") in TERMINAL_TASK_STATES:
            self._end()

    def _end(self) -> None:
        """No more statuses: a terminal one came, or the client closed."""
        if not self._ended.is_set():
            self._ended.set()
            self._inbox.put(_END)
            if self._forget is not None:
                self._forget(self.task_id)

    def refresh(self, *, timeout: float | None = None) -> str:
        """``tasks/get``: the current status (also updates :attr:`status`)."""
        answer = self._client.request("tasks/get", {"taskId": self.task_id}, timeout=timeout)
        if isinstance(answer, dict) and isinstance(answer.get("status"), str):
            self._status_noted({**answer, "taskId": self.task_id})
        return self.status

    def result(self, timeout: float | None = None) -> Any:
        """Block until the task is terminal; return its CallToolResult dict.

        Raises:
            RequestError: the task failed (or the server answered ``tasks/result`` with an error).
            RequestTimeout: not terminal within ``timeout`` seconds (None: wait as long as it takes).
        """
        deadline = None if timeout is None else time.monotonic() + check_timeout("timeout", timeout)
        while True:
            wait = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            try:
                answer = self._client.request("tasks/result", {"taskId": self.task_id}, timeout=wait)
                break
            except RequestTimeout:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
        if self.status not in TERMINAL_TASK_STATES:
            self.refresh(timeout=None if deadline is None else max(deadline - time.monotonic(), 0.001))
        if self.status == "failed":
            message = self.info.get("statusMessage") or f"task {self.task_id} failed"
            raise RequestError(INTERNAL_ERROR, str(message), data=answer)
        return answer

    def cancel(self, *, timeout: float | None = None) -> None:
        """``tasks/cancel``."""
        answer = self._client.request("tasks/cancel", {"taskId": self.task_id}, timeout=timeout)
        if isinstance(answer, dict) and isinstance(answer.get("status"), str):
            self._status_noted({**answer, "taskId": self.task_id})

    def get(self, timeout: float | None = None) -> Notification:
        """The next status notification; ``queue.Empty`` on timeout or once the task has ended."""
        item = self._inbox.get(timeout=timeout) if not self._ended.is_set() or not self._inbox.empty() else _END
        if item is _END:
            self._inbox.put(_END)
            raise queue.Empty
        assert isinstance(item, Notification)
        return item

    def __iter__(self) -> Iterator[Notification]:
        while True:
            try:
                yield self.get()
            except queue.Empty:
                return
