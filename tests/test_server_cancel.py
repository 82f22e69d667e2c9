"""A server's ``notifications/cancelled`` naming a ``subscriptions/listen`` ends that
subscription (MCP 2026-07-28 cancellation: a server MUST send it when it tears a
subscription down, and for nothing else).

The subscription closes with ``("cancelled_by_server", reason)`` and is not re-listened: a
re-listen is for a stream that ended without the server's word (the subscriptions page: "a
transport that closes without [the graceful answer] indicates an unexpected disconnect,
which the client MAY treat as a trigger to reconnect"); a cancellation is that word. The
peer is the official Python SDK 2.3.0 server over stdio, WebSocket and Streamable HTTP;
its ``teardown_listens`` tool sends the cancellation through the SDK, with or without the
graceful answer after it (the SDK's own ``ListenHandler.close`` sends only that answer).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import NO_REPLY, FakeServer
from tests.peers.launch import Peer, peer_argv
from tests.sdk_helpers import WAIT, TapTransport, next_message, server_stats

EXTRA = ("--extra-tools",)
REASON = "maintenance window \x1b[31m"
CANCELLED = ("cancelled_by_server", REASON)


@pytest.fixture(scope="module")
def peers() -> Iterator[dict[str, Peer]]:
    running = {kind: Peer(kind, "both", EXTRA).start() for kind in ("ws", "http")}
    yield running
    for peer in running.values():
        peer.stop()


def transport_for(kind: str, peers: dict[str, Peer]) -> mcp.Transport:
    if kind == "stdio":
        return mcp.StdioTransport(peer_argv("stdio", "both", extra_args=EXTRA))
    if kind == "ws":
        return mcp.WebSocketTransport(peers["ws"].url)
    return mcp.HttpTransport(peers["http"].url)


@pytest.mark.parametrize("answer", [False, True], ids=["cancellation-only", "then-graceful-answer"])
@pytest.mark.parametrize("kind", ["stdio", "ws", "http"])
def test_a_server_cancellation_closes_the_subscription_and_nothing_relistens(
    kind: str, answer: bool, peers: dict[str, Peer], caplog: pytest.LogCaptureFixture
) -> None:
    tap = TapTransport(transport_for(kind, peers))
    client = mcp.connect(tap)
    try:
        subscription = client.listen({"toolsListChanged": True})
        watch = client.watch({"resourcesListChanged": True})
        with caplog.at_level(logging.DEBUG, logger="exmcp_actors"):
            client.call_tool("teardown_listens", {"reason": REASON, "answer": answer}, timeout=WAIT)
            closed = next_message(subscription)
            assert isinstance(closed, mcp.SubscriptionClosed) and closed.reason == CANCELLED, closed
            ended = next_message(watch)
            assert isinstance(ended, mcp.Closed) and ended.reason == CANCELLED, ended
            server_stats(client)  # a round trip after the teardown: any late answer has arrived
        assert len(tap.sent_messages("subscriptions/listen")) == 2  # no re-listen
        assert tap.sent_messages("notifications/cancelled") == []  # the server ended them itself
        if kind == "http":
            # Our end of each stream is closed; with no graceful answer the stream was still open.
            closed_streams = dict(tap.stream_cancels)
            for sid in (subscription.subscription_id, watch.subscription_id):
                assert sid in closed_streams and (answer or closed_streams[sid]), tap.stream_cancels
        # The graceful answer after the cancellation is no news: skipped without a warning.
        ids = (str(subscription.subscription_id), str(watch.subscription_id))
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert not [w for w in warnings if any(sid in w for sid in ids)], warnings
        ended_lines = [r.getMessage() for r in caplog.records if "the server ended subscription" in r.getMessage()]
        assert len(ended_lines) == 2 and all("\x1b" not in line and "\\x1b" in line for line in ended_lines)
        assert client.status == "ready"
        again = client.listen({"toolsListChanged": True})  # the host may listen anew
        assert again.acknowledged_filter == {"toolsListChanged": True}
    finally:
        client.disconnect()


def test_a_cancellation_before_the_acknowledgment_fails_listen() -> None:
    # No SDK server can cancel a listen it has not acknowledged: its handler acknowledges first.
    with FakeServer(era="modern") as server:

        def cancel_it(params: dict[str, Any], ctx: Any) -> Any:
            ctx.notify("notifications/cancelled", {"requestId": ctx.request_id, "reason": "full"})
            return NO_REPLY

        server.on("subscriptions/listen", cancel_it)
        client = mcp.connect(server.transport())
        try:
            with pytest.raises(mcp.Error) as raised:
                client.listen({"toolsListChanged": True}, timeout=WAIT)
            assert raised.value.reason == ("cancelled_by_server", "full")
            assert "before acknowledging" in str(raised.value)
            assert client._inspect()["subscriptions"] == 0
        finally:
            client.disconnect()


def test_a_cancellation_naming_no_listen_leaves_subscriptions_alone() -> None:
    with FakeServer(era="modern") as server:
        client = mcp.connect(server.transport())
        try:
            subscription = client.listen({"toolsListChanged": True})
            server.notify("notifications/cancelled", {"requestId": "listen-999", "reason": "not yours"})
            server.event(subscription.subscription_id, "notifications/tools/list_changed")
            event = next_message(subscription)
            assert isinstance(event, mcp.SubscriptionEvent), event
        finally:
            client.disconnect()
