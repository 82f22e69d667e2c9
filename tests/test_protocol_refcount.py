"""URI refcount bookkeeping and the listener index, sans-IO."""

from __future__ import annotations

import string
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exmcp_actors._protocol._filters import normalize_filter
from exmcp_actors._protocol._index import ListenerIndex
from exmcp_actors._protocol._refcount import RefcountBook


def test_only_the_first_holder_of_a_uri_needs_the_wire() -> None:
    book = RefcountBook()
    assert book.needs_subscribe("a")
    book.take("a")
    assert not book.needs_subscribe("a")
    book.take("a")
    assert book.count("a") == 2


def test_only_the_last_holder_going_away_needs_an_unsubscribe() -> None:
    book = RefcountBook()
    book.take("a")
    book.take("a")
    assert book.drop("a") is False
    assert book.drop("a") is True
    assert book.count("a") == 0 and book.is_empty()


def test_each_listener_releases_exactly_what_it_acquired() -> None:
    book = RefcountBook()
    for uri in ("a", "b"):
        book.take(uri)
    book.record("L1", ["a", "b"])
    book.take("b")
    book.record("L2", ["b"])
    assert book.forget("L1") == ("a", "b")
    assert book.forget("L1") == ()
    assert book.held_by("L2") == ("b",)
    with pytest.raises(ValueError):
        book.record("L2", ["b"])


def test_a_lost_uri_keeps_its_holders_is_retried_and_needs_no_unsubscribe_at_the_end() -> None:
    book = RefcountBook()
    book.take("a")
    book.take("a")
    book.mark_lost("a")
    assert book.count("a") == 2
    assert book.needs_subscribe("a")  # the next listener naming it tries the wire again
    assert book.drop("a") is False
    assert book.drop("a") is False  # nothing to unsubscribe: the server holds nothing
    assert book.is_empty()


def test_a_lost_uri_found_again_behaves_normally() -> None:
    book = RefcountBook()
    book.take("a")
    book.mark_lost("a")
    book.take("a")  # a new holder subscribed on the wire successfully
    assert "a" not in book.lost_uris()
    book.drop("a")
    assert book.drop("a") is True


def test_marking_an_unheld_uri_lost_leaves_nothing_behind() -> None:
    book = RefcountBook()
    book.mark_lost("ghost")
    assert book.is_empty()


def test_the_index_matches_by_uri_and_category_in_registration_order() -> None:
    index: ListenerIndex[str] = ListenerIndex()
    index.add(1, normalize_filter({"toolsListChanged": True, "resourceSubscriptions": ["a"]}), "one")
    index.add(2, normalize_filter({"resourceSubscriptions": ["a", "b"]}), "two")
    index.add(3, normalize_filter({"promptsListChanged": True}), "three")
    assert list(index.reached("notifications/resources/updated", {"uri": "a"})) == ["one", "two"]
    assert list(index.reached("notifications/resources/updated", {"uri": "b"})) == ["two"]
    assert list(index.reached("notifications/resources/updated", {"uri": "c"})) == []
    assert list(index.reached("notifications/resources/updated", {})) == []
    assert list(index.reached("notifications/resources/updated", None)) == []
    assert list(index.reached("notifications/tools/list_changed", {})) == ["one"]
    assert list(index.reached("notifications/resources/list_changed", {})) == []
    assert list(index.reached("notifications/message", {})) == []
    index.remove(1)
    index.remove(99)
    assert list(index.reached("notifications/tools/list_changed", {})) == []
    assert len(index) == 2 and 2 in index and 1 not in index
    with pytest.raises(ValueError):
        index.add(2, normalize_filter({"toolsListChanged": True}), "again")


class _NoScan(dict):  # type: ignore[type-arg]
    """A dict that refuses whole-table scans, to prove dispatch never walks every listener."""

    def values(self):  # type: ignore[no-untyped-def]
        raise AssertionError("dispatch scanned every listener")

    def items(self):  # type: ignore[no-untyped-def]
        raise AssertionError("dispatch scanned every listener")

    def __iter__(self):  # type: ignore[no-untyped-def]
        raise AssertionError("dispatch scanned every listener")


def test_dispatch_touches_only_the_matching_listeners_not_all_of_them() -> None:
    index: ListenerIndex[int] = ListenerIndex()
    for number in range(10_000):
        index.add(number, normalize_filter({"resourceSubscriptions": [f"file:///{number}"]}), number)
    index._filters = _NoScan(index._filters)  # type: ignore[assignment]
    index._by_uri = _NoScan(index._by_uri)  # type: ignore[assignment]
    index._by_category = _NoScan(index._by_category)  # type: ignore[assignment]
    assert list(index.reached("notifications/resources/updated", {"uri": "file:///4242"})) == [4242]
    assert list(index.reached("notifications/tools/list_changed", {})) == []


#: (what the host subscribed, what a server built on a URL parser sends back): pydantic's
#: AnyUrl in the Python SDK 1.x escapes spaces and non-ASCII, lower-cases scheme and host and
#: gives an http authority the path "/".
SPELLINGS = [
    ("file:///a b.txt", "file:///a%20b.txt"),
    ("file:///tmp/ü.txt", "file:///tmp/%C3%BC.txt"),
    ("http://example.com", "http://example.com/"),
    ("HTTP://Example.com/x", "http://example.com/x"),
    ("http://x.org/%7Efoo", "http://x.org/%7efoo"),
    ("http://x.org/~foo", "http://x.org/%7Efoo"),
]


@pytest.mark.parametrize(("subscribed", "sent"), SPELLINGS)
def test_an_update_in_another_spelling_of_the_subscribed_uri_reaches_its_listener(subscribed: str, sent: str) -> None:
    index: ListenerIndex[str] = ListenerIndex()
    index.add(1, normalize_filter({"resourceSubscriptions": [subscribed]}), "one")
    index.add(2, normalize_filter({"resourceSubscriptions": ["file:///other"]}), "two")
    assert list(index.reached("notifications/resources/updated", {"uri": sent})) == ["one"]
    assert list(index.reached("notifications/resources/updated", {"uri": subscribed})) == ["one"]
    flt = normalize_filter({"resourceSubscriptions": [subscribed]})
    assert flt.enables("notifications/resources/updated", {"uri": sent})
    assert flt.enables("notifications/resources/updated", {"uri": sent}, sub_resources=True)


@pytest.mark.parametrize(
    ("subscribed", "sent"),
    [
        ("file:///a", "file:///b"),
        ("demo://a/b", "demo://a/c"),
        ("file:///a%2Fb", "file:///a/b"),
        ("demo://a", "demo://ab"),
        # An empty authority before a path that starts with "//" is no authority "x".
        ("http://evil/", "http:////evil/"),
        ("demo://x/a", "demo:////x/a"),
        ("demo:////x/a", "demo://x/a"),
        ("demo://x", "demo:////x/a"),
    ],
)
def test_a_different_uri_is_not_taken_for_another_spelling(subscribed: str, sent: str) -> None:
    index: ListenerIndex[str] = ListenerIndex()
    index.add(1, normalize_filter({"resourceSubscriptions": [subscribed]}), "one")
    assert list(index.reached("notifications/resources/updated", {"uri": sent})) == []
    assert not normalize_filter({"resourceSubscriptions": [subscribed]}).enables(
        "notifications/resources/updated", {"uri": sent}, sub_resources=True
    )


def test_the_spellings_a_server_sends_cost_a_bounded_cache() -> None:
    from exmcp_actors._protocol._uris import _KEYS_CACHED, _cached_key

    index: ListenerIndex[str] = ListenerIndex()
    long = "file:///" + "x" * 100_000 + " end"
    index.add(1, normalize_filter({"resourceSubscriptions": [long]}), "one")
    for number in range(3 * _KEYS_CACHED):
        assert not list(index.reached("notifications/resources/updated", {"uri": f"file:///n{number}"}))
    assert list(index.reached("notifications/resources/updated", {"uri": long.replace(" ", "%20")})) == ["one"]
    assert _cached_key.cache_info().currsize <= _KEYS_CACHED


_URI_PARTS = st.sampled_from(
    ["http://", "https://", "HTTP://", "ws://", "file://", "file:/", "demo://", "Demo://", "a+b.c://", "mailto:"]
)
_URI_TAIL = st.text(alphabet="aAzZ09-._~:/?#[]@!$&'()*+,;=% é\u00a0x", max_size=24)


@given(_URI_PARTS, _URI_TAIL)
@settings(max_examples=2000, deadline=None)
def test_a_uri_taken_as_already_in_key_form_is_exactly_what_the_full_normalization_gives(start: str, tail: str) -> None:
    from exmcp_actors._protocol._uris import _uri_key, uri_key

    uri = start + tail
    assert uri_key(uri) == _uri_key(uri), uri


def test_what_an_update_reached_is_forgotten_when_the_index_changes_and_stays_bounded() -> None:
    from exmcp_actors._protocol import _index

    index: ListenerIndex[str] = ListenerIndex()
    updated = "notifications/resources/updated"
    index.add(1, normalize_filter({"resourceSubscriptions": ["file:///a"]}), "a")
    assert list(index.reached(updated, {"uri": "file:///b"})) == []
    index.add(2, normalize_filter({"resourceSubscriptions": ["file:///b"]}), "b")
    assert list(index.reached(updated, {"uri": "file:///b"})) == ["b"]
    index.add(3, normalize_filter({"resourceSubscriptions": ["file:///"]}), "root")
    assert list(index.reached(updated, {"uri": "file:///b"})) == ["b", "root"]
    index.remove(2)
    assert list(index.reached(updated, {"uri": "file:///b"})) == ["root"]
    for number in range(3 * _index._REACHED_KEPT):
        index.reached(updated, {"uri": f"other:///{number}"})
    assert len(index._reached) <= _index._REACHED_KEPT
    assert list(index.reached(updated, {"uri": "file:///a"})) == ["a", "root"]


def test_what_updates_reached_is_remembered_for_short_uris_alone_so_its_memory_is_bounded_in_bytes() -> None:
    """A server's URIs are its own to size (a frame is up to 16 MiB): remembering 1,024 of any
    length could hold gigabytes until the index next changed."""
    from exmcp_actors._protocol import _index
    from exmcp_actors._protocol._uris import _CACHED_CHARS

    index: ListenerIndex[str] = ListenerIndex()
    updated = "notifications/resources/updated"
    index.add(1, normalize_filter({"resourceSubscriptions": ["file:///a"]}), "a")
    for number in range(200):
        assert list(index.reached(updated, {"uri": f"file:///a/{number}/" + "x" * 100_000})) == ["a"]
        assert list(index.reached(updated, {"uri": f"file:///b/{number}/" + "x" * 100_000})) == []
    assert list(index.reached(updated, {"uri": "file:///a/short"})) == ["a"]
    assert "file:///a/short" in index._reached
    assert sum(map(len, index._reached)) <= _index._REACHED_KEPT * _CACHED_CHARS


def _escaped_char_by_char(part: str) -> str:
    """What ``_uris._escaped`` gives, one character at a time (its former implementation)."""
    hexdigits = frozenset(string.hexdigits)
    unreserved = frozenset(string.ascii_letters + string.digits + "-._~")
    uri_chars = unreserved | frozenset(":/?#[]@!$&'()*+,;=")
    out: list[str] = []
    at = 0
    while at < len(part):
        char, pair = part[at], part[at + 1 : at + 3]
        if char == "%" and len(pair) == 2 and set(pair) <= hexdigits:
            decoded = chr(int(pair, 16))
            out.append(decoded if decoded in unreserved else "%" + pair.upper())
            at += 3
            continue
        if char in uri_chars:
            out.append(char)
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
        at += 1
    return "".join(out)


_ESCAPES = st.sampled_from(
    ["%41", "%7e", "%7E", "%2f", "%2F", "%e9", "%C3%A9", "%c3%a9", "%", "%%", "%g1", "%4", "%5F"]
)
_PART = st.lists(
    st.one_of(_ESCAPES, st.text(alphabet="aZ09-._~:/?#[]@!$&'()*+,;=% é\u00a0\ud800\U0001f600\x7f", max_size=4)),
    max_size=12,
).map("".join)


@given(_PART)
@settings(max_examples=3000, deadline=None)
def test_escapes_are_put_in_one_form_exactly_as_one_character_at_a_time(part: str) -> None:
    from exmcp_actors._protocol._uris import _escaped

    assert _escaped(part) == _escaped_char_by_char(part)


def _python_lines_run(call: Any) -> int:
    """How many lines of Python ``call()`` ran, in every function it called."""
    lines = 0

    def trace(frame: Any, event: str, arg: Any) -> Any:
        nonlocal lines
        if event == "line":
            lines += 1
        return trace

    sys.settrace(trace)
    try:
        call()
    finally:
        sys.settrace(None)
    return lines


@pytest.mark.parametrize("filler", ["é", " ", "\U0001f600"])
def test_the_key_form_of_a_long_uri_costs_no_python_step_per_character(filler: str) -> None:
    """A server's resources/updated URI is keyed on the thread that reads its frames: a step per
    character cost 1.6 us each, so a 16 MiB frame of one URI held that thread some 13 s. The
    steps are counted, the same for a URI a hundred times longer. (An escape to change, say
    ``%7e`` for ``~``, still costs a step.)"""
    from exmcp_actors._protocol._uris import uri_key

    def steps(length: int) -> int:
        uri = f"file://HOST/{length}/" + filler * (length // len(filler))
        return _python_lines_run(lambda: uri_key(uri).startswith("file://host/"))

    short, long = steps(3_000), steps(300_000)
    assert long <= short + 10 and long < 500, (short, long)
