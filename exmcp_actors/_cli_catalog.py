"""``exmcp-watch --catalog``: the merged catalog of every server once, then one line per change.

    tool echo                      (``[server] tool echo`` when there are several servers)
    + tool multiply
    - tool add
    ~ resource demo://clock: annotations

With ``--json`` each line is an object: ``{"time", "server", "event", "kind", "key"}``, ``event``
being ``listed`` (the catalog at the start), ``added``, ``removed`` or ``changed`` (with
``fields``). ``--count N`` exits 0 after N change lines.
"""

from __future__ import annotations

import queue
import re
import time
from collections.abc import Iterator
from typing import IO, Any, Final

from ._api._catalog import KINDS, CatalogChanged
from ._api._hub import Hub, HubCatalog
from ._cli_lines import LinePrinter, say
from ._protocol._catalog_diff import KEYS
from ._protocol._peer_text import peer_text

#: tools -> tool: what a line calls one item of a kind.
_SINGULAR: Final = {kind: kind[:-1] for kind in KINDS}
_SIGNS: Final = {"added": "+", "removed": "-", "changed": "~"}
#: Changed fields a text line names; the rest are counted.
_FIELDS_SHOWN: Final = 20
#: Seconds between two looks at whether any server's catalog is still followed.
_POLL: Final = 0.5
#: Characters that draw nothing (the soft hyphen, zero-width ones, bidi marks, word joiners
#: and invisible operators, the BOM, variation selectors, tag characters, Hangul fillers):
#: in a name they make two keys look alike, so a text line shows them escaped.
_INVISIBLE: Final = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2060-\u2064"
    "\u206a-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)


def _visible(text: str) -> str:
    """``text`` with the characters that draw nothing escaped (``\\u200b``, ``\\U000e0041``)."""

    def escaped(match: re.Match[str]) -> str:
        code = ord(match.group())
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"

    return _INVISIBLE.sub(escaped, text)


class CatalogPrinter(LinePrinter):
    """Writes catalog lines on ``out``; every name from a server is escaped (and bounded in text)."""

    def line(self, server: str, event: str, kind: str, key: Any, fields: tuple[str, ...] = ()) -> None:
        if self._json:
            record: dict[str, Any] = {
                "time": round(time.time(), 3),
                "server": server,
                "event": event,
                "kind": _SINGULAR[kind],
                "key": key,
            }
            if event == "changed":
                record["fields"] = list(fields)
            self._write_json(record)
            return
        sign = _SIGNS.get(event)
        text = f"{sign} " if sign else ""
        text += f"{_SINGULAR[kind]} {_visible(peer_text(key) if isinstance(key, str) else peer_text(key, quote=True))}"
        if fields:
            # A hostile item may have a million fields: the line names the first few.
            shown = ", ".join(_visible(peer_text(field, 80)) for field in fields[:_FIELDS_SHOWN])
            more = len(fields) - _FIELDS_SHOWN
            text += f": {shown}" + (f", ... {more} more" if more > 0 else "")
        self._write_text(server, text)


def _listed(catalog: HubCatalog) -> Iterator[tuple[str, str, Any]]:
    for server, cat in catalog.catalogs.items():
        for kind in KINDS:
            for item in getattr(cat, kind):
                if isinstance(item, dict):
                    yield server, kind, item.get(KEYS[kind])


def _changes(message: CatalogChanged) -> Iterator[tuple[str, str, tuple[str, ...]]]:
    for key in message.added:
        yield "added", key, ()
    for key in message.removed:
        yield "removed", key, ()
    for key, fields in message.changed.items():
        yield "changed", key, fields


def _drain(catalog: HubCatalog) -> None:
    while True:
        try:
            catalog.get_nowait()
        except queue.Empty:
            return


class _Shown:
    """The keys the lines so far have shown, per server and kind: a change that lands between
    the drain and the listing is in the listed lists already, and is not shown twice."""

    def __init__(self) -> None:
        self._keys: dict[tuple[str, str], set[Any]] = {}

    def listed(self, server: str, kind: str, key: Any) -> bool:
        """Record a listed item; False if the listing showed it already."""
        keys = self._keys.setdefault((server, kind), set())
        if _hashable(key) in keys:
            return False
        keys.add(_hashable(key))
        return True

    def news(self, server: str, message: CatalogChanged) -> Iterator[tuple[str, str, tuple[str, ...]]]:
        """The lines of ``message`` that say something the lines so far did not."""
        keys = self._keys.setdefault((server, message.kind), set())
        for event, key, fields in _changes(message):
            held = _hashable(key)
            if event == "added":
                if held in keys:
                    continue
                keys.add(held)
            elif event == "removed":
                if held not in keys:
                    continue
                keys.discard(held)
            yield event, key, fields


def _hashable(key: Any) -> Any:
    """A set member for any key a server sent (a non-string name is shown quoted, as it came)."""
    return key if isinstance(key, str) else repr(key)


def show_catalog(hub: Hub, out: IO[str], err: IO[str], *, as_json: bool, count: int | None) -> int:
    """Print ``hub``'s merged catalog, then its changes until ``count`` change lines (or every
    server is gone: status 1); returns the exit status."""
    with hub.catalog() as catalog:
        for name, error in catalog.errors.items():
            say(err, f"cannot follow the catalog of {name}: {error}")
        if not catalog.handles:
            return 1
        printer = CatalogPrinter(out, as_json=as_json, several=len(hub.specs) > 1)
        _drain(catalog)  # what is queued already is in the lists listed next
        shown = _Shown()
        for server, kind, key in _listed(catalog):
            if shown.listed(server, kind, key):
                printer.line(server, "listed", kind, key)
        seen = 0
        while True:
            try:
                message = catalog.get(timeout=_POLL)  # short, so a signal is handled promptly
            except queue.Empty:
                if not any(cat._worker.is_alive() for cat in catalog.catalogs.values()):
                    return 1  # every server is gone for good
                continue
            if not isinstance(message, CatalogChanged):
                continue  # a HubCollision: the change lines already say what moved
            server = message.catalog.client.name
            for event, key, fields in shown.news(server, message):
                printer.line(server, event, message.kind, key, fields)
                seen += 1
                if count is not None and seen >= count:
                    return 0
