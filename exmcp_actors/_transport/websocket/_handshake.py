"""The WebSocket opening handshake (RFC 6455 section 4.1), bounded and under one deadline.

websocket-client's own handshake gives a hostile server room: it reads the answer's head a
byte at a time with no limit on a line or on the number of headers, each read under the
timeout but the whole under none (a trickled head is read for as long as it lasts, on after
the caller gave up); it reads a refusal's announced body whole; and it keeps one process-wide
cookie jar that takes any ``Domain=``, so a cookie one server set is sent to another.

So the transport makes the connection and the handshake here, and hands the socket to
websocket-client for what it does well (framing and masking what we send), keeping its TLS
options (``sslopt``) as they were:

- every step (the TCP connection to each address in turn, TLS, the request, the answer)
  runs under the one deadline of ``open()``; past it the socket is closed, nothing reads on;
- the answer's head is read in chunks, at most :data:`MAX_LINE` bytes a line and
  :data:`MAX_HEADERS` header lines (the limits of the ``websockets`` library); the bytes
  received after it (the server's first frames) go to the frame reader;
- a refusal's body is never read: its status and headers are all the transport uses;
- no cookie is kept or sent beyond a ``Cookie`` the host put in ``headers``: MCP keeps no
  state in cookies (each connection starts with its own ``initialize``), and a jar shared
  between servers is what lets one server plant a cookie for another;
- the host name is resolved by ``getaddrinfo``, which has no timeout (as in websocket-client,
  httpx and websockets), and environment proxy settings are not used (as in the HTTP transport).

Example:
    >>> head = parse_head([b"HTTP/1.1 101 Switching Protocols", b"Upgrade: websocket"])
    >>> head.status, head.headers["upgrade"]
    (101, 'websocket')
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import websocket
from websocket import _http as websocket_http

from ..._protocol._errors import TransportError
from ..._protocol._peer_text import peer_text
from ..._util._redact import redact_url

#: Longest line of the answer's head, and most header lines (the websockets library's limits).
MAX_LINE: Final = 8192
MAX_HEADERS: Final = 128
#: One read of the answer: what one TCP segment or TLS record usually holds.
_READ_SIZE: Final = 4096
_GUID: Final = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_TOKEN_CHARS: Final = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class HandshakeError(TransportError):
    """The opening handshake failed; the text says why, in a sentence."""


class HandshakeRefused(HandshakeError):
    """The server answered with another status than 101: a redirect, a 401, a 503..."""

    status: int

    def __init__(self, message: str, status: int, headers: dict[str, str]) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers


class Deadline:
    """The one deadline of an ``open()``: what each blocking step may still take. ``abort``
    brings it forward to now, from another thread: the socket the open is blocked on is shut
    down under it, and every later step fails at once."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._at = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self.aborted = False

    def left(self, waiting_for: str) -> float:
        """Seconds left; past the deadline, the error that names what was still awaited."""
        if self.aborted:
            raise self.abandoned()
        left = self._at - time.monotonic()
        if left <= 0:
            raise self.expired(waiting_for)
        return left

    def expired(self, waiting_for: str) -> HandshakeError:
        return HandshakeError(f"gave up after {self.seconds:.1f}s waiting for {waiting_for}")

    @staticmethod
    def abandoned() -> HandshakeError:
        return HandshakeError("the connect was abandoned: the transport is closing")

    def watch(self, sock: socket.socket) -> None:
        """``sock`` is the one the open blocks on from now on (after an abort: refused)."""
        with self._lock:
            if self.aborted:
                raise self.abandoned()
            self._socket = sock

    def abort(self) -> None:
        """Make the open fail now: shut down the socket it is blocked on (the base-class
        method, which wakes a connect, a TLS handshake or a read), refuse every later step.
        An abort in the instant between a socket's last check and its ``connect()`` call
        finds it not yet connecting: that connect then runs out its share of the deadline."""
        with self._lock:
            self.aborted = True
            sock = self._socket
        if sock is not None:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


class OpenGate:
    """A transport's opens, as another thread sees them: ``abort`` brings forward the deadline
    of the open in progress and fails every later one, until ``reset`` (the next close)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._opening: Deadline | None = None
        self._aborted = False

    @contextlib.contextmanager
    def opening(self, timeout: float) -> Iterator[Deadline]:
        """The deadline of one open, abortable while the block runs."""
        deadline = Deadline(timeout)
        with self._lock:
            if self._aborted:
                raise deadline.abandoned()
            self._opening = deadline
        try:
            yield deadline
        finally:
            with self._lock:
                self._opening = None

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            deadline = self._opening
        if deadline is not None:
            deadline.abort()

    def reset(self) -> None:
        with self._lock:
            self._aborted = False


@dataclass(frozen=True, slots=True)
class Head:
    """The head of the server's answer: status, reason, headers (names in lower case,
    repeated ones joined with ``", "``)."""

    status: int
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    version: str = "HTTP/1.1"


@dataclass(frozen=True, slots=True)
class Opened:
    """A socket the server upgraded; ``rest``: bytes it sent after the head (frames)."""

    sock: socket.socket
    subprotocol: str
    rest: bytes


def open_websocket(
    url: str,
    headers: Mapping[str, str],
    sslopt: Mapping[str, Any],
    subprotocol: str,
    deadline: Deadline,
) -> Opened:
    """Connect, upgrade and check the answer, all before ``deadline``.

    ``headers`` are the host's (an ``Origin`` or ``Host`` among them replaces ours).

    Raises:
        HandshakeRefused: the server answered with another status than 101.
        HandshakeError: anything else went wrong (the text says what).
        OSError: the network failed (no such host, connection refused, TLS refused...).
    """
    parts = urllib.parse.urlsplit(url)
    secure = parts.scheme.lower() == "wss"
    host = parts.hostname or ""
    port = parts.port or (443 if secure else 80)
    sock = _connect_tcp(host, port, deadline)
    try:
        if secure:
            sock = _start_tls(sock, sslopt, host, deadline)
        key = base64.b64encode(os.urandom(16)).decode("ascii")
        request = _request(parts, host, port, secure, key, subprotocol, headers)
        sock.settimeout(deadline.left("the server to take the upgrade request"))
        try:
            sock.sendall(request)
        except TimeoutError:
            raise deadline.expired("the server to take the upgrade request") from None
        lines, rest = read_head(sock, deadline)
        head = parse_head(lines)
        chosen = check_upgrade(head, key, subprotocol)
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return Opened(sock, chosen, rest)


def _connect_tcp(host: str, port: int, deadline: Deadline) -> socket.socket:
    """A TCP connection to the first address that takes one, all tries before the deadline.

    Each address gets its share of the time left (the last one all of it): one that never
    answers (a black-holed IPv6 address, a hostile name's decoy) cannot keep the next from
    being tried."""
    waiting_for = f"a TCP connection to {host}:{port}"
    error: OSError | None = None
    addresses = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    for index, (family, kind, proto, _, address) in enumerate(addresses):
        last = index == len(addresses) - 1
        sock = socket.socket(family, kind, proto)
        try:
            deadline.watch(sock)
            sock.settimeout(deadline.left(waiting_for) / (len(addresses) - index))
            sock.connect(address)
        except BaseException as exc:
            sock.close()
            if isinstance(exc, TimeoutError) and last:
                raise deadline.expired(waiting_for) from None
            if not isinstance(exc, OSError):
                raise
            error = exc
            continue
        for option in websocket.DEFAULT_SOCKET_OPTION:  # no delay, keepalive: as websocket-client sets them
            sock.setsockopt(*option)
        return sock
    raise error or HandshakeError(f"{host} has no address to connect to")


def _start_tls(sock: socket.socket, sslopt: Mapping[str, Any], host: str, deadline: Deadline) -> ssl.SSLSocket:
    """TLS with websocket-client's reading of ``sslopt``, its handshake under the deadline
    (``SSLSocket.do_handshake`` applies the timeout to the whole handshake)."""
    options = dict(sslopt, do_handshake_on_connect=False)
    tls: ssl.SSLSocket = websocket_http._ssl_socket(sock, options, host)
    waiting_for = "the TLS handshake"
    try:
        deadline.watch(tls)  # the wrap detached the plain socket: an abort must reach this one
        tls.settimeout(deadline.left(waiting_for))
        tls.do_handshake()
    except TimeoutError:
        tls.close()
        raise deadline.expired(waiting_for) from None
    except BaseException:
        tls.close()
        raise
    return tls


def _request(
    parts: urllib.parse.SplitResult,
    host: str,
    port: int,
    secure: bool,
    key: str,
    subprotocol: str,
    headers: Mapping[str, str],
) -> bytes:
    """The upgrade request, as websocket-client writes it (its default ``Origin`` included)."""
    resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    hostport = f"[{host}]" if ":" in host else host
    if port != (443 if secure else 80):
        hostport = f"{hostport}:{port}"
    ours = {
        "Host": hostport,
        "Origin": f"{'https' if secure else 'http'}://{hostport}",
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": key,
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Protocol": subprotocol,
    }
    for name, value in headers.items():
        if name.lower() in ("host", "origin"):
            ours[name.title()] = value
    lines = [f"GET {resource} HTTP/1.1", *(f"{name}: {value}" for name, value in ours.items())]
    lines += [f"{name}: {value}" for name, value in headers.items() if name.lower() not in ("host", "origin")]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")


def read_head(sock: socket.socket, deadline: Deadline) -> tuple[list[bytes], bytes]:
    """The lines of the answer's head (without their ends), and the bytes after it.

    Lines end with CR LF (a bare LF is taken too, as RFC 9112 allows); a line longer than
    :data:`MAX_LINE`, more than :data:`MAX_HEADERS` headers, the end of the connection or
    the deadline ends the read with a :class:`HandshakeError`.
    """
    waiting_for = "the server's answer to the WebSocket upgrade"
    buffer = bytearray()
    lines: list[bytes] = []
    start = 0  # where the line being read begins
    scan = 0  # where to look for its end
    while True:
        end = buffer.find(b"\n", scan)
        if end < 0:
            # Room for a CR whose LF is still on the way: where TCP splits the bytes must not
            # decide whether a line of MAX_LINE bytes is taken.
            if len(buffer) - start > MAX_LINE + 1:
                raise HandshakeError(f"the server's handshake answer has a line longer than {MAX_LINE} bytes")
            scan = len(buffer)
            sock.settimeout(deadline.left(waiting_for))
            try:
                chunk = sock.recv(_READ_SIZE)
            except TimeoutError:
                raise deadline.expired(waiting_for) from None
            if not chunk:
                raise HandshakeError("the server closed the connection before it finished its handshake answer")
            buffer += chunk
            continue
        line = bytes(buffer[start : end - 1 if end > start and buffer[end - 1] == 0x0D else end])
        if len(line) > MAX_LINE:
            raise HandshakeError(f"the server's handshake answer has a line longer than {MAX_LINE} bytes")
        start = scan = end + 1
        if not line:
            return lines, bytes(buffer[start:])
        lines.append(line)
        if len(lines) > MAX_HEADERS + 1:  # the status line and the headers
            raise HandshakeError(f"the server's handshake answer has more than {MAX_HEADERS} headers")


def parse_head(lines: list[bytes]) -> Head:
    """Status line and headers; anything but HTTP/1.0 or HTTP/1.1 with a three-digit status, or
    a header line that is not ``token: value``, is a :class:`HandshakeError`. A NUL or CR in a
    value is refused too (RFC 9110 section 5.5: a recipient must not take it)."""
    if not lines:
        raise HandshakeError("the server's handshake answer is empty")
    version, _, rest = lines[0].decode("latin-1").partition(" ")
    code, _, reason = rest.partition(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or not (code.isascii() and code.isdigit()):
        raise HandshakeError(f"the server's handshake answer is not HTTP: {peer_text(lines[0].decode('latin-1'))!r}")
    headers: dict[str, str] = {}
    for raw in lines[1:]:
        text = raw.decode("latin-1")
        name, colon, value = text.partition(":")
        if not colon or not name or not _TOKEN_CHARS.issuperset(name) or "\0" in value or "\r" in value:
            raise HandshakeError(f"the server's handshake answer has a malformed header line: {peer_text(text)!r}")
        name, value = name.lower(), value.strip(" \t")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return Head(int(code), reason, headers, version)


def _tokens(value: str | None) -> list[str]:
    return [token.strip().lower() for token in (value or "").split(",")]


def check_upgrade(head: Head, key: str, subprotocol: str) -> str:
    """What RFC 6455 section 4.1 asks of the answer; returns the subprotocol chosen.

    Raises:
        HandshakeRefused: the status is not 101.
        HandshakeError: a header of the upgrade is missing or wrong.
    """
    if head.status != 101:
        raise HandshakeRefused(
            f"the server refused the WebSocket handshake with HTTP {head.status} {peer_text(head.reason)}".rstrip(),
            head.status,
            head.headers,
        )
    if head.version != "HTTP/1.1":
        raise HandshakeError(f"the server switched protocols in {head.version}: the WebSocket upgrade is HTTP/1.1")
    headers = head.headers
    upgrade = headers.get("upgrade")
    if upgrade is None or upgrade.lower() != "websocket":  # that one value, no other protocol beside it
        shown = "none" if upgrade is None else repr(peer_text(upgrade))
        raise HandshakeError(f"the server's answer does not upgrade to websocket alone (Upgrade: {shown})")
    if "upgrade" not in _tokens(headers.get("connection")):
        raise HandshakeError("the server's answer does not upgrade the connection (no Connection: Upgrade)")
    expected = base64.b64encode(hashlib.sha1((key + _GUID).encode("ascii")).digest()).decode("ascii")
    if not hmac.compare_digest(headers.get("sec-websocket-accept", "").encode("latin-1"), expected.encode("ascii")):
        raise HandshakeError("the server's Sec-WebSocket-Accept does not match the key sent")
    if headers.get("sec-websocket-extensions"):
        raise HandshakeError("the server chose a WebSocket extension, but none was offered")
    chosen = headers.get("sec-websocket-protocol")
    if chosen != subprotocol:
        shown = "none" if chosen is None else repr(peer_text(chosen))
        raise HandshakeError(f"the server did not accept the subprotocol {subprotocol!r} (it chose {shown})")
    return chosen


def why_not_upgraded(url: str, exc: Exception) -> str:
    """Why the upgrade failed, in words, without the answer's other headers or body (they may
    hold secrets); a redirect names its target, which is not followed."""
    if isinstance(exc, HandshakeRefused) and 300 <= exc.status < 400:
        location = exc.headers.get("location")
        target = redact_url(urllib.parse.urljoin(url, location)) if location else "nowhere (no Location)"
        return (
            f"the server redirects (HTTP {exc.status}) to {peer_text(target)}; redirects are not followed, use that URL"
        )
    return str(exc)
