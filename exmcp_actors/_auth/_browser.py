"""The default ``on_authorize``: open the system browser on the
authorization URL and wait, bounded, for the authorization server's redirect
to the loopback listener (RFC 8252 section 7.3). Only a redirect with the
request's ``state`` ends the wait (RFC 6749 section 10.12): any local process
can call the listener, and a forged callback must not end the flow."""

from __future__ import annotations

import logging
import os
import selectors
import socket
import sys
import threading
import time
import webbrowser
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from .._protocol._peer_text import escape_unsafe
from .._protocol._ratelog import RateLimitedLog
from .._util._redact import redact_url
from ._callback import carries_state
from ._errors import AuthError

__all__ = ["LoopbackListener", "free_port", "loopback_redirect", "open_browser", "reusable_redirect"]

logger = logging.getLogger("exmcp_actors.auth")

_PAGE: Final = b"<!doctype html><title>Authorized</title><p>Authorization complete: you may close this window.</p>"
#: Connections served at once; a browser opens one or two (a speculative one may stay idle).
_MAX_CONNECTIONS: Final = 16
#: Seconds after which a connection that sent no whole head yet makes room for a new one when
#: the listener is full: a browser sends its head within milliseconds, so a local process
#: holding every place with silent connections cannot keep the browser's callback out.
_EVICTABLE_AFTER: Final = 1.0
#: Seconds a connection has to send its whole request head (a browser needs milliseconds).
_HEAD_SECONDS: Final = 10.0
#: Largest request head read: a browser sends its 127.0.0.1 cookies too, so not a small bound.
_MAX_HEAD_BYTES: Final = 64 * 1024
#: Seconds to write the answer, and to wait for a connection's thread when closing.
_JOIN_SECONDS: Final = 2.0

_log: Final = RateLimitedLog(logger)


def loopback_redirect(redirect_uri: str) -> tuple[str, int, str]:
    """(host, port, path) of a loopback redirect URI.

    Raises:
        ValueError: not an ``http://`` loopback URI.
    """
    parts = urlsplit(redirect_uri)
    host = parts.hostname or ""
    if parts.scheme != "http" or host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(
            f"redirect_uri must be an http:// loopback URI (127.0.0.1, localhost or [::1]), got {redirect_uri!r}"
        )
    return host, parts.port or 0, parts.path or "/"


def reusable_redirect(registered: Any, wanted: str) -> str | None:
    """``registered``, the redirect URI a stored registration registered, when a flow whose
    ``redirect_uri`` is ``wanted`` can use it now; else None (the client registers anew).

    MCP authorization: a client MUST have its redirect URIs registered, and servers match
    them exactly. A port-0 ``wanted`` takes the registered port when it is free, so a
    registration outlives the object that made it; another port fixed, the port taken by
    another program, or nothing recorded (an earlier version's record) is no match.
    """
    if not isinstance(registered, str):
        return None
    try:
        host, port, path = loopback_redirect(registered)
    except ValueError:
        return None
    wanted_host, wanted_port, wanted_path = loopback_redirect(wanted)
    if (host, path) != (wanted_host, wanted_path) or wanted_port not in (0, port):
        return None
    if wanted_port == 0 and not _port_free(host, port):
        return None
    return registered


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        if os.name == "posix":  # as the listener binds: a closed flow's TIME_WAIT is no owner
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str) -> int:
    """A port free on ``host`` now (for a redirect URI the host's own ``on_authorize`` serves)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class LoopbackListener:
    """A one-shot HTTP listener on the redirect URI; :meth:`wait` returns the callback URL.

    Any local process can connect to it, so none can hold it: each connection is served on
    its own thread, has :data:`_HEAD_SECONDS` to send a head of at most
    :data:`_MAX_HEAD_BYTES`, and beyond :data:`_MAX_CONNECTIONS` at once a new one takes
    the place of the oldest that has sent nothing whole for :data:`_EVICTABLE_AFTER`, or is
    closed unanswered. Nor can one end the flow with a forged callback: with ``state``, a
    request to the path without the authorization request's ``state`` is answered 400 and
    discarded, and the wait goes on for the browser's. :meth:`close` (at the end of
    :meth:`wait`, whatever is connected) shuts every connection down.
    """

    def __init__(self, redirect_uri: str, state: str | None = None) -> None:
        host, port, self._path = loopback_redirect(redirect_uri)
        self._state = state
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.create_server((host, port), family=family)
        self.port: int = self._sock.getsockname()[1]
        self._result: str | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        self._conns: set[socket.socket] = set()
        #: The connections still sending their head, with when each was accepted.
        self._idle: dict[socket.socket, float] = {}
        self._threads: set[threading.Thread] = set()
        # Wakes the accepting thread's select() on close, on every platform.
        self._wake_read, self._wake = socket.socketpair()
        # A selector, not select.select(): that refuses a descriptor past 1023, which a host
        # with many files or connections open hands out, and the listener would never accept.
        self._selector = selectors.DefaultSelector()
        for sock in (self._sock, self._wake_read):
            self._selector.register(sock, selectors.EVENT_READ)
        self._accepter = threading.Thread(target=self._accept, name="exmcp-oauth-callback", daemon=True)
        self._accepter.start()

    def wait(self, base_uri: str, timeout: float) -> str:
        """The full callback URL, once the browser came back.

        Raises:
            AuthError: nothing came back within ``timeout`` seconds.
        """
        try:
            if not self._done.wait(timeout):
                raise AuthError(f"no authorization callback on the loopback redirect within {timeout:.0f}s")
            parts = urlsplit(base_uri)
            path = urlsplit(self._result or "")
            return urlunsplit((parts.scheme, parts.netloc, path.path, path.query, ""))
        finally:
            self.close()

    def close(self) -> None:
        """Stop listening and shut every connection down; returns once their threads ended."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conns, threads = list(self._conns), list(self._threads)
        self._wake.send(b"x")
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)  # wakes the thread reading it
            except OSError:
                pass
        for thread in (self._accepter, *threads):
            thread.join(_JOIN_SECONDS)
        self._selector.close()
        for sock in (self._sock, self._wake, self._wake_read):
            sock.close()

    def _accept(self) -> None:
        while True:
            ready = [key.fileobj for key, _ in self._selector.select()]
            if self._wake_read in ready:
                return
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue  # the connection was reset before we took it
            with self._lock:
                self._threads = {t for t in self._threads if t.is_alive()}
                if len(self._conns) >= _MAX_CONNECTIONS:
                    self._evict_oldest_idle()
                if self._closed or len(self._conns) >= _MAX_CONNECTIONS:
                    conn.close()
                    _log.warning("callback-full", "the loopback callback listener is full: a connection was dropped")
                    continue
                self._conns.add(conn)
                self._idle[conn] = time.monotonic()
                thread = threading.Thread(
                    target=self._serve, args=(conn,), name="exmcp-oauth-callback-conn", daemon=True
                )
                self._threads.add(thread)
                thread.start()  # under the lock: close() never joins a thread not started yet

    def _evict_oldest_idle(self) -> None:
        """Shut down the connection that has been sending its head longest, if that is long (under the lock)."""
        oldest = min(self._idle, key=self._idle.__getitem__, default=None)
        if oldest is None or time.monotonic() - self._idle[oldest] < _EVICTABLE_AFTER:
            return
        del self._idle[oldest]
        self._conns.discard(oldest)
        try:
            oldest.shutdown(socket.SHUT_RDWR)  # its thread wakes, and closes it
        except OSError:
            pass
        _log.info("callback-evicted", "the loopback callback listener is full: a silent connection made room")

    def _serve(self, conn: socket.socket) -> None:
        deadline = time.monotonic() + _HEAD_SECONDS
        try:
            head = _read_head(conn, deadline)
            with self._lock:
                self._idle.pop(conn, None)
            if head is None:
                return
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            method, target, version = request_line if len(request_line) == 3 else ("", "", "")
            if not version.startswith("HTTP/") or not _parses(target):
                _answer(conn, "400 Bad Request", b"")
            elif method != "GET":
                _answer(conn, "405 Method Not Allowed", b"")
            elif urlsplit(target).path != self._path:
                _answer(conn, "404 Not Found", b"")
            elif self._state is not None and not carries_state(target, self._state):
                _log.warning("callback-state", "the loopback callback listener discarded a request without the state")
                _answer(conn, "400 Bad Request", b"")
            else:
                with self._lock:
                    first = self._result is None
                    if first:
                        self._result = target
                try:
                    _answer(conn, "200 OK", _PAGE)
                finally:
                    if first:
                        self._done.set()
        except OSError:
            pass  # gone, or too slow: either way not the callback
        finally:
            with self._lock:
                self._conns.discard(conn)
                self._idle.pop(conn, None)
            conn.close()


def _read_head(conn: socket.socket, deadline: float) -> bytes | None:
    """The request head; None when the connection ends first, or breaks the deadline or the size bound."""
    head = bytearray()
    while b"\r\n\r\n" not in head:
        left = deadline - time.monotonic()
        if left <= 0 or len(head) > _MAX_HEAD_BYTES:
            # A browser's speculative connection may idle this long too: worth a line, not a warning.
            _log.info(
                "callback-slow",
                "the loopback callback listener dropped a connection: no whole request head in %gs and %d bytes",
                _HEAD_SECONDS,
                _MAX_HEAD_BYTES,
            )
            return None
        conn.settimeout(left)
        try:
            data = conn.recv(4096)
        except TimeoutError:
            continue  # the deadline: said above
        if not data:
            return None
        head += data
    return bytes(head)


def _parses(target: str) -> bool:
    """Whether urllib takes the request target apart (a local process may send anything)."""
    try:
        urlsplit(target)
    except ValueError:
        return False
    return True


def _answer(conn: socket.socket, status: str, page: bytes) -> None:
    conn.settimeout(_JOIN_SECONDS)
    kind = "text/html; charset=utf-8" if page else "text/plain"
    conn.sendall(
        f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(page)}\r\n"
        "Connection: close\r\nCache-Control: no-store\r\n\r\n".encode("latin-1")
        + page
    )


def open_browser(authorization_url: str) -> None:
    """Open the system browser; say where to go when there is none."""
    if not webbrowser.open(authorization_url):
        # The URL (state, code challenge, client id) goes to the user on stderr, never to a log;
        # escaped, as the authorization server's endpoint in it may carry terminal controls.
        logger.warning("could not open a browser to authorize with %s", redact_url(authorization_url))
        print(f"Open this URL in a browser to authorize:\n{escape_unsafe(authorization_url)}", file=sys.stderr)
