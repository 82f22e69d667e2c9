"""A hostile WebSocket server's handshake answer gets a bounded cost: at most 8,192 bytes a
line and 128 headers (the websockets library's limits), no more time than ``open()`` was
given (and no reading after it), a refusal's body unread; and no cookie it sets ever goes
anywhere (no jar: not to another server, nor back to it)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from helpers_transport import (
    WAIT,
    Behaviour,
    HostileTcpPeer,
    RecordingSink,
    StallingTlsPeer,
    join_exmcp_threads,
    unanswered_port,
    upgrade_answer,
    ws_accept_for,
)
from tls_files import make_tls_files

from exmcp_actors._protocol._errors import TransportError
from exmcp_actors._transport.websocket._connection import WebSocketTransport
from exmcp_actors._transport.websocket._handshake import MAX_LINE, Deadline, read_head


@pytest.fixture(autouse=True)
def no_transport_thread_left() -> Iterator[None]:
    yield
    assert join_exmcp_threads() == []


def open_transport(peer: HostileTcpPeer, timeout: float = WAIT, host: str = "127.0.0.1", **kwargs: Any) -> None:
    """Open (and close again) a transport to ``peer``; raises what ``open`` raises."""
    kwargs.setdefault("close_timeout", 0.1)  # the peer never answers a close frame
    transport = WebSocketTransport(f"ws://{host}:{peer.port}/mcp", heartbeat_interval=None, **kwargs)
    try:
        transport.open(RecordingSink(), timeout=timeout)
    finally:
        transport.close()


def answer_then_hold(answer: bytes) -> Behaviour:
    def behave(conn: socket.socket, head: bytes, stop: threading.Event) -> None:
        conn.sendall(answer)
        stop.wait()

    return behave


def upgrade_then_hold(*extra: str) -> Behaviour:
    """A valid upgrade answer (with ``extra`` header lines), then nothing until the peer stops."""

    def behave(conn: socket.socket, head: bytes, stop: threading.Event) -> None:
        conn.sendall(upgrade_answer(head, *extra))
        stop.wait()

    return behave


# -- bounds on the head ------------------------------------------------------------------


def test_a_handshake_line_longer_than_8192_bytes_is_refused() -> None:
    with HostileTcpPeer(upgrade_then_hold("X-Long: " + "a" * 9000)) as peer, pytest.raises(TransportError) as info:
        open_transport(peer)

    assert "a line longer than 8192 bytes" in str(info.value)


def test_a_handshake_line_of_8192_bytes_is_taken() -> None:
    with HostileTcpPeer(upgrade_then_hold("X-Long: " + "a" * (8192 - len("X-Long: ")))) as peer:
        open_transport(peer)


def test_a_handshake_answer_with_more_than_128_headers_is_refused() -> None:
    with (
        HostileTcpPeer(upgrade_then_hold(*(f"X-{i}: v" for i in range(130)))) as peer,
        pytest.raises(TransportError) as info,
    ):
        open_transport(peer)

    assert "more than 128 headers" in str(info.value)


def test_a_megabyte_head_costs_kilobytes_not_megabytes() -> None:
    def behave(conn: socket.socket, head: bytes, stop: threading.Event) -> None:
        conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nX-Big: ")
        with contextlib.suppress(OSError):
            for _ in range(16):  # 1 MiB, then the end of the head
                conn.sendall(b"a" * 65536)
            conn.sendall(b"\r\n\r\n")
        stop.wait()

    with HostileTcpPeer(behave) as peer:
        tracemalloc.start()
        try:
            with pytest.raises(TransportError, match="longer than 8192 bytes"):
                open_transport(peer)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()

    assert peak < 256 * 1024, f"reading the head peaked at {peak} bytes"


def test_a_trickled_head_ends_open_by_its_deadline_and_nothing_reads_on() -> None:
    trickling_ended = threading.Event()
    timeout = 1.0

    def behave(conn: socket.socket, head: bytes, stop: threading.Event) -> None:
        try:
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nX-Slow: ")
            while not stop.wait(0.02):
                conn.sendall(b"a")  # fails once the client closed the socket
        except OSError:
            trickling_ended.set()

    outcome: list[BaseException | None] = []
    with HostileTcpPeer(behave) as peer:

        def attempt() -> None:
            try:
                open_transport(peer, timeout=timeout)
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        started = time.monotonic()
        thread = threading.Thread(target=attempt, name="test-open", daemon=True)
        thread.start()
        thread.join(WAIT)
        elapsed = time.monotonic() - started
        assert not thread.is_alive(), f"open(timeout={timeout}) still reading after {WAIT}s"
        assert trickling_ended.wait(WAIT), "the client kept the socket open after open() gave up"

    assert elapsed < timeout + 1.0, f"open(timeout={timeout}) took {elapsed:.1f}s"
    [error] = outcome
    assert isinstance(error, TransportError)
    assert "gave up after 1.0s waiting for the server's answer to the WebSocket upgrade" in str(error)


def test_a_refusals_body_is_never_read() -> None:
    sent = threading.Event()

    def behave(conn: socket.socket, head: bytes, stop: threading.Event) -> None:
        conn.sendall(b"HTTP/1.1 503 Busy\r\nContent-Length: 1000000000\r\n\r\nslow body")
        sent.set()
        stop.wait()  # the rest of the body never comes

    started = time.monotonic()
    with HostileTcpPeer(behave) as peer, pytest.raises(TransportError) as info:
        open_transport(peer, timeout=WAIT)

    assert time.monotonic() - started < WAIT / 2
    assert "refused the WebSocket handshake with HTTP 503 Busy" in str(info.value)


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        (("Sec-WebSocket-Extensions: permessage-deflate",), "extension"),
        (("X-Bad Name: v",), "malformed header line"),
    ],
)
def test_an_answer_breaking_the_upgrade_is_refused(extra: tuple[str, ...], error: str) -> None:
    with HostileTcpPeer(upgrade_then_hold(*extra)) as peer, pytest.raises(TransportError, match=error):
        open_transport(peer)


#: Answers that break RFC 6455 section 4.1 (or HTTP itself) in one place, and what the error says.
BROKEN_ANSWERS = {
    "another protocol beside websocket": (b"Upgrade: websocket", b"Upgrade: websocket, h2c", "websocket alone"),
    "no Upgrade": (b"Upgrade: websocket\r\n", b"", "Upgrade: none"),
    "a 101 in HTTP/1.0": (b"HTTP/1.1 101", b"HTTP/1.0 101", "switched protocols in HTTP/1.0"),
    "a version that is not HTTP/1.x": (b"HTTP/1.1 101", b"HTTP/1.9 101", "is not HTTP"),
    "a status of non-ASCII digits": (b"HTTP/1.1 101", b"HTTP/1.1 \xb9\xb2\xb3", "is not HTTP"),
    "a NUL in a header value": (b"Connection: Upgrade", b"Connection: Upgrade\r\nX-A: a\0b", "malformed header"),
    "a lone CR in a header value": (b"Connection: Upgrade", b"Connection: Upgrade\r\nX-A: a\rb", "malformed header"),
    "the accept key in lower case": (b"Sec-WebSocket-Accept: ", b"Sec-WebSocket-Accept: ", "does not match"),
    "an unoffered subprotocol": (b"Protocol: mcp", b"Protocol: chat", "subprotocol 'mcp'"),
    "the subprotocol in upper case": (b"Protocol: mcp", b"Protocol: MCP", "subprotocol 'mcp'"),
    "no subprotocol": (b"Sec-WebSocket-Protocol: mcp\r\n", b"", "it chose none"),
}


@pytest.mark.parametrize("case", BROKEN_ANSWERS)
def test_an_answer_breaking_rfc_6455_or_http_is_refused(case: str) -> None:
    old, new, error = BROKEN_ANSWERS[case]

    def behave(conn: socket.socket, head: bytes, stop: threading.Event) -> None:
        answer = upgrade_answer(head).replace(old, new, 1)
        if case == "the accept key in lower case":
            accept = ws_accept_for(head).encode()
            answer = answer.replace(accept, accept.lower())
        conn.sendall(answer)
        stop.wait()

    with HostileTcpPeer(behave) as peer, pytest.raises(TransportError, match=error):
        open_transport(peer)


@pytest.mark.parametrize(
    "case",
    ["a bare LF ending every line", "a 101 without a reason", "Connection with another token", "spaces around values"],
)
def test_an_answer_http_allows_is_taken(case: str) -> None:
    def behave(conn: socket.socket, head: bytes, stop: threading.Event) -> None:
        answer = upgrade_answer(head)
        if case == "a bare LF ending every line":
            answer = answer.replace(b"\r\n", b"\n")
        elif case == "a 101 without a reason":
            answer = answer.replace(b"101 Switching Protocols", b"101")
        elif case == "Connection with another token":
            answer = answer.replace(b"Connection: Upgrade", b"Connection: keep-alive, upgrade")
        else:
            answer = answer.replace(b": ", b":  \t")
        conn.sendall(answer)
        stop.wait()

    with HostileTcpPeer(behave) as peer:
        open_transport(peer)


class ChunkedSocket:
    """Just what ``read_head`` uses of a socket: each ``recv`` returns the next chunk."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def settimeout(self, timeout: float | None) -> None:
        pass

    def recv(self, size: int) -> bytes:
        chunk = self._chunks.pop(0) if self._chunks else b""
        assert len(chunk) <= size
        return chunk


@pytest.mark.parametrize("split", ["before the CR", "between the CR and the LF", "after the LF"])
def test_a_line_of_8192_bytes_is_taken_wherever_tcp_splits_it(split: str) -> None:
    status = b"HTTP/1.1 101 Switching Protocols\r\n"
    line = b"X-Long: " + b"a" * (MAX_LINE - len("X-Long: "))
    answer = status + line + b"\r\n\r\n"
    cut = len(status) + len(line) + {"before the CR": 0, "between the CR and the LF": 1, "after the LF": 2}[split]
    chunks = [answer[i : min(i + 4096, cut)] for i in range(0, cut, 4096)] + [answer[cut:]]

    lines, rest = read_head(ChunkedSocket(chunks), Deadline(WAIT))  # type: ignore[arg-type]

    assert lines == [status[:-2], line] and rest == b""


def test_a_wrong_accept_key_is_refused() -> None:
    with (
        HostileTcpPeer(
            answer_then_hold(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Accept: bm90IHRoZSBrZXk=\r\nSec-WebSocket-Protocol: mcp\r\n\r\n"
            )
        ) as peer,
        pytest.raises(TransportError, match="Sec-WebSocket-Accept does not match"),
    ):
        open_transport(peer)


def test_control_characters_of_the_servers_reason_are_escaped() -> None:
    with (
        HostileTcpPeer(answer_then_hold(b"HTTP/1.1 500 \x1b[2Jgone\r\n\r\n")) as peer,
        pytest.raises(TransportError) as info,
    ):
        open_transport(peer)

    assert "\x1b" not in str(info.value) and "\\x1b[2Jgone" in str(info.value)


# -- the TCP connection ----------------------------------------------------------------------


def test_an_address_that_never_answers_does_not_keep_the_next_from_being_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    with unanswered_port() as black_hole, HostileTcpPeer(upgrade_then_hold()) as server:
        addresses = [("127.0.0.1", black_hole), ("127.0.0.1", server.port)]
        real = socket.getaddrinfo

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            if host != "two.example":
                return real(host, *args, **kwargs)
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", address) for address in addresses]

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
        open_transport(server, timeout=2.0, host="two.example")

    assert len(server.heads) == 1


# -- abort_open: a shutdown wakes an open at any step -----------------------------------------


def connects_in_syn_sent(port: int) -> int:
    """How many connections to 127.0.0.1:``port`` are in SYN_SENT (Linux's /proc/net/tcp)."""
    wanted = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as table:
        rows = [row.split() for row in table.read().splitlines()[1:]]
    return sum(1 for fields in rows if fields[2] == wanted and fields[3] == "02")


def set_once_one_more_syn_is_sent(port: int, before: int, event: threading.Event) -> None:
    """Set ``event`` once one more connection to ``port`` than ``before`` is in SYN_SENT: the
    open's connect is then blocked in the kernel, where an abort must reach it."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline and not event.wait(0.01):
        if connects_in_syn_sent(port) > before:
            event.set()


@contextlib.contextmanager
def hanging_open(step: str, tmp_path: Any) -> Iterator[tuple[WebSocketTransport, threading.Event]]:
    """A transport whose open hangs at ``step``, and the event set once it hangs there."""
    if step == "tcp connect":
        with unanswered_port() as port:
            reached = threading.Event()
            fillers = connects_in_syn_sent(port)  # the backlog's own, before the open starts
            watcher = threading.Thread(target=set_once_one_more_syn_is_sent, args=(port, fillers, reached), daemon=True)
            watcher.start()
            yield WebSocketTransport(f"ws://127.0.0.1:{port}/mcp", heartbeat_interval=None), reached
            watcher.join(WAIT)
    elif step == "tls handshake":
        pytest.importorskip("cryptography")
        ca, _, _ = make_tls_files(tmp_path)
        with StallingTlsPeer() as peer:
            url = f"wss://localhost:{peer.port}/mcp"
            yield WebSocketTransport(url, heartbeat_interval=None, sslopt={"ca_certs": ca}), peer.hello_received
    else:
        asked = threading.Event()

        def behave(conn: socket.socket, head: bytes, stop: threading.Event) -> None:
            asked.set()
            stop.wait()

        with HostileTcpPeer(behave) as silent:
            yield WebSocketTransport(f"ws://127.0.0.1:{silent.port}/mcp", heartbeat_interval=None), asked


@pytest.mark.parametrize("step", ["tcp connect", "tls handshake", "upgrade answer"])
def test_abort_open_ends_an_open_hanging_at_any_step(step: str, tmp_path: Any) -> None:
    outcome: list[BaseException] = []
    with hanging_open(step, tmp_path) as (transport, reached):

        def attempt() -> None:
            try:
                transport.open(RecordingSink(), timeout=WAIT * 3)
            except BaseException as exc:
                outcome.append(exc)

        opener = threading.Thread(target=attempt, name="test-open", daemon=True)
        opener.start()
        assert reached.wait(WAIT)
        started = time.monotonic()
        transport.abort_open()
        opener.join(WAIT)
        elapsed = time.monotonic() - started
        transport.close()

    assert not opener.is_alive() and elapsed < 1.0, f"open() went on {elapsed:.1f}s after abort_open()"
    [error] = outcome
    assert isinstance(error, TransportError) and "abandoned" in str(error)


def test_after_abort_open_opens_fail_until_close() -> None:
    with HostileTcpPeer(upgrade_then_hold()) as server:
        transport = WebSocketTransport(f"ws://127.0.0.1:{server.port}/mcp", heartbeat_interval=None)
        transport.abort_open()
        with pytest.raises(TransportError, match="abandoned"):
            transport.open(RecordingSink(), timeout=WAIT)
        assert server.heads == []

        transport.close()
        transport.open(RecordingSink(), timeout=WAIT)
        transport.close()


# -- cookies -------------------------------------------------------------------------------


def planting(domain: str) -> Any:
    """A server whose upgrade answer sets a cookie for ``domain``."""

    def behave(conn: socket.socket, head: bytes, stop: threading.Event) -> None:
        conn.sendall(upgrade_answer(head, f"Set-Cookie: planted=s3cr3t; Domain={domain}; Path=/"))
        stop.wait()

    return behave


def cookie_lines(head: bytes) -> list[bytes]:
    return [line for line in head.split(b"\r\n") if line.lower().startswith(b"cookie:")]


@pytest.fixture
def victim_resolves_to_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """``victim.example`` is a name of 127.0.0.1, in this process only."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == "victim.example" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.mark.parametrize(("domain", "victim_host"), [("127.0.0.1", "127.0.0.1"), ("victim.example", "victim.example")])
@pytest.mark.usefixtures("victim_resolves_to_loopback")
def test_a_cookie_one_server_sets_never_reaches_another(domain: str, victim_host: str) -> None:
    with HostileTcpPeer(planting(domain)) as planter, HostileTcpPeer(answer_then_hold(b"")) as victim:
        open_transport(planter)
        with contextlib.suppress(TransportError):  # the victim never answers: only its request matters
            open_transport(victim, timeout=0.5, host=victim_host)

        assert victim.heads, "the victim saw no request"
        assert cookie_lines(victim.heads[0]) == []


def test_a_cookie_a_server_sets_is_not_sent_back_to_it_either() -> None:
    with HostileTcpPeer(planting("127.0.0.1")) as server:
        open_transport(server)
        open_transport(server)

    assert [cookie_lines(head) for head in server.heads] == [[], []]


def test_the_hosts_own_cookie_header_goes_to_its_server() -> None:
    with HostileTcpPeer(planting("127.0.0.1")) as server:
        open_transport(server, headers={"Cookie": "mine=1"})

    assert cookie_lines(server.heads[0]) == [b"Cookie: mine=1"]
