"""A ``tools/call`` result checked against its tool's ``outputSchema`` (sans-IO).

A tool that declares an ``outputSchema`` MUST answer ``structuredContent`` conforming to it
(MCP 2025-06-18 on): :func:`check_tool_result` is the one check, for every way a tool's result
reaches the host. Both the schema and the result are the server's, so the check is bounded:

* each schema is compiled once per listing (:class:`OutputSchema`, made by the tool book),
  lazily, on the first thread that needs it;
* no ``$ref`` is ever fetched: an empty :class:`referencing.Registry` resolves references within
  the schema and the bundled metaschemas only, so a remote one fails the check;
* a schema over :data:`MAX_SCHEMA_BYTES`, or ``structuredContent`` over :data:`MAX_RESULT_BYTES`,
  is not checked but refused, saying so;
* ``format`` is not asserted (as the spec's JSON Schema default), and ``pattern`` is not
  applied: Python's ``re`` backtracks, and a server-made pattern against a server-made string
  could hold the caller's thread for hours. ``patternProperties`` still matches property
  names, which are keys of a parsed JSON object.

``jsonschema`` is imported on the first check, not with the library.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Final

from ._errors import InvalidToolResult
from ._peer_text import peer_text

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = ["MAX_RESULT_BYTES", "MAX_SCHEMA_BYTES", "OutputSchema", "check_tool_result", "json_size_over"]

#: Largest ``outputSchema`` the client compiles (as JSON, about): bigger is no tool's honest need.
MAX_SCHEMA_BYTES: Final = 256 * 1024
#: Largest ``structuredContent`` the client checks (as JSON, about).
MAX_RESULT_BYTES: Final = 4 * 1024 * 1024
#: The ``$schema`` a schema without one is read as (the MCP default).
DEFAULT_DRAFT: Final = "https://json-schema.org/draft/2020-12/schema"

_classes: dict[type[Any], type[Any]] = {}
_classes_lock = threading.Lock()


def json_size_over(value: Any, limit: int) -> bool:
    """Whether ``value`` (parsed JSON) takes more than about ``limit`` bytes as JSON; stops
    counting as soon as it does, so a huge value costs no more than ``limit`` to measure."""
    size = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            size += len(item) + 2
        elif isinstance(item, dict):
            size += 2 + len(item)
            for key, inner in item.items():
                size += len(key) + 3 if isinstance(key, str) else 8
                stack.append(inner)
        elif isinstance(item, list):
            size += 2 + len(item)
            stack.extend(item)
        else:
            size += 8
        if size > limit:
            return True
    return False


def _validator_class(schema: dict[str, Any]) -> type[Any]:
    """The draft ``$schema`` names (2020-12 when none, or one jsonschema does not know),
    without ``pattern`` (see the module docstring); made once per draft."""
    from jsonschema import validators

    base = validators.validator_for(schema, default=validators.validator_for({"$schema": DEFAULT_DRAFT}))
    with _classes_lock:
        cls = _classes.get(base)
        if cls is None:
            cls = _classes[base] = validators.extend(base, {"pattern": None})
    return cls


class OutputSchema:
    """One tool's ``outputSchema`` from one listing, compiled on first use (then kept: a
    new listing makes new ones). Two threads compiling at once both compile; either result is
    the same."""

    __slots__ = ("_compiled", "schema")

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        #: The validator, or why the schema cannot check anything; None until compiled.
        self._compiled: Validator | str | None = None

    def validator(self) -> Validator | str:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = self._compile()
        return compiled

    def _compile(self) -> Validator | str:
        if json_size_over(self.schema, MAX_SCHEMA_BYTES):
            return f"its outputSchema is larger than {MAX_SCHEMA_BYTES // 1024} KiB, more than the client compiles"
        from jsonschema import SchemaError
        from referencing import Registry

        try:
            cls = _validator_class(self.schema)
            cls.check_schema(self.schema)
        except SchemaError as bad:
            return f"its outputSchema is no valid JSON Schema: {_violation(bad)}"
        except RecursionError:
            return "its outputSchema is nested too deeply to check"
        validator: Validator = cls(self.schema, registry=Registry())
        return validator


def _violation(error: Any) -> str:
    """``path: message`` of a jsonschema error, bounded and escaped."""
    return f"at {peer_text(error.json_path, 120)}: {peer_text(error.message)}"


def check_tool_result(name: str, result: Any, output: OutputSchema | None) -> None:
    """Raise :class:`InvalidToolResult` if ``result`` (of tool ``name``, whose listing gave
    ``output``, or None: no schema) breaks its ``outputSchema``. An ``isError`` result, or one
    that is no dict, is not checked."""
    if output is None or not isinstance(result, dict) or result.get("isError") is True:
        return
    shown = peer_text(name, quote=True)
    if "structuredContent" not in result:
        raise InvalidToolResult(
            f"tool {shown} declares an outputSchema but its result has no structuredContent", tool=name, result=result
        )
    content = result["structuredContent"]
    if json_size_over(content, MAX_RESULT_BYTES):
        raise InvalidToolResult(
            f"tool {shown}: structuredContent is larger than {MAX_RESULT_BYTES // (1024 * 1024)} MiB, "
            "more than the client checks (call with validate=False to take it unchecked)",
            tool=name,
            result=result,
        )
    validator = output.validator()
    if isinstance(validator, str):
        raise InvalidToolResult(f"tool {shown}: the result cannot be checked: {validator}", tool=name, result=result)
    from referencing.exceptions import Unresolvable

    try:
        error = next(iter(validator.iter_errors(content)), None)
    except Unresolvable as unresolvable:
        why = f"a $ref of its outputSchema does not resolve within it (none is fetched): {peer_text(unresolvable)}"
        raise InvalidToolResult(
            f"tool {shown}: the result cannot be checked: {why}", tool=name, result=result
        ) from None
    except RecursionError:
        raise InvalidToolResult(
            f"tool {shown}: the result cannot be checked: its outputSchema or structuredContent nests too deeply",
            tool=name,
            result=result,
        ) from None
    if error is not None:
        violation = _violation(error)
        raise InvalidToolResult(
            f"tool {shown}: structuredContent does not conform to its outputSchema: {violation}",
            tool=name,
            result=result,
            violation=violation,
        )
