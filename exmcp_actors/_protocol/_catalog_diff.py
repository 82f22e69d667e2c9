"""What changed between two lists of a catalog kind: the keys added and removed, and for each key
kept, the top-level fields that differ.

Pure: no I/O, no state. Items are keyed by ``name`` (tools, prompts) or ``uri`` (resources) and
compared by a digest of their canonical JSON (sorted keys), so a diff costs O(n) time and a few
bytes per item beyond the lists themselves. A server decides how long its lists are: only the
first :data:`MAX_DIFFED` items of each side are compared, and the diff says it was truncated.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple, Protocol

from ._ratelog import RateLimitedLog

#: Items compared per list; past it the rest are not looked at and the diff is marked truncated.
MAX_DIFFED: Final = 10_000
#: What identifies an item of each kind.
KEYS: Final = {"tools": "name", "prompts": "name", "resources": "uri"}

#: key -> (digest of the whole item, the item).
_Index = dict[str, tuple[bytes, Mapping[str, Any]]]
#: Numbers the digests of values with no JSON form, so no two are ever equal.
_opaque = itertools.count()


class Diffed(Protocol):
    """Anything with a diff's three fields (a :class:`CatalogDiff`, a ``CatalogChanged``)."""

    @property
    def added(self) -> tuple[str, ...]: ...
    @property
    def removed(self) -> tuple[str, ...]: ...
    @property
    def changed(self) -> dict[str, tuple[str, ...]]: ...


class CatalogDiff(NamedTuple):
    """The difference of two lists of one kind."""

    #: Keys only the new list has, in its order.
    added: tuple[str, ...]
    #: Keys only the old list has, in its order.
    removed: tuple[str, ...]
    #: Key -> the sorted top-level field names whose values differ (present on one side only too).
    changed: dict[str, tuple[str, ...]]
    #: A list was longer than :data:`MAX_DIFFED`: items past it were not compared.
    truncated: bool = False
    #: Items left out: not an object, or with no string key.
    unkeyed: int = 0
    #: Items left out because an earlier item had the same key (the first one counts).
    duplicates: int = 0


#: One encoder for every canonical text: making one per value was most of a field's cost.
_CANONICAL: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=repr)


def canonical_text(value: Any) -> str | None:
    """``value``'s canonical JSON (sorted keys, ASCII); None if it has none (nested too deep, a cycle)."""
    try:
        return _CANONICAL.encode(value)
    except (ValueError, TypeError, RecursionError):
        return None


def canonical_digest(value: Any) -> bytes:
    """A digest of ``value``'s canonical JSON; equal values give equal digests.

    A value with no JSON form gets a digest of its own every time, so it always counts as
    changed rather than raising.
    """
    text = canonical_text(value)
    if text is None:
        return f"opaque-{next(_opaque)}".encode()
    return hashlib.blake2b(text.encode("ascii"), digest_size=16).digest()


def _index(items: Sequence[Any], key: str) -> tuple[_Index, bool, int, int]:
    """The first :data:`MAX_DIFFED` items by key; also whether some were past it, and how many
    were unkeyed or duplicates."""
    index: _Index = {}
    unkeyed = duplicates = 0
    for item in items[:MAX_DIFFED]:
        name = item.get(key) if isinstance(item, Mapping) else None
        if not isinstance(name, str):
            unkeyed += 1
        elif name in index:
            duplicates += 1
        else:
            index[name] = (canonical_digest(item), item)
    return index, len(items) > MAX_DIFFED, unkeyed, duplicates


def changed_fields(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, ...]:
    """The sorted top-level field names whose values differ between two items."""
    fields = set(old) | set(new)
    return tuple(
        sorted(
            str(field) for field in fields if field not in old or field not in new or _differ(old[field], new[field])
        )
    )


def _differ(old: Any, new: Any) -> bool:
    """Whether two field values differ as JSON (one with no JSON form always does)."""
    text = canonical_text(old)
    return text is None or text != canonical_text(new)


def diff_lists(kind: str, before: Sequence[Any], after: Sequence[Any]) -> CatalogDiff:
    """What changed from ``before`` to ``after``, two lists of ``kind`` (``"tools"``, ...).

    Items that are not objects, or have no string key, are left out; of several items with
    one key the first is compared and the others counted. The counts are of ``after``.
    """
    key = KEYS[kind]
    old, old_cut, _, _ = _index(before, key)
    new, new_cut, unkeyed, duplicates = _index(after, key)
    added = tuple(name for name in new if name not in old)
    removed = tuple(name for name in old if name not in new)
    changed: dict[str, tuple[str, ...]] = {}
    for name, (digest, item) in new.items():
        kept = old.get(name)
        if kept is not None and kept[0] != digest:
            changed[name] = changed_fields(kept[1], item)
    return CatalogDiff(added, removed, changed, old_cut or new_cut, unkeyed, duplicates)


def compose(kind: str, first: Diffed, second: Diffed, after: Sequence[Any]) -> CatalogDiff:
    """One diff for two in a row (old -> middle, middle -> ``after``), from the diffs alone.

    What was added or removed overall is exact. A key changed in both steps names the
    fields of either (a field changed and changed back still shows); a key removed then
    added back names every field of its new item, the old one being gone.
    """
    gone, came = set(second.removed), set(first.added)
    removed_first, came_back = set(first.removed), set(second.added)  # sets: membership stays O(1)
    changed: dict[str, tuple[str, ...]] = {}
    for name, fields in first.changed.items():
        if name not in gone:
            changed[name] = tuple(sorted({*fields, *second.changed.get(name, ())}))
    for name, fields in second.changed.items():
        if name not in came:
            changed.setdefault(name, fields)
    added_keys = {name for name in first.added if name not in gone}
    added_keys.update(name for name in second.added if name not in removed_first)
    back = [name for name in second.added if name in removed_first]
    index: _Index = _index(after, KEYS[kind])[0] if added_keys or back else {}
    for name in back:
        item = index.get(name)
        changed[name] = tuple(sorted(str(field) for field in item[1])) if item is not None else ()
    order = {name: n for n, name in enumerate(index)}
    added = tuple(sorted(added_keys, key=lambda name: order.get(name, len(order))))
    removed = tuple(
        [name for name in first.removed if name not in came_back]
        + [name for name in second.removed if name not in came]
    )
    truncated = bool(getattr(first, "truncated", False) or getattr(second, "truncated", False))
    return CatalogDiff(added, removed, changed, truncated)


def report_diff(log: RateLimitedLog, server: str, kind: str, diff: CatalogDiff) -> None:
    """Log (rate-limited) what a diff left out of a server's list of ``kind``: the server's doing."""
    if diff.truncated:
        log.warning(
            f"diff-truncated-{kind}",
            "catalog of %s: a %s list is longer than %d items; only the first %d are diffed",
            server,
            kind,
            MAX_DIFFED,
            MAX_DIFFED,
        )
    if diff.unkeyed:
        log.warning(
            f"diff-unkeyed-{kind}",
            "catalog of %s: %d %s items are not objects with a string %r; they are in no diff",
            server,
            diff.unkeyed,
            kind,
            KEYS[kind],
        )
    if diff.duplicates:
        log.warning(
            f"diff-duplicates-{kind}",
            "catalog of %s: %d %s items repeat the %s of an earlier one; the first of each is diffed",
            server,
            diff.duplicates,
            kind,
            KEYS[kind],
        )
