"""What the host answers for the server (sans-IO): the checks on server requests and
notifications meant for the host, the capabilities the client advertises, and the
finishing of the host's answers.

Shared by both eras: a legacy server sends ``sampling/createMessage``,
``elicitation/create`` and ``roots/list`` as JSON-RPC requests; a 2026-07-28
server embeds the same payloads in an ``input_required`` result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._elicit import ELICIT_ACTIONS, check_url_request
from ._elicit_schema import check_form_content
from ._extensions import TASKS_EXTENSION
from ._filters import ELICITATION_COMPLETE, LOG_MESSAGE, TASK_NOTIFICATIONS
from ._peer_text import peer_text
from ._sampling_request import check_sampling_request
from ._sampling_result import check_sampling_result

SAMPLING = "sampling/createMessage"
ELICITATION = "elicitation/create"
ROOTS = "roots/list"
HOST_METHODS: frozenset[str] = frozenset((SAMPLING, ELICITATION, ROOTS))

PROGRESS = "notifications/progress"
CANCELLED = "notifications/cancelled"
ROOTS_CHANGED = "notifications/roots/list_changed"

#: Notifications the session reads itself rather than only routing them to listeners.
SESSION_NOTIFICATIONS: frozenset[str] = frozenset(
    (PROGRESS, CANCELLED, LOG_MESSAGE, ELICITATION_COMPLETE, *TASK_NOTIFICATIONS)
)

LOG_LEVELS: tuple[str, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
#: Most ``input_required`` rounds (2026-07-28) one call, or one task, goes through; the SDKs use
#: 10 too. Each round may put a question to a person: a server asking without end is refused.
MAX_INPUT_ROUNDS = 10
TASK_STATES: frozenset[str] = frozenset(("working", "input_required", "completed", "failed", "cancelled"))
TERMINAL_TASK_STATES: frozenset[str] = frozenset(("completed", "failed", "cancelled"))


@dataclass(frozen=True, slots=True)
class HostAbilities:
    """Which server requests the host answers (it gave the handler, or roots), and the
    extensions it declares (checked by ``_extensions.check_extensions``)."""

    sampling: bool = False
    elicitation: bool = False
    roots: bool = False
    #: ``connect(on_request=)``: the host answers server requests the library does not know.
    custom: bool = False
    extensions: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The sampling handler takes ``tools`` and ``toolChoice`` (advertised as ``sampling.tools``).
    sampling_tools: bool = False
    #: The elicitation modes the handler takes (``form``, ``url``), advertised as given.
    elicitation_modes: tuple[str, ...] = ("form",)

    def capabilities(self) -> dict[str, Any]:
        """The client capabilities to advertise (``initialize`` and the modern ``_meta``)."""
        caps: dict[str, Any] = {}
        if self.roots:
            caps["roots"] = {"listChanged": True}
        if self.sampling:
            caps["sampling"] = {"tools": {}} if self.sampling_tools else {}
        if self.elicitation:
            caps["elicitation"] = {mode: {} for mode in self.elicitation_modes}
        requests: dict[str, Any] = {}
        if self.sampling:
            requests["sampling"] = {"createMessage": {}}
        if self.elicitation:
            requests["elicitation"] = {"create": {}}
        if requests:  # the server may send these as tasks (MCP 2025-11-25), see _host_tasks
            caps["tasks"] = {"list": {}, "cancel": {}, "requests": requests}
        if self.extensions:
            caps["extensions"] = dict(self.extensions)
        return caps

    @property
    def url_elicitation(self) -> bool:
        """Whether the host takes URL-mode elicitations (and so a -32042 error's)."""
        return self.elicitation and "url" in self.elicitation_modes

    def answers(self, method: str) -> bool:
        return (
            (method == SAMPLING and self.sampling)
            or (method == ELICITATION and self.elicitation)
            or (method == ROOTS and self.roots)
        )


def tasks_advertised(capabilities: dict[str, Any], era: str | None) -> bool:
    """Whether the server takes a ``tools/call`` as a task: on 2026-07-28 it lists the tasks
    extension; on 2025-11-25 it has ``tasks.requests.tools.call`` (a client MUST NOT ask otherwise)."""
    if era == "modern":
        extensions = capabilities.get("extensions")
        return isinstance(extensions, dict) and TASKS_EXTENSION in extensions
    tasks = capabilities.get("tasks")
    requests = tasks.get("requests") if isinstance(tasks, dict) else None
    tools = requests.get("tools") if isinstance(requests, dict) else None
    return isinstance(tools, dict) and isinstance(tools.get("call"), dict)


#: The requests a 2026-07-28 server may answer with a task (the tasks extension's supported methods).
TASK_METHODS: frozenset[str] = frozenset(("tools/call",))


def misplaced_task(method: str, result: Any) -> str | None:
    """Why ``result`` is no answer to ``method``: a task (``resultType: "task"``) where the tasks
    extension allows none, which a client MUST take as an invalid answer; else None."""
    if method in TASK_METHODS or not isinstance(result, dict) or result.get("resultType") != "task":
        return None
    return f"{method} was answered with a task (resultType 'task'), which only tools/call may be"


def created_task(result: Any) -> dict[str, Any] | None:
    """The task a ``tools/call`` answer made, or None for a plain result: 2026-07-28 puts it at
    the top with ``resultType: "task"``, 2025-11-25 under ``task``."""
    if not isinstance(result, dict):
        return None
    if result.get("resultType") == "task":
        return result
    task = result.get("task")
    return task if isinstance(task, dict) else None


def check_request(method: str, params: Any, abilities: HostAbilities, *, needs_id: bool = False) -> str | None:
    """Why a server request's params are unusable (a sentence), or None when they are fine.
    An elicitation mode the client did not advertise is -32602, as the spec says;
    ``needs_id``: a URL elicitation must carry its ``elicitationId`` (2025-11-25)."""
    if not isinstance(params, dict):
        return f"{method} params must be an object"
    if method == SAMPLING:
        return check_sampling_request(params, abilities.sampling_tools)
    if method == ELICITATION:
        if not isinstance(params.get("message"), str):
            return "elicitation/create needs 'message', a string"
        mode = params.get("mode", "form")
        if mode not in ("form", "url"):
            return f"elicitation/create mode must be 'form' or 'url', got {peer_text(mode, quote=True)}"
        if mode not in abilities.elicitation_modes:
            return f"elicitation/create in {mode} mode, which this client did not advertise"
        if mode == "form" and not isinstance(params.get("requestedSchema"), dict):
            return "elicitation/create in form mode needs 'requestedSchema', an object"
        if mode == "url":
            return check_url_request(params, needs_id)
    return None


def finish_answer(method: str, params: dict[str, Any], result: Any) -> tuple[dict[str, Any] | None, str | None]:
    """The host handler's ``result`` made ready to send: ``(result, None)``, or ``(None, why)``
    when it is unusable (not a dict; a sampling result of the wrong shape for its request).
    Every answer of both eras, plain or run as a task, passes here. An elicitation answer
    needs an action; a URL-mode one, or a declined or cancelled form, is action only (any
    ``content`` is dropped: it belongs to an accepted form only, and data the user declined
    to give is never sent); an accepted form gets the schema's defaults for the fields the
    handler left out (SEP-1034), then must fit the schema."""
    if not isinstance(result, dict):
        return None, f"the {peer_text(method)} handler returned {type(result).__name__}, not a dict"
    if method == SAMPLING:
        why = check_sampling_result(params, result)
        return (None, why) if why is not None else (result, None)
    if method != ELICITATION:
        return result, None
    action = result.get("action")
    if not isinstance(action, str) or action not in ELICIT_ACTIONS:
        return (
            None,
            f"the elicitation handler answered action {peer_text(action, quote=True)}, not accept, decline or cancel",
        )
    if params.get("mode") == "url" or action != "accept":  # content only for an accepted form
        return {name: value for name, value in result.items() if name != "content"}, None
    if action == "accept":
        schema = params.get("requestedSchema")
        properties = schema.get("properties") if isinstance(schema, dict) else None
        content = result.get("content") or {}
        if isinstance(properties, dict) and isinstance(content, dict):
            content = dict(content)
            for name, spec in properties.items():
                if name not in content and isinstance(spec, dict) and "default" in spec:
                    content[name] = spec["default"]
        why = check_form_content(schema, content)
        if why is not None:
            return None, f"the elicitation handler's accepted content does not fit the requested schema: {why}"
        result = {**result, "content": content}
    return result, None


def check_progress(params: dict[str, Any]) -> str | None:
    token = params.get("progressToken")
    if isinstance(token, bool) or not isinstance(token, (str, int)):
        return "progressToken must be a string or an integer"
    progress = params.get("progress")
    if isinstance(progress, bool) or not isinstance(progress, (int, float)):
        return "progress must be a number"
    total = params.get("total")
    if total is not None and (isinstance(total, bool) or not isinstance(total, (int, float))):
        return "total must be a number"
    return None


def check_cancelled(params: dict[str, Any]) -> str | None:
    request_id = params.get("requestId")  # optional: a task's cancellation may come without it
    if request_id is not None and (isinstance(request_id, bool) or not isinstance(request_id, (str, int, float))):
        return "requestId must be a string or a number"
    return None


def check_log(params: dict[str, Any]) -> str | None:
    if params.get("level") not in LOG_LEVELS:
        return f"level must be one of {', '.join(LOG_LEVELS)}"
    if "data" not in params:
        return "data is missing"
    logger_name = params.get("logger")
    if logger_name is not None and not isinstance(logger_name, str):
        return "logger must be a string"
    return None


def check_task_status(params: dict[str, Any]) -> str | None:
    if not isinstance(params.get("taskId"), str):
        return "taskId must be a string"
    status = params.get("status")
    if not isinstance(status, str) or status not in TASK_STATES:  # a set: an unhashable value would raise
        return f"status must be one of {', '.join(sorted(TASK_STATES))}"
    return None


def check_roots(roots: Any) -> list[dict[str, Any]]:
    """The host's roots, checked: a list of ``{"uri": "file://…", "name"?: str}``."""
    if not isinstance(roots, list):
        raise TypeError(f"roots must be a list of {{'uri': ..., 'name': ...}} dicts, got {type(roots).__name__}")
    checked = []
    for root in roots:
        if not isinstance(root, dict) or not isinstance(root.get("uri"), str) or not root["uri"]:
            raise ValueError(f"each root must be a dict with a non-empty 'uri' string, got {root!r}")
        if "name" in root and not isinstance(root["name"], str):
            raise ValueError(f"a root's 'name' must be a string, got {root['name']!r}")
        checked.append(dict(root))
    return checked
