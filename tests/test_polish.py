"""What a newcomer trips on: version, clientInfo, LICENSE, connect() arguments, .../sse URLs, get_nowait()."""

from __future__ import annotations

import configparser
import queue
import sys
from pathlib import Path

import pytest

import exmcp_actors as mcp
from exmcp_actors._api._connect import make_transport
from exmcp_actors._util._redact import redact_url
from exmcp_actors._version import installed_version
from exmcp_actors.testing import FakeServer

ROOT = Path(__file__).resolve().parents[1]
DEMO = [sys.executable, "-m", "exmcp_actors._demo"]


def test_version_and_client_info_come_from_the_package() -> None:
    from exmcp_actors import _version

    assert mcp.__version__ == _version.__version__
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    assert parser["metadata"]["version"] == "attr: exmcp_actors._version.__version__"
    with FakeServer() as server, mcp.connect(server.transport(), protocol="legacy"):
        (init,) = server.messages("initialize")
    assert init["params"]["clientInfo"] == {"name": "exmcp_actors", "version": installed_version()}


def test_installed_version_falls_back_to_the_source_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert installed_version() == mcp.__version__


def test_license_matches_setup_cfg() -> None:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    assert parser["metadata"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_a_string_command_is_refused_with_a_hint() -> None:
    with pytest.raises(ValueError, match=r"pass its argv as a list, e.g. connect\(\['python', 'server.py'\]\)"):
        mcp.connect("python server.py")
    with pytest.raises(ValueError, match="unsupported URL scheme 'ftp'"):
        mcp.connect("ftp://user:secret@host/x")
    with pytest.raises(ValueError) as raised:
        mcp.connect("ftp://user:secret@host/x")
    assert "secret" not in str(raised.value)


def test_connect_passes_env_and_cwd_to_the_server_process(tmp_path: Path) -> None:
    transport = make_transport(["server"], env={"A": "1"}, cwd=str(tmp_path))
    assert isinstance(transport, mcp.StdioTransport)
    assert (transport.env, transport.cwd, transport.inherit_env) == ({"A": "1"}, str(tmp_path), False)
    assert make_transport(["server"], inherit_env=True).inherit_env is True  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="env=, cwd= and inherit_env= apply to a server command"):
        mcp.connect("ws://localhost:1/", env={"A": "1"})
    with pytest.raises(ValueError, match="inherit_env= apply to a server command"):
        mcp.connect("ws://localhost:1/", inherit_env=True)
    env = {"PYTHONPATH": str(ROOT)}
    with mcp.connect(DEMO, env=env, cwd=str(tmp_path), name="demo") as client:
        assert client.name == "demo" and client.server_info["name"] == "exmcp-demo"


def test_an_sse_url_is_refused_with_what_to_use() -> None:
    with pytest.raises(mcp.ConnectError) as raised:
        mcp.connect("https://example.com/sse?key=secret")
    text = str(raised.value)
    assert "old HTTP+SSE transport" in text and "Streamable HTTP" in text and "secret" not in text
    assert raised.value.reason == "sse_transport_unsupported"
    assert redact_url("https://u:p@h:8/a?x=1&y=2", query_names=True) == "https://h:8/a?x=...&y=..."


def test_get_nowait_raises_empty_or_returns_what_is_already_there() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        with client.watch({"toolsListChanged": True}) as watch:
            with pytest.raises(queue.Empty):
                watch.get_nowait()
            server.list_changed("tools")
            assert watch.get(timeout=5).method == "notifications/tools/list_changed"
            changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
            server.send_batch([changed, changed])  # one delivery: both land in the inbox together
            watch.get(timeout=5)
            assert watch.get_nowait().method == "notifications/tools/list_changed"


def test_api_md_points_only_at_files_that_exist() -> None:
    import re

    text = (ROOT / "docs" / "API.md").read_text()
    paths = set(re.findall(r"(?<![\w/.])((?:[\w.-]+/)+[\w.-]+\.(?:py|md|cfg|json))", text))
    paths |= set(re.findall(r"\]\(([^)#:]+)\)", text))
    assert paths, "the check found no paths at all"
    missing = [p for p in sorted(paths) if not ((ROOT / p).exists() or (ROOT / "docs" / p).exists())]
    assert missing == []
