"""A thread subscriber's stop hook has no thread of its own: its messages land in its
inboxes, so all the subscriber needs is the hook that tells the client of its end. Its
death is still noticed at once, on a real server in both eras, and a subscriber proxy
thread is started only for an actor or a ``put()`` subscriber."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import pytest

import exmcp_actors as mcp
from tests.sdk_helpers import URI_A, WAIT, library_threads, target_for
from tests.waiting import wait_until


def proxy_threads() -> list[str]:
    return [t.name for t in library_threads() if t.name.startswith("SubscriberProxy")]


@pytest.mark.parametrize(("kind", "era"), [("stdio", "legacy"), ("ws", "modern"), ("http", "modern")])
def test_a_thread_subscriber_runs_no_proxy_thread_and_its_end_still_removes_its_watch_at_once(
    request: pytest.FixtureRequest, connected_clients: list[mcp.Client], kind: str, era: str
) -> None:
    target = target_for(request, kind, era)
    client = mcp.connect(target.tap(), request_timeout=WAIT)
    connected_clients.append(client)
    assert client.era == era
    made: list[Any] = []
    registered, leave = threading.Event(), threading.Event()

    def subscriber() -> None:
        made.append(client.watch({"resourceSubscriptions": [URI_A], "toolsListChanged": True}))
        registered.set()
        leave.wait(WAIT * 4)

    thread = threading.Thread(target=subscriber, name="test-subscriber", daemon=True)
    thread.start()
    assert registered.wait(WAIT)
    assert client._inspect()["proxies"] == 1 and proxy_threads() == []

    # A put() subscriber of the same client still gets its proxy thread.
    sink: queue.SimpleQueue[Any] = queue.SimpleQueue()
    client.watch({"toolsListChanged": True}, subscriber=sink)
    assert len(proxy_threads()) == 1

    leave.set()
    thread.join(WAIT)
    ended = time.monotonic()
    wait_until(lambda: client._inspect()["entries"] == 1, WAIT, "the ended thread's watch removed")
    assert time.monotonic() - ended < 1.0  # told by the thread's end, not found by a later poll
    with pytest.raises(queue.Empty):
        made[0].get(timeout=WAIT)  # finished: drained, then ends at once
    assert client._inspect()["proxies"] == 1  # the put() subscriber's alone
