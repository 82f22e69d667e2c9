"""``exmcp-watch --catalog``: the demo as a subprocess (both eras, text and JSON), two real SDK peers
in one config (lines labelled, a runtime tool change and a restart), and the printer's escaping."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors import _cli
from exmcp_actors._api._catalog import CatalogChanged
from exmcp_actors._cli_catalog import CatalogPrinter, _Shown
from tests.cli_helpers import Cli, run_cli
from tests.sdk_helpers import FAST_BACKOFF


def test_demo_catalog_lists_then_shows_the_rename_and_exits_after_count() -> None:
    done = run_cli("--demo", "--catalog", "--count", "3", timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    listed = [line for line in lines if line[:2] not in ("+ ", "- ", "~ ")]
    assert listed == [
        "tool echo",
        "tool add",
        "prompt greet",
        "resource demo://clock",
        "resource demo://counter",
        "resource demo://note/0",
    ]
    changes = lines[len(listed) :]
    assert len(changes) == 3
    assert changes[:2] == ["+ tool multiply", "- tool add"]  # the demo's first rename


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_demo_catalog_as_json_in_both_eras(era: str) -> None:
    done = run_cli("--demo", "--catalog", "--json", "--era", era, "--count", "5", timeout=30)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    changes = [(r["event"], r["kind"], r["key"], r.get("fields")) for r in records if r["event"] != "listed"]
    assert len(changes) == 5
    assert changes[:2] == [("added", "tool", "multiply", None), ("removed", "tool", "add", None)]
    assert ("changed", "resource", "demo://clock", ["annotations"]) in changes  # its lastModified
    assert {r["server"] for r in records} == {"demo"}


def _event(line: dict[str, Any], server: str, event: str, key: str) -> bool:
    return line["server"] == server and line["event"] == event and line["key"] == key


@pytest.mark.peer_args("--runtime-tools")
def test_config_of_two_peers_labels_each_line_and_follows_a_restart(
    sdk_ws_peer: Any, sdk_ws_peer_legacy: Any, tmp_path: Path
) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"a": {"url": sdk_ws_peer.url}, "b": {"url": sdk_ws_peer_legacy.url}}}))
    with Cli("--catalog", "--config", str(config)) as cli:
        cli.wait_line(lambda line: _event(line, "a", "listed", "echo"), "a's echo listed")
        cli.wait_line(lambda line: _event(line, "b", "listed", "echo"), "b's echo listed")
        with mcp.connect(sdk_ws_peer_legacy.url, backoff=FAST_BACKOFF) as client:
            client.call_tool("add_tool", {"name": "catdiff_cli"})
            cli.wait_line(lambda line: _event(line, "b", "added", "catdiff_cli"), "b's added tool")
            client.call_tool("add_tool", {"name": "catdiff_cli", "catdiff_properties": {"q": {"type": "number"}}})
            changed = cli.wait_line(lambda line: _event(line, "b", "changed", "catdiff_cli"), "b's reshaped tool")
            assert changed["fields"] == ["inputSchema"] and changed["kind"] == "tool"
        sdk_ws_peer_legacy.kill()
        sdk_ws_peer_legacy.start()
        cli.wait_line(lambda line: _event(line, "b", "removed", "catdiff_cli"), "b's tool gone after the restart", 30)
        rc, _ = cli.interrupt()
        assert rc in (0, 130), cli.stderr
        assert "Traceback" not in cli.stderr, cli.stderr


def test_the_printer_escapes_and_bounds_what_servers_name() -> None:
    out = io.StringIO()
    printer = CatalogPrinter(out, as_json=False, several=True)
    hostile = "evil\x1b]0;owned\x07\r\nforged\u202e" + "x" * 5000
    printer.line("srv\x1b[2J", "changed", "tools", hostile, ("inputSchema", "bad\x1bfield"))
    printer.line("srv", "listed", "resources", 42)  # a key that is no string, as a server may send
    first, second = out.getvalue().splitlines()
    assert "\x1b" not in first and "\x07" not in first and "\u202e" not in first
    assert first.startswith("[srv\\x1b[2J] ~ tool evil\\x1b]0;owned\\x07\\x0d\\x0aforged\\u202e")
    assert first.endswith(": inputSchema, bad\\x1bfield") and len(first) < 400
    assert second == "[srv] resource 42"
    as_json = io.StringIO()
    CatalogPrinter(as_json, as_json=True, several=False).line("s", "added", "prompts", hostile)
    record = json.loads(as_json.getvalue())
    assert record["key"] == hostile and record["kind"] == "prompt" and "\x1b" not in as_json.getvalue()


@pytest.mark.parametrize(
    "unseen",
    ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e", "\u200f", "\u061c", "\U000e0041", "\u3164"],
)
def test_a_name_that_differs_only_by_an_invisible_character_shows_the_difference(unseen: str) -> None:
    # Zero-width and tag characters, bidi marks, the soft hyphen and Hangul fillers draw
    # nothing: "tool echo" and a new "tool echo<U+200B>" printed alike, so a server could pass a
    # tool of its own off as one the user knows ("~ tool echo: inputSchema" about another tool).
    out = io.StringIO()
    printer = CatalogPrinter(out, as_json=False, several=False)
    printer.line("srv", "changed", "tools", f"ec{unseen}ho", (f"input{unseen}Schema",))
    line = out.getvalue().rstrip("\n")
    escaped = f"\\u{ord(unseen):04x}" if ord(unseen) <= 0xFFFF else f"\\U{ord(unseen):08x}"
    assert line == f"~ tool ec{escaped}ho: input{escaped}Schema"
    assert line.isascii()


def test_a_change_already_in_the_listed_lists_is_not_shown_twice() -> None:
    # A change that lands between the drain and the listing is in both: the listing shows its
    # result, and its change lines then show only what the listing did not.
    shown = _Shown()
    assert [shown.listed("s", "tools", key) for key in ("a", "b", "b", 7)] == [True, True, False, True]

    def change(added: list[Any], removed: list[Any], changed: dict[Any, tuple[str, ...]]) -> CatalogChanged:
        return CatalogChanged("ex_mcp_catalog_changed", None, "tools", [], added, removed, changed)

    lines = list(shown.news("s", change(["b", "c"], ["a", "gone"], {"b": ("inputSchema",)})))
    assert lines == [("added", "c", ()), ("removed", "a", ()), ("changed", "b", ("inputSchema",))]
    assert list(shown.news("s", change(["a", 7], [], {}))) == [("added", "a", ())]  # 7 was listed
    assert list(shown.news("other", change(["a"], [], {}))) == [("added", "a", ())]  # per server
    assert list(shown.news("s", change([], ["c", "c"], {}))) == [("removed", "c", ())]


def test_catalog_with_uri_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _cli.run(["--demo", "--catalog", "--uri", "demo://clock"], io.StringIO(), io.StringIO())
    assert exited.value.code == 2
    assert "--catalog shows only the lists: give one of them" in capsys.readouterr().err


def test_a_json_line_stays_strict_json_when_a_key_is_nan() -> None:
    out = io.StringIO()
    CatalogPrinter(out, as_json=True, several=False).line("s", "listed", "tools", float("nan"))

    def strict(constant: str) -> object:
        raise ValueError(f"{constant} is no JSON")

    assert json.loads(out.getvalue(), parse_constant=strict)["key"] == "NaN"


def test_a_text_line_stays_bounded_however_many_fields_changed() -> None:
    out = io.StringIO()
    fields = tuple(f"f{n:06}" + "x" * 100 for n in range(100_000))
    CatalogPrinter(out, as_json=False, several=False).line("s", "changed", "tools", "t", fields)
    line = out.getvalue()
    assert line.count("\n") == 1 and len(line) < 5_000, len(line)
    assert line.startswith("~ tool t: f000000") and line.rstrip("\n").endswith(" more")
