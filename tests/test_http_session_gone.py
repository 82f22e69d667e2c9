"""Streamable HTTP: a server that no longer knows our session must lead to a new session,
resubscription and ``Reconnected``, never to a client that looks ready and hears nothing.

The transport-level rules run against the scriptable fake (tests/http_fakes.py); the whole
story runs against the official SDK server restarted on the same port: as it is (an unknown
session id gets 404) and wrapped to answer 400 "Bad Request: No valid session ID provided",
as the Python SDK 1.x and servers built like it do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers_transport import RecordingSink
from http_fakes import WAIT, FakeMcp, ServerThread
from test_transport_http import start_legacy_session

import exmcp_actors as mcp
from exmcp_actors._transport.http import HttpTransport
from tests.peers.launch import WarmPeer
from tests.sdk_helpers import (
    FAST_BACKOFF,
    RESOURCE_UPDATED,
    URI_A,
    expect_notification,
    next_message,
    notify,
    server_stats,
)

LEGACY = "2025-11-25"


@pytest.fixture
def fake_link() -> Iterator[Callable[..., tuple[FakeMcp, HttpTransport, RecordingSink]]]:
    """``fake_link(**FakeMcp kwargs)``: a fake server and an open transport with a legacy session."""
    servers: list[ServerThread] = []
    transports: list[HttpTransport] = []

    def factory(**kwargs: Any) -> tuple[FakeMcp, HttpTransport, RecordingSink]:
        fake = FakeMcp(**kwargs)
        server = ServerThread(fake)
        server.__enter__()
        servers.append(server)
        transport = HttpTransport(server.url, sse_retry_default=0.02)
        sink = RecordingSink()
        transport.open(sink, timeout=5)
        transports.append(transport)
        start_legacy_session(transport, sink, fake)
        return fake, transport, sink

    yield factory
    for transport in transports:
        transport.close()
    for server in servers:
        server.stop()


def test_a_400_naming_the_session_on_a_post_reports_the_session_gone(fake_link: Any) -> None:
    fake, transport, sink = fake_link(unknown_session_status=400)
    fake.expire_session()
    transport.send({"jsonrpc": "2.0", "id": 5, "method": "test/json"})
    assert sink.wait_lost() == "session unknown to the server (400)"
    failed = sink.wait_failure(5).error
    assert isinstance(failed, mcp.ExchangeFailed) and failed.status == 400


def test_a_400_that_does_not_name_the_session_is_only_the_requests_error(fake_link: Any) -> None:
    _, transport, sink = fake_link()
    transport.send({"jsonrpc": "2.0", "id": 6, "method": "test/status", "params": {"status": 400}})
    failed = sink.wait_failure(6).error
    assert isinstance(failed, mcp.ExchangeFailed) and failed.status == 400
    assert sink.lost == []


@pytest.mark.parametrize("status", [404, 400])
def test_a_get_stream_refused_for_an_unknown_session_reports_the_session_gone(fake_link: Any, status: int) -> None:
    fake, transport, sink = fake_link(unknown_session_status=status)
    transport.negotiated(LEGACY, "legacy")
    assert fake.wait_until(lambda: fake.get_streams_open == 1)
    fake.expire_session()
    fake.drop_get()
    assert sink.wait_lost().startswith("session ")


def test_a_get_stream_that_worked_and_cannot_be_reopened_reports_the_loss(fake_link: Any) -> None:
    fake, transport, sink = fake_link()
    transport.negotiated(LEGACY, "legacy")
    assert fake.wait_until(lambda: fake.get_streams_open == 1)
    fake.get_mode = 503
    fake.drop_get()
    assert sink.wait_lost() == "GET stream could not be re-opened: HTTP 503"


# -- the whole story, against the SDK server restarted on the same port ------------------------


def test_an_sdk_server_answering_400_after_a_restart_ends_in_a_new_session_and_reconnected() -> None:
    # (The plain SDK server's 404 after a restart is covered by the chaos test over HTTP.)
    peer = WarmPeer("http", "legacy", ["--unknown-session-400"]).start()
    client = None
    try:
        client = mcp.connect(peer.url, backoff=FAST_BACKOFF, max_reconnect_attempts=60)
        assert client.era == "legacy"
        listener = client.subscribe_notifications({"resourceSubscriptions": [URI_A]}, timeout=WAIT)
        # The restart forgets every session; the client is idle: only its GET stream can notice.
        peer.kill()
        peer.start()  # on the same port
        reconnected = next_message(listener, 3 * WAIT)
        assert isinstance(reconnected, mcp.Reconnected), reconnected
        assert reconnected.report == {"resubscribed": [URI_A], "failed": []}
        assert client.status == "ready"
        assert server_stats(client)["subscribed"] == {URI_A: 1}
        notify(client, "resource_updated", URI_A)
        expect_notification(listener, RESOURCE_UPDATED, URI_A)
    finally:
        if client is not None:
            client.disconnect()
        peer.stop()
