"""Resource watches against the official Python SDK 1.9.0 server (tests/peers/sdk1_server.py),
on which most Python servers in the field are built: it keeps subscribed URIs as pydantic
``AnyUrl`` values, so its ``resources/updated`` carries its own spelling of the URI (a space
escaped, scheme and host in lower case, an http authority given the path "/"); and it
advertises ``resources.subscribe: false`` unless the server applies the known workaround."""

from __future__ import annotations

import pytest

import exmcp_actors as mcp
from tests.peers.sdk1_peer import missing_tools, sdk1_argv
from tests.sdk_helpers import ClientPool, TapTransport

WAIT = 20.0

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))


def text_of(watch: mcp.ResourceWatch) -> str:
    message = watch.get(timeout=WAIT)
    assert isinstance(message, mcp.ResourceChanged), message
    return str(message.contents[0]["text"])


@pytest.mark.parametrize(
    ("uri", "spelled"),
    [
        ("file:///a b.txt", "file:///a%20b.txt"),
        ("http://example.com", "http://example.com/"),
        ("HTTP://Example.com/x", "http://example.com/x"),
    ],
)
def test_a_watch_hears_an_update_in_the_servers_own_spelling_of_the_uri(
    pool: ClientPool, uri: str, spelled: str
) -> None:
    tap = TapTransport(mcp.StdioTransport(sdk1_argv("--advertise-subscribe")))
    client = pool.connect(tap, protocol="legacy", connect_timeout=WAIT)
    watch = client.watch_resource(uri, timeout=WAIT)
    assert watch.follows_changes
    assert text_of(watch) == f"{spelled} v0"
    client.call_tool("touch", {}, timeout=WAIT)
    assert text_of(watch) == f"{spelled} v1"
    updates = [f["params"]["uri"] for f in tap.received_frames() if isinstance(f, dict) and "method" in f]
    assert updates == [spelled]  # the wire: the server's spelling, not the one subscribed


def test_without_the_workaround_the_watch_says_it_cannot_follow_changes(pool: ClientPool) -> None:
    client = pool.connect(mcp.StdioTransport(sdk1_argv()), protocol="legacy", connect_timeout=WAIT)
    assert (client.server_capabilities or {})["resources"]["subscribe"] is False
    watch = client.watch_resource("file:///a b.txt", timeout=WAIT)
    assert text_of(watch) == "file:///a%20b.txt v0"
    assert watch.follows_changes is False
