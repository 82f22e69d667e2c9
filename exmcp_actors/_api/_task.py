"""``mcp.Task``: a tool call the server runs as a task, in either era's shape.

``client.call_tool(name, arguments, task=True)`` returns one when the server made a task.

* MCP 2025-11-25 (the tasks utility): the status follows ``notifications/tasks/status``
  and ``tasks/get`` answers; :meth:`Task.result` blocks in ``tasks/result``. The server
  need not push statuses (a requestor MUST NOT rely on them), so waiting for the next one
  polls ``tasks/get`` at the task's ``pollInterval``, while the server answers it.
* MCP 2026-07-28 (the ``io.modelcontextprotocol/tasks`` extension, SEP-2663): there is no
  ``tasks/result`` and nothing is pushed unless a ``listen()`` names the task: the handle
  polls ``tasks/get`` (honouring ``pollIntervalMs``), whose answer inlines the result or
  the error, answers the ``inputRequests`` of an ``input_required`` task with the host's
  handlers through ``tasks/update``, and takes ``notifications/tasks`` from listens.

Iterating a task yields each status change as ``Notification(task, method, params)`` (the
era's method) until a terminal status arrives.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from .._protocol._errors import Error, ProtocolError, RequestError, RequestTimeout
from .._protocol._filters import TASK_NOTIFICATION, TASK_STATUS
from .._protocol._host_checks import MAX_INPUT_ROUNDS, TERMINAL_TASK_STATES
from .._protocol._jsonrpc import INTERNAL_ERROR
from .._protocol._messages import NOTIFICATION, Notification
from .._protocol._peer_text import peer_text
from .._util._checks import check_timeout

_END = object()
#: How often a 2026-07-28 task is polled when the server suggests no ``pollIntervalMs``.
DEFAULT_POLL_INTERVAL = 0.5
#: The shortest poll interval taken from a server (one asking 0 would make a busy loop).
MIN_POLL_INTERVAL = 0.01
#: The longest: a task still polls now and then, whatever interval (up to infinity) a server asks.
MAX_POLL_INTERVAL = 60.0
#: How many characters of the server's task id the texts of a task quote.
_SHOWN_ID = 100
#: Fields of an answer that describe the answer, not the task.
_ANSWER_ONLY = ("resultType",)
#: Fields only a ``tasks/get`` answer (or a pushed status) may carry.
_POLL_ONLY = ("result", "error", "inputRequests")


class TaskClient(Protocol):
    """What a task uses of its client: raw requests."""

    def request(self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None) -> Any: ...


#: ``answer(requests)``: the host's responses to a 2026-07-28 task's ``inputRequests``.
InputAnswerer = Callable[[dict[str, Any]], dict[str, Any]]


class Task:
    """A server-side task. Thread-safe.

    Attributes:
        task_id: the server's id for it.
    """

    def __init__(
        self,
        client: TaskClient,
        task: dict[str, Any],
        forget: Callable[[str], None] | None = None,
        *,
        modern_meta: dict[str, Any] | None = None,
        answer: InputAnswerer | None = None,
        check: Callable[[Any], Any] | None = None,
    ) -> None:
        task_id = task.get("taskId")
        if not isinstance(task_id, str) or not task_id:
            raise ProtocolError(f"the server's CreateTaskResult has no taskId string: {peer_text(task)}")
        self.task_id: str = task_id
        self._client = client
        #: 2026-07-28: the ``_meta`` every ``tasks/*`` request carries (it declares the extension).
        self._modern_meta = modern_meta
        self._answer = answer
        #: ``check(result) -> result``: the call's check of its outcome (``_result_schema``).
        self._check = check
        self._method = TASK_STATUS if modern_meta is None else TASK_NOTIFICATION
        self._lock = threading.Lock()
        # A CreateTaskResult's result, error or inputRequests MUST NOT be used (SEP-2663).
        self._info: dict[str, Any] = {k: v for k, v in _task_fields(task).items() if k not in _POLL_ONLY}
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ended = threading.Event()
        #: Notified whenever a status is noted or the task ends (a poll waits on it).
        self._arrived = threading.Condition()
        #: ``inputRequests`` keys given to the host already (answered, or being answered).
        self._answered: set[str] = set()
        #: Rounds of ``inputRequests`` given to the host: bounded, as a call's rounds are.
        self._input_rounds = 0
        #: The task id as the texts of this task show it (the server chose it: escaped, bounded).
        self._shown = peer_text(task_id, _SHOWN_ID)
        #: ``forget(task_id)``: the client stops routing statuses to this task once it ended.
        self._forget = forget
        #: 2025-11-25: ``tasks/get`` failed once (a server without it, a closed client): from
        #: then on waiting takes only the pushed statuses.
        self._polls_failed = False

    def __repr__(self) -> str:
        return f"<Task {self._shown} {peer_text(self.status, 40)}>"

    @property
    def status(self) -> str:
        """``"working"``, ``"input_required"``, ``"completed"``, ``"failed"`` or ``"cancelled"`` (last known)."""
        with self._lock:
            return str(self._info.get("status", "working"))

    @property
    def info(self) -> dict[str, Any]:
        """The last known task object (``statusMessage``, ``pollInterval`` or ``pollIntervalMs``, ...)."""
        with self._lock:
            return dict(self._info)

    def _status_noted(self, params: dict[str, Any]) -> None:
        """A status notification for this task (or a ``tasks/get`` answer, or a push: the two
        may come at once, from a polling host thread and the client's)."""
        fields = _task_fields(params)
        with self._lock:
            # Taken and queued in one step, so the statuses queue in the order they were taken,
            # and none behind the end (a terminal status is final).
            if self._info.get("status") not in TERMINAL_TASK_STATES:
                changed = fields.get("status") != self._info.get("status")
                self._info.update(fields)
                if changed and not self._ended.is_set():
                    self._inbox.put(Notification(NOTIFICATION, self, self._method, fields))
        if params.get("status") in TERMINAL_TASK_STATES:
            self._end()
        with self._arrived:
            self._arrived.notify_all()

    def _end(self) -> None:
        """No more statuses: a terminal one came, or the client closed."""
        with self._lock:
            first = not self._ended.is_set()
            if first:
                self._ended.set()
                self._inbox.put(_END)
        if first and self._forget is not None:
            self._forget(self.task_id)
        with self._arrived:
            self._arrived.notify_all()

    def _ask(self, method: str, timeout: float | None, extra: dict[str, Any] | None = None) -> Any:
        params: dict[str, Any] = {"taskId": self.task_id, **(extra or {})}
        if self._modern_meta is not None:
            params["_meta"] = dict(self._modern_meta)
        return self._client.request(method, params, timeout=timeout)

    def refresh(self, *, timeout: float | None = None) -> str:
        """``tasks/get``: the current status (also updates :attr:`status`). On 2026-07-28, the
        ``inputRequests`` of an ``input_required`` task are answered here too."""
        answer = self._ask("tasks/get", timeout)
        if isinstance(answer, dict) and isinstance(answer.get("status"), str):
            self._status_noted({**answer, "taskId": self.task_id})
            if self._modern_meta is not None and answer["status"] == "input_required":
                self._give_input(answer.get("inputRequests"), timeout)
        return self.status

    def _give_input(self, requests: Any, timeout: float | None) -> None:
        """Answer the input requests the host has not seen yet, with one ``tasks/update``."""
        if not isinstance(requests, dict) or self._answer is None:
            return
        with self._lock:
            fresh = {key: value for key, value in requests.items() if key not in self._answered}
            if not fresh:
                return
            if self._input_rounds >= MAX_INPUT_ROUNDS:  # each round may ask a person something
                raise ProtocolError(f"task {self._shown} asked for input more than {MAX_INPUT_ROUNDS} times")
            self._input_rounds += 1
            self._answered.update(fresh)
        try:
            responses = self._answer(fresh)
        except BaseException:
            with self._lock:
                self._answered.difference_update(fresh)  # a later poll may try them again
                self._input_rounds -= 1
            raise
        self._ask("tasks/update", timeout, {"inputResponses": responses})

    def result(self, timeout: float | None = None) -> Any:
        """Block until the task is terminal; return its CallToolResult dict.

        Raises:
            RequestError: the task failed or was cancelled (or the server answered with an error).
            RequestTimeout: not terminal within ``timeout`` seconds (None: wait as long as it takes).
            InvalidToolResult: the result breaks the tool's ``outputSchema`` (unless the call
                had ``validate=False``).
        """
        deadline = None if timeout is None else time.monotonic() + check_timeout("timeout", timeout)
        outcome = self._polled_result(deadline) if self._modern_meta is not None else self._fetched_result(deadline)
        return outcome if self._check is None else self._check(outcome)

    def _fetched_result(self, deadline: float | None) -> Any:
        """2025-11-25: ``tasks/result`` blocks until terminal, and answers the outcome."""
        while True:
            wait = _left(deadline)
            try:
                answer = self._client.request("tasks/result", {"taskId": self.task_id}, timeout=wait)
                break
            except RequestTimeout:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
        if self.status not in TERMINAL_TASK_STATES:
            self.refresh(timeout=_left(deadline))
        if self.status == "failed":
            message = self.info.get("statusMessage") or f"task {self._shown} failed"
            raise RequestError(INTERNAL_ERROR, str(message), data=answer)
        return answer

    def _polled_result(self, deadline: float | None) -> Any:
        """2026-07-28: poll ``tasks/get`` until terminal; the answer inlines the outcome."""
        while self.status not in TERMINAL_TASK_STATES:
            self.refresh(timeout=_left(deadline))
            if self.status not in TERMINAL_TASK_STATES:
                self._wait_for_news(deadline, lambda: self.status in TERMINAL_TASK_STATES or self._input_pushed())
        info = self.info
        if info["status"] == "completed":
            outcome = info.get("result")
            if not isinstance(outcome, dict):  # a pushed status may leave it out; tasks/get must not
                again = self._ask("tasks/get", _left(deadline))
                outcome = again.get("result") if isinstance(again, dict) else None
            if not isinstance(outcome, dict):
                raise ProtocolError(f"task {self._shown} completed without a result object: {peer_text(info)}")
            return outcome
        error = info.get("error")
        if info["status"] == "failed" and isinstance(error, dict) and isinstance(error.get("code"), int):
            raise RequestError(error["code"], str(error.get("message", "")), data=error.get("data"))
        message = info.get("statusMessage") or f"task {self._shown} was {peer_text(info['status'], 40)}"
        raise RequestError(INTERNAL_ERROR, str(message), data=info)

    def _input_pushed(self) -> bool:
        """A pushed ``input_required`` status names input requests the host has not seen: the
        client SHOULD answer them now (through a poll: the host's handlers run on its thread),
        not at the next poll, which may be long in coming."""
        with self._lock:
            info, answered = self._info, self._answered
            requests = info.get("inputRequests") if info.get("status") == "input_required" else None
            return self._answer is not None and isinstance(requests, dict) and any(k not in answered for k in requests)

    def _wait_for_news(self, deadline: float | None, done: Callable[[], bool]) -> None:
        """Wait one poll interval, or less if ``done()`` turns true (a pushed status);
        RequestTimeout once the deadline has passed (no poll is sent that has no time left)."""
        left = _left(deadline)
        if left is not None and left <= 0.001:
            raise RequestTimeout(f"task {self._shown} is still {peer_text(self.status, 40)}")
        info = self.info
        wait = poll_wait(info.get("pollIntervalMs", info.get("pollInterval")))  # 2026-07-28, 2025-11-25
        with self._arrived:
            news = self._arrived.wait_for(
                lambda: done() or self._ended.is_set(), wait if left is None else min(wait, left)
            )
        if not news and deadline is not None and time.monotonic() >= deadline:
            raise RequestTimeout(f"task {self._shown} is still {peer_text(self.status, 40)}")

    def cancel(self, *, timeout: float | None = None) -> None:
        """``tasks/cancel``."""
        answer = self._ask("tasks/cancel", timeout)
        if isinstance(answer, dict) and isinstance(answer.get("status"), str):
            self._status_noted({**answer, "taskId": self.task_id})

    def get(self, timeout: float | None = None) -> Notification:
        """The next status notification; ``queue.Empty`` on timeout or once the task has ended.
        Waiting polls ``tasks/get``: on 2026-07-28 nothing else may report the task, and on
        2025-11-25 the server need not push its statuses."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._polls_failed:
            try:
                while not self._ended.is_set():
                    # Seeing a status and taking it are one step: another thread reading this
                    # task may take the one seen, and this read then polls on.
                    try:
                        item = self._inbox.get(block=False)
                    except queue.Empty:
                        pass
                    else:
                        return self._notification(item)
                    self.refresh(timeout=_left(deadline))
                    if self._inbox.empty():
                        self._wait_for_news(deadline, lambda: not self._inbox.empty())
            except RequestTimeout:
                raise queue.Empty from None
            except Error:
                if self._modern_meta is not None:
                    raise
                self._polls_failed = True  # the pushed statuses, if any, are all there is
        # Once ended, _END stays queued behind the last statuses (each reader puts it back).
        return self._notification(self._inbox.get(timeout=_left(deadline)))

    def _notification(self, item: Any) -> Notification:
        """A taken item as :meth:`get` returns it: ``queue.Empty`` for the end (put back for
        every other reader)."""
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


def poll_wait(interval_ms: Any) -> float:
    """Seconds until the next poll: a server's ``pollIntervalMs`` between the shortest and the
    longest interval taken; the default for anything that is no number (NaN included)."""
    if isinstance(interval_ms, bool) or not isinstance(interval_ms, int | float):
        return DEFAULT_POLL_INTERVAL
    if isinstance(interval_ms, float) and math.isnan(interval_ms):
        return DEFAULT_POLL_INTERVAL
    # Compared before dividing: an integer of hundreds of digits is no float.
    return min(max(interval_ms, MIN_POLL_INTERVAL * 1000), MAX_POLL_INTERVAL * 1000) / 1000.0


def _task_fields(answer: dict[str, Any]) -> dict[str, Any]:
    """The task object in an answer (``CreateTaskResult`` and ``tasks/get`` put it at the top)."""
    return {key: value for key, value in answer.items() if key not in _ANSWER_ONLY}


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - time.monotonic(), 0.001)
