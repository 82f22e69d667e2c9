"""The ``mcpServers`` configuration desktop hosts use, parsed and checked, shared by :class:`Hub` and the CLI.

Config is data: a :class:`ServerSpec` says what to run or where to point, and
whoever connects turns it into a transport (``_connect.spec_transport``).

The format::

    {"mcpServers": {
        "files": {"command": "python", "args": ["server.py"], "env": {"K": "V"}, "cwd": "/srv"},
        "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ..."}}
    }}

A ``"type"`` key (``stdio``, ``http``, ``streamable-http``, ``ws``) is accepted and checked
against the rest; ``"sse"`` (the old HTTP+SSE transport) is refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._util._redact import redact_url

_TYPES = frozenset({"stdio", "http", "streamable-http", "streamableHttp", "ws", "websocket"})


class ConfigError(ValueError):
    """An ``mcpServers`` configuration that cannot be used; its str() names the server and the key."""


@dataclass(frozen=True)
class ServerSpec:
    """One server of a configuration: a command (stdio) or a URL (WebSocket / Streamable HTTP)."""

    name: str
    command: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """What it runs or where it points, without secrets (no env values, header values, argv)."""
        if self.url is not None:
            return redact_url(self.url, query_names=True)
        return os.path.basename(self.command[0])


def load_config(source: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, ServerSpec]:
    """The servers of an ``mcpServers`` config: a path to a JSON file, or the dict itself.

    Raises:
        ConfigError: unreadable file, bad JSON, or a server entry that is not well formed.
    """
    if isinstance(source, Mapping):
        data: Any = source
    elif isinstance(source, (str, os.PathLike)):
        try:
            with open(source, encoding="utf-8") as fh:
                data = json.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read the config file {os.fspath(source)!r}: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"the config file {os.fspath(source)!r} is not valid JSON: {exc}") from None
    else:
        raise TypeError(f"a config is a file path or a dict, got {type(source).__name__}")
    servers = data.get("mcpServers") if isinstance(data, Mapping) else None
    if not isinstance(servers, Mapping):
        raise ConfigError('the config has no "mcpServers" object (expected {"mcpServers": {name: {...}}})')
    if not servers:
        raise ConfigError('the config\'s "mcpServers" object names no server')
    return {str(name): parse_server(str(name), entry) for name, entry in servers.items()}


def _strings(name: str, key: str, value: Any, kind: type) -> Any:
    if kind is list:
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ConfigError(f'server {name!r}: "{key}" must be a list of strings')
    elif kind is dict:
        if not (isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values())):
            raise ConfigError(f'server {name!r}: "{key}" must be an object of strings')
    elif not (isinstance(value, str) and value):
        raise ConfigError(f'server {name!r}: "{key}" must be a non-empty string')
    return value


def parse_server(name: str, entry: Any) -> ServerSpec:
    """One checked server entry (see the module docstring)."""
    if not isinstance(entry, Mapping):
        raise ConfigError(f"server {name!r}: its entry must be an object with a command or a url")
    kind = entry.get("type")
    if kind == "sse":
        raise ConfigError(
            f"server {name!r}: the old HTTP+SSE transport is not supported; "
            "use the server's Streamable HTTP endpoint (type http) or stdio"
        )
    if kind is not None and kind not in _TYPES:
        raise ConfigError(f"server {name!r}: unknown type {kind!r} (use stdio, http or ws)")
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise ConfigError(f'server {name!r}: give exactly one of "command" (stdio) or "url"')
    if has_url:
        url = _strings(name, "url", entry["url"], str)
        headers = dict(_strings(name, "headers", entry.get("headers", {}), dict))
        if url.split(":", 1)[0].lower() not in ("ws", "wss", "http", "https"):
            raise ConfigError(f"server {name!r}: the url must start with ws://, wss://, http:// or https://")
        return ServerSpec(name, url=url, headers=headers)
    command = _strings(name, "command", entry["command"], str)
    args = _strings(name, "args", entry.get("args", []), list)
    env = entry.get("env")
    cwd = entry.get("cwd")
    return ServerSpec(
        name,
        command=(command, *args),
        env=dict(_strings(name, "env", env, dict)) if env is not None else None,
        cwd=_strings(name, "cwd", cwd, str) if cwd is not None else None,
    )
