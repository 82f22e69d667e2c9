"""The live picture of a server against the npm reference server ``server-everything``
(tests/peers/everything.py; TypeScript SDK 1.x, MCP 2025-11-25 only), over stdio, across a kill.

Its dynamic resources (``demo://resource/dynamic/text/N`` and ``.../blob/N``, a blob in base64)
are made on each read with the time of day to the second; ``toggle-subscriber-updates`` sends
``resources/updated`` for every URI the session subscribed, once at once and then every 5 s.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest

import exmcp_actors as mcp
from tests.peers.everything import everything_argv, missing_tools
from tests.sdk_helpers import ClientPool, TapTransport, kill_pid
from tests.test_status_peers import assert_a_reconnect, read_until_ready
from tests.waiting import wait_until

WAIT = 20.0
FAST = mcp.Backoff(initial=0.05, factor=2, maximum=0.5, jitter=0.1)
TEXT = "demo://resource/dynamic/text/1"
BLOB = "demo://resource/dynamic/blob/1"

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))


def connect(pool: ClientPool, **options: Any) -> tuple[mcp.Client, TapTransport]:
    tap = TapTransport(mcp.StdioTransport(everything_argv()))
    client = pool.connect(
        tap, protocol="legacy", backoff=FAST, connect_timeout=WAIT, max_reconnect_attempts=60, **options
    )
    return client, tap


def shown(watch: mcp.ResourceWatch) -> str:
    """The next contents of ``watch``, as text (a blob decoded)."""
    message = watch.get(timeout=WAIT)
    assert isinstance(message, mcp.ResourceChanged), message
    (item,) = message.contents
    assert item["uri"] == watch.uri
    return item["text"] if "text" in item else base64.b64decode(item["blob"]).decode()


def a_second_later() -> None:
    """Until the clock's second has moved on: what the server reads from now on differs from
    what it read before (its contents carry the time to the second)."""
    now = int(time.time())
    wait_until(lambda: int(time.time()) > now, 2.0, "the next second")


def test_watches_of_a_text_and_a_blob_resource_follow_its_updates_and_a_kill(pool: ClientPool) -> None:
    client, tap = connect(pool)
    text, blob = client.watch_resource(TEXT, timeout=WAIT), client.watch_resource(BLOB, timeout=WAIT)
    assert text.follows_changes and blob.follows_changes
    before = shown(text), shown(blob)
    assert before[0].startswith("Resource 1: This is a plaintext resource created at ")
    assert before[1].startswith("Resource 1: This is a base64 blob created at ")

    a_second_later()
    client.call_tool("toggle-subscriber-updates", {}, timeout=WAIT)  # an update of each, at once
    after = shown(text), shown(blob)
    assert after[0] != before[0] and after[1] != before[1]
    assert [m["params"]["uri"] for m in tap.sent_messages("resources/subscribe")] == [TEXT, BLOB]

    a_second_later()
    pid = tap.pid
    assert pid is not None
    kill_pid(pid)
    # The respawned server is subscribed again and each resource read again: news, a second on.
    again = shown(text), shown(blob)
    assert again[0] != after[0] and again[1] != after[1]
    assert tap.pid != pid and tap.connection == 2
    assert sorted(m["params"]["uri"] for m in tap.sent_messages("resources/subscribe", connection=2)) == [BLOB, TEXT]
    text.close()
    blob.close()
    wait_until(lambda: len(tap.sent_messages("resources/unsubscribe", connection=2)) == 2, WAIT, "both unsubscribed")


def test_keepalive_pings_are_answered_and_status_follows_a_kill(pool: ClientPool) -> None:
    client, tap = connect(pool, keepalive=0.3)
    watch = client.watch({"toolsListChanged": True, "status": True}, timeout=WAIT)
    ready = {"era": "legacy", "protocolVersion": "2025-11-25"}
    assert watch.get(timeout=WAIT) == mcp.Status("ex_mcp_status", watch, "ready", ready)
    wait_until(lambda: client._inspect()["keepalive"][1] >= 2, WAIT, "two probes answered")
    pings = {m["id"] for m in tap.sent_messages("ping", connection=1)}
    answered = {f.get("id") for f in tap.received_frames(1) if isinstance(f, dict) and f.get("result") == {}}
    assert len(pings & answered) >= 2 and tap.connection == 1
    pid = tap.pid
    assert pid is not None
    kill_pid(pid)
    # server-everything says tools/list_changed once it knows the client (each process):
    # the status messages around it are in order.
    heard = [m for m in read_until_ready(watch) if not isinstance(m, mcp.Notification)]
    assert_a_reconnect(heard, "transport_closed")
    assert tap.pid != pid and client.list_tools()
