"""Resource watches against real servers over stdio, in both eras: the Python SDK 2.3.0 server
(tests/peers/sdk_server.py, tool ``notify`` bumps a resource's version) and the TypeScript SDK
v2 server (tests/peers/ts_server.mjs, tool ``touch``). The watch delivers the contents first,
the re-read contents after each change, and after a kill and respawn of the server a re-read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from tests.sdk_helpers import STDIO_ERA_PEERS, ClientPool, TapTransport, kill_pid, stdio_era_argv

WAIT = 20.0
FAST = mcp.Backoff(initial=0.05, factor=2, maximum=0.5, jitter=0.1)

#: peer -> (uri, the tool that changes it, the text of each version)
SUBJECT: dict[str, tuple[str, str, Any]] = {
    "sdk": ("file:///a.txt", "notify", lambda n: f"a.txt version {n}"),
    "ts": ("demo://a", "touch", lambda n: f"demo://a v{n - 1}"),
}


@pytest.fixture
def pool() -> Iterator[ClientPool]:
    made = ClientPool()
    yield made
    made.close_all()


def change(client: mcp.Client, peer: str) -> None:
    uri, tool, _text = SUBJECT[peer]
    args: dict[str, Any] = {"kind": "resource_updated", "uri": uri} if peer == "sdk" else {"uri": uri}
    client.call_tool(tool, args, timeout=WAIT)


def next_contents(watch: mcp.ResourceWatch) -> Any:
    message = watch.get(timeout=WAIT)
    assert isinstance(message, mcp.ResourceChanged), message
    assert message.handle is watch
    return message.contents[0]["text"]


@pytest.mark.parametrize(("peer", "protocol"), STDIO_ERA_PEERS)
def test_a_watch_carries_contents_across_changes_and_a_kill_and_restart(
    pool: ClientPool, peer: str, protocol: str
) -> None:
    tap = TapTransport(mcp.StdioTransport(stdio_era_argv(peer, protocol)))
    client = pool.connect(tap, protocol=protocol, backoff=FAST, connect_timeout=WAIT, max_reconnect_attempts=60)
    assert client.era == ("legacy" if protocol == "legacy" else "modern")
    uri, _tool, text = SUBJECT[peer]
    watch = client.watch_resource(uri, timeout=WAIT)
    other = client.watch_resource(uri, timeout=WAIT)
    assert next_contents(watch) == text(1)
    assert next_contents(other) == text(1)
    assert watch.follows_changes and other.follows_changes
    change(client, peer)
    assert next_contents(watch) == text(2)
    assert next_contents(other) == text(2)
    reads = watch.reads
    change(client, peer)
    assert next_contents(watch) == text(3)
    assert watch.reads == reads + 1  # two handles, one shared read per change
    assert next_contents(other) == text(3)

    pid = tap.pid
    assert pid is not None
    kill_pid(pid)
    # The new process starts from its first version: the re-read after the reconnect shows it.
    assert next_contents(watch) == text(1)
    assert next_contents(other) == text(1)
    assert tap.pid != pid
    change(client, peer)
    assert next_contents(watch) == text(2)
    other.close()
    client.disconnect()
    closed = watch.get(timeout=WAIT)
    assert isinstance(closed, mcp.Closed), closed
