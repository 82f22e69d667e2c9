"""Closing an HTTP transport wakes every socket it is using, wherever the connection is: the
TCP connect, the TLS handshake (a server that stalls in it), a connection that was made just
as the abort ran. None waits out ``io_timeout`` after ``close()``."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import httpcore
import pytest
from helpers_transport import WAIT, RecordingSink, StallingTlsPeer, join_threads_named
from tls_files import make_tls_files

from exmcp_actors._transport.http import HttpTransport
from exmcp_actors._transport.http import _plumbing as plumbing

#: Far longer than any wait of these tests: a socket left to time out would show.
LONG_IO_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("cryptography")
    ca, _, _ = make_tls_files(tmp_path_factory.mktemp("tls"))
    return ca


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    yield server
    server.close()


def test_close_wakes_a_tls_handshake_the_server_stalls(ca_file: str) -> None:
    with StallingTlsPeer() as peer:
        transport = HttpTransport(f"https://localhost:{peer.port}/mcp", verify=ca_file, io_timeout=LONG_IO_TIMEOUT)
        transport.open(RecordingSink(), timeout=WAIT)
        transport.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
        assert peer.hello_received.wait(WAIT), "the transport never started its TLS handshake"

        started = time.monotonic()
        transport.close()
        elapsed = time.monotonic() - started

        assert join_threads_named("exmcp-http-", WAIT / 2) == []
    assert elapsed < WAIT / 4, f"close() took {elapsed:.1f}s"


def test_a_connection_made_just_as_the_abort_runs_is_not_kept(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = plumbing.TrackingBackend()
    real_stream = plumbing.SyncStream

    def stream_after_an_abort(sock: socket.socket) -> Any:
        backend.abort_all()  # the connect is done and no longer recorded as connecting
        return real_stream(sock)

    monkeypatch.setattr(plumbing, "SyncStream", stream_after_an_abort)
    port = listener.getsockname()[1]

    with pytest.raises(httpcore.ConnectError, match="closing"):
        backend.connect_tcp("127.0.0.1", port, timeout=WAIT)


def test_no_connection_starts_after_an_abort(listener: socket.socket) -> None:
    backend = plumbing.TrackingBackend()
    backend.abort_all()

    with pytest.raises(httpcore.ConnectError, match="closing"):
        backend.connect_tcp("127.0.0.1", listener.getsockname()[1], timeout=WAIT)
