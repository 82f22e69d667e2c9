"""Many threads registering and removing listeners on shared URIs against the
real SDK server: nothing may leak, and the wire must stay paired.

Contract: BEHAVIOUR.md, Registration ("one resources/subscribe per URI, shared";
"subscribe and unsubscribe counts on the wire stay paired, and the last wire
operation for a URI with no holders is an unsubscribe") and Lifecycle.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest

import exmcp_actors as mcp
from tests.sdk_helpers import (
    TOOLS_CHANGED,
    URI_A,
    URI_B,
    URI_C,
    WAIT,
    ClientPool,
    expect_closed,
    expect_notification,
    library_actors,
    library_threads,
    notify,
    server_stats,
    settle,
    surviving_library_threads,
    target_for,
)

THREADS = 8
CYCLES_PER_THREAD = 125  # 1,000 subscribe/unsubscribe cycles in all
URIS = [URI_A, URI_B, URI_C]
#: A hard bound for the whole run (it takes a second or two).
BUDGET = 60.0


def _cycles(client: mcp.Client, seed: int, errors: list[BaseException], start: threading.Barrier) -> None:
    rng = random.Random(seed)
    try:
        start.wait(WAIT)
        for _ in range(CYCLES_PER_THREAD):
            uris = rng.sample(URIS, rng.randint(1, len(URIS)))
            flt: dict[str, Any] = {"resourceSubscriptions": uris}
            if rng.random() < 0.25:
                flt["toolsListChanged"] = True
            listener = client.subscribe_notifications(flt, timeout=WAIT)
            listener.unsubscribe(timeout=WAIT)
    except BaseException as error:  # reported by the test
        errors.append(error)


@pytest.mark.parametrize("kind", ["stdio", "ws"])
def test_a_thousand_subscribe_unsubscribe_cycles_from_eight_threads_leave_nothing_behind(
    request: pytest.FixtureRequest, pool: ClientPool, kind: str
) -> None:
    target = target_for(request, kind, "legacy")
    client = pool.connect(target.tap())
    witness = client.subscribe_notifications({"toolsListChanged": True})  # keeps one proxy busy throughout
    threads_before = {t.name for t in library_threads()}
    own_actors = {ref.actor_urn for ref in library_actors()}

    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)
    workers = [
        threading.Thread(target=_cycles, args=(client, seed, errors, start), name=f"stress-{seed}")
        for seed in range(THREADS)
    ]
    began = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(BUDGET)
    elapsed = time.monotonic() - began
    assert not any(w.is_alive() for w in workers), f"the cycles did not finish within {BUDGET}s"
    assert errors == [], f"{len(errors)} cycles failed, first: {errors[0]!r}"
    print(f"\n{kind}: {THREADS * CYCLES_PER_THREAD} cycles in {elapsed:.2f}s")

    # Client side: no listener, no proxy, no refcount left (the witness only).
    state = settle(client)
    assert state["entries"] == 1 and state["indexed"] == 1 and state["proxies"] == 1, state
    assert state["pending"] == 0
    assert state["refcount"] == {"counts": {}, "lost": [], "empty": True}

    # No extra thread, no extra actor: the per-subscriber proxies of the stress threads are gone.
    # (A proxy stops asynchronously after its last listener: join rather than look.)
    deadline = time.monotonic() + WAIT
    for thread in library_threads():
        if thread.name not in threads_before:
            thread.join(max(0.0, deadline - time.monotonic()))
    stray = [t.name for t in library_threads() if t.name not in threads_before]
    assert stray == [], f"threads left by the cycles: {stray}"
    assert {ref.actor_urn for ref in library_actors()} == own_actors

    # Server side: nothing subscribed, every subscribe paired with an unsubscribe,
    # and per URI the wire alternates subscribe/unsubscribe, ending with an unsubscribe.
    stats = server_stats(client)
    print(f"{kind}: wire subscribe calls {stats['subscribe_calls']}")
    assert stats["subscribed"] == {}
    assert set(stats["subscribe_calls"]) == set(URIS)
    for uri in URIS:
        assert stats["subscribe_calls"][uri] == stats["unsubscribe_calls"].get(uri), (uri, stats["subscribe_calls"])
        ops = [op["op"] for op in stats["ops"] if op["uri"] == uri]
        assert all(op["ok"] for op in stats["ops"])
        assert ops == ["subscribe", "unsubscribe"] * (len(ops) // 2), f"{uri}: unpaired wire operations {ops[:20]}..."

    # The client still works, then shuts down completely.
    notify(client, "tools")
    expect_notification(witness, TOOLS_CHANGED)
    client.disconnect()
    assert expect_closed(witness).reason == "disconnected"
    assert library_actors() == []
    assert surviving_library_threads() == []
