"""HttpTransport against real HTTP servers: small fakes and the MCP SDK's own app."""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers_transport import RecordingSink, refusing_port
from http_fakes import WAIT, FakeMcp, ServerThread
from tls_files import make_tls_files

import exmcp_actors as mcp
from exmcp_actors._protocol._errors import ExchangeFailed, ProtocolError, TransportError
from exmcp_actors._protocol._param_headers import encode_header_value
from exmcp_actors._transport._base import InvalidFrame, RequestFailed
from exmcp_actors._transport.http import STREAM_DROPPED, HttpTransport
from exmcp_actors._transport.http import _pump as pump_module
from exmcp_actors._transport.http._sse import SSEEvent, SSEParser

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "0"},
}


def request(rid: Any, method: str, params: dict[str, Any] | None = None, *, modern: bool = False) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None or modern:
        msg["params"] = dict(params or {})
        if modern:
            msg["params"]["_meta"] = META
    return msg


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def initialize(rid: Any = "init") -> dict[str, Any]:
    return request(
        rid,
        "initialize",
        {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "tests", "version": "0"},
        },
    )


def our_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("exmcp-http")]


@pytest.fixture(autouse=True)
def no_threads_left_behind() -> Iterator[None]:
    yield
    for thread in our_threads():
        thread.join(WAIT)
    assert our_threads() == []


Opened = tuple[HttpTransport, RecordingSink]


@pytest.fixture
def open_transport() -> Iterator[Callable[..., Opened]]:
    """``open_transport(url, **kwargs)``: an opened transport, closed after the test."""
    opened: list[HttpTransport] = []

    def factory(url: str, **kwargs: Any) -> Opened:
        kwargs.setdefault("sse_retry_default", 0.02)
        transport = HttpTransport(url, **kwargs)
        sink = RecordingSink()
        transport.open(sink, timeout=5)
        opened.append(transport)
        return transport, sink

    yield factory
    for transport in opened:
        transport.close()


@pytest.fixture
def fake_server() -> Iterator[Callable[..., tuple[FakeMcp, str]]]:
    """``fake_server(**FakeMcp kwargs)``: a running fake and its URL, stopped after the test."""
    servers: list[ServerThread] = []

    def factory(**kwargs: Any) -> tuple[FakeMcp, str]:
        fake = FakeMcp(**kwargs)
        server = ServerThread(fake)
        server.__enter__()
        servers.append(server)
        return fake, server.url

    yield factory
    for server in servers:
        server.stop()


def start_legacy_session(transport: HttpTransport, sink: RecordingSink, fake: FakeMcp | None = None) -> dict[str, Any]:
    transport.send(initialize())
    result = sink.wait_response("init")
    transport.send(notification("notifications/initialized"))
    if fake is not None:
        assert fake.wait_until(lambda: bool(fake.posted("notifications/initialized")))
    return result


def quiet(transport: HttpTransport) -> bool:
    link = transport._link
    return link is not None and link.wait_quiet(WAIT)


# --------------------------------------------------------------------------
# Requests and their replies


def test_a_json_reply_is_delivered_and_the_post_carries_the_mcp_headers(fake_server, open_transport) -> None:
    fake, url = fake_server(sessions=False)
    transport, sink = open_transport(url, headers={"Authorization": "Bearer t", "accept": "text/plain"})

    transport.send(request(1, "test/json", {"a": 1}))

    assert sink.wait_response(1) == {"jsonrpc": "2.0", "id": 1, "result": {"echo": {"a": 1}}}
    headers = fake.posted("test/json")[0].headers
    assert headers["accept"] == "application/json, text/event-stream"
    assert headers["content-type"] == "application/json"
    assert headers["authorization"] == "Bearer t"
    assert "mcp-session-id" not in headers and "mcp-protocol-version" not in headers


def test_an_sse_reply_delivers_every_message_event_then_the_response(fake_server, open_transport) -> None:
    _, url = fake_server(sessions=False)
    transport, sink = open_transport(url)

    transport.send(request("s", "test/sse", {"count": 3}))

    sink.wait_response("s")
    methods = [f.get("method") or f.get("result") for f in sink.frames]
    # The comment and the event of another type are skipped.
    assert methods == ["notifications/message"] * 3 + [{"count": 3}]
    assert [f["params"]["n"] for f in sink.frames[:3]] == [0, 1, 2]


class RawSse:
    """An ASGI app answering every request with one SSE body, written as ``pieces``."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for piece in self.pieces:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


@pytest.mark.parametrize("pieces", ["whole", "bytewise"])
def test_every_event_shape_in_an_sse_reply_becomes_the_right_frame(open_transport, pieces: str) -> None:
    body = (
        b'data: {"jsonrpc":"2.0","method":"n/plain"}\n\n'
        b'data:  {"jsonrpc": "2.0", "method": "n/spaced"} \n\n'  # whitespace around the JSON
        b'event: message\r\ndata: {"jsonrpc":"2.0","method":"n/crlf"}\r\n\r\n'  # the MCP SDK's shape
        b'id: 4\ndata: {"jsonrpc":"2.0",\ndata: "method":"n/two-lines"}\n\n'
        b"data: 7\n\n"  # valid JSON, not an object: delivered as it is
        b"data: [1, 2]\n\n"
        b"data: {not json\n\n"
        b"data: \xff\xfe\n\n"
        b"event: other\ndata: {}\n\n"
        b"data:\n\n"
        b'data: {"jsonrpc":"2.0","id":1,"result":{"done":true}}\n\n'
        b'data: {"jsonrpc":"2.0","method":"n/after-the-response"}\n\n'
    )
    chunks = [body] if pieces == "whole" else [bytes([b]) for b in body]
    with ServerThread(RawSse(chunks)) as server:
        transport, sink = open_transport(server.url)
        transport.send(request(1, "test/shapes"))
        assert sink.wait_response(1)["result"] == {"done": True}
        frames = sink.frames
        transport.close()
    assert [f.get("method") for f in frames[:4]] == ["n/plain", "n/spaced", "n/crlf", "n/two-lines"]
    assert frames[4] == 7
    bad = frames[5:8]
    assert all(isinstance(f, InvalidFrame) for f in bad)
    assert ["batch" in bad[0].error, "JSON" in bad[1].error, "UTF-8" in bad[2].error] == [True, True, True]
    assert frames[8] == {"jsonrpc": "2.0", "id": 1, "result": {"done": True}}
    assert len(frames) == 9


def test_events_that_arrive_in_one_read_are_delivered_as_one_batch(fake_server, open_transport) -> None:
    _, url = fake_server(sessions=False)
    transport, sink = open_transport(url)

    transport.send(request(7, "test/sse", {"count": 4, "one_chunk": True}))

    sink.wait_response(7)
    assert [len(b) for b in sink.batches] == [5]


def test_a_stream_left_open_after_its_response_is_ended_by_the_client(fake_server, open_transport, monkeypatch) -> None:
    monkeypatch.setattr(pump_module, "_DRAIN_SECONDS", 0.05)
    _, url = fake_server(sessions=False)
    transport, sink = open_transport(url)

    transport.send(request(8, "test/sse", {"count": 1, "linger": True}))

    sink.wait_response(8)
    assert quiet(transport)  # the worker gave up the lingering body


def test_a_notification_is_posted_before_a_request_sent_after_it(fake_server, open_transport) -> None:
    fake, url = fake_server(sessions=False)
    transport, sink = open_transport(url)

    transport.send(notification("notifications/initialized"))
    transport.send(request(2, "test/json"))

    sink.wait_response(2)
    assert [p.body.get("method") for p in fake.posts] == [
        "notifications/initialized",
        "test/json",
    ]
    assert sink.frames == [sink.wait_response(2)]  # the 202 delivered nothing


def test_many_concurrent_requests_are_all_answered(fake_server, open_transport) -> None:
    _, url = fake_server(sessions=False)
    transport, sink = open_transport(url)

    for n in range(40):
        transport.send(request(n, "test/sse" if n % 2 else "test/json", {"count": 1}))

    for n in range(40):
        sink.wait_response(n)
    assert quiet(transport)


def test_the_session_id_from_initialize_is_sent_on_later_messages(fake_server, open_transport) -> None:
    fake, url = fake_server()
    transport, sink = open_transport(url)

    start_legacy_session(transport, sink)
    transport.negotiated(LEGACY, "legacy")
    transport.send(request(3, "test/json"))

    sink.wait_response(3)
    init, initialized, later = (
        fake.posts[0].headers,
        fake.posts[1].headers,
        fake.posted("test/json")[0].headers,
    )
    assert "mcp-session-id" not in init and "mcp-protocol-version" not in init
    assert initialized["mcp-session-id"] == "session-1"
    assert later["mcp-session-id"] == "session-1"
    assert later["mcp-protocol-version"] == LEGACY
    assert "mcp-method" not in later


def test_a_modern_request_carries_version_method_and_name_headers(fake_server, open_transport) -> None:
    fake, url = fake_server(sessions=False)
    transport, sink = open_transport(url)

    # The probe: nothing negotiated yet, the version comes from _meta.
    transport.send(request("d", "server/discover", modern=True))
    sink.wait_response("d")
    transport.negotiated(MODERN, "modern")
    transport.send(request(1, "tools/call", {"name": "café", "arguments": {}}, modern=True))
    transport.send(request(2, "resources/read", {"uri": "file:///a b"}, modern=True))
    sink.wait_response(1)
    sink.wait_response(2)

    probe = fake.posted("server/discover")[0].headers
    assert probe["mcp-protocol-version"] == MODERN
    assert probe["mcp-method"] == "server/discover"
    assert "mcp-name" not in probe and "mcp-session-id" not in probe
    call = fake.posted("tools/call")[0].headers
    assert call["mcp-method"] == "tools/call"
    assert call["mcp-name"] == "=?base64?" + base64.b64encode("café".encode()).decode() + "?="
    assert fake.posted("resources/read")[0].headers["mcp-name"] == "file:///a b"
    assert fake.gets == []  # no GET stream in the modern era


# --------------------------------------------------------------------------
# HTTP failures fail the request as the transport's (or the server's) fault, never as a made-up answer


def failed_exchange(sink: RecordingSink, request_id: Any) -> ExchangeFailed:
    """The transport's failure of ``request_id``; no JSON-RPC answer was made up for it."""
    error = sink.wait_failure(request_id).error
    assert isinstance(error, ExchangeFailed), error
    assert [f for f in sink.about(request_id) if isinstance(f, dict)] == []
    return error


@pytest.mark.parametrize("status", [400, 404, 405])
def test_a_legacy_server_refusing_the_probe_fails_it_with_the_http_status(
    fake_server, open_transport, status: int
) -> None:
    _, url = fake_server(probe_status=status)
    transport, sink = open_transport(url)

    transport.send(request("probe", "server/discover", modern=True))

    error = failed_exchange(sink, "probe")
    assert error.what.startswith(f"HTTP {status} ")
    assert (error.status, error.body) == (status, f"no such thing ({status})")
    # The client falls back to initialize on the same connection.
    start_legacy_session(transport, sink)
    assert sink.lost == []


def test_a_json_rpc_error_body_is_forwarded_with_the_request_id(fake_server, open_transport) -> None:
    _, url = fake_server(sessions=False)
    transport, sink = open_transport(url)

    transport.send(request(4, "test/status", {"status": 400, "rpc": True}))

    assert sink.wait_response(4) == {
        "jsonrpc": "2.0",
        "id": 4,
        "error": {"code": -32602, "message": "bad params"},
    }


def test_an_http_error_with_a_text_body_is_quoted(fake_server, open_transport) -> None:
    _, url = fake_server(sessions=False)
    transport, sink = open_transport(url)

    transport.send(request(5, "test/status", {"status": 500, "body": "boom" * 500}))

    error = failed_exchange(sink, 5)
    assert error.what == "HTTP 500 Internal Server Error"
    assert error.status == 500
    assert error.body == ("boom" * 500)[:1000]


def test_an_http_503_on_a_post_is_a_failed_exchange_carrying_the_status(fake_server, open_transport) -> None:
    _, url = fake_server(sessions=False)
    transport, sink = open_transport(url)

    transport.send(request(7, "test/status", {"status": 503, "body": "overloaded"}))

    error = failed_exchange(sink, 7)
    assert (error.status, error.what, error.body) == (503, "HTTP 503 Service Unavailable", "overloaded")
    assert error.reason == ("transport_error", 503, "HTTP 503 Service Unavailable")
    assert sink.lost == []  # one exchange failed; the transport carries on


def test_a_202_for_a_request_fails_it_as_the_servers_protocol_error(fake_server, open_transport) -> None:
    _, url = fake_server(sessions=False)
    transport, sink = open_transport(url)

    transport.send(request(6, "test/accepted"))

    error = sink.wait_failure(6).error
    assert isinstance(error, ProtocolError) and error.reason == ("no_response", 202)


def test_a_batch_body_is_an_invalid_frame(fake_server, open_transport) -> None:
    _, url = fake_server(sessions=False)
    transport, sink = open_transport(url)

    transport.send(request(9, "test/batch"))

    sink.wait_failure(9)
    bad, failed = sink.batches[0]
    assert isinstance(bad, InvalidFrame) and "batch" in bad.error
    assert isinstance(failed, RequestFailed) and isinstance(failed.error, ProtocolError)


def test_an_oversized_event_is_an_invalid_frame_and_drops_the_stream(fake_server, open_transport, caplog) -> None:
    _, url = fake_server(sessions=False)
    transport, sink = open_transport(url, max_frame_bytes=1000)

    transport.send(request(10, "test/big", {"size": 50_000}))

    # The stream broke the size cap: it is no longer read (the response behind the event is
    # not waited for); without SSE ids to resume from, the request fails as a dropped stream.
    assert failed_exchange(sink, 10).what == STREAM_DROPPED
    assert isinstance(sink.frames[0], InvalidFrame)
    assert "SSE stream dropped: the server sent an event larger than 1000 bytes" in caplog.text
    transport.send(request(11, "test/json"))
    assert "result" in sink.wait_response(11)  # the transport itself carries on


def test_a_404_on_a_session_reports_the_session_expired_after_the_error(fake_server, open_transport) -> None:
    fake, url = fake_server()
    transport, sink = open_transport(url)
    start_legacy_session(transport, sink, fake)

    fake.expire_session()
    transport.send(request(11, "test/json"))

    assert sink.wait_lost() == "session expired (404)"
    error = sink.wait_response(11)["error"]
    assert error["code"] == -32600 and error["message"] == "Session not found"
    assert sink.frames[-1]["id"] == 11  # delivered before the loss, nothing after
    with pytest.raises(TransportError):
        transport.send(request(12, "test/json"))


def test_a_404_naming_the_request_id_is_a_method_error_not_a_lost_session(fake_server, open_transport) -> None:
    _, url = fake_server()
    transport, sink = open_transport(url)
    start_legacy_session(transport, sink)

    transport.send(request(13, "no/such/method"))

    assert sink.wait_response(13)["error"]["code"] == -32601
    transport.send(request(14, "test/json"))
    sink.wait_response(14)
    assert sink.lost == []


def test_an_unreachable_server_fails_the_request_and_loses_the_transport(
    open_transport,
) -> None:
    with refusing_port() as port:
        transport, sink = open_transport(f"http://127.0.0.1:{port}/mcp")

        transport.send(request(15, "server/discover", modern=True))

        error = failed_exchange(sink, 15)
        assert error.what.startswith("connection error: ConnectError") and error.status is None
        assert sink.wait_lost().startswith("server unreachable")


# --------------------------------------------------------------------------
# Streams that end early, and cancel_stream


@pytest.mark.parametrize("method", ["test/drop", "test/abort"])
@pytest.mark.parametrize("modern", [True, False])
def test_a_stream_ending_before_its_response_reports_stream_dropped(
    fake_server, open_transport, method: str, modern: bool
) -> None:
    _, url = fake_server(sessions=False)
    transport, sink = open_transport(url)

    transport.send(request("listen-1", method, modern=modern))

    error = failed_exchange(sink, "listen-1")
    assert (error.what, error.status) == (STREAM_DROPPED, None)
    assert error.reason == ("transport_error", None, STREAM_DROPPED)
    assert sink.frames[0]["method"] == "notifications/message"
    assert sink.lost == []


@pytest.mark.parametrize(
    ("method", "params", "status", "what"),
    [
        ("test/status", {"status": 503, "body": "overloaded"}, 503, "HTTP 503 Service Unavailable"),
        ("test/abort", {}, None, STREAM_DROPPED),  # the connection is reset mid-stream
    ],
    ids=["http-503-on-a-post", "reset-mid-stream"],
)
def test_a_hosts_call_whose_exchange_fails_raises_the_transports_error_and_the_client_stays_ready(
    fake_server, caplog, method: str, params: dict[str, Any], status: int | None, what: str
) -> None:
    _, url = fake_server(sessions=False)
    client = mcp.connect(HttpTransport(url), reconnect=False)
    try:
        caplog.set_level(logging.DEBUG, logger="exmcp_actors")
        with pytest.raises(mcp.ExchangeFailed) as info:
            client.request(method, params, timeout=WAIT)
        assert (info.value.status, info.value.what) == (status, what)
        assert isinstance(info.value, mcp.ConnectionLost) and isinstance(info.value, mcp.TransportError)
        assert not isinstance(info.value, mcp.RequestError)  # no server answered
        assert client.status == "ready"
        assert client.request("test/json", {}, timeout=WAIT)["echo"] is not None
        logged = [r.getMessage() for r in caplog.records if r.name == "exmcp_actors" and r.levelno >= logging.WARNING]
        assert not [text for text in logged if "frame" in text or "request id" in text], logged  # no bad answer
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    finally:
        client.disconnect()


def test_a_legacy_stream_with_event_ids_is_resumed_with_a_get(fake_server, open_transport) -> None:
    fake, url = fake_server()
    transport, sink = open_transport(url)
    start_legacy_session(transport, sink)

    transport.send(request(16, "test/resumable"))

    assert sink.wait_response(16)["result"] == {"resumed": True}
    resume = fake.gets[-1].headers
    assert resume["last-event-id"] == "r1"
    assert resume["mcp-session-id"] == "session-1"


def test_cancel_stream_closes_a_modern_listen_stream(fake_server, open_transport) -> None:
    fake, url = fake_server(sessions=False)
    transport, sink = open_transport(url)
    transport.negotiated(MODERN, "modern")

    transport.send(request("listen-2", "subscriptions/listen", {"notifications": {}}, modern=True))
    sink.wait_frame(lambda f: f.get("method") == "notifications/subscriptions/acknowledged")

    assert transport.cancel_stream("listen-2") is True
    assert fake.wait_until(lambda: fake.disconnected == ["listen-2"])
    assert quiet(transport)
    assert sink.about("listen-2") == []  # no "stream dropped" failure
    assert transport.cancel_stream("listen-2") is False


def test_cancel_stream_aborts_a_legacy_stream_but_asks_for_a_cancel_notification(fake_server, open_transport) -> None:
    fake, url = fake_server()
    transport, sink = open_transport(url)
    start_legacy_session(transport, sink)

    transport.send(request(17, "test/long"))
    sink.wait_frame(lambda f: f.get("method") == "notifications/subscriptions/acknowledged")

    assert transport.cancel_stream(17) is False
    assert fake.wait_until(lambda: fake.disconnected == [17])
    assert quiet(transport)


def test_cancel_stream_interrupts_a_request_still_waiting_for_its_headers(fake_server, open_transport) -> None:
    fake, url = fake_server(sessions=False)
    transport, sink = open_transport(url)
    transport.send(request("slow", "test/slow", modern=True))
    assert fake.wait_until(lambda: bool(fake.posted("test/slow")))

    assert transport.cancel_stream("slow") is True
    assert quiet(transport)  # the worker was unblocked although no byte came back
    fake.release()
    transport.send(request(18, "test/json"))
    sink.wait_response(18)
    assert sink.about("slow") == []


def test_cancel_stream_of_an_unknown_id_is_false(fake_server, open_transport) -> None:
    _, url = fake_server(sessions=False)
    transport, _ = open_transport(url)
    assert transport.cancel_stream("nope") is False


# --------------------------------------------------------------------------
# The legacy GET stream


def test_an_oversized_event_on_the_get_stream_drops_it_and_the_stream_is_reopened(fake_server, open_transport) -> None:
    fake, url = fake_server(retry_ms=10)
    transport, sink = open_transport(url, max_frame_bytes=1000)
    start_legacy_session(transport, sink)
    transport.negotiated(LEGACY, "legacy")
    assert fake.wait_until(lambda: fake.get_streams_open == 1)

    fake.push(notification("notifications/message", {"data": "x" * 5000}))
    assert fake.wait_until(lambda: len(fake.gets) == 2 and fake.get_streams_open == 1)
    fake.push(notification("notifications/prompts/list_changed"))

    sink.wait_until(lambda: len(sink.notifications("notifications/prompts/list_changed")) == 1)
    assert fake.gets[1].headers["last-event-id"] == "e1"  # resumed after the bad event, not before it
    assert not sink.lost


def test_the_get_stream_delivers_server_messages_and_resumes_after_a_drop(fake_server, open_transport) -> None:
    fake, url = fake_server(retry_ms=10)
    transport, sink = open_transport(url)
    start_legacy_session(transport, sink)
    transport.negotiated(LEGACY, "legacy")
    assert fake.wait_until(lambda: fake.get_streams_open == 1)

    fake.push(notification("notifications/tools/list_changed"))
    fake.push(notification("notifications/resources/updated", {"uri": "file:///x"}))
    sink.wait_until(lambda: len(sink.notifications("notifications/resources/updated")) == 1)
    fake.drop_get()
    assert fake.wait_until(lambda: len(fake.gets) == 2 and fake.get_streams_open == 1)
    fake.push(notification("notifications/prompts/list_changed"))

    sink.wait_until(lambda: len(sink.notifications("notifications/prompts/list_changed")) == 1)
    first, second = fake.gets[0].headers, fake.gets[1].headers
    assert first["accept"] == "text/event-stream"
    assert first["mcp-session-id"] == "session-1"
    assert first["mcp-protocol-version"] == LEGACY
    assert "last-event-id" not in first
    assert second["last-event-id"] == "e2"
    assert sink.lost == []


def test_a_server_without_a_get_stream_is_fine(fake_server, open_transport) -> None:
    fake, url = fake_server(get_mode=405)
    transport, sink = open_transport(url)
    start_legacy_session(transport, sink)

    transport.negotiated(LEGACY, "legacy")
    link = transport._link
    assert link is not None and link.get_thread is not None
    link.get_thread.join(WAIT)

    assert not link.get_thread.is_alive()
    assert len(fake.gets) == 1
    transport.send(request(19, "test/json"))
    sink.wait_response(19)
    assert sink.lost == []


def test_a_get_stream_that_cannot_reconnect_loses_the_transport(open_transport) -> None:
    fake = FakeMcp(retry_ms=10)
    server = ServerThread(fake).__enter__()
    try:
        transport, sink = open_transport(server.url)
        start_legacy_session(transport, sink)
        transport.negotiated(LEGACY, "legacy")
        assert fake.wait_until(lambda: fake.get_streams_open == 1)
    finally:
        server.stop()

    assert sink.wait_lost().startswith("GET stream could not reconnect: ConnectError")


# --------------------------------------------------------------------------
# Lifecycle


def test_close_deletes_the_session_ends_every_stream_and_is_idempotent(fake_server, open_transport) -> None:
    fake, url = fake_server()
    transport, sink = open_transport(url)
    start_legacy_session(transport, sink)
    transport.negotiated(LEGACY, "legacy")
    transport.send(request(20, "test/long"))
    sink.wait_frame(lambda f: f.get("method") == "notifications/subscriptions/acknowledged")
    assert fake.wait_until(lambda: fake.get_streams_open == 1)

    transport.close()
    transport.close()

    assert [d.headers["mcp-session-id"] for d in fake.deletes] == ["session-1"]
    assert our_threads() == []
    assert fake.wait_until(lambda: fake.get_streams_open == 0 and fake.disconnected == [20])
    assert sink.lost == []
    with pytest.raises(TransportError):
        transport.send(request(21, "test/json"))


def test_open_again_starts_without_the_old_session(fake_server, open_transport) -> None:
    fake, url = fake_server()
    transport, sink = open_transport(url)
    start_legacy_session(transport, sink)
    transport.negotiated(LEGACY, "legacy")
    transport.close()

    second = RecordingSink()
    transport.open(second, timeout=5)
    transport.send(initialize("init-2"))
    second.wait_response("init-2")

    assert "mcp-session-id" not in fake.posted("initialize")[1].headers
    assert sink.frames == [sink.wait_response("init")]  # the old sink got nothing new


def test_send_before_open_raises() -> None:
    with pytest.raises(TransportError):
        HttpTransport("http://127.0.0.1:1/mcp").send(request(1, "ping"))


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match="not an http"):
        HttpTransport("ws://127.0.0.1/mcp")


# --------------------------------------------------------------------------
# The MCP SDK's own Streamable HTTP app


@pytest.fixture
def sdk_server() -> Iterator[str]:
    mcp_types = pytest.importorskip("mcp_types")
    from mcp.server.lowlevel import Server
    from mcp.server.subscriptions import (
        InMemorySubscriptionBus,
        ListenHandler,
        ResourceUpdated,
    )

    bus = InMemorySubscriptionBus()
    uri = "file:///watched.txt"

    async def list_tools(ctx: Any, params: Any) -> Any:
        schema = {"type": "object", "properties": {}}
        return mcp_types.ListToolsResult(tools=[mcp_types.Tool(name="poke", input_schema=schema)])

    async def call_tool(ctx: Any, params: Any) -> Any:
        if ctx.protocol_version == MODERN:
            await bus.publish(ResourceUpdated(uri=uri))
        else:
            await ctx.session.send_resource_updated(uri)  # the standalone GET stream
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="poked")])

    async def list_resources(ctx: Any, params: Any) -> Any:
        return mcp_types.ListResourcesResult(resources=[mcp_types.Resource(name="watched", uri=uri)])

    async def read_resource(ctx: Any, params: Any) -> Any:
        return mcp_types.ReadResourceResult(contents=[mcp_types.TextResourceContents(uri=uri, text="hello")])

    async def subscribe(ctx: Any, params: Any) -> Any:
        return mcp_types.EmptyResult()

    server = Server(
        "sdk-test",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=subscribe,
        on_subscriptions_listen=ListenHandler(bus),
    )
    with ServerThread(server.streamable_http_app(), lifespan="on") as running:
        yield running.url


class _Flag(logging.Handler):
    """Sets an event when the transport logs ``text`` (at debug)."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.DEBUG)
        self.text = text
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == self.text:
            self.event.set()


@pytest.fixture
def get_stream_connected() -> Iterator[threading.Event]:
    log = logging.getLogger("exmcp_actors.http")
    flag = _Flag("GET stream connected")
    old_level = log.level
    log.setLevel(logging.DEBUG)
    log.addHandler(flag)
    yield flag.event
    log.removeHandler(flag)
    log.setLevel(old_level)


def test_a_legacy_session_with_the_sdk_server_gets_answers_and_updates_on_the_get_stream(
    sdk_server, open_transport, get_stream_connected
) -> None:
    transport, sink = open_transport(sdk_server)

    result = start_legacy_session(transport, sink)["result"]
    assert result["protocolVersion"] == LEGACY
    transport.negotiated(LEGACY, "legacy")
    transport.send(request(1, "tools/list"))
    assert [t["name"] for t in sink.wait_response(1)["result"]["tools"]] == ["poke"]
    transport.send(request(2, "resources/subscribe", {"uri": "file:///watched.txt"}))
    assert sink.wait_response(2)["result"] == {}
    assert get_stream_connected.wait(WAIT)

    transport.send(request(3, "tools/call", {"name": "poke", "arguments": {}}))

    assert sink.wait_response(3)["result"]["content"][0]["text"] == "poked"
    updated = sink.wait_frame(lambda f: f.get("method") == "notifications/resources/updated")
    assert updated["params"]["uri"] == "file:///watched.txt"
    assert sink.lost == []


def test_a_modern_session_with_the_sdk_server_gets_answers_and_updates_on_its_listen(
    sdk_server, open_transport
) -> None:
    transport, sink = open_transport(sdk_server)

    transport.send(request("discover", "server/discover", modern=True))
    assert MODERN in sink.wait_response("discover")["result"]["supportedVersions"]
    transport.negotiated(MODERN, "modern")
    transport.send(request(1, "resources/read", {"uri": "file:///watched.txt"}, modern=True))
    assert sink.wait_response(1)["result"]["contents"][0]["text"] == "hello"

    listen = {"notifications": {"resourceSubscriptions": ["file:///watched.txt"]}}
    transport.send(request("listen-1", "subscriptions/listen", listen, modern=True))
    ack = sink.wait_frame(lambda f: f.get("method") == "notifications/subscriptions/acknowledged")
    assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"
    transport.send(request(2, "tools/call", {"name": "poke", "arguments": {}}, modern=True))
    assert sink.wait_response(2)["result"]["content"][0]["text"] == "poked"
    updated = sink.wait_frame(lambda f: f.get("method") == "notifications/resources/updated")
    assert updated["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"

    assert transport.cancel_stream("listen-1") is True
    assert quiet(transport)
    assert sink.about("listen-1") == []
    assert sink.lost == []


# --------------------------------------------------------------------------
# The SSE parser on its own


def feed_all(parser: SSEParser, chunks: list[bytes]) -> list[SSEEvent]:
    return [event for chunk in chunks for event in parser.feed(chunk)]


def test_the_sse_parser_splits_on_crlf_lf_and_cr_even_across_reads() -> None:
    stream = b"data: a\r\n\r\ndata: b\n\ndata: c\r\rdata: d1\r\ndata: d2\r\n\r\n"
    whole = [e.data for e in feed_all(SSEParser(100), [stream])]
    bytewise = [e.data for e in feed_all(SSEParser(100), [bytes([b]) for b in stream])]
    assert whole == bytewise == [b"a", b"b", b"c", b"d1\nd2"]


def test_the_sse_parser_keeps_ids_and_retry_and_skips_comments_and_bom() -> None:
    parser = SSEParser(100)
    events = feed_all(
        parser,
        [
            b"\xef\xbb\xbf: ping\n\nid: 1\nretry: 250\nevent: message\ndata:{}\n\n",
            b"data: x\n\nid\ndata: y\n\n",
        ],
    )
    assert [(e.event, e.data, e.id) for e in events] == [
        ("message", b"{}", "1"),
        ("message", b"x", "1"),
        ("message", b"y", ""),
    ]
    assert parser.retry_ms == 250
    assert parser.last_event_id == ""


def test_the_sse_parser_dispatches_nothing_without_data_but_records_the_id() -> None:
    parser = SSEParser(100)
    assert parser.feed(b"id: 9\n\nretry: soon\n\n") == []
    assert parser.last_event_id == "9"
    assert parser.retry_ms is None
    assert [e.data for e in parser.feed(b"data:\n\n")] == [b""]  # a priming event


def test_the_sse_parser_reports_an_oversized_event_once_without_buffering_it() -> None:
    parser = SSEParser(10)
    chunks = [b"data: " + b"x" * 8, b"x" * 1000, b"x" * 1000, b"\n\ndata: ok\n\n"]
    events = feed_all(parser, chunks)
    assert [(e.oversize, e.data) for e in events] == [(True, b""), (False, b"ok")]
    assert len(parser._partial) == 0
    events = feed_all(parser, [b"data: 12345\ndata: 12345\n\n"])
    assert [e.oversize for e in events] == [True]


def test_an_mcp_name_that_is_not_plain_ascii_is_base64_wrapped() -> None:
    encode = encode_header_value
    assert encode("get_weather") == "get_weather"
    assert encode("file:///a b") == "file:///a b"
    for tricky in ["café", " lead", "trail ", "tab\there", "=?base64?abc?="]:
        wrapped = encode(tricky)
        assert wrapped.startswith("=?base64?") and wrapped.endswith("?=")
        assert base64.b64decode(wrapped[9:-2]).decode() == tricky


def test_an_oversized_json_body_is_an_invalid_frame_and_an_error(fake_server, open_transport) -> None:
    _, url = fake_server(sessions=False)
    transport, sink = open_transport(url, max_frame_bytes=50)

    transport.send(request(30, "test/json", {"pad": "x" * 200}))

    sink.wait_failure(30)
    bad, failed = sink.batches[0]
    assert isinstance(bad, InvalidFrame) and "larger than 50" in bad.error
    assert isinstance(failed, RequestFailed) and failed.id == 30 and isinstance(failed.error, ProtocolError)


def test_requests_in_the_modern_era_carry_mcp_method_without_meta(fake_server, open_transport) -> None:
    fake, url = fake_server(sessions=False)
    transport, sink = open_transport(url)
    transport.negotiated(MODERN, "modern")

    transport.send(request(31, "tools/list"))
    transport.send(notification("notifications/cancelled", {"requestId": 31}))

    sink.wait_response(31)
    assert fake.wait_until(lambda: len(fake.posts) == 2)
    for post in fake.posts:
        assert post.headers["mcp-protocol-version"] == MODERN
        assert post.headers["mcp-method"] == post.body["method"]


def test_unusable_tls_settings_fail_open_with_a_transport_error() -> None:
    transport = HttpTransport("https://[::1]:8443/mcp", verify="/no/such/ca-bundle.pem")
    assert transport.describe() == "http https://[::1]:8443/mcp"
    with pytest.raises(TransportError, match="cannot open"):
        transport.open(RecordingSink(), timeout=1)


def test_over_tls_requests_work_and_cancel_stream_still_interrupts_the_read(tmp_path, open_transport) -> None:
    pytest.importorskip("cryptography")
    ca, cert, key = make_tls_files(tmp_path)
    fake = FakeMcp(sessions=False)
    with ServerThread(fake, tls=(cert, key)) as server:
        transport, sink = open_transport(server.url, verify=ca)
        transport.send(request(1, "test/json"))
        assert sink.wait_response(1)["result"] == {"echo": {}}
        transport.send(request("listen", "subscriptions/listen", modern=True))
        sink.wait_frame(lambda f: f.get("method") == "notifications/subscriptions/acknowledged")

        assert transport.cancel_stream("listen") is True
        assert fake.wait_until(lambda: fake.disconnected == ["listen"])
        assert quiet(transport)
        transport.close()
