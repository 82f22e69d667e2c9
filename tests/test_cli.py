"""``exmcp-watch`` end to end, as a subprocess, against the real SDK peer over stdio, WebSocket and HTTP."""

from __future__ import annotations

import configparser
import io
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors import _cli
from tests.cli_helpers import ROOT, Cli, run_cli, wait_gone
from tests.peers.launch import peer_argv
from tests.sdk_helpers import WAIT
from tests.waiting import wait_until

URI_A = "file:///a.txt"
FAST = mcp.Backoff(initial=0.05, factor=2, maximum=0.5, jitter=0.1)


def _notify(url: str, kind: str, uri: str | None = None) -> None:
    """Make the peer push to every session, from a client of its own."""
    with mcp.connect(url, backoff=FAST) as client:
        client.call_tool("notify", {"kind": kind, **({"uri": uri} if uri else {})})


def _clean_exit(cli: Cli) -> None:
    rc, took = cli.interrupt()
    assert rc in (0, 130), cli.stderr
    assert took < 2.0, f"exited {took:.2f}s after SIGINT"
    assert "Traceback" not in cli.stderr, cli.stderr


@pytest.mark.parametrize(("kind", "era"), [("ws", "both"), ("http", "legacy")])
def test_url_target_prints_notifications_and_a_reconnect(kind: str, era: str, request: pytest.FixtureRequest) -> None:
    peer = request.getfixturevalue(f"sdk_{kind}_peer" if era == "both" else f"sdk_{kind}_peer_legacy")
    with Cli("--uri", URI_A, peer.url) as cli:
        connected = cli.wait_method("connected")
        assert connected["params"]["era"] == ("modern" if era == "both" else "legacy")
        _notify(peer.url, "tools")
        line = cli.wait_method("notifications/tools/list_changed")
        assert set(line) >= {"server", "method", "params", "time"}
        _notify(peer.url, "resource_updated", URI_A)
        assert cli.wait_method("notifications/resources/updated")["params"]["uri"] == URI_A

        peer.kill()
        peer.start()
        reconnected = cli.wait_method("reconnected", timeout=20)
        assert reconnected["params"]["failed"] == []
        if era == "legacy":
            assert reconnected["params"]["resubscribed"] == [URI_A]
        _clean_exit(cli)


def test_stdio_command_reconnects_and_ctrl_c_stops_the_server(sdk_stdio_argv: list[str]) -> None:
    with Cli("--uri", URI_A, "--", *sdk_stdio_argv) as cli:
        connected = cli.wait_method("connected")
        assert connected["server"] == Path(sdk_stdio_argv[0]).name
        (server,) = cli.children()
        server.kill()  # an abrupt death: the client starts a new process and says so
        cli.wait_method("reconnected", timeout=20)
        children = cli.children()
        assert children and server.pid not in {c.pid for c in children}
        _clean_exit(cli)
        assert wait_gone(children) == [], "a server process outlived exmcp-watch"


def test_config_watches_two_servers_each_line_labelled(
    shared_ws_peer: Any, shared_http_peer: Any, tmp_path: Path
) -> None:
    config = tmp_path / "servers.json"
    servers = {"one": {"url": shared_ws_peer.url}, "two": {"url": shared_http_peer.url}}
    config.write_text(json.dumps({"mcpServers": servers}))
    with Cli("--config", str(config)) as cli:
        cli.wait_method("connected")
        cli.wait_method("connected")
        assert {line["server"] for line in cli.lines} == {"one", "two"}
        _notify(shared_http_peer.url, "prompts")
        cli.wait_method("notifications/prompts/list_changed", server="two")
        _notify(shared_ws_peer.url, "resources")
        cli.wait_method("notifications/resources/list_changed", server="one")
        _clean_exit(cli)


def test_demo_with_count_exits_by_itself() -> None:
    done = run_cli("--demo", "--json", "--count", "3", timeout=20)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0]["method"] == "connected" and lines[0]["server"] == "demo"
    notifications = [line for line in lines if line["event"] == "notification"]
    assert len(notifications) == 3
    assert done.stderr == ""


def test_demo_ctrl_c_stops_the_demo_server() -> None:
    with Cli("--demo") as cli:
        cli.wait_method("notifications/resources/updated")
        children = cli.children()
        assert len(children) == 1
        _clean_exit(cli)
        assert wait_gone(children) == []


def _run_here(*args: str) -> tuple[int, str, str]:
    """The command in this process (no interpreter start-up): status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    try:
        rc = _cli.run(list(args), out, err)
    except SystemExit as exc:  # argparse's usage errors
        rc = int(exc.code or 0)
    return rc, out.getvalue(), err.getvalue()


def test_text_output_has_a_time_stamp_and_the_server_name() -> None:
    rc, stdout, stderr = _run_here("--demo", "--count", "1")
    assert rc == 0, stderr
    first = stdout.splitlines()[0]
    stamp, name, method = first.split()[:3]
    assert len(stamp) == len("12:34:56.789") and stamp[2] == ":" and name == "demo" and method == "connected"
    assert "\033[" not in stdout  # no colour when stdout is not a terminal


def test_a_terminal_gets_colour() -> None:
    class Tty:
        def __init__(self) -> None:
            self.text = ""

        def write(self, text: str) -> None:
            self.text += text

        def flush(self) -> None:
            pass

    out = Tty()
    _cli.Printer(out, as_json=False, colour=True).line("s", "notifications/tools/list_changed", {})  # type: ignore[arg-type]
    assert "\033[" in out.text and "notifications/tools/list_changed" in out.text


def test_unreachable_server_is_one_line_and_a_failure() -> None:
    done = run_cli("http://127.0.0.1:9/mcp", timeout=30)
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("exmcp-watch: cannot connect to 127.0.0.1:9:") and "refused" in line


def test_refused_handshake_is_one_line_and_a_failure() -> None:
    rc, stdout, stderr = _run_here("--era", "modern", "--", *peer_argv("stdio", "legacy"))
    assert rc == 1 and stdout == ""
    (line,) = stderr.splitlines()
    assert line.startswith("exmcp-watch: cannot connect to")


def test_a_bad_config_or_bad_arguments_exit_with_status_2_and_say_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, stderr = _run_here("--config", "/nonexistent/servers.json")
    assert rc == 2
    assert stderr.splitlines() == [
        "exmcp-watch: cannot read the config file '/nonexistent/servers.json': No such file or directory"
    ]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"mcpServers": {"x": {"url": "http://h/sse", "type": "sse"}}}))
    rc, _, stderr = _run_here("--config", str(bad))
    assert rc == 2 and "HTTP+SSE transport is not supported" in stderr
    assert _run_here("ftp://example.com")[0] == 2
    assert _run_here("--demo", "http://example.com")[0] == 2  # two sources
    assert _run_here("--demo", "--count", "0")[0] == 2
    assert "exactly one of" in capsys.readouterr().err


def test_console_script_entry_point_resolves() -> None:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    (line,) = [x for x in parser["options.entry_points"]["console_scripts"].splitlines() if x.strip()]
    name, target = (part.strip() for part in line.split("="))
    assert name == "exmcp-watch"
    module, func = target.split(":")
    assert (module, func) == ("exmcp_actors._cli", "main")
    assert getattr(sys.modules[module], func) is _cli.main
    installed = [ep for ep in metadata.entry_points(group="console_scripts") if ep.name == "exmcp-watch"]
    for ep in installed:  # present once the package is (re)installed from this tree
        assert ep.value == target


def test_python_m_without_watch_shows_usage() -> None:
    import subprocess

    from tests.cli_helpers import cli_env

    done = subprocess.run(
        [sys.executable, "-m", "exmcp_actors"],
        check=False,
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "watch" in done.stderr


NEVER_ANSWERS = "import sys, time; sys.stdin.readline(); open(sys.argv[1], 'w').close(); time.sleep(60)"


def test_ctrl_c_during_a_connect_that_never_answers_exits_promptly(tmp_path: Path) -> None:
    heard = tmp_path / "heard"
    # A server that reads the probe, says so through a file, and never answers.
    never = [sys.executable, "-c", NEVER_ANSWERS, str(heard)]
    with Cli("--", *never) as cli:
        # Another process's file: nothing to wait on but a poll.
        wait_until(heard.exists, WAIT, "the server to read the probe", every=0.05)
        children = cli.children()
        assert children, "exmcp-watch did not start its server"
        rc, took = cli.interrupt()  # the connect is under way, waiting for an answer
        assert rc in (0, 130), cli.stderr
        assert took < 2.5, f"exited {took:.2f}s after SIGINT"
        assert "Traceback" not in cli.stderr, cli.stderr
        assert wait_gone(children) == []
