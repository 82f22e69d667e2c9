"""CatalogChanged's added/removed/changed: the pure diff (field changes, caps, bad items, two diffs
composed) and a catalog on the FakeServer (hostile lists, unread refreshes, subscribers that raise
or hang). Real peers: tests/test_catalog_diff_peers.py."""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors._api import _catalog as catalog_module
from exmcp_actors._protocol._catalog_diff import MAX_DIFFED, CatalogDiff, compose, diff_lists
from exmcp_actors._protocol._ratelog import RateLimitedLog
from exmcp_actors.testing import FakeError, FakeServer
from tests.waiting import WAIT, wait_until

OBJ = {"type": "object"}


def _tool(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "inputSchema": OBJ, **fields}


def test_a_diff_names_added_removed_and_the_top_level_fields_that_changed() -> None:
    before = [
        _tool("a"),
        _tool("b", description="B"),
        _tool("c", inputSchema={"type": "object", "properties": {"x": {"type": "string"}}}),
        _tool("d", annotations={"readOnlyHint": True}),
        _tool("e", outputSchema=OBJ),
        _tool("f"),
    ]
    after = [
        _tool("g"),
        {"description": "B", "inputSchema": OBJ, "name": "b"},  # key order is no change
        _tool("c", inputSchema={"type": "object", "properties": {"x": {"type": "integer"}}}),
        _tool("d", annotations={"readOnlyHint": False}),
        _tool("e", outputSchema={"type": "object", "properties": {}}, title="E"),
        _tool("a", description="now"),
        _tool("h"),
    ]
    diff = diff_lists("tools", before, after)
    assert diff.added == ("g", "h")
    assert diff.removed == ("f",)
    assert diff.changed == {
        "a": ("description",),
        "c": ("inputSchema",),
        "d": ("annotations",),
        "e": ("outputSchema", "title"),
    }
    assert not diff.truncated and (diff.unkeyed, diff.duplicates) == (0, 0)
    # JSON types are told apart: 1, 1.0 and true are three values.
    flags = diff_lists("tools", [_tool("a", x=1), _tool("b", x=1)], [_tool("a", x=True), _tool("b", x=1.0)])
    assert flags.changed == {"a": ("x",), "b": ("x",)}
    resources = diff_lists("resources", [{"uri": "u://1", "name": "one"}], [{"uri": "u://1", "name": "uno"}])
    assert resources == CatalogDiff((), (), {"u://1": ("name",)})


def test_bad_items_are_left_out_and_duplicates_count_once() -> None:
    after: list[Any] = [_tool("a"), "not an object", {"name": 7}, {"title": "no name"}, _tool("a", title="again")]
    diff = diff_lists("tools", [], after)
    assert diff.added == ("a",) and diff.changed == {}
    assert (diff.unkeyed, diff.duplicates) == (3, 1)
    # The first of a key is the one compared.
    assert diff_lists("tools", [_tool("a")], after).changed == {}


def test_a_huge_list_is_diffed_up_to_the_cap_and_no_further() -> None:
    huge = [_tool(f"t{n}") for n in range(MAX_DIFFED * 5)]
    diff = diff_lists("tools", huge, [*huge[:10], _tool("t10", title="x"), *huge[11:]])
    assert diff.truncated and diff.changed == {"t10": ("title",)} and diff.added == diff.removed == ()
    # Past the cap nothing is compared: the last item's change is not seen.
    assert diff_lists("tools", huge, [*huge[:-1], _tool("last")]).added == ()


def test_a_value_with_no_json_form_counts_as_changed_and_does_not_raise() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    diff = diff_lists("tools", [_tool("a", x=deep)], [_tool("a", x=deep)])
    assert diff.changed == {"a": ("x",)}


def test_two_diffs_compose_into_the_diff_across_both() -> None:
    lists = [
        [_tool("a"), _tool("b"), _tool("c"), _tool("d")],
        [_tool("b", title="1"), _tool("c"), _tool("e"), _tool("f")],  # - a d, + e f, ~ b
        [_tool("b", title="1", description="2"), _tool("d"), _tool("e", title="3"), _tool("g")],  # - c f, + d g
    ]
    first, second = diff_lists("tools", lists[0], lists[1]), diff_lists("tools", lists[1], lists[2])
    both = compose("tools", first, second, lists[2])
    direct = diff_lists("tools", lists[0], lists[2])
    assert both.added == direct.added == ("e", "g")
    assert set(both.removed) == set(direct.removed) == {"a", "c"}
    assert both.changed["b"] == direct.changed["b"] == ("description", "title")
    # d was removed and came back: its old fields are gone, so every field of the new one is named.
    assert both.changed["d"] == ("inputSchema", "name") and "d" not in direct.changed
    assert set(both.changed) == {"b", "d"}


def _next(catalog: Any) -> mcp.CatalogChanged:
    message = catalog.get(timeout=WAIT)
    assert isinstance(message, mcp.CatalogChanged)
    return message


def test_a_catalog_publishes_each_refresh_with_its_diff() -> None:
    with FakeServer() as server:
        server.set_items("tools", [_tool("x"), _tool("y"), _tool("z")])
        with mcp.connect(server.transport()) as client, client.catalog() as catalog:
            server.set_items("tools", [_tool("x"), _tool("z", annotations={"destructiveHint": True}), _tool("w")])
            server.list_changed("tools")
            changed = _next(catalog)
            assert len(changed) == 7
            assert changed[4:] == (("w",), ("y",), {"z": ("annotations",)})
            assert catalog.diff_truncated == {"tools": False, "prompts": False, "resources": False}
            server.list_changed("tools")  # nothing changed
            assert _next(catalog)[4:] == ((), (), {})


def test_a_hostile_list_is_capped_logged_once_and_never_hurts_the_catalog(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The log is shared by every catalog: a fresh one, so no earlier test's record holds this one back.
    monkeypatch.setattr(catalog_module, "_DIFF_LOG", RateLimitedLog(catalog_module.logger))
    with FakeServer() as server, mcp.connect(server.transport()) as client, client.catalog() as catalog:
        hostile: list[Any] = [_tool(f"t{n}") for n in range(MAX_DIFFED + 5)]
        hostile[1:1] = [_tool("t0", title="dup"), 42, {"name": None}]
        server.set_items("tools", hostile)
        caplog.set_level(logging.WARNING, logger="exmcp_actors.catalog")
        for _ in range(2):
            server.list_changed("tools")
            changed = _next(catalog)
            assert changed.items == catalog.tools
        assert catalog.diff_truncated["tools"]
        records = [record.getMessage() for record in caplog.records if record.name == "exmcp_actors.catalog"]
        assert sum("only the first 10000 are diffed" in text for text in records) == 1, records
        assert any("repeat the name of an earlier one" in text for text in records), records
        assert any("are not objects with a string 'name'" in text for text in records), records
        server.set_items("tools", [_tool("small")])
        server.list_changed("tools")
        changed = _next(catalog)
        assert changed.added == ("small",) and len(changed.removed) == MAX_DIFFED - 3
        assert catalog.diff_truncated["tools"]  # the list before it was cut
        server.list_changed("tools")
        assert _next(catalog)[4:] == ((), (), {}) and not catalog.diff_truncated["tools"]


def test_refetches_that_keep_failing_are_logged_at_most_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    # A server that floods list_changed and fails every tools/list made one warning per
    # refetch: hundreds of records a second.
    failing = threading.Event()
    failing.set()

    def listing(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if failing.is_set() and server.count("tools/list") > 1:
            raise FakeError(-32000, "boom \x1b[2J")
        return {"tools": [_tool("after")] if not failing.is_set() else [_tool("before")]}

    with FakeServer() as server, mcp.connect(server.transport()) as client, client.catalog() as catalog:
        server.on("tools/list", listing)
        caplog.set_level(logging.WARNING, logger="exmcp_actors.catalog")
        for n in range(20):
            server.list_changed("tools")
            wait_until(lambda n=n: server.count("tools/list") >= n + 2, what=f"refetch {n + 1}")
        failing.clear()
        server.list_changed("tools")  # a marker: the worker refetches in order, after every failure
        assert _next(catalog).added == ("after",)
        failures = [r.getMessage() for r in caplog.records if "refetching tools failed" in r.getMessage()]
        assert len(failures) == 1, failures
        assert "\x1b" not in failures[0]  # the server's text is escaped


def test_unread_refreshes_are_kept_as_one_message_with_both_diffs() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client, client.catalog() as catalog:
        before = catalog.tools
        catalog._publish("tools", [*before, _tool("new")])  # as the worker does after each refetch
        catalog._publish("tools", [_tool(item["name"], title="t") for item in before[1:]] + [_tool("new")])
        assert catalog.pending() == 1
        changed = _next(catalog)
        assert changed.added == ("new",) and changed.removed == (before[0]["name"],)
        assert set(changed.changed) == {item["name"] for item in before[1:]}


class _Raising:
    def put(self, message: Any) -> None:
        raise RuntimeError("a host bug")


class _Slow:
    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.got: queue.Queue[Any] = queue.Queue()

    def put(self, message: Any) -> None:
        self.entered.set()
        self.release.wait(WAIT)
        self.got.put(message)


def test_a_raising_or_hanging_subscriber_hurts_no_other_catalog() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        slow = _Slow()
        raising = client.catalog(subscriber=_Raising())
        hanging = client.catalog(subscriber=slow)
        try:
            with client.catalog() as catalog:
                server.set_items("tools", [_tool("only")])
                server.list_changed("tools")
                assert slow.entered.wait(WAIT)  # it holds its catalog's worker
                changed = _next(catalog)
                assert changed.added == ("only",) and changed.catalog is catalog
                server.set_items("tools", [_tool("only", title="t")])
                server.list_changed("tools")
                assert _next(catalog).changed == {"only": ("title",)}
            slow.release.set()
            assert slow.got.get(timeout=WAIT).added == ("only",)
        finally:
            slow.release.set()
            raising.close()
            hanging.close()


class _CountedName(str):
    """A name that counts how often it is compared for equality: a membership test in a
    list compares it with each item, one in a set or a dict with about one."""

    compared = 0
    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        _CountedName.compared += 1
        return str.__eq__(self, other)


def test_composing_two_diffs_compares_each_name_about_once() -> None:
    # A server that swaps its whole list each refresh, with the host not reading: the unread
    # diffs are composed on the catalog's worker, so compose must stay linear in the names
    # (a membership test in a list made it quadratic; that cost is in C, so it is counted).
    n = 2_000
    a = [_tool(_CountedName(f"a{k}")) for k in range(n)]
    b = [_tool(_CountedName(f"b{k}")) for k in range(n)]
    first, second = diff_lists("tools", a, b), diff_lists("tools", b, a)
    assert all(type(name) is _CountedName for name in (*first.added, *first.removed))
    _CountedName.compared = 0
    both = compose("tools", first, second, a)
    assert both.added == () and both.removed == () and len(both.changed) == n
    assert _CountedName.compared <= 4 * n, f"{_CountedName.compared:,} comparisons for {n:,} names a side"
