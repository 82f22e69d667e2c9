"""Which server a hub's ``call_tool(name)`` goes to.

``name`` is ``"server/tool"`` or a bare ``"tool"``. Every split at a ``/`` whose prefix is
a server of the hub and whose rest is a tool that server lists is a match; only when no
split matches is the whole name looked up as a tool on every server (2025-11-25 tool names
SHOULD have no ``/``; every split is tried for those that do). The lists are each
client's latest ``tools/list`` (its tool book, which every listing feeds, a hub catalog's
refetches too); a server never listed yet is listed once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from .._protocol._errors import Error

logger = logging.getLogger("exmcp_actors.hub")

#: What a server's tools are, by name (None: its list could not be fetched).
ToolNames = Callable[[str], Collection[str] | None]


class AmbiguousTool(Error, ValueError):
    """More than one server of the hub has the tool: ``.servers`` (sorted) and ``.choices``
    (the ``"server/tool"`` name of each) say how to name the one meant."""

    reason: Any = "ambiguous_tool"
    default_message = "the tool is on more than one server of the hub"

    def __init__(self, name: str = "", matches: Sequence[tuple[str, str]] = ()) -> None:
        self.name = name
        self.servers = sorted({server for server, _ in matches})
        self.choices = sorted(f"{server}/{tool}" for server, tool in matches)
        if not matches:
            super().__init__(None)
            return
        text = (
            f"tool {name!r} is on more than one server of the hub ({', '.join(self.servers)}): "
            f"name it as {' or '.join(repr(choice) for choice in self.choices)}"
        )
        if len(set(self.choices)) < len(self.choices):
            # Servers "a" and "a/b" with tools "b/x" and "x": one spelling for both.
            text += ", or call hub.clients[server].call_tool()"
        super().__init__(text, reason=("ambiguous_tool", name, self.servers))


class UnknownTool(Error, ValueError):
    """No server of the hub lists the tool: ``.servers`` were searched, ``.unlisted`` could
    not be listed."""

    reason: Any = "unknown_tool"
    default_message = "no server of the hub lists the tool"

    def __init__(self, name: str = "", servers: Sequence[str] = (), unlisted: Sequence[str] = ()) -> None:
        self.name = name
        self.servers = sorted(servers)
        self.unlisted = sorted(unlisted)
        if not name:
            super().__init__(None)
            return
        searched = ", ".join(self.servers) if self.servers else "none connected"
        text = f"no server of the hub lists a tool {name!r} (servers searched: {searched}"
        if self.unlisted:
            text += f"; their tools could not be listed: {', '.join(self.unlisted)}"
        super().__init__(text + ")", reason=("unknown_tool", name))


# Shown as exmcp_actors.AmbiguousTool, like the library's other errors (not by this module's path).
for _public in (AmbiguousTool, UnknownTool):
    _public.__module__ = "exmcp_actors"


def resolve_tool(name: str, servers: Sequence[str], names_of: ToolNames) -> tuple[str, str]:
    """``(server, tool)`` that ``name`` means (see the module docstring).

    Raises:
        AmbiguousTool: more than one match.
        UnknownTool: none.
    """
    known = set(servers)
    longest = max(map(len, servers), default=0)
    matches: list[tuple[str, str]] = []
    # Only splits within the longest server name: a long name with many slashes stays linear.
    at = name.find("/")
    while 0 <= at <= longest:
        server, tool = name[:at], name[at + 1 :]
        if tool and server in known and tool in (names_of(server) or ()):
            matches.append((server, tool))
        at = name.find("/", at + 1)
    if not matches:
        matches = [(server, name) for server in servers if name in (names_of(server) or ())]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise AmbiguousTool(name, matches)
    raise UnknownTool(name, servers, [server for server in servers if names_of(server) is None])


class ListedTools:
    """``names_of`` for :func:`resolve_tool` over a hub's clients: each server's latest
    listing, fetched once (within ``timeout``) where none was made yet; memoized per call."""

    def __init__(self, clients: Mapping[str, Any], timeout: float | None) -> None:
        self._clients = clients
        self._timeout = timeout
        self._known: dict[str, Collection[str] | None] = {}

    def __call__(self, server: str) -> Collection[str] | None:
        if server not in self._known:
            self._known[server] = self._names(self._clients[server])
        return self._known[server]

    def _names(self, client: Any) -> Collection[str] | None:
        if "tools" not in (client.server_capabilities or {}):
            return ()
        book = client._shared.tools
        if book is None or not book.has_listing:
            try:
                client.list_tools(timeout=self._timeout)
            except Error as exc:
                logger.info("hub: the tools of %r could not be listed: %s", client.name, exc)
                return None
            book = client._shared.tools
        # The book's mapping is replaced whole, never changed: read without a copy.
        return book.facts if book is not None else None
