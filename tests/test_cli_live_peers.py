"""``exmcp-watch --catalog`` and ``--resource`` as a subprocess against a server written elsewhere,
the TypeScript SDK v2 server over Streamable HTTP (its documented stateful composition for 2025
traffic), in both eras, across a kill and a restart of the server on the same port. Another
client changes the server; exmcp-watch's JSON lines must show each change."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from tests.cli_helpers import Cli
from tests.peers.launch import Peer
from tests.peers.ts_peer import missing_tools, ts_http_peer
from tests.sdk_helpers import FAST_BACKOFF

#: A restarted node server and exmcp-watch's own backoff, on a loaded 2-core machine.
SLOW = 30.0

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))


@pytest.fixture
def peer() -> Iterator[Peer]:
    with ts_http_peer("stateful") as started:
        yield started


def _is(event: str, key: str) -> Any:
    return lambda line: line["event"] == event and line.get("key", line.get("uri")) == key


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_exmcp_watch_catalog_shows_a_ts_servers_changes_and_its_restart(peer: Peer, era: str) -> None:
    with Cli("--catalog", "--era", era, peer.url) as cli:
        cli.wait_line(_is("listed", "echo"), "echo listed")
        with mcp.connect(peer.url, backoff=FAST_BACKOFF) as client:
            client.call_tool("catdiff_reshape", {"name": "cli_t", "properties": ["a"]})
            added = cli.wait_line(_is("added", "cli_t"), "the added tool")
            assert added["kind"] == "tool"
            client.call_tool("catdiff_reshape", {"name": "cli_t", "properties": ["a"], "readOnly": True})
            changed = cli.wait_line(_is("changed", "cli_t"), "the reshaped tool")
            assert changed["fields"] == ["annotations"]
        peer.kill()
        peer.start()
        cli.wait_line(_is("removed", "cli_t"), "the tool gone after the restart", SLOW)
        rc, _ = cli.interrupt()
        assert rc in (0, 130), cli.stderr
        assert "Traceback" not in cli.stderr, cli.stderr


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_exmcp_watch_resource_shows_a_ts_servers_contents_each_change_and_its_restart(peer: Peer, era: str) -> None:
    def text(line: dict[str, Any]) -> str:
        (item,) = line["contents"]
        return str(item["text"])

    with Cli("--resource", "demo://a", "--era", era, peer.url) as cli:
        assert text(cli.wait_line(_is("contents", "demo://a"), "the contents")) == "demo://a v0"
        with mcp.connect(peer.url, backoff=FAST_BACKOFF) as client:
            client.call_tool("touch", {"uri": "demo://a"})
            assert text(cli.wait_line(_is("contents", "demo://a"), "the changed contents")) == "demo://a v1"
        peer.kill()
        peer.start()  # a fresh process, back at v0: read again once reconnected
        assert text(cli.wait_line(_is("contents", "demo://a"), "the contents after the restart", SLOW)) == "demo://a v0"
        rc, _ = cli.interrupt()
        assert rc in (0, 130), cli.stderr
        assert "cannot tell of changes" not in cli.stderr and "Traceback" not in cli.stderr, cli.stderr
