"""Tool arguments mirrored into HTTP headers (sans-IO): MCP 2026-07-28 Streamable HTTP,
"Custom Headers from Tool Parameters".

A tool's ``inputSchema`` may mark a property with ``x-mcp-header: Name``; a client on
Streamable HTTP then sends that argument's value as ``Mcp-Param-Name`` with each
``tools/call``, and must leave out of ``tools/list`` a tool whose annotations break the
rules (empty or not an RFC 9110 token, not unique ignoring case, on a type other than
string / integer / boolean, or anywhere but a chain of ``properties`` keys from the root).

The checks and the walk follow the official Python SDK 2.3.0 (``mcp.shared.inbound``) and
the TypeScript SDK v2 (``mcpParamHeaders``) so that servers built on either accept what we
send: the same positions count as unreachable, ``number`` is refused, and a value is
rendered and encoded as theirs are (``true`` / ``false``, decimal integers, a value that is
no plain header value wrapped as ``=?base64?...?=``). Where the two disagree, we send what
both servers accept (see :func:`render_value`).
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

__all__ = [
    "PARAM_HEADER_PREFIX",
    "X_MCP_HEADER",
    "HeaderMap",
    "encode_header_value",
    "header_map",
    "invalid_x_mcp_header",
    "param_headers",
    "render_value",
]

X_MCP_HEADER: Final = "x-mcp-header"
PARAM_HEADER_PREFIX: Final = "Mcp-Param-"
#: ``((property path, header token), ...)`` of one tool's valid annotations.
HeaderMap = tuple[tuple[tuple[str, ...], str], ...]

# RFC 9110 section 5.6.2 token: the characters an HTTP field name may hold.
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_PRIMITIVE_TYPES: Final = frozenset({"string", "integer", "boolean"})
_SENTINEL_PREFIX: Final = "=?base64?"
_SENTINEL_SUFFIX: Final = "?="

# JSON Schema 2020-12 applicators whose values are schema positions; crossing any of them
# leaves the chain of ``properties`` keys (``$ref`` is never followed, data keywords such
# as ``default`` or ``enum`` never entered), so an annotation below them is invalid.
_ONE_SCHEMA: Final = frozenset(
    {
        "items",
        "contains",
        "unevaluatedItems",
        "additionalProperties",
        "propertyNames",
        "unevaluatedProperties",
        "not",
        "if",
        "then",
        "else",
        "contentSchema",
    }
)
_SCHEMA_LIST: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SCHEMA_MAP: Final = frozenset({"patternProperties", "dependentSchemas", "$defs", "definitions"})


def _positions(root: Any) -> Iterator[tuple[tuple[str, ...] | None, dict[str, Any]]]:
    """``(properties path, schema)`` for every schema position; the path is None once
    another applicator was crossed. An explicit stack: no recursion on a deep schema."""
    stack: list[tuple[tuple[str, ...] | None, Any]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield path, node
        for keyword, value in node.items():
            if keyword == "properties" and isinstance(value, dict):
                stack.extend(((*path, name) if path is not None else None, sub) for name, sub in value.items())
            elif keyword in _ONE_SCHEMA:
                stack.append((None, value))
            elif keyword in _SCHEMA_LIST and isinstance(value, list):
                stack.extend((None, sub) for sub in value)
            elif keyword in _SCHEMA_MAP and isinstance(value, dict):
                stack.extend((None, sub) for sub in value.values())


def invalid_x_mcp_header(schema: Any) -> str | None:
    """Why a tool's ``inputSchema`` carries an invalid ``x-mcp-header`` annotation, or None.

    The reason names the property path and the annotation as the server sent them: escape
    it before it reaches a log record.
    """
    seen: dict[str, str] = {}
    for path, node in _positions(schema):
        if X_MCP_HEADER not in node:
            continue
        if not path:
            return f"{X_MCP_HEADER} is not on a property reached through 'properties' keys alone"
        where = ".".join(path)
        token = node[X_MCP_HEADER]
        if not isinstance(token, str):
            return f"property {where!r}: {X_MCP_HEADER} must be a string, not {type(token).__name__}"
        if not _TOKEN.fullmatch(token):
            return f"property {where!r}: {X_MCP_HEADER} {token!r} is not an HTTP token"
        kind = node.get("type")
        if not isinstance(kind, str) or kind not in _PRIMITIVE_TYPES:
            return f"property {where!r}: {X_MCP_HEADER} is allowed on string, integer or boolean, not {kind!r}"
        lower = token.lower()
        if lower in seen:
            return f"property {where!r}: {X_MCP_HEADER} {token!r} repeats the one of property {seen[lower]!r}"
        seen[lower] = where
    return None


def header_map(schema: Any) -> HeaderMap:
    """The annotations of a schema :func:`invalid_x_mcp_header` accepts, in a stable order."""
    found = [
        (path, node[X_MCP_HEADER])
        for path, node in _positions(schema)
        if path and isinstance(node.get(X_MCP_HEADER), str)
    ]
    return tuple(sorted(found))


def render_value(value: Any) -> str | None:
    """An argument as its header text, or None when it has none (no header is sent).

    As both SDKs: ``true`` / ``false``, a string as is, an integer in decimal (also past
    2**53, which the Python SDK server expects a header for and the TypeScript one skips).
    An integral float (``42.0``, which an integer property may hold once JSON is decoded)
    is sent as that integer, ``42``: both servers compare an integer property's header
    as a number (Python's ``str`` gives ``42.0``, and ``1e+16`` for ``1e16``, which the
    TypeScript server compares as text and rejects). Other values
    (None, objects, lists, NaN, infinities) have no header.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        try:
            return str(value)
        except ValueError:  # more digits than the interpreter converts
            return None
    if isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() else repr(value)
    return None


def encode_header_value(value: str) -> str:
    """An HTTP-safe rendering of ``value``: as is when printable ASCII (0x20-0x7E) without
    edge spaces and not looking like the sentinel itself, else ``=?base64?<UTF-8 base64>?=``
    (the rule for ``Mcp-Name`` and ``Mcp-Param-*``; the Python SDK's too)."""
    plain = all(" " <= ch <= "~" for ch in value) and value == value.strip()
    if plain and not (value.startswith(_SENTINEL_PREFIX) and value.endswith(_SENTINEL_SUFFIX)):
        return value
    return _SENTINEL_PREFIX + base64.b64encode(value.encode("utf-8")).decode("ascii") + _SENTINEL_SUFFIX


def param_headers(headers: HeaderMap, arguments: Any) -> dict[str, str]:
    """The ``Mcp-Param-*`` headers of one ``tools/call``: for each annotation whose path
    holds a value in ``arguments`` (not None, and renderable), its encoded text."""
    found: dict[str, str] = {}
    if not isinstance(arguments, Mapping):
        return found
    for path, token in headers:
        node: Any = arguments
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        text = render_value(node) if node is not None else None
        if text is not None:
            found[PARAM_HEADER_PREFIX + token] = encode_header_value(text)
    return found
