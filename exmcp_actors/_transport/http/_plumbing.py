"""httpx plumbing: sockets another thread can interrupt, the client built on
them, and the TLS context.

Interrupting blocked reads: closing an httpx response from another thread
does not wake a thread blocked in ``recv()`` (measured on Linux). So the
client is built on a connection pool whose network backend records every
socket and which thread last used it; ``cancel_stream`` and ``close`` shut
those sockets down (``shutdown(SHUT_RDWR)``), which does wake the reader.
Sockets still connecting are recorded too (the backend makes its own TCP
connections): on Linux a shutdown wakes a blocked ``connect()`` as well, so
``close`` never waits out a connect timeout for a server that does not answer;
and so is the TLS socket during its handshake (the stream wraps it itself), for a
server that stalls there. After an abort no stream is taken on.
Consequence: environment proxy settings (``HTTP_PROXY``...) are not used.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx
from httpcore._backends.sync import SyncStream  # httpcore's own stream over a plain socket

from ._config import Config

__all__ = ["AbortableStream", "TrackingBackend", "make_client", "ssl_context_for"]


class AbortableStream(httpcore.NetworkStream):
    """A network stream whose socket another thread can shut down.

    Every read and write records the calling thread, so the transport can
    find "the socket worker T is blocked on" without a race: a worker forgets
    its entry before each new HTTP exchange.
    """

    def __init__(self, inner: httpcore.NetworkStream, backend: TrackingBackend) -> None:
        self._inner = inner
        self._backend = backend
        #: The socket ``abort`` shuts down (during a TLS handshake: the TLS one).
        extra = inner.get_extra_info("socket")
        self.socket: socket.socket | None = extra if isinstance(extra, socket.socket) else None
        #: (thread id, monotonic deadline): reads by that thread time out then.
        self.deadline: tuple[int, float] | None = None

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        tid = threading.get_ident()
        self._backend.current[tid] = self
        deadline = self.deadline
        if deadline is not None and deadline[0] == tid:
            timeout = max(0.0, deadline[1] - time.monotonic())
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._backend.current[threading.get_ident()] = self
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._backend.forget(self)
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        """TLS over this stream's socket, as httpcore's ``SyncStream.start_tls`` makes it, but
        with the handshake still tracked: a close wakes a server that stalls in the middle of
        it (httpcore's wrap detaches the plain socket first, out of ``abort``'s reach)."""
        sock = self.socket
        if sock is None or isinstance(sock, ssl.SSLSocket):  # TLS in TLS (a proxy): not used here
            self._backend.forget(self)
            return self._backend.track(self._inner.start_tls(ssl_context, server_hostname, timeout))
        tls: ssl.SSLSocket | None = None
        try:
            sock.settimeout(timeout)
            tls = ssl_context.wrap_socket(sock, server_hostname=server_hostname, do_handshake_on_connect=False)
            self._backend.swap_socket(self, tls)
            tls.do_handshake()
        except BaseException as exc:
            self.close()
            if tls is not None:  # it holds the socket now
                tls.close()
            if isinstance(exc, TimeoutError):
                raise httpcore.ConnectTimeout(str(exc)) from exc
            if isinstance(exc, OSError):
                raise httpcore.ConnectError(str(exc)) from exc
            raise
        self._backend.forget(self)
        return self._backend.track(SyncStream(tls))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)

    def abort(self) -> None:
        """Shut the socket down: a thread blocked reading it wakes up with EOF or an error."""
        sock = self.socket
        if sock is not None:
            try:
                # The base-class method: ssl.SSLSocket.shutdown would also drop
                # its SSL object under the feet of the reading thread.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass


class TrackingBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, remembering every live stream and its last user thread."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()
        self._lock = threading.Lock()
        self._live: set[AbortableStream] = set()
        #: Sockets in ``connect()``: a close must be able to wake those too; once aborted, no
        #: new connection starts (a host name's next address is not tried either).
        self._connecting: set[socket.socket] = set()
        self._aborted = False
        #: thread id -> the stream that thread last read or wrote.
        self.current: dict[int, AbortableStream] = {}

    def track(self, inner: httpcore.NetworkStream) -> AbortableStream:
        """Record a stream, so that ``abort_all`` reaches it; after an abort, none is taken
        (a connect that ended just as the abort ran would otherwise outlive it, unseen)."""
        stream = AbortableStream(inner, self)
        with self._lock:
            aborted = self._aborted
            if not aborted:
                self._live.add(stream)
        if aborted:
            inner.close()
            raise httpcore.ConnectError("the transport is closing")
        self.current[threading.get_ident()] = stream
        return stream

    def swap_socket(self, stream: AbortableStream, sock: socket.socket) -> None:
        """Make ``sock`` the one ``stream``'s abort shuts down; after an abort, refused."""
        with self._lock:
            if self._aborted:
                raise httpcore.ConnectError("the transport is closing")
            stream.socket = sock

    def forget(self, stream: AbortableStream) -> None:
        with self._lock:
            self._live.discard(stream)

    def forget_thread(self) -> None:
        """Called by a thread before each new HTTP exchange."""
        self.current.pop(threading.get_ident(), None)

    def stream_of(self, thread_id: int) -> AbortableStream | None:
        return self.current.get(thread_id)

    def abort_all(self) -> None:
        with self._lock:
            self._aborted = True
            streams = list(self._live)
            connecting = list(self._connecting)
        for stream in streams:
            stream.abort()
        for sock in connecting:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        """httpcore's ``SyncBackend.connect_tcp`` (``socket.create_connection``), with each
        socket recorded while it connects."""
        source = None if local_address is None else (local_address, 0)
        try:
            addresses = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
        except OSError as exc:  # the name does not resolve
            raise httpcore.ConnectError(str(exc)) from exc
        error: OSError | None = None
        for family, kind, proto, _, address in addresses:
            sock = socket.socket(family, kind, proto)
            with self._lock:
                if self._aborted:
                    sock.close()
                    raise httpcore.ConnectError("the transport is closing")
                self._connecting.add(sock)
            try:
                sock.settimeout(timeout)
                if source is not None:
                    sock.bind(source)
                sock.connect(address)
                for option in socket_options or ():
                    sock.setsockopt(*option)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError as exc:
                sock.close()
                if isinstance(exc, TimeoutError):
                    raise httpcore.ConnectTimeout(str(exc)) from exc
                error = exc
                continue
            finally:
                with self._lock:
                    self._connecting.discard(sock)
            return self.track(SyncStream(sock))
        raise httpcore.ConnectError(str(error) if error else f"{host} has no address to connect to") from error

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return self.track(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def make_client(cfg: Config, backend: TrackingBackend, ssl_context: ssl.SSLContext | None) -> httpx.Client:
    # verify=False only spares building a context this transport never uses
    # (``ssl_context`` is None for an http:// URL, and redirects are not followed).
    transport = httpx.HTTPTransport(verify=ssl_context or False)
    # httpx offers no public way to choose httpcore's network backend; the
    # pool is rebuilt with ours (see "Interrupting blocked reads" above).
    # No connection limit: each long-lived stream holds one connection.
    transport._pool = httpcore.ConnectionPool(
        ssl_context=ssl_context,
        max_connections=None,
        max_keepalive_connections=16,
        keepalive_expiry=5.0,
        network_backend=backend,
    )
    timeout = httpx.Timeout(connect=cfg.io_timeout, read=None, write=cfg.io_timeout, pool=cfg.io_timeout)
    return httpx.Client(transport=transport, timeout=timeout, follow_redirects=False, auth=cfg.auth)


def ssl_context_for(verify: bool | str | ssl.SSLContext) -> ssl.SSLContext:
    if isinstance(verify, str):  # httpx deprecates a path here; same meaning
        if os.path.isdir(verify):
            return ssl.create_default_context(capath=verify)
        return ssl.create_default_context(cafile=verify)
    return httpx.create_ssl_context(verify=verify)
