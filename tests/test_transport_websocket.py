"""WebSocketTransport against a real ``websockets`` server and a hand-made raw peer."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers_transport import (
    WAIT,
    RawWsPeer,
    RecordingSink,
    echo_handler,
    exmcp_threads,
    join_exmcp_threads,
    send_from_four_threads_and_check_order,
    ws_server,
)
from tls_files import make_tls_files
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve
from websockets.typing import Subprotocol

from exmcp_actors._protocol._errors import TransportError
from exmcp_actors._transport._base import InvalidFrame
from exmcp_actors._transport.websocket._connection import WebSocketTransport

MakeTransport = Callable[..., WebSocketTransport]
TEXT, BINARY, CONT, CLOSE, PING, PONG = 0x1, 0x2, 0x0, 0x8, 0x9, 0xA


@pytest.fixture
def make() -> Iterator[MakeTransport]:
    """Build transports that are closed after the test, and check no thread is left."""
    made: list[WebSocketTransport] = []

    def factory(url: str, **kwargs: Any) -> WebSocketTransport:
        kwargs.setdefault("close_timeout", 0.5)
        transport = WebSocketTransport(url, **kwargs)
        made.append(transport)
        return transport

    yield factory
    for transport in made:
        transport.close()
    assert join_exmcp_threads() == []


@pytest.fixture
def raw_peer() -> Iterator[RawWsPeer]:
    peer = RawWsPeer()
    yield peer
    peer.close()


def opened(make: MakeTransport, url: str, **kwargs: Any) -> tuple[WebSocketTransport, RecordingSink]:
    transport = make(url, **kwargs)
    sink = RecordingSink()
    transport.open(sink, timeout=WAIT)
    return transport, sink


# -- talking -------------------------------------------------------------------


def test_a_message_sent_comes_back_from_an_echo_server(make: MakeTransport) -> None:
    with ws_server(echo_handler) as (url, _):
        transport, sink = opened(make, url)
        message = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"s": "é ✓"}}

        transport.send(message)

        assert sink.wait_frames(1) == [message]
        assert sink.threads == {"exmcp-ws-reader"}


def test_the_mcp_subprotocol_is_negotiated_and_custom_headers_reach_the_server(
    make: MakeTransport,
) -> None:
    seen: dict[str, Any] = {}
    done = threading.Event()

    def handler(conn: ServerConnection) -> None:
        seen["subprotocol"] = conn.subprotocol
        seen["headers"] = conn.request.headers if conn.request else None
        done.set()
        echo_handler(conn)

    with ws_server(handler) as (url, _):
        headers = {
            "Authorization": "Bearer t0k3n",
            "X-Client": "exmcp",
            "Origin": "http://app",
        }
        transport, _ = opened(make, url, headers=headers)

        assert done.wait(WAIT)
        assert seen["subprotocol"] == "mcp"
        assert transport.subprotocol == "mcp"
        assert seen["headers"]["Authorization"] == "Bearer t0k3n"
        assert seen["headers"]["X-Client"] == "exmcp"
        assert seen["headers"].get_all("Origin") == ["http://app"]


def test_messages_go_out_as_compact_text_frames(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    transport, _ = opened(make, raw_peer.url, heartbeat_interval=None)

    transport.send({"a": "é", "b": [1, 2]})

    assert raw_peer.recv_frame() == (TEXT, '{"a":"é","b":[1,2]}'.encode())


def test_every_frame_the_client_sends_is_masked(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    transport, _ = opened(make, raw_peer.url, heartbeat_interval=None)
    transport.send({"data": True})
    raw_peer.send_frames(raw_peer.frame(PING, b"are you there"))
    received = [raw_peer.recv_frame(), raw_peer.recv_frame()]
    transport.close()
    received.append(raw_peer.recv_frame())

    assert sorted(opcode for opcode, _ in received) == [TEXT, CLOSE, PONG]
    assert raw_peer.masked == [True, True, True]


def test_many_threads_may_send_at_once(make: MakeTransport) -> None:
    with ws_server(echo_handler) as (url, _):
        transport, sink = opened(make, url)
        send_from_four_threads_and_check_order(transport, sink)


def test_a_burst_from_a_server_arrives_complete_and_in_order(
    make: MakeTransport,
) -> None:
    def handler(conn: ServerConnection) -> None:
        conn.recv()
        for i in range(1000):
            conn.send(json.dumps({"n": i}))
        echo_handler(conn)

    with ws_server(handler) as (url, _):
        transport, sink = opened(make, url)
        transport.send({"go": True})

        assert sink.wait_frames(1000) == [{"n": i} for i in range(1000)]
        assert len(sink.batches) < 1000


def test_frames_already_received_are_handed_over_in_one_batch(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    sink = RecordingSink(hold_first_batch=True)
    transport = make(raw_peer.url, heartbeat_interval=None)
    transport.open(sink, timeout=WAIT)
    raw_peer.send_text('{"n":-1}')
    assert sink.first_batch_arrived.wait(WAIT)  # the reader is now held in the sink

    raw_peer.send_frames(*(raw_peer.frame(TEXT, b'{"n":%d}' % i) for i in range(1000)))
    sink.release.set()

    assert sink.wait_frames(1001) == [{"n": i} for i in range(-1, 1000)]
    assert len(sink.batches) <= 5, [len(b) for b in sink.batches]


def test_batches_are_capped_at_max_batch_frames(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    sink = RecordingSink(hold_first_batch=True)
    transport = make(raw_peer.url, heartbeat_interval=None, max_batch_frames=10)
    transport.open(sink, timeout=WAIT)
    raw_peer.send_text("0")
    assert sink.first_batch_arrived.wait(WAIT)

    raw_peer.send_frames(*(raw_peer.frame(TEXT, b"%d" % i) for i in range(1, 101)))
    sink.release.set()

    assert sink.wait_frames(101) == list(range(101))
    assert max(len(b) for b in sink.batches) == 10


# -- bad frames ------------------------------------------------------------------


def test_bad_frames_become_invalid_frames_and_reading_goes_on(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    _, sink = opened(make, raw_peer.url, heartbeat_interval=None)

    raw_peer.send_frames(
        raw_peer.frame(TEXT, b"not json"),
        raw_peer.frame(TEXT, b'{"a":"\xff"}'),
        raw_peer.frame(TEXT, b"  "),
        raw_peer.frame(TEXT, b'{"ok":1}'),
    )

    frames = sink.wait_frames(4)
    assert isinstance(frames[0], InvalidFrame)
    assert "invalid JSON" in frames[0].error
    assert frames[0].raw == b"not json"
    assert isinstance(frames[1], InvalidFrame)
    assert "invalid UTF-8" in frames[1].error
    assert isinstance(frames[2], InvalidFrame)
    assert frames[3] == {"ok": 1}


def test_binary_frames_holding_json_are_accepted(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    _, sink = opened(make, raw_peer.url, heartbeat_interval=None)

    raw_peer.send_frames(raw_peer.frame(BINARY, b'{"bin":1}'), raw_peer.frame(BINARY, b"\x00\x01"))

    frames = sink.wait_frames(2)
    assert frames[0] == {"bin": 1}
    assert isinstance(frames[1], InvalidFrame)


def test_a_fragmented_message_is_reassembled(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    _, sink = opened(make, raw_peer.url, heartbeat_interval=None)

    raw_peer.send_frames(
        raw_peer.frame(TEXT, b'{"part":', fin=False),
        raw_peer.frame(PING, b"in between"),
        raw_peer.frame(CONT, b'"one and two"}'),
    )

    assert sink.wait_frames(1) == [{"part": "one and two"}]
    assert raw_peer.recv_frame() == (
        0xA,
        b"in between",
    )  # websocket-client answered the ping


def test_an_oversized_frame_becomes_an_invalid_frame_and_fails_the_connection_with_1009(
    make: MakeTransport, raw_peer: RawWsPeer
) -> None:
    _, sink = opened(make, raw_peer.url, heartbeat_interval=None, max_frame_bytes=1000)

    raw_peer.send_frames(
        raw_peer.frame(TEXT, json.dumps({"big": "x" * 5000}).encode()),
        raw_peer.frame(TEXT, b'{"after":1}'),
    )

    reason = sink.wait_lost()
    assert "max_frame_bytes=1000" in reason and "closed it with status 1009" in reason, reason
    [bad] = sink.frames  # nothing after it
    assert isinstance(bad, InvalidFrame)
    assert "oversized" in bad.error
    assert len(bad.raw) <= 200
    assert raw_peer.recv_frame() == (CLOSE, struct.pack("!H", 1009) + b"message too big")


# -- losses --------------------------------------------------------------------


def test_a_silent_peer_is_detected_by_the_heartbeat(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    transport, sink = opened(make, raw_peer.url, heartbeat_interval=0.2, heartbeat_timeout=0.3)
    started = time.monotonic()
    raw_peer.wait_connected()  # and then never reads nor answers

    reason = sink.wait_lost()
    took = time.monotonic() - started

    assert "heartbeat timeout" in reason
    assert took < 0.2 + 0.3 + 1.0
    assert join_exmcp_threads() == []  # the threads end by themselves
    assert sink.lost == [reason]
    with pytest.raises(TransportError, match="lost"):
        transport.send({"late": True})


def test_a_live_idle_server_keeps_the_connection(make: MakeTransport) -> None:
    with ws_server(echo_handler) as (url, _):
        transport, sink = opened(make, url, heartbeat_interval=0.05, heartbeat_timeout=0.5)

        # Many heartbeats. No marker can show a loss that did not happen: a heartbeat timer would
        # report it, so the connection is watched across two heartbeat timeouts.
        assert not sink.lost_event.wait(1.0)

        transport.send({"still": "here"})
        assert sink.wait_frames(1) == [{"still": "here"}]


def test_a_server_close_is_reported_once_with_its_code_and_reason(
    make: MakeTransport,
) -> None:
    def handler(conn: ServerConnection) -> None:
        conn.recv()
        conn.send('{"last":1}')
        conn.close(1001, "bye")

    with ws_server(handler) as (url, _):
        transport, sink = opened(make, url)
        transport.send({"go": True})

        reason = sink.wait_lost()

        assert "code 1001" in reason
        assert "bye" in reason
        assert sink.frames == [{"last": 1}]
        assert join_exmcp_threads() == []
        assert sink.lost == [reason]


def test_a_hostile_close_reason_reaches_the_loss_escaped(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    _, sink = opened(make, raw_peer.url, heartbeat_interval=None)
    reason = "\x1b]0;owned\x07\r\nFORGED LINE \u202e".encode()
    raw_peer.send_frames(raw_peer.frame(CLOSE, struct.pack("!H", 4000) + reason))

    lost = sink.wait_lost()

    assert "code 4000" in lost and "FORGED LINE" in lost
    assert not any(c in lost for c in "\x1b\x07\r\n\u202e"), lost


def test_a_dropped_tcp_connection_is_reported(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    _, sink = opened(make, raw_peer.url, heartbeat_interval=None)

    raw_peer.drop()

    assert "without a close frame" in sink.wait_lost()
    assert join_exmcp_threads() == []


def test_open_after_a_loss_makes_a_new_connection(make: MakeTransport) -> None:
    connections: list[int] = []

    def handler(conn: ServerConnection) -> None:
        connections.append(id(conn))
        if len(connections) == 1:
            conn.close(1012, "restart")
            return
        echo_handler(conn)

    with ws_server(handler) as (url, _):
        transport, first = opened(make, url)
        first.wait_lost()

        second = RecordingSink()
        transport.open(second, timeout=WAIT)
        transport.send({"again": True})

        assert second.wait_frames(1) == [{"again": True}]
        assert len(connections) == 2
        assert first.frames == []
        assert len(first.lost) == 1
        assert second.lost == []


# -- opening -------------------------------------------------------------------


def test_open_raises_when_nothing_listens(make: MakeTransport) -> None:
    with ws_server(echo_handler) as (url, _):
        pass  # the port is free again
    transport = make(url)

    with pytest.raises(TransportError, match="cannot connect"):
        transport.open(RecordingSink(), timeout=WAIT)
    assert exmcp_threads() == []


def test_open_raises_when_the_server_refuses_the_mcp_subprotocol(
    make: MakeTransport,
) -> None:
    with ws_server(echo_handler, subprotocols=["other"]) as (url, _):
        transport = make(url)

        with pytest.raises(TransportError, match="cannot connect"):
            transport.open(RecordingSink(), timeout=WAIT)


def test_a_bad_url_or_header_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="ws://"):
        WebSocketTransport("http://example.com/mcp")
    with pytest.raises(ValueError, match="line break"):
        WebSocketTransport("ws://example.com/mcp", headers={"X": "a\r\nInjected: 1"})


def test_describe_hides_credentials_and_query() -> None:
    transport = WebSocketTransport("wss://user:secret@example.com:8443/mcp?token=abc")
    assert transport.describe() == "websocket wss://example.com:8443/mcp"


# -- TLS -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    pytest.importorskip("cryptography")
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@contextlib.contextmanager
def tls_server(handler: Callable[[ServerConnection], None], cert: str, key: str) -> Iterator[int]:
    """A wss:// server on 127.0.0.1 running ``handler`` per connection; yields its port."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    protocols = [Subprotocol("mcp")]
    server = serve(handler, "127.0.0.1", 0, ssl=context, subprotocols=protocols, compression=None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.socket.getsockname()[1]
    finally:
        server.shutdown()
        thread.join(WAIT)


def test_wss_verifies_certificates_by_default(make: MakeTransport, tls_files: tuple[str, str, str]) -> None:
    _, cert, key = tls_files
    with tls_server(echo_handler, cert, key) as port:
        transport = make(f"wss://127.0.0.1:{port}/mcp")

        with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED"):
            transport.open(RecordingSink(), timeout=WAIT)


def test_wss_with_a_trusted_ca_works_and_batches(make: MakeTransport, tls_files: tuple[str, str, str]) -> None:
    ca, cert, key = tls_files

    def handler(conn: ServerConnection) -> None:
        conn.recv()
        for i in range(500):
            conn.send(json.dumps({"n": i}))
        echo_handler(conn)

    with tls_server(handler, cert, key) as port:
        transport, sink = opened(make, f"wss://localhost:{port}/mcp", sslopt={"ca_certs": ca})
        transport.send({"go": True})

        assert sink.wait_frames(500) == [{"n": i} for i in range(500)]
        transport.close()


# -- closing -------------------------------------------------------------------


def test_close_sends_a_close_frame_and_leaves_no_thread(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    transport, sink = opened(make, raw_peer.url, heartbeat_interval=None)
    transport.send({"before": "close"})
    assert raw_peer.recv_frame() == (TEXT, b'{"before":"close"}')

    transport.close()

    opcode, payload = raw_peer.recv_frame()
    assert opcode == CLOSE
    assert struct.unpack("!H", payload[:2])[0] == 1000
    assert exmcp_threads() == []
    assert sink.lost == []
    with pytest.raises(TransportError, match="not open"):
        transport.send({"after": "close"})


def test_close_completes_the_closing_handshake_with_a_real_server(
    make: MakeTransport,
) -> None:
    codes: list[int | None] = []
    done = threading.Event()

    def handler(conn: ServerConnection) -> None:
        echo_handler(conn)
        codes.append(conn.close_code)
        done.set()

    with ws_server(handler) as (url, _):
        transport, sink = opened(make, url)
        transport.send({"x": 1})
        sink.wait_frames(1)

        transport.close()

        assert exmcp_threads() == []
        assert done.wait(WAIT)
        assert codes == [1000]
        assert sink.lost == []


def still_open_after_the_closing_handshake(conn: socket.socket) -> bool:
    """Whether the client, its closing handshake done, leaves the TCP close to the server
    (RFC 6455 section 7.1.1): nothing more arrives, no FIN, within a short look."""
    conn.settimeout(0.3)
    try:
        return conn.recv(1) == b"X"  # anything at all (b"": the client closed) is a failure
    except TimeoutError:
        return True


def test_after_the_servers_close_the_client_answers_once_and_waits_for_the_tcp_close(
    make: MakeTransport, raw_peer: RawWsPeer
) -> None:
    _, sink = opened(make, raw_peer.url, heartbeat_interval=None, close_timeout=WAIT)
    raw_peer.send_frames(raw_peer.frame(CLOSE, struct.pack("!H", 1001) + b"going away"))

    assert raw_peer.recv_frame() == (CLOSE, struct.pack("!H", 1000))
    assert "code 1001" in sink.wait_lost()
    assert still_open_after_the_closing_handshake(raw_peer.wait_connected())

    raw_peer.drop()
    assert join_exmcp_threads() == []


def test_close_waits_for_the_servers_tcp_close_after_its_close_frame(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    transport, sink = opened(make, raw_peer.url, heartbeat_interval=None, close_timeout=WAIT)
    closer = threading.Thread(target=transport.close, name="test-close")
    closer.start()
    assert raw_peer.recv_frame() == (CLOSE, struct.pack("!H", 1000))
    raw_peer.send_frames(raw_peer.frame(CLOSE, struct.pack("!H", 1000)))

    assert still_open_after_the_closing_handshake(raw_peer.wait_connected())

    started = time.monotonic()
    raw_peer.drop()
    closer.join(WAIT)
    assert not closer.is_alive()
    assert time.monotonic() - started < WAIT / 2  # ended by the TCP close, not close_timeout
    assert sink.lost == []


def test_close_is_bounded_when_the_peer_never_answers(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    transport, sink = opened(make, raw_peer.url, heartbeat_interval=0.2, heartbeat_timeout=5.0)
    raw_peer.wait_connected()

    started = time.monotonic()
    transport.close()

    assert time.monotonic() - started < 2.0
    assert exmcp_threads() == []
    assert sink.lost == []


def test_close_is_idempotent_and_harmless_before_open(make: MakeTransport) -> None:
    with ws_server(echo_handler) as (url, _):
        transport = make(url)
        transport.close()
        transport.open(RecordingSink(), timeout=WAIT)

        transport.close()
        transport.close()

        assert exmcp_threads() == []


def test_no_loss_is_reported_after_close_even_for_a_silent_peer(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    transport, sink = opened(make, raw_peer.url, heartbeat_interval=0.05, heartbeat_timeout=0.05)

    transport.close()

    assert join_exmcp_threads() == []  # no thread is left that could report a loss
    assert sink.lost == []


def test_the_tls_helper_writes_files(tls_files: tuple[str, str, str]) -> None:
    assert all(Path(p).stat().st_size > 0 for p in tls_files)


def test_close_is_bounded_while_the_writer_is_stuck_on_a_full_socket(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    transport, sink = opened(make, raw_peer.url, heartbeat_interval=None)
    raw_peer.wait_connected()  # never reads: the socket buffers fill up
    payload = "x" * 100_000
    for i in range(500):  # 50 MB
        transport.send({"i": i, "p": payload})

    started = time.monotonic()
    transport.close()

    assert time.monotonic() - started < 3.0
    assert exmcp_threads() == []
    assert sink.lost == []


def test_the_heartbeat_fires_even_while_the_writer_is_stuck(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    transport, sink = opened(make, raw_peer.url, heartbeat_interval=0.2, heartbeat_timeout=0.3)
    raw_peer.wait_connected()
    payload = "x" * 100_000
    for i in range(500):
        try:
            transport.send({"i": i, "p": payload})
        except TransportError:  # the heartbeat may fire before the loop ends
            break

    assert "heartbeat timeout" in sink.wait_lost()
    assert join_exmcp_threads() == []


def test_a_sink_may_close_the_transport_from_its_loss_callback(
    make: MakeTransport,
) -> None:
    def handler(conn: ServerConnection) -> None:
        conn.close(1001, "bye")

    with ws_server(handler) as (url, _):
        transport = make(url)
        closed = threading.Event()

        class ClosingSink(RecordingSink):
            def transport_lost(self, reason: str) -> None:
                super().transport_lost(reason)
                transport.close()  # on the reader thread, re-entrantly
                closed.set()

        sink = ClosingSink()
        transport.open(sink, timeout=WAIT)

        assert closed.wait(WAIT)
        assert join_exmcp_threads() == []
        assert len(sink.lost) == 1


# -- the reader's frame parser against real servers ------------------------------------


def test_a_fragmented_message_from_a_real_server_is_reassembled(make: MakeTransport) -> None:
    def handler(conn: ServerConnection) -> None:
        conn.recv()
        conn.send(['{"part":', '"one and', ' two"}'])
        conn.send([b'{"bin":', b"1}"])
        conn.send('{"after":1}')
        echo_handler(conn)

    with ws_server(handler) as (url, _):
        transport, sink = opened(make, url)
        transport.send({"go": True})

        assert sink.wait_frames(3) == [{"part": "one and two"}, {"bin": 1}, {"after": 1}]


def test_a_server_ping_is_answered_with_a_pong(make: MakeTransport) -> None:
    def handler(conn: ServerConnection) -> None:
        conn.recv()
        pong = conn.ping(b"are you there")
        conn.send(json.dumps({"pong": pong.wait(WAIT)}))
        echo_handler(conn)

    with ws_server(handler) as (url, _):
        transport, sink = opened(make, url, heartbeat_interval=None)
        transport.send({"go": True})

        assert sink.wait_frames(1) == [{"pong": True}]


def mixed_sizes(count: int) -> list[str]:
    """Messages whose lengths take 7-, 16- and 64-bit length fields."""
    fillers = ["", "x" * 200, "y" * 70_000]
    return [json.dumps({"n": i, "f": fillers[i % 7 % 3]}) for i in range(count)]


def test_a_burst_of_mixed_sizes_arrives_complete_and_in_order(make: MakeTransport) -> None:
    messages = mixed_sizes(300)

    def handler(conn: ServerConnection) -> None:
        conn.recv()
        for message in messages:
            conn.send(message)
        echo_handler(conn)

    with ws_server(handler) as (url, _):
        transport, sink = opened(make, url)
        transport.send({"go": True})

        assert sink.wait_frames(300) == [json.loads(m) for m in messages]


def test_an_oversized_message_from_a_real_server_fails_the_connection_and_the_server_sees_1009(
    make: MakeTransport,
) -> None:
    received: list[int | None] = []
    closed = threading.Event()

    def handler(conn: ServerConnection) -> None:
        conn.recv()
        conn.send(json.dumps({"small": 1}))
        # The client closes with 1009 once the third fragment passes its limit: the last one
        # may find the connection closed already.
        with contextlib.suppress(ConnectionClosed):
            conn.send(['{"frag":"', "y" * 600, "z" * 600, '"}'])
            conn.send('{"after":1}')
            conn.recv()
        received.append(conn.close_code)
        closed.set()

    with ws_server(handler) as (url, _):
        transport, sink = opened(make, url, max_frame_bytes=1000)
        transport.send({"go": True})

        reason = sink.wait_lost()
        assert "closed it with status 1009" in reason, reason
        assert sink.frames[0] == {"small": 1}
        [bad] = sink.frames[1:]
        assert isinstance(bad, InvalidFrame)
        assert "oversized frame: 1209 bytes" in bad.error  # announced when the limit was passed
        assert 0 < len(bad.raw) <= 200
        assert closed.wait(WAIT)
        assert received == [1009]


def test_a_protocol_error_from_the_server_is_a_loss(make: MakeTransport, raw_peer: RawWsPeer) -> None:
    _, sink = opened(make, raw_peer.url, heartbeat_interval=None)

    raw_peer.send_frames(raw_peer.frame(TEXT, b'{"ok":1}'), b"\x81\x82abcd" + b"xx")  # a masked frame

    assert "protocol error: masked frame" in sink.wait_lost()
    assert sink.frames == [{"ok": 1}]
    assert raw_peer.recv_frame() == (CLOSE, struct.pack("!H", 1002) + b"protocol error")
    assert join_exmcp_threads() == []


def test_wss_reads_large_fragmented_and_pinged_messages(make: MakeTransport, tls_files: tuple[str, str, str]) -> None:
    ca, cert, key = tls_files
    messages = mixed_sizes(200)
    pong_seen: list[bool] = []

    def handler(conn: ServerConnection) -> None:
        conn.recv()
        for message in messages:
            conn.send(message)
        pong_seen.append(conn.ping(b"tls ping").wait(WAIT))
        conn.send(['{"frag":', '"ment', 'ed"}'])
        echo_handler(conn)

    with tls_server(handler, cert, key) as port:
        url = f"wss://localhost:{port}/mcp"
        transport, sink = opened(make, url, sslopt={"ca_certs": ca}, heartbeat_interval=None)
        transport.send({"go": True})

        assert sink.wait_frames(201) == [*(json.loads(m) for m in messages), {"frag": "mented"}]
        assert pong_seen == [True]
        transport.close()
