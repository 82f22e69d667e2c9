"""MCP extensions (SEP-2133), sans-IO: the names, the checks on what the host declares, and the
library's own (the tasks extension).

An extension is declared in ``capabilities.extensions`` as ``{identifier: settings}``: in the
``initialize`` request on a legacy connection, in the client capabilities of every request's
``_meta`` on 2026-07-28. An identifier is ``{vendor-prefix}/{name}``, named by the ``_meta`` key
rules with the prefix mandatory: one or more dot-separated labels, which SHOULD (not must) be a
reversed domain name (``com.example``).
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
#: The extensions the library declares itself, with their settings: a host may name one only
#: with these settings, as the library's code is what speaks it.
LIBRARY_EXTENSIONS: Final[dict[str, dict[str, Any]]] = {TASKS_EXTENSION: {}}

#: The longest identifier taken (no spec bound; it rides in every modern request).
MAX_IDENTIFIER = 256
#: Most extensions one client declares (each one rides in every modern request).
MAX_EXTENSIONS = 64

_LABEL = r"[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_IDENTIFIER: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*/[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")


def check_extensions(extensions: Any) -> dict[str, dict[str, Any]]:
    """The host's ``extensions`` argument, checked and copied (later changes of the host's dicts
    change nothing sent).

    Raises:
        TypeError: not a dict, or a settings value that is not a dict.
        ValueError: a malformed identifier, settings that are no JSON object, too many, or one
            of the library's own extensions with other settings.
    """
    if not isinstance(extensions, dict):
        raise TypeError(f"extensions must be a dict of {{identifier: settings dict}}, got {type(extensions).__name__}")
    if len(extensions) > MAX_EXTENSIONS:
        raise ValueError(f"extensions declares {len(extensions)} extensions; at most {MAX_EXTENSIONS} are taken")
    checked: dict[str, dict[str, Any]] = {}
    for name, settings in extensions.items():
        if not isinstance(name, str) or len(name) > MAX_IDENTIFIER or not _IDENTIFIER.fullmatch(name):
            raise ValueError(
                f"extensions has the name {name!r}, which is no extension identifier: it must be "
                "'vendor-prefix/name', the prefix dot-separated labels (a reversed domain name), "
                "e.g. 'com.example/my-extension'"
            )
        if not isinstance(settings, dict):
            raise TypeError(
                f"extensions[{name!r}] must be a settings dict (may be empty), got {type(settings).__name__}"
            )
        try:
            copied = json.loads(json.dumps(settings, allow_nan=False))
        except (TypeError, ValueError) as error:
            raise ValueError(f"extensions[{name!r}] must be a JSON object: {error}") from None
        if not _string_keys(settings):
            raise ValueError(f"extensions[{name!r}] must be a JSON object: its keys must be strings")
        own = LIBRARY_EXTENSIONS.get(name)
        if own is not None and copied != own:
            raise ValueError(
                f"extensions[{name!r}] is the library's own extension, declared with the settings {own!r}; "
                f"it cannot be declared with {copied!r}"
            )
        checked[name] = copied
    return checked


def _string_keys(value: Any) -> bool:
    """Whether every object in ``value`` has string keys (json.dumps would turn others into strings)."""
    if isinstance(value, dict):
        return all(isinstance(key, str) and _string_keys(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return all(_string_keys(item) for item in value)
    return True


def with_tasks_extension(capabilities: dict[str, Any], wanted: bool) -> dict[str, Any]:
    """2026-07-28: a request about tasks (a ``taskIds`` listen, a task-augmented call) declares
    the tasks extension in its client capabilities (a server refuses it with -32021 otherwise)."""
    if not wanted:
        return capabilities
    extensions = {**capabilities.get("extensions", {}), TASKS_EXTENSION: LIBRARY_EXTENSIONS[TASKS_EXTENSION]}
    return {**capabilities, "extensions": extensions}


def server_extensions(capabilities: dict[str, Any]) -> dict[str, Any]:
    """The extensions a server declared in its capabilities (``initialize`` or ``server/discover``):
    the entries named by a string with an object as settings; anything else is skipped."""
    extensions = capabilities.get("extensions")
    if not isinstance(extensions, dict):
        return {}
    return {name: value for name, value in extensions.items() if isinstance(name, str) and isinstance(value, dict)}
