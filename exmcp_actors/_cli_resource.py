"""``exmcp-watch --resource URI``: a resource's contents once, then again after each change.

    demo://counter = 7                 (``[server] ...`` when there are several servers)
    demo://counter = 8
    demo://counter: read failed: ...

A text content is printed escaped and cut at :data:`_TEXT_LIMIT` characters (newlines shown
as ``\\n``, so one change is one line); a blob as its size; past that many characters in all, the
rest of a read's contents as their number. With ``--json`` each line is an
object ``{"time", "server", "event", "uri", ...}``: ``event`` ``contents`` with ``contents``
(as read), ``read_failed`` with ``error``. ``--count N`` exits 0 after N contents lines.
"""

from __future__ import annotations

import queue
import time
from typing import IO, Any, Final

from ._api._hub import Hub
from ._api._resource_watch import ResourceChanged, ResourceReadFailed, ResourceWatch
from ._cli_lines import LinePrinter, say
from ._protocol._errors import Error
from ._protocol._messages import CLOSED
from ._protocol._peer_text import peer_text

#: Characters of a text content a line shows.
_TEXT_LIMIT: Final = 2000
#: Seconds of one wait on a watch, so a signal is handled promptly.
_POLL: Final = 0.5


def _shown(contents: list[dict[str, Any]]) -> str:
    parts: list[str] = []
    size = 0
    for at, item in enumerate(contents):
        if size >= _TEXT_LIMIT:  # a read may hold a million contents: the line stays one screen
            parts.append(f"... {len(contents) - at} more contents")
            break
        if isinstance(item.get("text"), str):
            parts.append(peer_text(item["text"].replace("\n", "\\n"), _TEXT_LIMIT))
        elif isinstance(item.get("blob"), str):
            parts.append(f"<blob of {len(item['blob']) * 3 // 4} bytes>")
        else:
            parts.append("<no text>")
        size += len(parts[-1])
    return " | ".join(parts) if parts else "<empty>"


class ResourcePrinter(LinePrinter):
    """Writes a line per message of the watches; everything from a server is escaped."""

    def line(self, server: str, message: Any) -> None:
        if self._json:
            record: dict[str, Any] = {"time": round(time.time(), 3), "server": server, "uri": message.uri}
            if isinstance(message, ResourceChanged):
                record.update(event="contents", contents=message.contents)
            else:
                record.update(event="read_failed", error=str(message.error))
            self._write_json(record)
            return
        uri = peer_text(message.uri, 400)
        if isinstance(message, ResourceChanged):
            self._write_text(server, f"{uri} = {_shown(message.contents)}")
        else:
            self._write_text(server, f"{uri}: read failed: {peer_text(str(message.error), 400)}")


def show_resource(hub: Hub, uri: str, out: IO[str], err: IO[str], *, as_json: bool, count: int | None) -> int:
    """Watch ``uri`` on every server of ``hub`` and print its contents until ``count`` contents
    lines (or every watch closed: status 1); returns the exit status."""
    watches: dict[str, ResourceWatch] = {}
    try:
        for name, client in hub.clients.items():
            try:
                watches[name] = client.watch_resource(uri)
            except Error as exc:
                say(err, f"cannot watch {uri} on {name}: {exc}")
                continue
            if not watches[name].follows_changes:
                # Otherwise the one contents line reads like a resource that has not changed yet.
                say(err, f"{name} cannot tell of changes to {uri}: its contents are shown now and after a reconnect")
        if not watches:
            return 1
        printer = ResourcePrinter(out, as_json=as_json, several=len(hub.specs) > 1)
        return _follow(watches, printer, count)
    finally:
        for watch in watches.values():
            watch.close()


def _follow(watches: dict[str, ResourceWatch], printer: ResourcePrinter, count: int | None) -> int:
    seen = 0
    live = dict(watches)
    while live:
        for name, watch in list(live.items()):
            try:
                message = watch.get(timeout=_POLL / len(live))
            except queue.Empty:
                continue
            if message[0] == CLOSED:
                del live[name]
                continue
            if isinstance(message, (ResourceChanged, ResourceReadFailed)):
                printer.line(name, message)
                if isinstance(message, ResourceChanged):
                    seen += 1
                    if count is not None and seen >= count:
                        return 0
    return 1
