"""Driving a :class:`~exmcp_actors.Call` from its first round to its outcome.

Every request the host makes (``submit``, ``submit_tool`` and the blocking forms, which
wait on the same future) goes through :meth:`SubmitCalls._start`. The first round is sent
from the calling thread, so what one thread asks for reaches the wire in the order it
asked; each answer is handed to the call pool, where :meth:`SubmitCalls._answered` decides
the outcome: settle, re-issue a lost request (2026-07-28), answer an ``input_required``
round, or re-list the tools after a header mismatch. The last two run host handlers or a
listing, which may block, so they run on a thread of their own, never on the pool.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pykka

from .._protocol._errors import Error, OutcomeUnknown, ProtocolError, RequestError
from .._protocol._events import CancelRequest, SendRequest
from .._protocol._host_checks import MAX_INPUT_ROUNDS, created_task, misplaced_task
from .._protocol._jsonrpc import HEADER_MISMATCH, RequestBuilder
from .._protocol._peer_text import peer_text
from .._protocol._reissue import MAX_REISSUES, describe_call, why_not_reissued
from .._protocol._result_schema import check_tool_result
from .._runtime._host_pool import HostRuntime, TaskFeed
from .._runtime._monitor import SessionMonitor
from .._util._checks import check_timeout
from .._util._reply import HookedReply
from .._util._tracing import with_trace
from ._call import Budget, Call
from ._lists import ListCalls
from ._task import Task
from ._url_elicit import go_through, needs_url_elicitation, retry_failed

if TYPE_CHECKING:
    from .._runtime._shared import SharedState

#: Most seconds a command waits to enter the session: its holders run only short steps that
#: never block, so only a bug of the library makes a command wait that long.
COMMAND_WAIT = 10.0
#: How long a finished call waits for its progress callback to take what already arrived.
PROGRESS_DRAIN_WAIT = 5.0
_progress_tokens = itertools.count(1)
logger = logging.getLogger("exmcp_actors")
Progress = Callable[[dict[str, Any]], Any]


def _ignore(params: dict[str, Any]) -> None:
    """The progress callback of a call that restarts its timeout on progress and wants none."""


@dataclass(eq=False)
class Drive:
    """Where one call stands: its params now, and what it may still do."""

    method: str
    base: dict[str, Any] | None
    #: ``input_required`` rounds are answered, and a misplaced task refused (not for raw requests).
    interactive: bool
    task: bool | dict[str, Any] = False
    modern_meta: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    reissued: int = 0
    rounds: int = 0
    relisted: bool = False
    #: The URL elicitations of a -32042 were gone through: the request is retried only once.
    elicited: bool = False
    feed: Any = None
    token: str | None = None
    #: The tool whose ``outputSchema`` the result is checked against (``validate``), if any.
    checked_tool: str | None = None


class SubmitCalls(ListCalls):
    """Requests as futures (the blocking forms in ``_calls`` wait on them)."""

    _ref: pykka.ActorRef[Any]
    _monitor: SessionMonitor
    _shared: SharedState
    _ids: RequestBuilder
    _request_timeout: float
    _host: HostRuntime
    name: str

    @property
    def era(self) -> str | None:
        raise NotImplementedError

    def _run(self, message: Any, timeout: float | None = None) -> Any:
        """Run a command on the session from this thread (see ``exmcp_actors._runtime``): its
        frames are on the transport, in order, when this returns."""
        return self._monitor.run(message, COMMAND_WAIT if timeout is None else min(timeout, COMMAND_WAIT))

    def _cancel_on_wire(self, request_id: Any, reason: str) -> None:
        self._run(CancelRequest(request_id, reason))

    def _start(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        timeout: float | None,
        interactive: bool,
        progress: Progress | None = None,
        reset: bool = False,
        max_total: float | None = None,
        task: bool | dict[str, Any] = False,
        modern_meta: dict[str, Any] | None = None,
        checked_tool: str | None = None,
    ) -> Call:
        """Make the call's future, arm its budget and send its first round from this thread."""
        if progress is not None and not callable(progress):
            raise TypeError(f"progress must be a callable fn(params), got {type(progress).__name__}")
        if not isinstance(reset, bool):
            raise TypeError(f"reset_timeout_on_progress must be a bool, got {type(reset).__name__}")
        wait = self._request_timeout if timeout is None else check_timeout("timeout", timeout)
        total = None if max_total is None else check_timeout("max_total_timeout", max_total)
        call = Call(method, self._host.call_pool, self._cancel_on_wire, Budget(wait, reset, total))
        # The host's OpenTelemetry span is current here, on its thread: every round carries it.
        params = with_trace(params)
        drive = Drive(method, params, interactive, task, modern_meta, checked_tool=checked_tool)
        if progress is not None or reset:
            drive.token = f"progress-{next(_progress_tokens)}"
            params = dict(params or {})
            meta = dict(params.get("_meta") or {})
            meta["progressToken"] = drive.token
            drive.base = params = {**params, "_meta": meta}
            drive.feed = self._host.watch_progress(drive.token, progress or _ignore, call._progressed)
            token = drive.token
            call._cleanup.append(lambda: self._host.feeds.pop(token))
        drive.params = params
        call._arm()
        self._send_round(call, drive)
        return call

    def _send_round(self, call: Call, drive: Drive) -> None:
        request_id = self._ids.next_id()

        def on_answer(value: Any, error: BaseException | None) -> None:
            if error is None and self._settles_at_once(drive, value):
                self._answered(call, drive, value, None)  # wakes the waiting host thread directly
                return
            if not self._host.call_pool.submit(lambda: self._answered(call, drive, value, error)):
                self._answered(call, drive, value, error)  # the pool closed with the client

        if not call._round_sent(request_id):
            return  # settled (cancelled, expired) before this round went out
        try:
            # Settled on the reader's or the actor's thread: at once when nothing of the outcome may
            # block (_settles_at_once), else handed to the call pool.
            reply = HookedReply(on_answer)
            self._run(SendRequest(request_id, drive.method, drive.params, reply), call._remaining())
        except BaseException as failed:
            # A Ctrl-C (or a session that would not take the command) must leave no pending entry behind.
            call._cancel_quietly(request_id, "interrupted" if isinstance(failed, KeyboardInterrupt) else "failed")
            if not isinstance(failed, Exception):
                if call._claim():  # nothing more can come: waiters wake
                    Future.cancel(call)
                raise
            call._finish(error=failed)
            return
        if not call._open and not reply.done():  # settled while it was being sent, and not by its answer
            call._cancel_quietly(request_id, "cancelled")

    def _answered(self, call: Call, drive: Drive, value: Any, error: BaseException | None) -> None:
        """One round's answer, on the call pool (or where it arrived, see _settles_at_once): the
        call's one outcome function."""
        if not call._open:
            return
        try:
            if error is not None:
                self._round_failed(call, drive, error)
            elif drive.interactive and isinstance(value, dict) and value.get("resultType") == "input_required":
                if drive.rounds >= MAX_INPUT_ROUNDS:
                    raise ProtocolError(f"{drive.method} asked for input more than {MAX_INPUT_ROUNDS} times")
                drive.rounds += 1
                call.input_rounds = drive.rounds
                self._off_pool(call, drive, lambda: self._answer_round(call, drive, value))
            elif drive.checked_tool is not None and self._needs_lookup(drive.checked_tool, value):
                tool = drive.checked_tool  # the listing blocks: off the pool, within the call's budget
                self._off_pool(call, drive, lambda: self._look_up_and_settle(call, drive, tool, value))
            else:
                outcome = self._outcome(drive, value)
                if drive.checked_tool is not None and not isinstance(outcome, Task):
                    outcome = self._checked_result(drive.checked_tool, outcome, call._remaining())
                self._settle(call, drive, outcome)
        except Exception as failed:
            self._settle(call, drive, error=failed)

    def _outcome(self, drive: Drive, result: Any) -> Any:
        if not drive.interactive:
            return result
        why = misplaced_task(drive.method, result)
        if why is not None:
            raise ProtocolError(f"{why}: {peer_text(result)}")
        created = created_task(result) if drive.task is not False else None
        if created is None:
            return result
        tool = drive.checked_tool
        handle = Task(
            self,
            created,
            self._host.tasks.pop,
            modern_meta=drive.modern_meta,
            answer=lambda requests: self._answer_inputs("tasks/get", requests),
            check=None if tool is None else (lambda outcome: self._checked_result(tool, outcome, None)),
        )
        self._host.adopt_task(handle.task_id, TaskFeed(handle._status_noted, handle._end))
        return handle

    def _settles_at_once(self, drive: Drive, value: Any) -> bool:
        """An answer whose outcome takes nothing that may block or run long (a progress drain,
        an ``input_required`` round, a task, a schema check): settled on the thread that got it."""
        if drive.token is not None or drive.task is not False:
            return False
        if drive.interactive and isinstance(value, dict) and value.get("resultType") == "input_required":
            return False
        if drive.checked_tool is None:
            return True
        tools = self._shared.tools
        return (
            tools is not None and tools.listed(drive.checked_tool) and tools.output_schema(drive.checked_tool) is None
        )

    def _needs_lookup(self, name: str, result: Any) -> bool:
        """A result to check of a tool no listing named yet (not a task, which is checked in
        ``Task.result()``): the tools are listed first."""
        return self._unlisted_structured(name, result) and created_task(result) is None

    def _unlisted_structured(self, name: str, result: Any) -> bool:
        tools = self._shared.tools
        return (
            tools is not None and not tools.listed(name) and isinstance(result, dict) and "structuredContent" in result
        )

    def _look_up_and_settle(self, call: Call, drive: Drive, name: str, result: Any) -> None:
        """The call succeeded: a listing that takes the rest of its budget leaves the result
        unchecked rather than expiring it, so the expiry is this step's until it settles."""
        call._own_expiry(True)
        self._settle(call, drive, self._checked_result(name, self._outcome(drive, result), call._remaining()))

    def _checked_result(self, name: str, result: Any, timeout: float | None) -> Any:
        """``result`` of tool ``name``, checked (see :func:`check_tool_result`); a tool no listing
        named, answering ``structuredContent``, is looked up first (``ToolBook.look_up``)."""
        tools = self._shared.tools
        if tools is None:
            return result
        if self._unlisted_structured(name, result):
            wait = self._request_timeout if timeout is None else timeout
            tools.look_up(name, wait, lambda: self._list_for_check(name, wait))
        check_tool_result(name, result, tools.output_schema(name))
        return result

    def _list_for_check(self, name: str, wait: float) -> None:
        try:
            self.list_tools(timeout=wait)
        except Error as failed:  # the call itself succeeded: its result goes back unchecked
            logger.info("%s: tools/list for checking %s failed: %s", self.name, peer_text(name, quote=True), failed)

    def _settle(self, call: Call, drive: Drive, value: Any = None, error: BaseException | None = None) -> None:
        if drive.token is not None:
            self._host.feeds.pop(drive.token)
            drive.feed.wait_drained(PROGRESS_DRAIN_WAIT)  # what arrived before the answer is passed first
        call._finish(value, error)

    def _round_failed(self, call: Call, drive: Drive, error: BaseException) -> None:
        """A lost answer is re-issued when safe; a refused ``Mcp-Param-*`` header (-32020) gets
        the tool re-listed and the call once more, as the spec advises; else the error stands."""
        if isinstance(error, OutcomeUnknown):
            why_not = self._why_not_reissued(drive, call._budget.deadline())
            if why_not is not None:
                raise OutcomeUnknown(
                    error.what,
                    status=error.status,
                    body=error.body,
                    request=describe_call(drive.method, drive.params),
                    reissued=drive.reissued,
                    why_not=why_not,
                ) from None
            drive.reissued += 1
            logger.info("%s: %s lost its answer (%s); re-issuing it", self.name, drive.method, error.what)
            self._send_round(call, drive)
            return
        if isinstance(error, RequestError) and needs_url_elicitation(error, self._host):
            if drive.elicited:
                raise retry_failed(error)
            drive.elicited = True
            self._off_pool(call, drive, lambda: self._elicit_and_retry(call, drive, error))
            return
        if (
            drive.method == "tools/call"
            and isinstance(error, RequestError)
            and error.code == HEADER_MISMATCH
            and self.era == "modern"
            and not drive.relisted
        ):
            drive.relisted = True
            self._off_pool(call, drive, lambda: self._relist_and_retry(call, drive, error))
            return
        raise error

    def _why_not_reissued(self, drive: Drive, deadline: float) -> str | None:
        if self.era != "modern":
            return "re-issuing is for MCP 2026-07-28, which resumes no stream"
        if drive.reissued >= MAX_REISSUES:
            return f"it was re-issued {MAX_REISSUES} times already"
        if time.monotonic() >= deadline:
            return "its timeout ran out"
        tools = self._shared.tools
        return why_not_reissued(
            drive.method, drive.params, tools.idempotent if tools is not None else lambda name: False
        )

    def _relist_and_retry(self, call: Call, drive: Drive, mismatch: RequestError) -> None:
        call._own_expiry(True)  # a re-listing out of time reports the mismatch, not a bare timeout
        try:  # the re-listing is part of this call: within its one timeout
            self._paginate("tools/list", None, False, deadline=call._budget.deadline())
        except Error as relist_failed:
            raise mismatch from relist_failed
        finally:
            call._own_expiry(False)
        self._send_round(call, drive)

    def _elicit_and_retry(self, call: Call, drive: Drive, required: RequestError) -> None:
        call._own_expiry(True)  # the handler's time is the person's, not the server's
        try:
            go_through(required, self._host)
        finally:
            call._budget.restart()  # so the retry gets the whole timeout again
            call._own_expiry(False)
        logger.info("%s: %s: the URL elicitations were accepted; retrying it once", self.name, drive.method)
        self._send_round(call, drive)

    def _answer_round(self, call: Call, drive: Drive, result: dict[str, Any]) -> None:
        """Answer a 2026-07-28 ``input_required`` round's embedded requests with the host's
        handlers and send the retry with ``inputResponses`` and ``requestState``."""
        base = drive.base or {}
        retry = {key: value for key, value in base.items() if key not in ("inputResponses", "requestState")}
        requests = result.get("inputRequests")
        if isinstance(requests, dict) and requests:
            retry["inputResponses"] = self._answer_inputs(drive.method, requests)
        if "requestState" in result:
            retry["requestState"] = result["requestState"]
        drive.params = retry
        self._send_round(call, drive)

    def _off_pool(self, call: Call, drive: Drive, job: Callable[[], None]) -> None:
        """Run a step that may block (a host handler, a listing) on a thread of its own."""

        def run() -> None:
            try:
                job()
            except Exception as failed:
                self._settle(call, drive, error=failed)

        threading.Thread(target=run, name=f"exmcp-calls-{self.name}-step", daemon=True).start()

    def _answer_inputs(self, method: str, requests: dict[str, Any]) -> dict[str, Any]:
        responses: dict[str, Any] = {}
        for key, request in requests.items():
            inner = request.get("method") if isinstance(request, dict) else None
            params = request.get("params") if isinstance(request, dict) else None
            answer, why = self._host.answer_now(str(inner), params)
            if why is not None:
                raise Error(
                    f"{method}: the server's input request {peer_text(key, quote=True)} could not be answered: {why}",
                    reason=("input_required_failed", key, why),
                )
            responses[key] = answer
        return responses

    @staticmethod
    def _wait(call: Call) -> Any:
        """The blocking form: the call's outcome; a Ctrl-C cancels it on the wire first. The
        wait has a bound of its own past the call's deadline, should the timer not fire (no
        timer thread may start while the interpreter exits: see ``_util/_threads``)."""
        try:
            while True:
                try:
                    return call.result(timeout=call._wait_bound())
                except TimeoutError:
                    if call.done():
                        raise  # the call's own outcome
                    call._due()  # what the timer would have done
        except KeyboardInterrupt:
            call._abandon("interrupted", None)
            raise
