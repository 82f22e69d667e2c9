"""What the client asks of the server: raw requests and the MCP request helpers.

:class:`ServerCalls` is a mixin of :class:`~exmcp_actors.Client`; it needs the
client's session monitor, request ids, default timeout and era. Every request is a
:class:`~exmcp_actors.Call` (see ``_submit``), its first round sent from the calling
thread, so what one thread asks for reaches the wire in the order it asked; the
blocking forms here wait on that future.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, NamedTuple

from .._protocol._errors import Error, NotConnected, ProtocolError, RequestError, RequestTimeout, UseListen
from .._protocol._events import CancelRequest, SendRequest, SetLogLevel, SetRoots
from .._protocol._extensions import with_tasks_extension
from .._protocol._handshake import META_CLIENT_CAPABILITIES
from .._protocol._host_checks import LOG_LEVELS, check_roots, tasks_advertised
from .._protocol._peer_text import peer_text
from .._util._checks import check_timeout
from .._util._reply import Reply
from .._util._tracing import with_trace
from ._call import Call
from ._lists import Meta, check_meta, with_meta
from ._submit import Progress, SubmitCalls

logger = logging.getLogger("exmcp_actors")


class PendingRequest(NamedTuple):
    """A request sent and not yet awaited (the refcount worker's own rounds)."""

    request_id: Any
    method: str
    future: Reply


def _check_method(method: Any, params: Any) -> None:
    if not isinstance(method, str) or not method:
        raise TypeError(f"method must be a non-empty string, got {method!r}")
    if params is not None and not isinstance(params, dict):
        raise TypeError(f"params must be a dict or None, got {type(params).__name__}")


class ServerCalls(SubmitCalls):
    """Requests to the server; every call blocks for at most its ``timeout`` (or the client's default)."""

    def submit(
        self, method: str, params: dict[str, Any] | None = None, *, meta: Meta = None, timeout: float | None = None
    ) -> Call:
        """Send a raw request and return its :class:`Call` at once: the future of what
        :meth:`request` returns or raises (``meta`` as for :meth:`call_tool`)."""
        own_meta = check_meta(meta)
        _check_method(method, params)
        sent = with_meta(dict(params or {}), own_meta) if own_meta else params
        return self._start(method, sent, timeout=timeout, interactive=False)

    def request(self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None) -> Any:
        """Send a raw request and return its ``result`` (``submit(...).result()``).

        On MCP 2026-07-28 a request whose answer was lost after it went out (its response
        stream dropped) is re-issued under a new id when that is safe (``_reissue``: the
        listings, ``server/discover``, ``resources/read``, ``prompts/get``, ``tasks/get``, an
        idempotent tool), at most twice, within ``timeout``. A Ctrl-C while it waits cancels
        the request on the wire before it propagates.

        Raises:
            RequestError: the server answered with an error.
            RequestTimeout: no answer in time (``notifications/cancelled`` is sent).
            OutcomeUnknown: the answer was lost and the request was not (or no longer) re-issued:
                it may or may not have run on the server.
            NotConnected: the client is not ready, or the connection dropped meanwhile.
            UrlElicitationRequired: the server answered -32042 and the URL elicitations it
                listed were not all accepted, or the one retry met -32042 again.
        """
        _check_method(method, params)
        return self._wait(self._start(method, params, timeout=timeout, interactive=False))

    def _send_request(self, method: str, params: dict[str, Any] | None, wait: float | None = None) -> PendingRequest:
        """Send a request without waiting, for the refcount worker (see :meth:`_await_request`).
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
            try:  # the timeout is the outcome: its own cancel failing (a client stopping) must not hide it
                self._run(CancelRequest(pending.request_id, "timeout"))
            except Exception as failed:
                logger.info("%s: cancelling %s after its timeout failed: %r", self.name, pending.method, failed)
            shown = wait if timeout is None else timeout
            raise RequestTimeout(f"{pending.method} got no answer within {shown:g}s") from None

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
        progress: Progress | None = None,
        task: bool | dict[str, Any] = False,
        meta: Meta = None,
        validate: bool = True,
        timeout: float | None = None,
        reset_timeout_on_progress: bool = False,
        max_total_timeout: float | None = None,
    ) -> Any:
        """``tools/call``; returns the result dict, or a :class:`Task` when the server made one
        (``submit_tool(...).result()``; a Ctrl-C while it waits cancels the call on the wire).

        Args:
            progress: called with the params of each ``notifications/progress`` of this call,
                in order, off the client's threads (the client adds ``_meta.progressToken``).
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
            reset_timeout_on_progress: each progress notification of the call restarts
                ``timeout`` (a progress token is sent even without ``progress``).
            max_total_timeout: seconds the call may take in all, whatever its progress.
            validate: check a result that is no error (a task's too, in ``Task.result()``)
                against the tool's ``outputSchema`` (``_result_schema``), the tools listed once
                first if this one was not and the result has ``structuredContent``; False takes
                the result unchecked.

        Raises:
            InvalidToolResult: the result breaks the tool's ``outputSchema``, or cannot be checked.
        """
        return self._wait(
            self.submit_tool(
                name,
                arguments,
                progress=progress,
                meta=meta,
                timeout=timeout,
                task=task,
                reset_timeout_on_progress=reset_timeout_on_progress,
                max_total_timeout=max_total_timeout,
                validate=validate,
            )
        )

    def submit_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        progress: Progress | None = None,
        meta: Meta = None,
        timeout: float | None = None,
        task: bool | dict[str, Any] = False,
        reset_timeout_on_progress: bool = False,
        max_total_timeout: float | None = None,
        validate: bool = True,
    ) -> Call:
        """``tools/call`` without waiting: its :class:`Call`, settled with what :meth:`call_tool`
        returns or raises (arguments as there). On 2025-11-25, ``task=True`` for a tool no
        listing named yet lists the tools first, in this thread."""
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
        return self._start(
            "tools/call",
            with_meta(params, own_meta),
            timeout=timeout,
            interactive=True,
            progress=progress,
            reset=reset_timeout_on_progress,
            max_total=max_total_timeout,
            task=task,
            modern_meta=modern_meta,
            checked_tool=name if validate else None,
        )

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

    def read_resource(self, uri: str, *, meta: Meta = None, timeout: float | None = None) -> Any:
        """``resources/read``; returns the result dict (``meta`` as for :meth:`call_tool`)."""
        params = with_meta({"uri": uri}, check_meta(meta))
        return self._wait(self._start("resources/read", params, timeout=timeout, interactive=True))

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
        return self._wait(self._start("prompts/get", with_meta(params, own_meta), timeout=timeout, interactive=True))

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
