"""The live picture of a server against fastmcp 4.1.6 (tests/peers/fastmcp_server.py), a server
written elsewhere, in both eras, across a kill and a restart.

What fastmcp does differently from the SDK peers: on 2025-11-25 it advertises ``listChanged``
for every list (and sends ``tools/list_changed`` when a tool asks it to); on 2026-07-28 it
advertises none, answers ``subscriptions/listen`` with -32601 and puts ``ttlMs: 0`` on every
result; it never offers ``resources/subscribe``. Its tools carry ``_meta``, ``outputSchema``
and an automatic ``title``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from tests.cli_helpers import run_cli
from tests.peers.fastmcp_peer import fastmcp_argv, missing_tools
from tests.sdk_helpers import ClientPool, TapTransport, kill_pid
from tests.waiting import wait_until

WAIT = 20.0
FAST = mcp.Backoff(initial=0.05, factor=2, maximum=0.5, jitter=0.1)
PATIENT: dict[str, Any] = {"backoff": FAST, "max_reconnect_attempts": 60, "connect_timeout": WAIT}
ERAS = [pytest.param("legacy", id="legacy"), pytest.param("auto", id="modern")]

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))


@pytest.fixture
def pool() -> Iterator[ClientPool]:
    made = ClientPool()
    yield made
    made.close_all()


def stdio(pool: ClientPool, protocol: str, **options: Any) -> tuple[mcp.Client, TapTransport]:
    tap = TapTransport(mcp.StdioTransport(fastmcp_argv()))
    client = pool.connect(tap, protocol=protocol, **{**PATIENT, **options})
    assert client.era == ("legacy" if protocol == "legacy" else "modern")
    return client, tap


# -- resource watches ----------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ERAS)
def test_a_resource_watch_of_fastmcp_says_it_cannot_follow_changes_and_rereads_after_a_kill(
    pool: ClientPool, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    client, tap = stdio(pool, protocol)
    assert (client.server_capabilities or {})["resources"]["subscribe"] is False
    with caplog.at_level(logging.WARNING, logger="exmcp_actors.resource_watch"):
        watch = client.watch_resource("demo://a", timeout=WAIT)
    first = watch.get(timeout=WAIT)
    assert isinstance(first, mcp.ResourceChanged) and first.contents[0]["text"] == "demo://a v0"
    # fastmcp has no resources/subscribe (nor, on 2026-07-28, subscriptions/listen): the watch
    # says so, on the handle and in the log, instead of waiting silently for changes.
    assert watch.follows_changes is False
    said = [r.getMessage() for r in caplog.records if r.name == "exmcp_actors.resource_watch"]
    assert any("demo://a" in line and "cannot tell" in line for line in said), said
    assert not tap.sent_messages("resources/subscribe")

    client.call_tool("touch", {"uri": "demo://a"}, timeout=WAIT)
    reads = watch.reads
    pid = tap.pid
    assert pid is not None
    kill_pid(pid)
    # After the reconnect the resource is read again (the new process is back at v0: the
    # contents this handle already has, so nothing is delivered; the read is counted).
    wait_until(lambda: watch.reads > reads, WAIT, "a re-read after the reconnect")
    assert tap.pid != pid and watch.follows_changes is False
    client.call_tool("touch", {"uri": "demo://a"}, timeout=WAIT)
    client.disconnect()
    closed = watch.get(timeout=WAIT)
    assert isinstance(closed, mcp.Closed), closed


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_exmcp_watch_resource_says_when_fastmcp_cannot_tell_of_changes(era: str) -> None:
    done = run_cli("--resource", "demo://a", "--era", era, "--count", "1", "--", *fastmcp_argv(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["demo://a = demo://a v0"]
    notice = "exmcp-watch: python cannot tell of changes to demo://a"
    assert notice in done.stderr, done.stderr
