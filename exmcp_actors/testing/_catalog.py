"""The fake's scripted content: tools, resources and prompts, and the built-in answers that serve them."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

from exmcp_actors.testing._codec import encode
from exmcp_actors.testing._connection import FakeConnection, Handler
from exmcp_actors.testing._protocol import INVALID_PARAMS, KINDS, FakeError, ListKind, check_choice, uri_param

#: One item of each kind, for a server given none (copied: servers share nothing).
_DEFAULT_ITEMS: dict[str, dict[str, Any]] = {
    "tools": {
        "name": "echo",
        "description": "Echo the arguments back as text.",
        "inputSchema": {"type": "object"},
    },
    "resources": {
        "uri": "file:///fake/readme.txt",
        "name": "readme.txt",
        "mimeType": "text/plain",
    },
    "prompts": {
        "name": "greet",
        "description": "Say hello.",
        "arguments": [{"name": "who", "required": False}],
    },
}


class Catalog:
    """The items a server lists and the built-in handlers that serve them.

    That is ``tools/list``, ``resources/list``, ``prompts/list``, ``tools/call``,
    ``resources/read`` and ``prompts/get``.

    Args:
        lock: the server's lock.
        page_size: the server's current page size (None: one page).
        tools, resources, prompts: the items; None for one default item each.
    """

    def __init__(
        self,
        lock: threading.RLock,
        page_size: Callable[[], int | None],
        tools: list[dict[str, Any]] | None,
        resources: list[dict[str, Any]] | None,
        prompts: list[dict[str, Any]] | None,
    ) -> None:
        self._lock = lock
        self._page_size = page_size
        given = {"tools": tools, "resources": resources, "prompts": prompts}
        self._items: dict[str, list[dict[str, Any]]] = {
            kind: list(items) if items is not None else [copy.deepcopy(_DEFAULT_ITEMS[kind])]
            for kind, items in given.items()
        }
        self._resource_texts: dict[str, str] = {}

    def handlers(self) -> dict[str, Handler]:
        """Method name to built-in handler."""
        return {
            "tools/list": self._lister("tools"),
            "resources/list": self._lister("resources"),
            "prompts/list": self._lister("prompts"),
            "tools/call": self._call_tool,
            "resources/read": self._read_resource,
            "prompts/get": self._get_prompt,
        }

    def set_items(self, kind: ListKind, items: list[dict[str, Any]]) -> None:
        """See :meth:`FakeServer.set_items`."""
        check_choice("kind", kind, KINDS)
        with self._lock:
            self._items[kind] = list(items)

    def set_resource_text(self, uri: str, text: str) -> None:
        """See :meth:`FakeServer.set_resource_text`."""
        with self._lock:
            self._resource_texts[uri] = text

    def _lister(self, kind: str) -> Handler:
        def list_items(params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
            with self._lock:
                items = list(self._items[kind])
            size = self._page_size()
            cursor = params.get("cursor")
            start = 0
            if cursor is not None:
                # Opaque on purpose: a client doing arithmetic on cursors breaks.
                if not isinstance(cursor, str) or not cursor.startswith("page:") or not cursor[5:].isdigit():
                    raise FakeError(INVALID_PARAMS, f"Invalid cursor: {cursor!r}")
                start = int(cursor[5:])
            end = len(items) if size is None else start + size
            result: dict[str, Any] = {kind: items[start:end]}
            if end < len(items):
                result["nextCursor"] = f"page:{end}"
            return result

        return list_items

    def _known(self, kind: str, params: dict[str, Any]) -> tuple[Any, Any]:
        """``params.name`` and ``params.arguments`` (default ``{}``); -32602 unless one of ``kind`` has that name."""
        name = params.get("name")
        with self._lock:
            known = any(item.get("name") == name for item in self._items[kind])
        if not known:
            raise FakeError(INVALID_PARAMS, f"Unknown {kind[:-1]}: {name}")
        return name, params.get("arguments") or {}

    def _call_tool(self, params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        _, arguments = self._known("tools", params)
        return {
            "content": [{"type": "text", "text": encode(arguments)}],
            "isError": False,
        }

    def _read_resource(self, params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        uri = uri_param(params)
        with self._lock:
            text = self._resource_texts.get(uri, f"contents of {uri}")
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}

    def _get_prompt(self, params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        name, arguments = self._known("prompts", params)
        return {
            "description": f"prompt {name}",
            "messages": [
                {
                    "role": "user",
                    "content": {"type": "text", "text": f"{name} {encode(arguments)}"},
                }
            ],
        }
