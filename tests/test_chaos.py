"""Chaos: the real SDK server is killed and brought back at random points, over stdio,
WebSocket and Streamable HTTP, while many listeners exist and others come and go.

At the end every listener is accounted for (it still receives, or it got its ``Closed``)
and the server's subscriptions are exactly the union of the live listeners' URIs.

The normal suite runs a short version (two kills per transport); ``EXMCP_SOAK=1`` runs a
long one (``EXMCP_SOAK_ROUNDS`` kills per transport, 25 by default).
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from tests.peers.launch import WarmPeer, peer_argv
from tests.sdk_helpers import (
    FAST_BACKOFF,
    RESOURCE_UPDATED,
    WAIT,
    TapTransport,
    kill_pid,
    notify,
    server_stats,
    settle,
)
from tests.waiting import wait_until

SOAK = os.environ.get("EXMCP_SOAK") == "1"
ROUNDS = int(os.environ.get("EXMCP_SOAK_ROUNDS", "25")) if SOAK else 2
URIS = [f"file:///chaos/{n}.txt" for n in range(6)]
LISTENERS = 24
#: Errors a listener call may meet while the server is down or coming back.
EXPECTED = (mcp.NotConnected, mcp.ConnectionLost, mcp.RequestTimeout, mcp.SubscribeFailed, mcp.ListenerNotFound)


class Chaos:
    """One client against one SDK peer it can kill at will (ws/http: a warm standby comes back)."""

    def __init__(self, kind: str, seed: int) -> None:
        self.kind = kind
        self.rng = random.Random(seed)
        self.peer: WarmPeer | None = None
        #: How many connections the client had opened when the server was last killed.
        self.connections_at_kill = 0
        if kind == "stdio":
            # The client spawns a fresh server process on every reconnect.
            inner: mcp.Transport = mcp.StdioTransport(peer_argv("stdio", "legacy"))
        else:
            self.peer = WarmPeer(kind, "legacy").start()
            url = self.peer.url
            inner = mcp.WebSocketTransport(url) if kind == "ws" else mcp.HttpTransport(url)
        self.tap = TapTransport(inner)
        self.client = mcp.connect(self.tap, protocol="legacy", backoff=FAST_BACKOFF, max_reconnect_attempts=1000)

    def kill(self) -> None:
        """SIGKILL the server: no close frame, no final answers, every session gone."""
        self.connections_at_kill = self.tap.connection
        if self.peer is not None:
            self.peer.kill()
        elif (pid := self.tap.pid) is not None:
            with contextlib.suppress(ProcessLookupError):  # it died already (killed a moment ago)
                kill_pid(pid)

    def bring_back(self) -> None:
        if self.peer is not None:
            self.peer.start()

    def close(self) -> None:
        self.client.disconnect()
        if self.peer is not None:
            self.peer.stop()


@pytest.fixture(params=["stdio", "ws", "http"])
def chaos(request: pytest.FixtureRequest) -> Iterator[Chaos]:
    seed = int(os.environ.get("EXMCP_CHAOS_SEED", str(random.randrange(1 << 30))))
    print(f"chaos seed {seed} ({request.param})")  # shown with a failure, to replay it
    made = Chaos(request.param, seed)
    try:
        yield made
    finally:
        made.close()


def churn(chaos: Chaos, stop: threading.Event, errors: list[BaseException]) -> None:
    """Listeners come and go all through the chaos; each one is unsubscribed before it is forgotten."""
    rng = random.Random(chaos.rng.random())
    client = chaos.client
    while not stop.is_set():
        try:
            listener = client.subscribe_notifications(
                {"resourceSubscriptions": rng.sample(URIS, rng.randint(1, 3))}, timeout=2.0
            )
        except EXPECTED:
            stop.wait(0.05)  # the server is down: try again shortly
            continue
        except BaseException as error:
            errors.append(error)
            return
        try:
            stop.wait(rng.uniform(0.0, 0.1))
            listener.unsubscribe()
        except EXPECTED:
            pass  # closed meanwhile, or the unsubscribe could not reach the server: either is fine
        except BaseException as error:
            errors.append(error)
            return


def reopened(chaos: Chaos) -> None:
    """Wait until the client noticed the last kill: it opened a new connection since."""
    tap, before = chaos.tap, chaos.connections_at_kill
    tap.wait_for(lambda: tap.connection > before, 6 * WAIT, "a connection opened after the kill")


def wait_ready(client: mcp.Client, timeout: float) -> None:
    wait_until(lambda: client.status in ("ready", "disconnected"), timeout, "the client ready")
    assert client.status == "ready", "the client gave up"


def expect_update(listener: Any, uri: str) -> bool:
    """Read until the update for ``uri``; skips Reconnected and other updates. False if it closed."""
    deadline = time.monotonic() + 3 * WAIT
    while True:
        message = listener.get(timeout=max(0.01, deadline - time.monotonic()))
        if isinstance(message, mcp.Closed):
            return False
        if isinstance(message, mcp.Notification) and message.method == RESOURCE_UPDATED:  # noqa: SIM102
            if message.params.get("uri") == uri:
                return True


def test_kills_and_restarts_at_random_points_leave_every_listener_accounted_for(chaos: Chaos) -> None:
    client, rng = chaos.client, chaos.rng
    live: dict[Any, list[str]] = {}
    for _ in range(LISTENERS):
        uris = rng.sample(URIS, rng.randint(1, 3))
        live[client.subscribe_notifications({"resourceSubscriptions": uris}, timeout=WAIT)] = uris
    stop, errors = threading.Event(), list[BaseException]()
    churner = threading.Thread(target=churn, args=(chaos, stop, errors), name="chaos-churn", daemon=True)
    churner.start()
    try:
        for _ in range(ROUNDS):
            wait_ready(client, 6 * WAIT)
            chaos.kill()
            if rng.random() < 0.5:
                time.sleep(rng.uniform(0.0, 0.3))  # a random point of the client's reconnect attempts
            chaos.bring_back()
            if rng.random() < 0.3:
                # Again while the client is in its handshake or its resubscription.
                reopened(chaos)
                time.sleep(rng.uniform(0.0, 0.05))
                chaos.kill()
                chaos.bring_back()
            reopened(chaos)  # not "ready" on the connection just killed, before the client noticed
    finally:
        stop.set()
        churner.join(3 * WAIT)
    assert not churner.is_alive()
    assert errors == []
    wait_ready(client, 6 * WAIT)
    # "ready" comes before the reconnect's resubscription ends (it goes over the same wire);
    # an update the server sends before it knows a URI again is not for us to see.
    settle(client)

    # Accounted for: every listener still receives (or got its Closed, which it may not have here).
    union = sorted({uri for uris in live.values() for uri in uris})
    for uri in union:
        notify(client, "resource_updated", uri)
    for listener, uris in live.items():
        for uri in sorted(uris):
            assert expect_update(listener, uri), f"{listener!r} closed: {client.status}"
    # The server holds exactly what the live listeners need, once each.
    settle(client)
    assert server_stats(client)["subscribed"] == dict.fromkeys(union, 1)
