"""What the client asks of the server: raw requests and the MCP request helpers.

:class:`ServerCalls` is a mixin of :class:`~exmcp_actors.Client`; it needs the
client's session monitor, request ids, default timeout and era. Every command runs its
input on the calling thread, through the monitor (``exmcp_actors._runtime``), so what
one thread asks for reaches the wire in the order it asked.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, NamedTuple

import pykka

from .._protocol._errors import (
    Error,
    NotConnected,
    OutcomeUnknown,
    ProtocolError,
    RequestError,
    RequestTimeout,
    UseListen,
)
from .._protocol._events import CancelRequest, SendRequest, SetLogLevel, SetRoots
from .._protocol._handshake import META_CLIENT_CAPABILITIES
from .._protocol._host_checks import (
    LOG_LEVELS,
    MAX_INPUT_ROUNDS,
    check_roots,
    created_task,
    misplaced_task,
    tasks_advertised,
    with_tasks_extension,
)
from .._protocol._jsonrpc import HEADER_MISMATCH, RequestBuilder
from .._protocol._peer_text import peer_text
from .._protocol._reissue import MAX_REISSUES, describe_call, why_not_reissued
from .._protocol._result_schema import check_tool_result
from .._runtime._host_pool import HostRuntime, TaskFeed
from .._runtime._monitor import SessionMonitor
from .._util._checks import check_timeout
from .._util._reply import Reply
from .._util._tracing import with_trace
from ._lists import ListCalls, Meta, check_meta, with_meta
from ._task import Task

if TYPE_CHECKING:
    from .._runtime._shared import SharedState

#: Most seconds a command waits to enter the session: its holders run only short steps that
#: never block, so only a bug of the library makes a command wait that long.
COMMAND_WAIT = 10.0
#: How long a finished call waits for its progress callback to take what already arrived.
PROGRESS_DRAIN_WAIT = 5.0
_progress_tokens = itertools.count(1)
logger = logging.getLogger("exmcp_actors")
#: ``send(params, timeout) -> result``: one round of a request (see ``_driving_input``).
Send = Callable[[dict[str, Any], float], Any]


class PendingRequest(NamedTuple):
    """A request sent and not yet awaited."""

    request_id: Any
    method: str
    future: Reply


class ServerCalls(ListCalls):
    """Requests to the server; every call blocks for at most its ``timeout`` (or the client's default)."""

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

    def request(self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None) -> Any:
        """Send a raw request and return its ``result``.

        On MCP 2026-07-28 a request whose answer was lost after it went out (its response
        stream dropped) is re-issued under a new id when that is safe (``_reissue``: the
        listings, ``server/discover``, ``resources/read``, ``prompts/get``, ``tasks/get``, an
        idempotent tool), at most twice, within ``timeout``.

        Raises:
            RequestError: the server answered with an error.
            RequestTimeout: no answer in time (``notifications/cancelled`` is sent).
            OutcomeUnknown: the answer was lost and the request was not (or no longer) re-issued:
                it may or may not have run on the server.
            NotConnected: the client is not ready, or the connection dropped meanwhile.
        """
        if not isinstance(method, str) or not method:
            raise TypeError(f"method must be a non-empty string, got {method!r}")
        if params is not None and not isinstance(params, dict):
            raise TypeError(f"params must be a dict or None, got {type(params).__name__}")
        wait = self._request_timeout if timeout is None else check_timeout("timeout", timeout)
        deadline = time.monotonic() + wait
        reissued = 0
        while True:
            try:
                return self._await_request(self._send_request(method, params), deadline - time.monotonic(), wait)
            except OutcomeUnknown as lost:
                why_not = self._why_not_reissued(method, params, reissued, deadline)
                if why_not is not None:
                    request = describe_call(method, params)
                    raise OutcomeUnknown(
                        lost.what,
                        status=lost.status,
                        body=lost.body,
                        request=request,
                        reissued=reissued,
                        why_not=why_not,
                    ) from None
                reissued += 1
                logger.info("%s: %s lost its answer (%s); re-issuing it", self.name, method, lost.what)

    def _why_not_reissued(
        self, method: str, params: dict[str, Any] | None, reissued: int, deadline: float
    ) -> str | None:
        if self.era != "modern":
            return "re-issuing is for MCP 2026-07-28, which resumes no stream"
        if reissued >= MAX_REISSUES:
            return f"it was re-issued {MAX_REISSUES} times already"
        if time.monotonic() >= deadline:
            return "its timeout ran out"
        tools = self._shared.tools
        return why_not_reissued(method, params, tools.idempotent if tools is not None else lambda name: False)

    def _run(self, message: Any, timeout: float | None = None) -> Any:
        """Run a command on the session from this thread (see ``exmcp_actors._runtime``): its
        frames are on the transport, in order, when this returns."""
        return self._monitor.run(message, COMMAND_WAIT if timeout is None else min(timeout, COMMAND_WAIT))

    def _send_request(self, method: str, params: dict[str, Any] | None, wait: float | None = None) -> PendingRequest:
        """Send a request without waiting: many can be in flight at once (see :meth:`_await_request`).
        A client that is not ready (or has stopped) fails the request through its future.
        ``wait``: seconds to wait for the session (at most COMMAND_WAIT), else RequestTimeout.
        The host's current OpenTelemetry span rides in ``_meta`` (``_tracing``): taken here,
        on the host's thread, where it is current."""
        request_id = self._ids.next_id()
        future = Reply()
        self._run(SendRequest(request_id, method, with_trace(params), future), wait)
        return PendingRequest(request_id, method, future)

    def _await_request(self, pending: PendingRequest, wait: float, timeout: float | None = None) -> Any:
        """The result of a sent request within ``wait`` seconds (what is left of the caller's
        ``timeout``); on timeout it is cancelled on the wire and RequestTimeout raised."""
        try:
            return pending.future.result(max(0.0, wait))
        except FutureTimeout:
            self._run(CancelRequest(pending.request_id, "timeout"))
            shown = wait if timeout is None else timeout
            raise RequestTimeout(f"{pending.method} got no answer within {shown:g}s") from None

    def _interactive(
        self,
        method: str,
        params: dict[str, Any],
        timeout: float | None,
        progress: Callable[[dict[str, Any]], Any] | None,
        send: Send | None = None,
    ) -> Any:
        """A request the server may answer with progress, or (2026-07-28) ``input_required``;
        ``send`` sends each round (default: :meth:`request`)."""
        if progress is None:
            return self._driving_input(method, params, timeout, send)
        if not callable(progress):
            raise TypeError(f"progress must be a callable fn(params), got {type(progress).__name__}")
        token = f"progress-{next(_progress_tokens)}"
        meta = dict(params.get("_meta") or {})
        meta["progressToken"] = token
        feed = self._host.watch_progress(token, progress)
        try:
            return self._driving_input(method, {**params, "_meta": meta}, timeout, send)
        finally:
            self._host.feeds.pop(token)
            feed.wait_drained(PROGRESS_DRAIN_WAIT)  # what arrived before the answer is passed first

    def _driving_input(self, method: str, params: dict[str, Any], timeout: float | None, send: Send | None) -> Any:
        """Send; while a 2026-07-28 server answers ``input_required``, answer its embedded
        requests with the host's handlers and retry with ``inputResponses`` and ``requestState``."""
        wait = self._request_timeout if timeout is None else check_timeout("timeout", timeout)
        deadline = time.monotonic() + wait
        if send is None:

            def send(round_params: dict[str, Any], round_wait: float) -> Any:
                return self.request(method, round_params, timeout=round_wait)

        result = send(params, wait)
        for _ in range(MAX_INPUT_ROUNDS):
            if not isinstance(result, dict) or result.get("resultType") != "input_required":
                why = misplaced_task(method, result)
                if why is not None:
                    raise ProtocolError(f"{why}: {peer_text(result)}")
                return result
            retry = {key: value for key, value in params.items() if key not in ("inputResponses", "requestState")}
            requests = result.get("inputRequests")
            if isinstance(requests, dict) and requests:
                retry["inputResponses"] = self._answer_inputs(method, requests)
            if "requestState" in result:
                retry["requestState"] = result["requestState"]
            result = send(retry, max(deadline - time.monotonic(), 0.001))
        raise ProtocolError(f"{method} asked for input more than {MAX_INPUT_ROUNDS} times")

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

    # -- MCP requests ----------------------------------------------------------------------

    def ping(self, *, timeout: float | None = None) -> None:
        """``ping`` (legacy peers only: 2026-07-28 has no ping)."""
        if self.era == "modern":
            raise Error("ping does not exist in MCP 2026-07-28", reason=("legacy_only", "ping"))
        self.request("ping", timeout=timeout)

    def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        progress: Callable[[dict[str, Any]], Any] | None = None,
        task: bool | dict[str, Any] = False,
        meta: Meta = None,
        validate: bool = True,
        timeout: float | None = None,
    ) -> Any:
        """``tools/call``; returns the result dict, or a :class:`Task` when the server made one.

        Args:
            progress: called with the params of each ``notifications/progress`` of this call,
                in order, off the client's threads (the client adds ``_meta.progressToken``).
                Progress does not extend ``timeout``.
            task: True (or ``{"ttl": ms}``, MCP 2025-11-25 only): let the server run the call as
                a task, when it says it can (2025-11-25: ``tasks.requests.tools.call`` and the
                tool's ``execution.taskSupport`` "optional" or "required", the tools listed
                first if this one was not; 2026-07-28: the ``io.modelcontextprotocol/tasks``
                extension); else the call runs plainly. A server that runs it at once answers
                the result dict, which is returned as is.
            meta: a mapping the request carries as its ``_meta`` (here and in every call
                that takes it), merged under the keys the library puts there itself, which
                win: ``progressToken`` when ``progress`` is given, and the 2026-07-28 envelope
                (``io.modelcontextprotocol/protocolVersion``, ``clientInfo``,
                ``clientCapabilities``), never taken from ``meta`` in either era.
            validate: check a result that is no error (a task's too, in ``Task.result()``)
                against the tool's ``outputSchema`` (``_result_schema``), the tools listed once
                first if this one was not and the result has ``structuredContent``; False takes
                the result unchecked.

        Raises:
            InvalidToolResult: the result breaks the tool's ``outputSchema``, or cannot be checked.
        """
        own_meta = check_meta(meta)
        if not isinstance(validate, bool):
            raise TypeError(f"validate must be True or False, got {validate!r}")
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty string, got {name!r}")
        if arguments is not None and not isinstance(arguments, dict):
            raise TypeError(f"arguments must be a dict or None, got {type(arguments).__name__}")
        if task is not False and task is not True and not isinstance(task, dict):
            raise TypeError(f"task must be True, False or a dict like {{'ttl': 60000}}, got {task!r}")
        params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
        modern = self.era == "modern"
        asks = task is not False and tasks_advertised(self._shared.server_capabilities, self.era)
        if asks and not modern:
            wait = self._request_timeout if timeout is None else check_timeout("timeout", timeout)
            deadline = time.monotonic() + wait
            asks = self._tool_runs_as_task(name, wait)
            timeout = max(deadline - time.monotonic(), 0.001)
        # Only a call that may become a task declares the extension (a plain call builds nothing).
        modern_meta = (
            {META_CLIENT_CAPABILITIES: with_tasks_extension(self._host.abilities.capabilities(), True)}
            if modern and task is not False
            else None
        )
        if asks and modern_meta is not None:  # 2026-07-28: the server decides; declaring the extension lets it
            params["_meta"] = modern_meta
        elif asks:
            params["task"] = dict(task) if isinstance(task, dict) else {}
        params = with_meta(params, own_meta)
        # A lookup the check makes (an unlisted tool) spends what is left of this one timeout.
        deadline = time.monotonic() + (self._request_timeout if timeout is None else check_timeout("timeout", timeout))
        result = self._interactive("tools/call", params, timeout, progress, self._calling_tool)
        created = created_task(result) if task is not False else None
        if created is None:
            return self._checked_result(name, result, max(deadline - time.monotonic(), 0.001)) if validate else result
        handle = Task(
            self,
            created,
            self._host.tasks.pop,
            modern_meta=modern_meta,
            answer=lambda requests: self._answer_inputs("tasks/get", requests),
            check=(lambda outcome: self._checked_result(name, outcome, None)) if validate else None,
        )
        self._host.adopt_task(handle.task_id, TaskFeed(handle._status_noted, handle._end))
        return handle

    def _checked_result(self, name: str, result: Any, timeout: float | None) -> Any:
        """``result`` of tool ``name``, checked (see :func:`check_tool_result`); a tool no listing
        named, answering ``structuredContent``, is looked up first (``ToolBook.look_up``)."""
        tools = self._shared.tools
        if tools is None:
            return result
        if not tools.listed(name) and isinstance(result, dict) and "structuredContent" in result:
            wait = self._request_timeout if timeout is None else timeout
            tools.look_up(name, wait, lambda: self._list_for_check(name, wait))
        check_tool_result(name, result, tools.output_schema(name))
        return result

    def _list_for_check(self, name: str, wait: float) -> None:
        try:
            self.list_tools(timeout=wait)
        except Error as failed:  # the call itself succeeded: its result goes back unchecked
            logger.info("%s: tools/list for checking %s failed: %s", self.name, peer_text(name, quote=True), failed)

    def _tool_runs_as_task(self, name: str, wait: float) -> bool:
        """2025-11-25: whether the tool's listing lets it run as a task (``execution.taskSupport``
        "optional" or "required"; where it is absent or "forbidden" a client MUST NOT ask). A
        tool no listing named yet is looked up with one ``list_tools()``; a server that refuses
        the listing gets a plain call."""
        tools = self._shared.tools
        if tools is None:
            return False
        allowed = tools.runs_as_task(name)
        if allowed is None:
            try:
                self.list_tools(timeout=wait)
            except RequestError:
                return False
            allowed = tools.runs_as_task(name)
        return allowed is True

    def _calling_tool(self, params: dict[str, Any], wait: float) -> Any:
        """One round of a ``tools/call``. A 2026-07-28 server that refuses its ``Mcp-Param-*``
        headers (-32020, HeaderMismatch: the tool was never listed, or its schema changed)
        gets it once more after the tool is re-listed, as the spec advises."""
        deadline = time.monotonic() + wait
        try:
            return self.request("tools/call", params, timeout=wait)
        except RequestError as mismatch:
            if mismatch.code != HEADER_MISMATCH or self.era != "modern":
                raise
            try:  # the re-listing is part of this call: within its one timeout
                self._paginate("tools/list", None, False, deadline=deadline)
            except Error as relist_failed:
                raise mismatch from relist_failed
            return self.request("tools/call", params, timeout=max(deadline - time.monotonic(), 0.001))

    def read_resource(self, uri: str, *, meta: Meta = None, timeout: float | None = None) -> Any:
        """``resources/read``; returns the result dict (``meta`` as for :meth:`call_tool`)."""
        return self._interactive("resources/read", with_meta({"uri": uri}, check_meta(meta)), timeout, None)

    def complete(
        self,
        ref: dict[str, Any],
        argument: dict[str, Any],
        context: dict[str, Any] | None = None,
        *,
        meta: Meta = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """``completion/complete``; returns the ``completion`` dict (``values``, ``total``, ``hasMore``).

        Args:
            ref: ``{"type": "ref/prompt", "name": ...}`` or ``{"type": "ref/resource", "uri": ...}``.
            argument: ``{"name": ..., "value": ...}``.
            context: ``{"arguments": {...}}``, values already chosen.
            meta: as for :meth:`call_tool`.
        """
        own_meta = check_meta(meta)
        if not isinstance(ref, dict) or not isinstance(ref.get("type"), str):
            raise TypeError(f"ref must be a dict with a 'type' (ref/prompt or ref/resource), got {ref!r}")
        if not isinstance(argument, dict) or not isinstance(argument.get("name"), str):
            raise TypeError(f"argument must be a dict with 'name' and 'value', got {argument!r}")
        params: dict[str, Any] = {"ref": ref, "argument": argument}
        if context is not None:
            params["context"] = context
        result = self.request("completion/complete", with_meta(params, own_meta), timeout=timeout)
        completion = result.get("completion") if isinstance(result, dict) else None
        if not isinstance(completion, dict):
            raise ProtocolError(f"completion/complete returned no completion object: {peer_text(result)}")
        return completion

    def set_logging_level(self, level: str, *, timeout: float | None = None) -> None:
        """Ask for the server's log messages at ``level`` and above (legacy: ``logging/setLevel``;
        2026-07-28: the level rides in every later request's ``_meta``). Receive them with the
        filter key ``"logMessages": True``."""
        if level not in LOG_LEVELS:
            raise ValueError(f"level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
        wait = self._request_timeout if timeout is None else check_timeout("timeout", timeout)
        if self._shared.status == "disconnected":
            # A modern session would take the level without a wire call, and say nothing.
            raise NotConnected("the client is disconnected")
        future: Future[Any] = Future()
        self._run(SetLogLevel(level, future), wait)
        try:
            future.result(wait)
        except FutureTimeout:
            raise RequestTimeout(f"logging/setLevel got no answer within {wait}s") from None

    def set_roots(self, roots: list[dict[str, Any]]) -> None:
        """Replace the roots the client answers ``roots/list`` with; a legacy server hears
        ``notifications/roots/list_changed`` (if the client was connected with ``roots=``)."""
        if not self._host.abilities.roots:
            raise ValueError(
                "set_roots() needs a client connected with roots=[...]: without it the client "
                "neither advertises roots nor answers roots/list"
            )
        checked = check_roots(roots)
        if self._shared.status == "disconnected":
            raise NotConnected("the client is disconnected")
        self._host.roots = checked  # 2026-07-28 input requests are answered in the caller's thread
        self._run(SetRoots(checked))

    def get_prompt(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        meta: Meta = None,
        timeout: float | None = None,
    ) -> Any:
        """``prompts/get``; returns the result dict (``meta`` as for :meth:`call_tool`)."""
        own_meta = check_meta(meta)
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        return self._interactive("prompts/get", with_meta(params, own_meta), timeout, None)

    def subscribe_resource(self, uri: str, *, timeout: float | None = None) -> None:
        """Direct ``resources/subscribe``: NOT refcounted with listeners (legacy only)."""
        self._legacy_only("resources/subscribe")
        self.request("resources/subscribe", {"uri": uri}, timeout=timeout)

    def unsubscribe_resource(self, uri: str, *, timeout: float | None = None) -> None:
        """Direct ``resources/unsubscribe``: also silences listeners naming ``uri`` (legacy only)."""
        self._legacy_only("resources/unsubscribe")
        self.request("resources/unsubscribe", {"uri": uri}, timeout=timeout)

    def _legacy_only(self, method: str) -> None:
        if self.era == "modern":
            raise UseListen(f"{method} does not exist in MCP 2026-07-28; use listen()")
