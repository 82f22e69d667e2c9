"""``exmcp-watch --resource URI``: the demo as a subprocess (both eras, text and JSON), the
refusal of --resource beside --catalog or --uri, and the printer's escaping and bounds."""

from __future__ import annotations

import io
import json
import sys

import pytest

import exmcp_actors as mcp
from exmcp_actors._cli_resource import ResourcePrinter
from tests.cli_helpers import run_cli


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_demo_resource_prints_the_contents_then_each_change(era: str) -> None:
    done = run_cli("--demo", "--resource", "demo://counter", "--era", era, "--count", "3", timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert len(lines) == 3
    values = [int(line.removeprefix("demo://counter = ")) for line in lines]
    assert values == list(range(values[0], values[0] + 3))  # the counter, then each tick


def test_demo_resource_as_json() -> None:
    done = run_cli("--demo", "--resource", "demo://clock", "--json", "--count", "2", timeout=30)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["event"] for r in records] == ["contents", "contents"]
    assert all(r["uri"] == "demo://clock" and r["server"] == "demo" for r in records)
    assert records[0]["contents"][0]["text"] != records[1]["contents"][0]["text"]


@pytest.mark.parametrize("extra", [["--catalog"], ["--uri", "demo://clock"]])
def test_resource_beside_catalog_or_uri_is_refused_saying_why(extra: list[str]) -> None:
    done = run_cli("--demo", "--resource", "demo://clock", *extra, timeout=30)
    assert done.returncode == 2
    assert "--resource shows one resource's contents" in done.stderr


def test_a_read_failure_is_a_line_naming_the_uri_and_the_error() -> None:
    out = io.StringIO()
    error = mcp.Error("the contents are 9 characters, over the cap of 8", reason=("contents_too_large", 9, 8))
    ResourcePrinter(out, as_json=False, several=False).line(
        "srv", mcp.ResourceReadFailed("ex_mcp_resource_read_failed", None, "demo://a", error)
    )
    assert out.getvalue().startswith("demo://a: read failed: ")
    out = io.StringIO()
    ResourcePrinter(out, as_json=True, several=False).line(
        "srv", mcp.ResourceReadFailed("ex_mcp_resource_read_failed", None, "demo://a", error)
    )
    record = json.loads(out.getvalue())
    assert record["event"] == "read_failed" and record["uri"] == "demo://a" and record["error"]


def test_the_printer_escapes_server_text_and_bounds_it() -> None:
    out = io.StringIO()
    printer = ResourcePrinter(out, as_json=False, several=True)
    hostile = "\x1b]0;owned\x07line1\nline2\u202e" + "x" * 10_000
    printer.line(
        "srv\x1b[2J", mcp.ResourceChanged("ex_mcp_resource_changed", None, "demo://a\x1b", [{"text": hostile}])
    )
    printer.line("srv", mcp.ResourceChanged("ex_mcp_resource_changed", None, "demo://b", [{"blob": "AAAA"}]))
    text = out.getvalue()
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    first, second = text.splitlines()
    assert first.startswith("[srv\\x1b[2J] demo://a\\x1b = ")
    assert "line1\\nline2" in first and len(first) < 2200
    assert second == "[srv] demo://b = <blob of 3 bytes>"


def test_a_json_line_stays_json_whatever_the_text_holds() -> None:
    out = io.StringIO()
    text = "del\x7f esc\x1b nel\x85 rlo\u202e"
    changed = mcp.ResourceChanged("ex_mcp_resource_changed", None, "demo://a", [{"text": text}])
    ResourcePrinter(out, as_json=True, several=False).line("srv", changed)
    line = out.getvalue()
    assert json.loads(line)["contents"][0]["text"] == text  # escaping made it no other JSON
    assert "\x1b" not in line and "\x85" not in line and "\u202e" not in line


def _strict(constant: str) -> object:
    raise ValueError(f"{constant} is no JSON")


def test_a_json_line_stays_strict_json_when_a_server_sent_nan_or_infinity() -> None:
    # Our reader accepts NaN, Infinity (and 1e400, an infinity) as Python's json does; jq and
    # every strict parser refuse them, so a line must not carry them on.
    out = io.StringIO()
    odd = [{"text": "t", "_meta": {"n": float("nan"), "big": float("inf"), "small": [float("-inf")]}}]
    ResourcePrinter(out, as_json=True, several=False).line(
        "srv", mcp.ResourceChanged("ex_mcp_resource_changed", None, "demo://a", odd)
    )
    record = json.loads(out.getvalue(), parse_constant=_strict)
    assert record["contents"][0]["text"] == "t"
    assert record["contents"][0]["_meta"] == {"n": "NaN", "big": "Infinity", "small": ["-Infinity"]}


def _nested(depth: int, leaf: object) -> dict[str, object]:
    value: object = leaf
    for _ in range(depth):
        value = {"a": value}
    return {"text": "t", "_meta": value}


@pytest.mark.parametrize("leaf", [1, float("nan")], ids=["plain", "nan"])
def test_a_json_line_stays_json_when_the_contents_nest_deeper_than_the_printer_can_go(leaf: object) -> None:
    # The reader decodes a frame near the top of its thread's stack; the printer encodes it
    # deeper down its own (and walks a NaN's levels in Python): a RecursionError ended the CLI.
    # Python 3.11 bounds the encoder by the interpreter's recursion limit, 3.12 on by a C
    # stack budget of its own, so the contents nest past both.
    out = io.StringIO()
    deep = [_nested(max(sys.getrecursionlimit(), 100_000), leaf)]
    ResourcePrinter(out, as_json=True, several=False).line(
        "srv", mcp.ResourceChanged("ex_mcp_resource_changed", None, "demo://a", deep)
    )
    assert out.getvalue().count("\n") == 1
    record = json.loads(out.getvalue(), parse_constant=_strict)
    assert (record["event"], record["uri"]) == ("contents", "demo://a")
    assert isinstance(record["contents"], str) and record["contents"].startswith("[{")


def test_a_text_line_stays_bounded_however_many_contents_a_read_has() -> None:
    # Within the watch's cap: a thousand 2,000-character texts, then 100,000 empty contents.
    out = io.StringIO()
    many = [{"text": "x" * 2000}] * 1000 + [{}] * 100_000
    ResourcePrinter(out, as_json=False, several=False).line(
        "srv", mcp.ResourceChanged("ex_mcp_resource_changed", None, "demo://a", many)
    )
    line = out.getvalue()
    assert line.count("\n") == 1 and len(line) < 10_000, len(line)
    assert line.rstrip("\n").endswith(f"... {len(many) - 1} more contents")
