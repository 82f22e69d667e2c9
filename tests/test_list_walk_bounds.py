"""A listing's walk over every page is bounded in time, items and bytes, whatever the server's
cursors do: a catalog's first listing within its timeout, a list_*() within its timeout (the
whole walk), the catalog worker's refetch within the client's request_timeout, and every walk
refused once it gathered MAX_ITEMS items or MAX_WALK_BYTES of pages."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors._api import _lists
from exmcp_actors.testing import FakeServer
from tests.waiting import WAIT, wait_until


def _endless(pause: float = 0.0, per_page: int = 1, fat: str = "") -> Any:
    """A tools/list whose cursors never end."""

    def page(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        at = int(params.get("cursor") or 0)
        if pause:
            time.sleep(pause)
        tools = [{"name": f"t{at}-{n}", "description": fat, "inputSchema": {"type": "object"}} for n in range(per_page)]
        return {"tools": tools, "nextCursor": str(at + 1)}

    return page


def test_a_catalog_over_cursors_that_never_end_gives_up_within_its_timeout() -> None:
    with FakeServer() as server:
        server.on("tools/list", _endless(pause=0.02), concurrent=True)
        with mcp.connect(server.transport()) as client:
            started = time.monotonic()
            with pytest.raises(mcp.RequestTimeout, match="tools/list was not walked to its last page in time"):
                client.catalog(timeout=0.5)
            assert time.monotonic() - started < 0.5 + WAIT / 4
            pages = server.count("tools/list")
            assert 5 <= pages < 200


def test_a_list_call_bounds_its_whole_walk_by_its_timeout() -> None:
    with FakeServer() as server:
        server.on("tools/list", _endless(pause=0.02), concurrent=True)
        with mcp.connect(server.transport(), request_timeout=WAIT) as client:
            started = time.monotonic()
            with pytest.raises(mcp.RequestTimeout):
                client.list_tools(timeout=0.4)
            assert time.monotonic() - started < 0.4 + WAIT / 4


def test_a_walk_past_the_item_bound_is_refused_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_lists, "MAX_ITEMS", 250)
    with FakeServer() as server:
        server.on("tools/list", _endless(per_page=100))
        with mcp.connect(server.transport()) as client:
            with pytest.raises(
                mcp.ProtocolError,
                match=r"tools/list returned more than 250 items over 3 pages: the listing is refused \(list_page\(\)",
            ):
                client.list_tools(timeout=WAIT)
            assert server.count("tools/list") == 3  # refused at the page that crossed the bound


def test_a_walk_past_the_byte_bound_is_refused_and_the_catalog_goes_on_with_what_it_had(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pages of 200 KB with cursors that never end: refused after about 1 MiB (the bound
    here), not held until the server stops; a catalog's worker refetch that meets it keeps the
    last list, and refetches again at the next change."""
    monkeypatch.setattr(_lists, "MAX_WALK_BYTES", 1 << 20)
    with FakeServer() as server:
        with mcp.connect(server.transport()) as client, client.catalog(timeout=WAIT) as catalog:
            before = catalog.tools
            listed = server.default_handler("tools/list")
            assert listed is not None
            server.on("tools/list", _endless(fat="x" * 200_000))
            walked = server.count("tools/list")
            with pytest.raises(mcp.ProtocolError, match=r"more than 1 MiB of pages \(as compact JSON\) over 6 pages"):
                client.list_tools(cache=False, timeout=WAIT)
            server.list_changed("tools")
            refused = walked + 12  # this walk's 6 pages, then the worker's 6
            wait_until(
                lambda: server.count("tools/list") >= refused, WAIT, "the worker's refetch, refused at the bound"
            )
            assert catalog.tools == before
            server.on("tools/list", listed)
            server.set_items("tools", [*before, {"name": "late", "inputSchema": {"type": "object"}}])
            server.list_changed("tools")
            changed = catalog.get(timeout=WAIT)
            while changed[0] != "ex_mcp_catalog_changed":
                changed = catalog.get(timeout=WAIT)
            assert changed.added == ("late",)


def _holds_a_tool(value: Any, depth: int = 4) -> bool:
    """Whether ``value`` reaches a tool of :func:`_endless` within ``depth`` containers."""
    if isinstance(value, dict):
        if str(value.get("name", "")).startswith("t") and "inputSchema" in value:
            return True
        return depth > 0 and any(_holds_a_tool(item, depth - 1) for item in value.values())
    if isinstance(value, list | tuple | set):
        return depth > 0 and any(_holds_a_tool(item, depth - 1) for item in value)
    return False


@pytest.mark.parametrize("how", ["refused", "timed out"])
def test_a_walk_that_fails_leaves_nothing_it_gathered_to_the_error_it_raises(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host (or a Call, as the error of a relisting) may keep the error for long: its
    traceback keeps the walk's frames alive, and they must not hold the pages' items."""
    monkeypatch.setattr(_lists, "MAX_ITEMS", 250)
    release = threading.Event()
    endless = _endless(per_page=100)

    def page(params: dict[str, Any], ctx: Any) -> Any:
        if how == "timed out" and params.get("cursor") is not None:
            release.wait(WAIT)  # the second page never comes in time
        return endless(params, ctx)

    with FakeServer() as server:
        server.on("tools/list", page, concurrent=True)
        with mcp.connect(server.transport(), request_timeout=WAIT) as client:
            try:
                with pytest.raises(mcp.RequestTimeout if how == "timed out" else mcp.ProtocolError) as raised:
                    client.list_tools(timeout=0.3 if how == "timed out" else WAIT)
            finally:
                release.set()
    frames = []
    tb = raised.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    assert any(frame.f_code.co_name == "_walk" for frame in frames)
    held = [
        (frame.f_code.co_name, name)
        for frame in frames
        for name, value in frame.f_locals.items()
        if _holds_a_tool(value)
    ]
    assert held == []


def test_a_walk_of_pages_dense_in_values_is_refused_by_their_number_not_only_their_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An empty object is 3 bytes of compact JSON and some 70 decoded: 64 MiB of them held
    some 1.8 GB. A walk counts its pages' values (brackets and commas) too."""
    monkeypatch.setattr(_lists, "MAX_WALK_VALUES", 50_000)

    def page(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        at = int(params.get("cursor") or 0)
        schema = {"type": "object", "x": [{}] * 20_000}
        return {"tools": [{"name": f"t{at}", "inputSchema": schema}], "nextCursor": str(at + 1)}

    with FakeServer() as server:
        server.on("tools/list", page)
        with mcp.connect(server.transport()) as client:
            with pytest.raises(
                mcp.ProtocolError, match=r"tools/list returned more than 50,000 JSON values over 2 pages: the listing"
            ):
                client.list_tools(timeout=WAIT)
            assert server.count("tools/list") == 2


def _deeper(frames: int, call: Any) -> Any:
    """``call()`` from ``frames`` frames deeper in this thread's stack."""
    return call() if frames == 0 else _deeper(frames - 1, call)


def test_a_page_too_deep_for_the_hosts_stack_to_encode_is_charged_its_own_size() -> None:
    """The reader decodes a page near the top of its stack, a host's thread may be too deep
    to encode it again: such a page counts what it holds, not the largest frame (16 MiB each,
    so that five small pages were refused as more than 64 MiB)."""
    deep: Any = {}
    for _ in range(900):
        deep = {"d": deep}

    def page(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        at = int(params.get("cursor") or 0)
        listed = {"tools": [{"name": f"t{at}", "inputSchema": {"type": "object", "x": deep}}]}
        return {**listed, "nextCursor": str(at + 1)} if at < 5 else listed

    with FakeServer() as server:
        server.on("tools/list", page)
        with mcp.connect(server.transport()) as client:
            # Python 3.11 counts the host's frames against the encoder's depth, so the page is
            # too deep to encode there; 3.12 on gives the encoder a C stack budget of its own.
            too_deep = _deeper(100, lambda: _lists._kept_form(page({}, None))) is None
            assert too_deep == (sys.version_info < (3, 12))
            tools = _deeper(100, lambda: client.list_tools(timeout=WAIT))
            assert [tool["name"] for tool in tools] == [f"t{at}" for at in range(6)]
