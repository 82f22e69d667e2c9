"""MCP Streamable HTTP, both eras, on httpx's synchronous client.

One endpoint URL. Every outgoing message is an HTTP POST; the reply to a
request is a JSON body or a ``text/event-stream`` (SSE) body carrying
notifications, server requests and finally the response. A legacy
(2024-11-05 .. 2025-11-25) server may also push on a standalone GET stream;
a modern (2026-07-28) server has no session and no GET stream, and a
``subscriptions/listen`` request's SSE response *is* the subscription.

Threads (all daemon, all joined by :meth:`HttpTransport.close`):

* ``writer``: takes messages in ``send`` order. A notification or a response
  is POSTed right there (the server answers 202 at once), so it reaches the
  server before anything sent after it (``notifications/initialized`` before
  the next request). A request is handed to a worker, and the writer waits
  until that request's body is on the wire before taking the next message.
* ``workers``: an elastic pool, one busy worker per in-flight request; a new
  worker is started whenever none is idle, because a listen POST may run for
  hours and must not starve other requests. Idle workers exit after a while.
* ``get``: the legacy standalone GET stream reader, started by
  :meth:`HttpTransport.negotiated` in the legacy era. 405 means the server
  has none (fine). When the stream ends it reconnects after the server's
  ``retry:`` (else ``sse_retry_default``; capped by ``max_retry_delay``) with
  ``Last-Event-ID``; ``reconnect_attempts`` failures in a row to connect at
  all report ``transport_lost("GET stream could not reconnect: ...")`` (this
  is how a dead legacy server is noticed while idle); a 404 while carrying
  the session id reports ``session expired (404)``; other HTTP refusals, as
  many times in a row, only give the GET stream up (with a warning).

Once a stream's response has arrived the worker reads the rest of the body
for up to two seconds, so the connection returns to the pool instead of
being dropped (a server should end the body right after the response).

Headers on every POST: ``Accept: application/json, text/event-stream``,
``Content-Type: application/json``, the user's headers, ``Mcp-Session-Id``
once the ``initialize`` response carried one (never on ``initialize``
itself), ``MCP-Protocol-Version`` once :meth:`HttpTransport.negotiated` ran
(never on ``initialize``). A modern request (its ``params._meta`` carries
``io.modelcontextprotocol/protocolVersion``, or the era is modern) takes the
version header from that ``_meta`` value, so the first ``server/discover``
probe carries it, plus ``Mcp-Method: <method>`` and, for ``tools/call``,
``prompts/get`` and ``resources/read``, ``Mcp-Name: <params.name or
params.uri>`` (base64-wrapped as ``=?base64?...?=`` when not plain printable
ASCII). The SDK server routes on the version header alone: a request
without it, or with a legacy version, takes the legacy path; with
``2026-07-28`` it must match ``_meta`` exactly, as must ``Mcp-Method`` and
``Mcp-Name``, else error -32020 at HTTP 400.

Synthesized frames. A request never hangs on an HTTP failure: the transport
delivers a JSON-RPC error response for the request's id instead.

* HTTP status outside 2xx whose body is a JSON-RPC error: the server's error
  is forwarded as is, with ``id`` set to the request's id (servers send
  ``null`` when they reject before parsing the id).
* Any other HTTP status outside 2xx, a 202/204 or an unusable body for a
  request: ``{"code": -32000, "message": "HTTP 404 Not Found",
  "data": {"httpStatus": 404, "body": "<first 1000 chars>"}}``.
  When probing ``server/discover``, a 400/404/405 here means "legacy server".
* The connection failed before a response arrived: ``-32000`` with
  ``data: {"transportError": "ConnectError: ..."}``. A failure to connect at
  all also reports ``transport_lost("server unreachable: ...")``, after the
  error frame.
* An SSE response stream ended (server closed it, or the connection broke)
  before the request's response arrived: ``{"code": -32001, "message":
  "stream dropped", "data": {"streamDropped": true}}``. For a
  ``subscriptions/listen`` this is the abrupt drop of that one subscription
  (the client may re-listen and refetch); the transport itself is fine.
  Legacy streams that carried SSE ids are first resumed with a GET and
  ``Last-Event-ID``, as the 2025-11-25 revision specifies.

Response frames are delivered as the server sent them; the transport never
rewrites a server's frame except the ``id`` of an HTTP error body.

A 404 on a message that carried ``Mcp-Session-Id`` means the session is gone
(unless its body is a JSON-RPC error naming the request's own id, which is
an ordinary method error): after the error frame, ``transport_lost("session
expired (404)")``. The client must ``close`` and ``open`` again and
re-initialize. After ``transport_lost`` nothing more is delivered and
``send`` raises :class:`TransportError`.

``open`` performs no network I/O: HTTP has no connection to open. The first
POST proves the server reachable; if it is not, that request gets the
``-32000`` frame above and the sink gets ``transport_lost``.

``cancel_stream(request_id)`` aborts the request's HTTP exchange at once
(its socket is shut down, so the reading worker unblocks even mid-read; no
further frame for that request is delivered) and returns True for a request
sent in the modern era, where closing the stream *is* the cancellation (how
a client ends a ``subscriptions/listen``). For a legacy request it aborts
the same way but returns False: on the legacy wire a disconnect is not a
cancellation, so the client still sends ``notifications/cancelled``.
Unknown or finished ids return False.

Interrupting blocked reads: closing an httpx response from another thread
does not wake a thread blocked in ``recv()`` (measured on Linux). So the
client is built on a connection pool whose network backend records every
socket and which thread last used it; ``cancel_stream`` and ``close`` shut
those sockets down (``shutdown(SHUT_RDWR)``), which does wake the reader.
Consequence: environment proxy settings (``HTTP_PROXY``...) are not used.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import os
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

import httpcore
import httpx

from .._protocol._errors import TransportError
from .._protocol._handshake import META_PROTOCOL_VERSION
from .._protocol._versions import MODERN_VERSIONS
from ._base import DEFAULT_MAX_FRAME_BYTES, HTTP_ERROR, STREAM_DROPPED, Frame, FrameSink, InvalidFrame, Transport
from ._framing import decode_message, decode_text, invalid_frame
from ._sse import SSEEvent, SSEParser

__all__ = ["HTTP_ERROR", "STREAM_DROPPED", "HttpTransport"]

logger = logging.getLogger("exmcp_actors.http")


#: Method -> params key mirrored in the ``Mcp-Name`` header (modern era).
_NAME_PARAMS: Final = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
}
_ACCEPT_BOTH: Final = "application/json, text/event-stream"
#: How much of an error body is read, and how much of it is quoted in ``data.body``.
_ERROR_BODY_READ: Final = 64 * 1024
_ERROR_BODY_QUOTE: Final = 1000
#: After a stream's response arrived, how long to wait for the end of the body
#: (reading to the end lets the connection be reused).
_DRAIN_SECONDS: Final = 2.0
#: How long close() waits for all threads, in total.
_JOIN_SECONDS: Final = 5.0
#: Idle pool workers exit after this many seconds.
_WORKER_IDLE_SECONDS: Final = 30.0
#: What an HTTP exchange may raise: httpx's errors, socket errors, a client
#: closed under our feet (RuntimeError), a header that is not ASCII (ValueError).
_IO_ERRORS: Final = (
    httpx.HTTPError,
    httpx.InvalidURL,
    OSError,
    RuntimeError,
    ValueError,
)


class HttpTransport(Transport):
    """MCP Streamable HTTP client transport (legacy and modern eras).

    Args:
        url: the MCP endpoint, ``http://`` or ``https://``.
        headers: extra headers sent with every HTTP request (e.g.
            ``Authorization``). Protocol headers take precedence.
        verify: TLS verification, as httpx takes it (bool, CA bundle path or
            ``ssl.SSLContext``).
        max_frame_bytes: largest JSON body or SSE event accepted.
        sse_retry_default: seconds to wait before reconnecting a dropped SSE
            stream when the server sent no ``retry:``.
        io_timeout: connect, write and pool timeout in seconds, and the read
            timeout for the 202 answering a notification. Reads of a request's
            response are unbounded in time (a tool call or a listen may take
            hours) but interruptible by ``cancel_stream`` and ``close``.
        delete_timeout: bound on the best-effort ``DELETE`` sent by ``close``.
        reconnect_attempts: consecutive failed reconnections of an SSE stream
            before giving up (then ``transport_lost`` for the GET stream when
            the server is unreachable).
        max_retry_delay: upper bound on a server's ``retry:`` value, seconds.

    Example:
        >>> t = HttpTransport("http://127.0.0.1:8000/mcp", {"Authorization": "Bearer x"})
        >>> t.describe()
        'http http://127.0.0.1:8000/mcp'
    """

    def __init__(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        *,
        verify: bool | str | ssl.SSLContext = True,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        sse_retry_default: float = 1.0,
        io_timeout: float = 10.0,
        delete_timeout: float = 2.0,
        reconnect_attempts: int = 3,
        max_retry_delay: float = 30.0,
    ) -> None:
        parsed = httpx.URL(url)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url
        self.max_frame_bytes = max_frame_bytes
        self._tls = parsed.scheme == "https"
        self._cfg = _Config(
            url=url,
            headers=dict(headers or {}),
            verify=verify,
            max_frame_bytes=max_frame_bytes,
            sse_retry_default=sse_retry_default,
            io_timeout=io_timeout,
            delete_timeout=delete_timeout,
            reconnect_attempts=max(1, reconnect_attempts),
            max_retry_delay=max_retry_delay,
        )
        # Shown in logs and errors: no credentials, no query string.
        host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
        port = f":{parsed.port}" if parsed.port else ""
        self._display = f"http {parsed.scheme}://{host}{port}{parsed.path}"
        self._lock = threading.Lock()
        self._link: _Link | None = None
        # Built on the first open of an https URL and reused: loading the CA
        # bundle costs tens of milliseconds.
        self._ssl_context: ssl.SSLContext | None = None

    def open(self, sink: FrameSink, *, timeout: float) -> None:
        """Start a fresh connection (no session id, no negotiated version).

        No network I/O happens here; the first POST proves the server
        reachable (see the module docstring). A previous connection still
        open is closed first.

        Raises:
            TransportError: the TLS settings are unusable (e.g. a missing CA bundle).
        """
        self.close()
        try:
            if self._ssl_context is None and self._tls:
                self._ssl_context = _ssl_context_for(self._cfg.verify)
            link = _Link(self._cfg, sink, self._ssl_context)
        except (OSError, ValueError, RuntimeError) as exc:  # a bad CA bundle, no thread to start
            raise TransportError(f"{self._display}: cannot open: {exc}") from exc
        with self._lock:
            self._link = link
        logger.debug("%s: opened", self._display)

    def send(self, message: dict[str, Any]) -> None:
        """Queue ``message`` for POSTing; returns at once.

        Raises:
            TransportError: not open, closed, or the connection was lost.
        """
        link = self._link
        if link is None:
            raise TransportError(f"{self._display}: transport is not open")
        link.send(message)

    def cancel_stream(self, request_id: Any) -> bool:
        """Abort the HTTP exchange of an in-flight request.

        Returns:
            True when the request was sent in the modern era (closing the
            stream is the cancellation); False for a legacy request (aborted
            too, but the client must still send ``notifications/cancelled``)
            and for unknown or finished ids.
        """
        link = self._link
        return link.cancel(request_id) if link is not None else False

    def negotiated(self, protocol_version: str, era: str) -> None:
        """Use ``protocol_version`` in headers; in the legacy era open the GET stream."""
        link = self._link
        if link is not None:
            link.negotiated(protocol_version, era)

    def close(self) -> None:
        """DELETE the session (legacy, best effort), abort all streams, join all threads.

        Idempotent; bounded in time; never calls ``transport_lost``.
        """
        with self._lock:
            link, self._link = self._link, None
        if link is not None:
            link.shutdown()
            logger.debug("%s: closed", self._display)

    def describe(self) -> str:
        """The endpoint without credentials or query, e.g. ``http https://host/mcp``."""
        return self._display


class _Config:
    """Settings shared by every connection of one transport (read-only)."""

    __slots__ = (
        "delete_timeout",
        "headers",
        "io_timeout",
        "max_frame_bytes",
        "max_retry_delay",
        "reconnect_attempts",
        "sse_retry_default",
        "url",
        "verify",
    )

    def __init__(
        self,
        *,
        url: str,
        headers: dict[str, str],
        verify: bool | str | ssl.SSLContext,
        max_frame_bytes: int,
        sse_retry_default: float,
        io_timeout: float,
        delete_timeout: float,
        reconnect_attempts: int,
        max_retry_delay: float,
    ) -> None:
        self.url = url
        self.headers = headers
        self.verify = verify
        self.max_frame_bytes = max_frame_bytes
        self.sse_retry_default = sse_retry_default
        self.io_timeout = io_timeout
        self.delete_timeout = delete_timeout
        self.reconnect_attempts = reconnect_attempts
        self.max_retry_delay = max_retry_delay


# --------------------------------------------------------------------------
# Sockets another thread can interrupt


class _AbortableStream(httpcore.NetworkStream):
    """A network stream whose socket another thread can shut down.

    Every read and write records the calling thread, so the transport can
    find "the socket worker T is blocked on" without a race: a worker forgets
    its entry before each new HTTP exchange.
    """

    def __init__(self, inner: httpcore.NetworkStream, backend: _TrackingBackend) -> None:
        self._inner = inner
        self._backend = backend
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
        self._backend.forget(self)
        return self._backend.track(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)

    def abort(self) -> None:
        """Shut the socket down: a thread blocked reading it wakes up with EOF or an error."""
        sock = self._inner.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            try:
                # The base-class method: ssl.SSLSocket.shutdown would also drop
                # its SSL object under the feet of the reading thread.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass


class _TrackingBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, remembering every live stream and its last user thread."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()
        self._lock = threading.Lock()
        self._live: set[_AbortableStream] = set()
        #: thread id -> the stream that thread last read or wrote.
        self.current: dict[int, _AbortableStream] = {}

    def track(self, inner: httpcore.NetworkStream) -> _AbortableStream:
        stream = _AbortableStream(inner, self)
        with self._lock:
            self._live.add(stream)
        self.current[threading.get_ident()] = stream
        return stream

    def forget(self, stream: _AbortableStream) -> None:
        with self._lock:
            self._live.discard(stream)

    def forget_thread(self) -> None:
        """Called by a thread before each new HTTP exchange."""
        self.current.pop(threading.get_ident(), None)

    def stream_of(self, thread_id: int) -> _AbortableStream | None:
        return self.current.get(thread_id)

    def abort_all(self) -> None:
        with self._lock:
            streams = list(self._live)
        for stream in streams:
            stream.abort()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return self.track(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return self.track(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _make_client(cfg: _Config, backend: _TrackingBackend, ssl_context: ssl.SSLContext | None) -> httpx.Client:
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
    return httpx.Client(transport=transport, timeout=timeout, follow_redirects=False)


# --------------------------------------------------------------------------
# Worker pool


class _Workers:
    """Elastic thread pool: a job never waits for a busy worker."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # waiting workers not yet promised a queued job
        self._threads: set[threading.Thread] = set()
        self._count = 0
        self._stopped = False

    def submit(self, job: Callable[[], None]) -> bool:
        """Run ``job`` on a worker; False once stopped. ``job`` must not raise."""
        with self._lock:
            if self._stopped:
                return False
            self._jobs.put(job)
            if self._idle > 0:
                self._idle -= 1
                return True
            self._count += 1
            thread = threading.Thread(target=self._run, name=f"{self._name}-{self._count}", daemon=True)
            self._threads.add(thread)
        try:
            thread.start()
        except RuntimeError:
            with self._lock:
                self._threads.discard(thread)
            raise
        return True

    def _run(self) -> None:
        try:
            while True:
                try:
                    job = self._jobs.get(timeout=_WORKER_IDLE_SECONDS)
                except queue.Empty:
                    with self._lock:
                        try:
                            # A job promised to an idle worker as this one timed out.
                            job = self._jobs.get_nowait()
                        except queue.Empty:
                            self._idle -= 1
                            return
                if job is None:
                    return
                job()
                with self._lock:
                    self._idle += 1
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def stop(self) -> list[threading.Thread]:
        """Ask every worker to exit once its job is done; return them for joining."""
        with self._lock:
            self._stopped = True
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        return threads


# --------------------------------------------------------------------------
# One POST


class _Post:
    """One outgoing message and the state of its HTTP exchange."""

    __slots__ = (
        "body",
        "cancelled",
        "has_id",
        "meta_version",
        "method",
        "modern",
        "name",
        "request_id",
        "sent_session",
        "thread_id",
        "written",
    )

    def __init__(self, message: dict[str, Any], body: bytes, era: str | None) -> None:
        self.body = body
        method = message.get("method")
        self.method: str | None = method if isinstance(method, str) else None
        #: A request (has a method and an id): it is owed a response.
        self.has_id = self.method is not None and "id" in message
        self.request_id: Any = message.get("id")
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        version = meta.get(META_PROTOCOL_VERSION) if isinstance(meta, dict) else None
        self.meta_version: str | None = version if isinstance(version, str) else None
        self.modern = era == "modern" or self.meta_version in MODERN_VERSIONS
        name = None
        if self.method in _NAME_PARAMS and isinstance(params, dict):
            value = params.get(_NAME_PARAMS[self.method])
            name = value if isinstance(value, str) else None
        self.name: str | None = name
        self.cancelled = False
        self.sent_session = False
        self.thread_id: int | None = None
        #: Set once the request body is on the wire (or the exchange ended).
        self.written = threading.Event()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore trace hook: learn when the body has been written."""
        if event.endswith(("send_request_body.complete", "send_request_body.failed")):
            self.written.set()

    def describe(self) -> str:
        if self.has_id:
            return f"{self.method} (id {self.request_id!r})"
        return self.method or f"response (id {self.request_id!r})"


def _id_key(request_id: Any) -> tuple[str, Any]:
    # JSON-RPC ids "1" and 1 are different requests.
    return (type(request_id).__name__, request_id)


# --------------------------------------------------------------------------
# One connection (one open() .. close())


class _Link:
    """Everything one ``open`` owns. ``close`` discards it whole, so a late
    thread of an old connection can never touch the next one."""

    def __init__(self, cfg: _Config, sink: FrameSink, ssl_context: ssl.SSLContext | None) -> None:
        self.cfg = cfg
        self.sink = sink
        self.backend = _TrackingBackend()
        self.client = _make_client(cfg, self.backend, ssl_context)
        self.lock = threading.Lock()
        #: Notified whenever a request's exchange ends (see wait_quiet).
        self.quiet = threading.Condition(self.lock)
        #: Held while calling the sink, so nothing is delivered after close().
        self.deliver_lock = threading.RLock()
        #: Set by close() or on loss: every thread winds down.
        self.halt = threading.Event()
        self.closed = False
        self.lost = False
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.era: str | None = None
        self.posts: dict[tuple[str, Any], _Post] = {}
        self.outbox: queue.SimpleQueue[_Post | None] = queue.SimpleQueue()
        self.workers = _Workers("exmcp-http-post")
        self.get_thread: threading.Thread | None = None
        self.writer = threading.Thread(target=self._write_loop, name="exmcp-http-writer", daemon=True)
        self.writer.start()

    # -- called by HttpTransport ------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        if self.closed:
            raise TransportError("HTTP transport is closed")
        if self.lost:
            raise TransportError("HTTP connection was lost")
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        post = _Post(message, body, self.era)
        if post.has_id:
            with self.lock:
                # A reused id takes over: cancel_stream reaches the newest.
                self.posts[_id_key(post.request_id)] = post
        self.outbox.put(post)

    def cancel(self, request_id: Any) -> bool:
        with self.lock:
            post = self.posts.get(_id_key(request_id))
            if post is None:
                return False
            post.cancelled = True
            # Under the lock: the worker unregisters under it too, so the
            # socket aborted here is this request's, not its next job's.
            if post.thread_id is not None:
                stream = self.backend.stream_of(post.thread_id)
                if stream is not None:
                    stream.abort()
        logger.debug("cancelled the stream of %s", post.describe())
        return post.modern

    def negotiated(self, protocol_version: str, era: str) -> None:
        with self.lock:
            self.protocol_version = protocol_version
            self.era = era
            start_get = era == "legacy" and not (self.get_thread and self.get_thread.is_alive())
            if start_get and not self.halt.is_set():
                self.get_thread = threading.Thread(target=self._get_loop, name="exmcp-http-get", daemon=True)
            else:
                start_get = False
        if start_get:
            assert self.get_thread is not None
            self.get_thread.start()

    def shutdown(self) -> None:
        with self.deliver_lock:
            already = self.closed
            self.closed = True
            self.halt.set()
        if already:
            return
        self.outbox.put(None)
        with self.lock:
            session_id, version = self.session_id, self.protocol_version
        if session_id is not None and not self.lost:
            self._delete_session(session_id, version)
        self.backend.abort_all()
        workers = self.workers.stop()
        try:
            self.client.close()
        except Exception:  # best effort: a concurrent request may be mid-flight
            logger.debug("error closing the HTTP client", exc_info=True)
        deadline = time.monotonic() + _JOIN_SECONDS
        me = threading.current_thread()
        for thread in [self.writer, self.get_thread, *workers]:
            if thread is None or thread is me or not thread.is_alive():
                continue
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                logger.warning("thread %s did not stop within %.0fs", thread.name, _JOIN_SECONDS)

    def _delete_session(self, session_id: str, version: str | None) -> None:
        headers = httpx.Headers(self.cfg.headers)
        headers["Mcp-Session-Id"] = session_id
        if version:
            headers["MCP-Protocol-Version"] = version
        try:
            response = self.client.delete(self.cfg.url, headers=headers, timeout=self.cfg.delete_timeout)
            logger.debug("DELETE session: HTTP %d", response.status_code)
        except _IO_ERRORS as exc:
            logger.debug("DELETE session failed: %s", exc)

    # -- delivery -----------------------------------------------------------

    def deliver(self, frames: list[Frame], post: _Post | None = None) -> None:
        with self.deliver_lock:
            if self.halt.is_set() or (post is not None and post.cancelled):
                return
            try:
                self.sink.frames_received(frames)
            except Exception:
                logger.exception("sink.frames_received raised")

    def report_lost(self, reason: str) -> None:
        with self.deliver_lock:
            if self.halt.is_set():
                return
            self.lost = True
            self.halt.set()
        logger.info("connection lost: %s", reason)
        # Nothing more will be delivered: free every thread blocked on a socket.
        self.backend.abort_all()
        try:
            self.sink.transport_lost(reason)
        except Exception:
            logger.exception("sink.transport_lost raised")

    def _fail(self, post: _Post, code: int, message: str, data: dict[str, Any]) -> None:
        """Deliver a synthesized error response for ``post``'s request id."""
        self.deliver([_error_frame(post.request_id, code, message, data)], post)

    # -- the writer -----------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            post = self.outbox.get()
            if post is None:
                return
            if self.halt.is_set():
                self._unregister(post)
            elif not post.has_id:
                self._run_post(post)
            else:
                try:
                    started = self.workers.submit(functools.partial(self._run_post, post))
                except RuntimeError as exc:  # no thread to be had: fail this one, go on
                    logger.error("cannot start a worker for %s: %s", post.describe(), exc)
                    self._fail(
                        post,
                        HTTP_ERROR,
                        f"no worker thread: {exc}",
                        {"transportError": str(exc)},
                    )
                    post.cancelled = True  # its queued job must not run later
                    started = False
                if started:
                    # Keep wire order: the next message waits until this body is sent.
                    post.written.wait(self.cfg.io_timeout)
                else:
                    self._unregister(post)

    # -- one POST --------------------------------------------------------------

    def _run_post(self, post: _Post) -> None:
        try:
            self._post(post)
        except Exception:  # a worker must answer the request, not die
            logger.exception("unexpected error while posting %s", post.describe())
            if post.has_id and not self._silenced(post):
                self._fail(
                    post,
                    HTTP_ERROR,
                    "internal transport error",
                    {"transportError": "internal"},
                )
        finally:
            post.written.set()
            self._unregister(post)

    def _unregister(self, post: _Post) -> None:
        if post.has_id:
            with self.lock:
                key = _id_key(post.request_id)
                if self.posts.get(key) is post:
                    del self.posts[key]
                self.quiet.notify_all()

    def wait_quiet(self, timeout: float) -> bool:
        """Wait until no request is in flight (for tests and diagnostics)."""
        with self.lock:
            return self.quiet.wait_for(lambda: not self.posts, timeout)

    def _silenced(self, post: _Post) -> bool:
        return post.cancelled or self.halt.is_set()

    def _post_headers(self, post: _Post) -> httpx.Headers:
        headers = httpx.Headers(self.cfg.headers)
        headers["Accept"] = _ACCEPT_BOTH
        headers["Content-Type"] = "application/json"
        with self.lock:
            session_id, version = self.session_id, self.protocol_version
        if post.method == "initialize":
            # A fresh negotiation: no stale session, no probe-stamped version.
            session_id = version = None
        if post.meta_version is not None:
            version = post.meta_version
        if version:
            headers["MCP-Protocol-Version"] = version
        if session_id and not post.modern:
            headers["Mcp-Session-Id"] = session_id
            post.sent_session = True
        if post.modern and post.method is not None:
            headers["Mcp-Method"] = post.method
            if post.name is not None:
                headers["Mcp-Name"] = _encode_header_value(post.name)
        return headers

    def _post(self, post: _Post) -> None:
        self.backend.forget_thread()
        with self.lock:
            if self._silenced(post):
                return
            post.thread_id = threading.get_ident()
        timeout = None if post.has_id else self.cfg.io_timeout
        request = self.client.build_request(
            "POST",
            self.cfg.url,
            content=post.body,
            headers=self._post_headers(post),
            extensions={"trace": post.trace},
            timeout=httpx.Timeout(self.cfg.io_timeout, read=timeout),
        )
        try:
            response = self.client.send(request, stream=True)
        except _IO_ERRORS as exc:
            self._connection_failed(post, exc)
            return
        try:
            post.written.set()
            self._handle_response(post, response)
        finally:
            response.close()

    def _connection_failed(self, post: _Post, exc: Exception) -> None:
        if self._silenced(post):
            return
        reason = f"{type(exc).__name__}: {exc}"
        logger.debug("POST %s failed: %s", post.describe(), reason)
        if post.has_id:
            self._fail(
                post,
                HTTP_ERROR,
                f"connection error: {reason}",
                {"transportError": reason},
            )
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            self.report_lost(f"server unreachable: {reason}")
        elif not post.has_id:
            logger.warning("could not POST %s: %s", post.describe(), reason)

    def _handle_response(self, post: _Post, response: httpx.Response) -> None:
        status = response.status_code
        if post.method == "initialize" and 200 <= status < 300:
            session_id = response.headers.get("mcp-session-id")
            if session_id:
                with self.lock:
                    self.session_id = session_id
                logger.info("session id assigned by the server")
        if not 200 <= status < 300:
            self._http_error(post, response)
            return
        if not post.has_id:
            return  # 202 (or any 2xx) for a notification or a response: done
        content_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if status in (202, 204) or not content_type:
            self._fail(
                post,
                HTTP_ERROR,
                f"HTTP {status} {response.reason_phrase}: no response to a request",
                {"httpStatus": status},
            )
        elif content_type == "text/event-stream":
            self._consume_post_stream(post, response)
        elif content_type == "application/json" or content_type.endswith("+json"):
            self._consume_json(post, response)
        else:
            self._fail(
                post,
                HTTP_ERROR,
                f"unexpected content type {content_type!r}",
                {"httpStatus": status, "contentType": content_type},
            )

    def _http_error(self, post: _Post, response: httpx.Response) -> None:
        status = response.status_code
        raw = _read_some(response, _ERROR_BODY_READ)
        server_error = _jsonrpc_error(raw)
        if post.has_id:
            if server_error is not None:
                frame: dict[str, Any] = dict(server_error)
                frame["id"] = post.request_id
            else:
                text = raw.decode("utf-8", "replace")[:_ERROR_BODY_QUOTE]
                frame = _error_frame(
                    post.request_id,
                    HTTP_ERROR,
                    f"HTTP {status} {response.reason_phrase}".rstrip(),
                    {"httpStatus": status, "body": text},
                )
            self.deliver([frame], post)
        elif not self._silenced(post):
            logger.warning(
                "HTTP %d %s answering %s",
                status,
                response.reason_phrase,
                post.describe(),
            )
        own_id = server_error is not None and post.has_id and server_error.get("id") == post.request_id
        if status == 404 and post.sent_session and not own_id:
            with self.lock:
                self.session_id = None
            self.report_lost("session expired (404)")

    def _consume_json(self, post: _Post, response: httpx.Response) -> None:
        limit = self.cfg.max_frame_bytes
        try:
            body = _read_some(response, limit + 1, strict=True)
        except _IO_ERRORS as exc:
            if not self._silenced(post):
                reason = f"{type(exc).__name__}: {exc}"
                self._fail(
                    post,
                    HTTP_ERROR,
                    f"connection error: {reason}",
                    {"transportError": reason},
                )
            return
        if len(body) > limit:
            bad = InvalidFrame(f"JSON body larger than {limit} bytes", body[:200])
        else:
            frame = _decode(body)
            if not isinstance(frame, InvalidFrame):
                self.deliver([frame], post)
                return
            bad = frame
        status = response.status_code
        self.deliver(
            [
                bad,
                _error_frame(
                    post.request_id,
                    HTTP_ERROR,
                    f"unusable response body: {bad.error}",
                    {"httpStatus": status},
                ),
            ],
            post,
        )

    def _consume_post_stream(self, post: _Post, response: httpx.Response) -> None:
        parser = SSEParser(self.cfg.max_frame_bytes)
        if self._pump(response, parser, post):
            return
        failures = 0
        # A legacy stream with SSE ids can be resumed with GET + Last-Event-ID.
        while not post.modern and parser.last_event_id and failures < self.cfg.reconnect_attempts:
            if self._silenced(post) or self.halt.wait(self._retry_delay(parser)):
                return
            retry_ms = parser.retry_ms
            parser = SSEParser(self.cfg.max_frame_bytes, last_event_id=parser.last_event_id)
            parser.retry_ms = retry_ms
            outcome = self._resume(post, parser)
            if outcome is True:
                return
            failures = 0 if outcome is None else failures + 1
        if not self._silenced(post):
            logger.debug("stream of %s dropped before its response", post.describe())
            self._fail(post, STREAM_DROPPED, "stream dropped", {"streamDropped": True})

    def _resume(self, post: _Post, parser: SSEParser) -> bool | None:
        """GET with Last-Event-ID; True: response arrived, None: stream opened but
        ended again, False: could not reopen."""
        self.backend.forget_thread()
        headers = self._get_headers(parser.last_event_id)
        try:
            with self.client.stream("GET", self.cfg.url, headers=headers) as response:
                content_type = response.headers.get("content-type", "")
                if response.status_code != 200 or not content_type.startswith("text/event-stream"):
                    logger.debug("resuming %s: HTTP %d", post.describe(), response.status_code)
                    return False
                return True if self._pump(response, parser, post) else None
        except _IO_ERRORS as exc:
            logger.debug("resuming %s failed: %s", post.describe(), exc)
            return False

    def _pump(self, response: httpx.Response, parser: SSEParser, post: _Post | None) -> bool:
        """Deliver the events of an SSE body, one batch per network read.

        Returns True when ``post``'s response arrived (the body is then drained
        so the connection can be reused), False when the stream ended first.
        """
        chunks = response.iter_bytes()
        request_id = post.request_id if post is not None and post.has_id else _NO_REQUEST
        try:
            for chunk in chunks:
                items = parser.feed_messages(chunk)
                if not items:
                    continue
                frames, done = self._frames(items, request_id)
                if frames:
                    self.deliver(frames, post)
                if done:
                    self._drain(chunks)
                    return True
                if post is not None and self._silenced(post):
                    return False
        except _IO_ERRORS as exc:
            if not (post is not None and self._silenced(post)) and not self.halt.is_set():
                logger.debug("SSE stream broke: %s: %s", type(exc).__name__, exc)
        return False

    def _frames(self, items: list[str | SSEEvent], request_id: Any) -> tuple[list[Frame], bool]:
        """The frames of a read's events, and whether the last one answers ``request_id``.

        Stops at that answer. ``request_id`` is :data:`_NO_REQUEST` when none is awaited.
        """
        frames: list[Frame] = []
        append = frames.append
        awaited = request_id is not _NO_REQUEST
        for item in items:
            if isinstance(item, str):
                frame = decode_text(item)  # a plain event's data, decoded from UTF-8 by the parser
                if frame.__class__ is list:
                    frame = _batch_refused(item)
            else:
                frame = self._event_frame(item)
                if frame is None:
                    continue
            append(frame)
            if awaited and _answers(frame, request_id):
                return frames, True
        return frames, False

    def _event_frame(self, event: SSEEvent) -> Frame | None:
        """The frame an event from the parser's general path carries, if any."""
        if event.oversize:
            return InvalidFrame(f"SSE event larger than {self.cfg.max_frame_bytes} bytes")
        if event.event != "message":
            logger.debug("ignored SSE event of type %r", event.event)
            return None
        if not event.data:
            return None  # a priming event: it only carries an id
        return _decode(event.data)

    def _drain(self, chunks: Iterator[bytes]) -> None:
        """Read the rest of a finished stream, briefly, so its connection is reused.

        The deadline is enforced by the socket wrapper, for this thread only:
        the connection may serve another thread as soon as it is released.
        """
        tid = threading.get_ident()
        stream = self.backend.stream_of(tid)
        if stream is not None:
            stream.deadline = (tid, time.monotonic() + _DRAIN_SECONDS)
        try:
            # Too slow or broken: httpcore drops the connection instead.
            with contextlib.suppress(*_IO_ERRORS):
                for _ in chunks:
                    pass
        finally:
            if stream is not None:
                stream.deadline = None

    def _retry_delay(self, parser: SSEParser) -> float:
        if parser.retry_ms is None:
            return self.cfg.sse_retry_default
        return min(parser.retry_ms / 1000.0, self.cfg.max_retry_delay)

    # -- the legacy GET stream ------------------------------------------------

    def _get_headers(self, last_event_id: str | None) -> httpx.Headers:
        headers = httpx.Headers(self.cfg.headers)
        headers["Accept"] = "text/event-stream"
        with self.lock:
            session_id, version = self.session_id, self.protocol_version
        if session_id:
            headers["Mcp-Session-Id"] = session_id
        if version:
            headers["MCP-Protocol-Version"] = version
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        return headers

    def _get_loop(self) -> None:
        last_event_id: str | None = None
        delay = self.cfg.sse_retry_default
        unreachable = 0  # consecutive failures to connect at all
        refused = 0  # consecutive HTTP errors
        while not self.halt.is_set():
            self.backend.forget_thread()
            headers = self._get_headers(last_event_id)
            sent_session = "mcp-session-id" in headers
            try:
                with self.client.stream("GET", self.cfg.url, headers=headers) as response:
                    status = response.status_code
                    content_type = response.headers.get("content-type", "")
                    if status == 405:
                        logger.debug("the server offers no GET stream (405)")
                        return
                    if status == 404 and sent_session:
                        self.report_lost("session expired (404)")
                        return
                    if status != 200 or not content_type.startswith("text/event-stream"):
                        refused += 1
                        unreachable = 0
                        logger.warning(
                            "GET stream refused: HTTP %d %s",
                            status,
                            response.reason_phrase,
                        )
                        if refused >= self.cfg.reconnect_attempts:
                            logger.warning("giving up the GET stream")
                            return
                    else:
                        unreachable = refused = 0
                        logger.debug("GET stream connected")
                        parser = SSEParser(self.cfg.max_frame_bytes, last_event_id=last_event_id)
                        self._pump(response, parser, None)
                        last_event_id = parser.last_event_id or None
                        if parser.retry_ms is not None:
                            delay = self._retry_delay(parser)
                        if not self.halt.is_set():
                            logger.info("GET stream ended; reconnecting in %.2fs", delay)
            except _IO_ERRORS as exc:
                if self.halt.is_set():
                    return
                unreachable += 1
                reason = f"{type(exc).__name__}: {exc}"
                logger.info("GET stream: %s (attempt %d)", reason, unreachable)
                if unreachable >= self.cfg.reconnect_attempts:
                    self.report_lost(f"GET stream could not reconnect: {reason}")
                    return
            if self.halt.wait(delay):
                return


# --------------------------------------------------------------------------
# Helpers


def _ssl_context_for(verify: bool | str | ssl.SSLContext) -> ssl.SSLContext:
    if isinstance(verify, str):  # httpx deprecates a path here; same meaning
        if os.path.isdir(verify):
            return ssl.create_default_context(capath=verify)
        return ssl.create_default_context(cafile=verify)
    return httpx.create_ssl_context(verify=verify)


def _error_frame(request_id: Any, code: int, message: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": code, "message": message, "data": data},
    }


def _decode(data: bytes) -> Frame:
    """One JSON-RPC message, or an InvalidFrame (bad JSON, bad UTF-8, or a batch).

    The size cap was applied when the body or event was read, so none is applied here.
    """
    value = decode_message(data, len(data))
    if isinstance(value, list):
        return _batch_refused(data)
    return value


def _batch_refused(data: bytes | str) -> InvalidFrame:
    return invalid_frame("JSON-RPC batches are not accepted", data)


#: ``_frames``' request id when no response is awaited (None is a valid JSON-RPC id).
_NO_REQUEST: Final = object()


def _answers(frame: Frame, request_id: Any) -> bool:
    """Whether ``frame`` is the response to ``request_id``."""
    if not isinstance(frame, dict) or "method" in frame or not ("result" in frame or "error" in frame):
        return False
    frame_id = frame.get("id")
    return bool(frame_id == request_id or (frame_id is not None and str(frame_id) == str(request_id)))


def _jsonrpc_error(raw: bytes) -> dict[str, Any] | None:
    """The body as a JSON-RPC error response, if it is one."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    error = value.get("error")
    if not isinstance(error, dict) or not isinstance(error.get("code"), int) or "result" in value:
        return None
    return value


def _read_some(response: httpx.Response, limit: int, *, strict: bool = False) -> bytes:
    """Up to ``limit`` bytes of the body. Errors are swallowed unless ``strict``."""
    buf = bytearray()
    try:
        for chunk in response.iter_bytes():
            buf += chunk
            if len(buf) >= limit:
                break
    except _IO_ERRORS:
        if strict:
            raise
    return bytes(buf[:limit])


def _encode_header_value(value: str) -> str:
    """An HTTP-safe rendering of ``value``: as is when printable ASCII without
    edge whitespace, else ``=?base64?<utf-8 base64>?=`` (the MCP convention)."""
    plain = all(" " <= ch <= "~" for ch in value) and value == value.strip()
    if plain and not (value.startswith("=?base64?") and value.endswith("?=")):
        return value
    return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="
