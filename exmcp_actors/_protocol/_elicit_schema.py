"""The check of an accepted form answer against its ``requestedSchema`` (sans-IO).

The schema is the spec's restricted subset: a flat object whose properties are strings
(``minLength``/``maxLength``, ``format`` email, uri, date or date-time, ``enum`` or ``oneOf``
of titled consts), numbers and integers (``minimum``/``maximum``), booleans, and multi-select
arrays of enum strings (``items.enum`` or ``items.anyOf``, ``minItems``/``maxItems``), with
``required``. Content that does not fit is never sent: the server asked for that shape.
The reasons name the field and the rule, never the value: they go to the server too.
A property of a kind outside the subset is the server's to judge and is passed as it is;
``pattern`` is not run (a server's regular expression could take the client's time).
"""

from __future__ import annotations

import datetime
import re
from typing import Any, Final
from urllib.parse import urlsplit

from ._peer_text import peer_text

_EMAIL: Final = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s.]+")
_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATE_TIME: Final = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def check_form_content(schema: Any, content: Any) -> str | None:
    """Why ``content`` does not fit ``schema`` (a sentence naming the field), or None."""
    if not isinstance(content, dict):
        return f"content must be an object, got {type(content).__name__}"
    properties = schema.get("properties") if isinstance(schema, dict) else None
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required") if isinstance(schema, dict) else None
    for name in required if isinstance(required, list) else ():
        if isinstance(name, str) and name not in content:
            return f"required field {peer_text(name, quote=True)} is missing"
    for name, value in content.items():
        if name not in properties:
            return "content has a field the requested schema does not list"
        spec = properties[name]
        why = _check_value(spec, value) if isinstance(spec, dict) else None
        if why is not None:
            return f"field {peer_text(name, quote=True)} {why}"
    return None


def _consts(options: Any) -> list[Any] | None:
    """The values an ``enum`` list or a ``oneOf``/``anyOf`` list of ``{"const": ...}`` allows."""
    if not isinstance(options, list):
        return None
    return [option.get("const") if isinstance(option, dict) else option for option in options]


def _allowed(spec: dict[str, Any]) -> list[Any] | None:
    for key in ("enum", "oneOf", "anyOf"):
        if key in spec:
            return _consts(spec[key])
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _bounds(value: float, spec: dict[str, Any], low: str, high: str, what: str) -> str | None:
    floor: Any = spec.get(low)
    ceiling: Any = spec.get(high)
    if _is_number(floor) and value < floor:
        return f"{what} is below {low} {floor!r}"
    if _is_number(ceiling) and value > ceiling:
        return f"{what} is above {high} {ceiling!r}"
    return None


def _check_value(spec: dict[str, Any], value: Any) -> str | None:
    kind = spec.get("type")
    if kind == "string":
        return _check_string(spec, value)
    if kind in ("number", "integer"):
        if not _is_number(value):
            return f"must be {'an integer' if kind == 'integer' else 'a number'}, got {type(value).__name__}"
        if kind == "integer" and not (isinstance(value, int) or float(value).is_integer()):
            return "must be an integer, got a fraction"
        return _bounds(value, spec, "minimum", "maximum", "value")
    if kind == "boolean":
        return None if isinstance(value, bool) else f"must be a boolean, got {type(value).__name__}"
    if kind == "array":
        return _check_choices(spec, value)
    return None


def _check_string(spec: dict[str, Any], value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    allowed = _allowed(spec)
    if allowed is not None and value not in allowed:
        return f"must be one of {peer_text(allowed)}"
    why = _bounds(len(value), spec, "minLength", "maxLength", "length")
    if why is not None:
        return why
    fmt = spec.get("format")
    if fmt is not None and not _fits_format(fmt, value):
        return f"is not a valid {peer_text(fmt)}"
    return None


def _fits_format(fmt: Any, value: str) -> bool:
    try:
        if fmt == "email":
            return _EMAIL.fullmatch(value) is not None
        if fmt == "uri":
            parts = urlsplit(value)
            return bool(parts.scheme) and bool(parts.netloc or parts.path)
        if fmt == "date":
            return _DATE.fullmatch(value) is not None and bool(datetime.date.fromisoformat(value))
        if fmt == "date-time":
            return _DATE_TIME.fullmatch(value) is not None and bool(datetime.datetime.fromisoformat(value))
    except ValueError:  # a date that matches the shape and does not exist (2025-02-30)
        return False
    return True  # a format outside the subset is the server's to check


def _check_choices(spec: dict[str, Any], value: Any) -> str | None:
    if not isinstance(value, list):
        return f"must be a list, got {type(value).__name__}"
    why = _bounds(len(value), spec, "minItems", "maxItems", "the number of choices")
    if why is not None:
        return why
    items = spec.get("items")
    allowed = _allowed(items) if isinstance(items, dict) else None
    for choice in value:
        if not isinstance(choice, str) or (allowed is not None and choice not in allowed):
            return "has a choice outside the options"
    return None
