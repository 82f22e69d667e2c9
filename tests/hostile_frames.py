"""Hypothesis strategies for what a hostile server sends: every frame shape the session reads,
each field valid most of the time and anything at all otherwise.

Ids are placeholders the test resolves against the session it feeds: ``"$ID"`` becomes one
of the request ids the client sent (a pending request, the handshake's), ``"$LISTEN"`` one of
its ``subscriptions/listen`` ids, so answers and stamps hit live state, not only strangers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

SOME_ID = "$ID"
SOME_LISTEN_ID = "$LISTEN"
STAMP_KEY = "io.modelcontextprotocol/subscriptionId"

_KEYS = [
    *("uri", "progressToken", "progress", "total", "message", "requestId", "reason", "level", "data"),
    *("logger", "taskId", "status", "statusMessage", "notifications", "_meta", "task", "ttl", "messages"),
    *("maxTokens", "mode", "requestedSchema", "properties", "default", "protocolVersion", "capabilities"),
    *("serverInfo", "supportedVersions", "instructions", "supported", "code", "toolsListChanged"),
    *("resourceSubscriptions", "taskIds", "logMessages", "roots", "name", STAMP_KEY, "content", "action"),
    *("elicitationId", "url", "elicitationComplete", "required", "enum", "minLength", "format"),
]
_STRINGS = [
    *("file:///a", "file:///b", "file:///a/sub", "2025-11-25", "2026-07-28", "2024-11-05", "info", "working"),
    *("completed", "form", "url", "accept", "", SOME_ID, SOME_LISTEN_ID),
    "\x1b[31mred\x07\r\nforged",
    "\ud800",  # a lone surrogate: JSON can carry one, UTF-8 cannot
]
_METHODS = [
    *("notifications/progress", "notifications/cancelled", "notifications/message"),
    *("notifications/tasks/status", "notifications/tools/list_changed", "notifications/prompts/list_changed"),
    *("notifications/resources/list_changed", "notifications/resources/updated"),
    *("notifications/subscriptions/acknowledged", "sampling/createMessage", "elicitation/create", "roots/list"),
    *("ping", "tasks/get", "tasks/result", "tasks/list", "tasks/cancel", "initialize", "x/unknown"),
    "notifications/elicitation/complete",
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([0, 1, -1, -32022, -32601, 2.0, 1.5, 1e308, -0.0])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
    | st.sampled_from(_STRINGS)
)
_keys = st.sampled_from(_KEYS) | st.text(max_size=5)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=6), max_leaves=12
)
ids = st.sampled_from([SOME_ID, SOME_ID, SOME_LISTEN_ID]) | scalars | json_values


#: What a field may hold instead of what it should: containers as often as scalars (an
#: unhashable value where a key is looked up is the classic of its kind).
_odd = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(_keys, scalars, max_size=3), json_values)


def _field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(valid, _odd)


def _shaped(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """An object of ``fields``: every one valid but one (where a check that forgot a type
    bites), or some of them, each valid or anything."""

    def all_valid_but(bad: str) -> st.SearchStrategy[dict[str, Any]]:
        return st.fixed_dictionaries({key: _odd if key == bad else value for key, value in fields.items()})

    return st.one_of(
        st.sampled_from(sorted(fields)).flatmap(all_valid_but),
        st.fixed_dictionaries({}, optional={key: _field(value) for key, value in fields.items()}),
    )


_META = {"_meta": st.fixed_dictionaries({}, optional={STAMP_KEY: st.just(SOME_LISTEN_ID)})}
_URIS = st.sampled_from(["file:///a", "file:///b", "file:///c", "file:///a/x"])
_FILTER = _shaped(
    {
        "toolsListChanged": st.booleans(),
        "promptsListChanged": st.booleans(),
        "resourcesListChanged": st.booleans(),
        "resourceSubscriptions": st.lists(_URIS),
        "taskIds": st.lists(st.sampled_from(["t1", "t2"])),
    }
)
_TASK = {"task": st.fixed_dictionaries({}, optional={"ttl": json_values})}
_TASK_IDS = st.sampled_from(["client-task-1", "client-task-2"])
#: method -> its params as a hostile server may shape them.
PARAMS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "notifications/progress": _shaped(
        {"progressToken": st.just(SOME_ID), "progress": st.floats(), "total": st.floats(), **_META}
    ),
    "notifications/cancelled": _shaped({"requestId": st.just(SOME_ID), "reason": st.text(max_size=5), **_META}),
    "notifications/message": _shaped(
        {"level": st.sampled_from(["info", "error"]), "data": json_values, "logger": st.text(max_size=4), **_META}
    ),
    "notifications/tasks/status": _shaped(
        {
            "taskId": st.sampled_from(["t1", "client-task-1"]),
            "status": st.sampled_from(["working", "completed"]),
            **_META,
        }
    ),
    "notifications/resources/updated": _shaped({"uri": _URIS, **_META}),
    "notifications/elicitation/complete": _shaped({"elicitationId": st.sampled_from(["e1", "e2"]) | scalars, **_META}),
    "notifications/tools/list_changed": _shaped(_META),
    "notifications/prompts/list_changed": _shaped(_META),
    "notifications/resources/list_changed": _shaped(_META),
    "notifications/subscriptions/acknowledged": _shaped({"notifications": _FILTER, **_META}),
    "sampling/createMessage": _shaped(
        {"messages": st.lists(st.fixed_dictionaries({"role": st.just("user")})), "maxTokens": st.integers(), **_TASK}
    ),
    "elicitation/create": _shaped(
        {
            "message": st.text(max_size=4),
            "mode": st.sampled_from(["form", "url"]),
            "url": st.sampled_from(["https://a.example/x", "http://a.example/", "https://a@b/", "https://a\u202e/"]),
            "elicitationId": st.sampled_from(["e1", "e2"]) | scalars,
            "requestedSchema": st.fixed_dictionaries(
                {}, optional={"properties": st.dictionaries(st.text(max_size=3), _shaped({"default": json_values}))}
            ),
            **_TASK,
        }
    ),
    "tasks/get": _shaped({"taskId": _TASK_IDS}),
    "tasks/result": _shaped({"taskId": _TASK_IDS}),
    "tasks/cancel": _shaped({"taskId": _TASK_IDS}),
    "tasks/list": _shaped({"cursor": st.text(max_size=3)}),
    "roots/list": _shaped(_META),
    "ping": _shaped(_META),
}
_CAPABILITIES = _shaped({"resources": _shaped({"subscribe": st.booleans()}), "tools": json_values})
_RESULTS = st.one_of(
    _shaped(  # an initialize result
        {
            "protocolVersion": st.sampled_from(["2025-11-25", "2024-11-05", "2026-07-28"]),
            "capabilities": _CAPABILITIES,
            "serverInfo": _shaped({"name": st.text(max_size=4)}),
            "instructions": st.text(max_size=4),
        }
    ),
    _shaped(  # a server/discover result
        {
            "supportedVersions": st.lists(st.sampled_from(["2026-07-28", "2025-11-25"])),
            "capabilities": _CAPABILITIES,
            "serverInfo": json_values,
            "_meta": _shaped({"io.modelcontextprotocol/serverInfo": json_values}),
        }
    ),
    json_values,
)
_methods_with_params = st.sampled_from(sorted(PARAMS)).flatmap(lambda m: st.tuples(st.just(m), PARAMS[m]))


def notification(method: Any, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def request(request_id: Any, method: Any, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def stamped(method: Any, params: Any, listen_id: Any = SOME_LISTEN_ID) -> dict[str, Any]:
    """``method`` as an event of one of the client's modern subscriptions."""
    params = dict(params) if isinstance(params, dict) else {}
    params["_meta"] = {STAMP_KEY: listen_id}
    return notification(method, params)


#: An answer to one of the client's requests: a result of any handshake's shape, or an error.
answers = st.one_of(
    st.builds(lambda i, r: {"jsonrpc": "2.0", "id": i, "result": r}, ids, _RESULTS),
    st.builds(
        lambda i, c, m, d: {"jsonrpc": "2.0", "id": i, "error": {"code": c, "message": m, "data": d}},
        ids,
        st.sampled_from([-32022, -32601, -32603, 0]) | scalars,
        st.text(max_size=4) | _odd,
        _shaped({"supported": st.lists(st.sampled_from(["2026-07-28", "2025-11-25", "x"]))}) | _odd,
    ),
)


#: One frame as a hostile server may send it.
frames = st.one_of(
    _methods_with_params.map(lambda mp: notification(*mp)),
    _methods_with_params.map(lambda mp: stamped(*mp)),
    st.builds(lambda i, mp: request(i, *mp), st.sampled_from(["s1", "s2", 7]) | ids, _methods_with_params),
    answers,
    st.builds(notification, st.sampled_from(_METHODS) | scalars, json_values),
    st.builds(request, ids, st.sampled_from(_METHODS) | scalars, json_values),
    json_values,
)


def resolve(value: Any, request_ids: list[Any], listen_ids: list[Any], pick: Callable[[int], int]) -> Any:
    """``value`` with its placeholders replaced by ids the client really uses."""
    if type(value) is str and value in (SOME_ID, SOME_LISTEN_ID):
        pool = request_ids if value == SOME_ID else listen_ids
        return pool[pick(len(pool))] if pool else value
    if isinstance(value, list):
        return [resolve(item, request_ids, listen_ids, pick) for item in value]
    if isinstance(value, dict):
        return {key: resolve(item, request_ids, listen_ids, pick) for key, item in value.items()}
    return value


# -- every field of a valid message made odd in turn (deterministic, exhaustive) --------------

#: What a field may hold instead of what it should: each type JSON has, and the worst of each.
ODD_VALUES: list[Any] = [
    *(None, True, False, 0, -1, 2**70, 1.5, float("nan"), float("inf"), "", "\x1b[2J\x07", "\ud800"),
    *([], [None], [[1]], {}, {"": None}, {"uri": []}),
]
_STAMP = {STAMP_KEY: SOME_LISTEN_ID, "progressToken": SOME_ID}
#: method -> a valid params object of it, every field the session reads present.
VALID_PARAMS: dict[str, dict[str, Any]] = {
    "notifications/progress": {"progressToken": SOME_ID, "progress": 1, "total": 2, "message": "m"},
    "notifications/cancelled": {"requestId": SOME_ID, "reason": "r"},
    "notifications/message": {"level": "info", "data": {"text": "d"}, "logger": "l"},
    "notifications/tasks/status": {"taskId": "t1", "status": "working", "statusMessage": "s", "ttl": 1000},
    "notifications/resources/updated": {"uri": "file:///a"},
    "notifications/elicitation/complete": {"elicitationId": "e1"},
    "notifications/tools/list_changed": {},
    "notifications/prompts/list_changed": {},
    "notifications/resources/list_changed": {},
    "notifications/subscriptions/acknowledged": {
        "notifications": {"resourceSubscriptions": ["file:///a"], "toolsListChanged": True, "taskIds": ["t1"]}
    },
    "sampling/createMessage": {
        "messages": [{"role": "user", "content": {"type": "text", "text": "x"}}],
        "maxTokens": 5,
        "task": {"ttl": 1000},
    },
    "elicitation/create": {
        "message": "m",
        "mode": "form",
        "requestedSchema": {"type": "object", "properties": {"a": {"type": "string", "default": "x"}}},
        "task": {"ttl": 1000},
    },
    "tasks/get": {"taskId": "client-task-1"},
    "tasks/result": {"taskId": "client-task-1"},
    "tasks/cancel": {"taskId": "client-task-1"},
    "tasks/list": {"cursor": "c"},
    "roots/list": {},
    "ping": {},
}
#: The answers a handshake reads, valid.
VALID_RESULTS: list[dict[str, Any]] = [
    {
        "protocolVersion": "2025-11-25",
        "capabilities": {"resources": {"subscribe": True}, "tools": {"listChanged": True}},
        "serverInfo": {"name": "s", "version": "1"},
        "instructions": "i",
    },
    {
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"resources": {"subscribe": True}},
        "serverInfo": {"name": "s"},
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s"}},
    },
]
VALID_ERRORS: list[dict[str, Any]] = [
    {"code": -32022, "message": "unsupported", "data": {"supported": ["2025-11-25", "2026-07-28"]}},
    {"code": -32601, "message": "Method not found"},
]


def every_field_made_odd(valid: Any) -> list[Any]:
    """``valid`` with, in turn, each value at each path in it (and itself) replaced by each of
    :data:`ODD_VALUES`."""
    variants = list(ODD_VALUES)
    if isinstance(valid, dict):
        for key, value in valid.items():
            variants += [{**valid, key: odd} for odd in every_field_made_odd(value)]
    elif isinstance(valid, list):
        for at, value in enumerate(valid):
            variants += [[*valid[:at], odd, *valid[at + 1 :]] for odd in every_field_made_odd(value)]
    return variants
