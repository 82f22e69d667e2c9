"""The GET side: the legacy standalone GET stream, and the resumption of a
dropped POST stream, both with ``Last-Event-ID`` after the server's ``retry:``.

* ``get`` thread: the legacy standalone GET stream reader, started by
  :meth:`HttpTransport.negotiated` in the legacy era. 405 means the server
  has none (fine). When the stream ends it reconnects after the server's
  ``retry:`` (else ``sse_retry_default``; capped by ``max_retry_delay``) with
  ``Last-Event-ID``, each wait doubled after a stream that ended at once with nothing
  delivered (up to ``max_retry_delay``); ``reconnect_attempts`` failures in a row to connect at
  all report ``transport_lost("GET stream could not reconnect: ...")`` (this
  is how a dead legacy server is noticed while idle); a 404, or a 400 naming
  the session, while carrying the session id reports the session gone
  (``_session.session_gone``); other HTTP refusals, as many times in a row,
  report ``transport_lost("GET stream could not be re-opened: ...")`` when a
  GET stream was open before on this connection (a client must never look
  ready while deaf), else only give the GET stream up (a server without one).
* An SSE response stream ended (server closed it, or the connection broke)
  before the request's response arrived: the request fails with
  ``OutcomeUnknown(STREAM_DROPPED)`` (an ``ExchangeFailed``: it may or may not have run),
  a transport failure, never a server's error answer. For a ``subscriptions/listen`` this is the abrupt drop of that
  one subscription (the client may re-listen and refetch); the transport
  itself is fine.
  Legacy streams that carried SSE ids are first resumed with a GET and
  ``Last-Event-ID``, as the 2025-11-25 revision specifies; a resumed stream that ends
  with nothing delivered counts as a failed resumption.
"""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Final

import httpx

from ..._protocol._errors import OutcomeUnknown
from ._config import IO_ERRORS, Config, logger, status_line
from ._session import session_gone
from ._sse import SSEParser

if TYPE_CHECKING:
    from ._outlet import Outlet
    from ._plumbing import TrackingBackend
    from ._pump import EventPump
    from ._requests import Post
    from ._session import HttpSession

__all__ = ["STREAM_DROPPED", "GetStream", "GetStreams", "StreamResumer"]

#: ``ExchangeFailed.what`` when a response stream ended before the request's answer.
STREAM_DROPPED: Final = "the response stream dropped before the answer"

#: How much of a GET refusal's body is read to see whether it names the session.
_REFUSAL_BYTES = 4096
#: A GET stream that ends sooner than this with nothing delivered made no progress: the next
#: one waits longer (see ``GetStreams.idle_delay``). One that lived longer was merely quiet.
_BRIEF_STREAM: Final = 1.0
#: Past this many, idle streams in a row wait no longer (the cap is reached long before).
_MAX_DOUBLINGS: Final = 16


class GetStreams:
    """Opens GET streams on the endpoint and paces their reconnections."""

    def __init__(self, cfg: Config, client: httpx.Client, backend: TrackingBackend, session: HttpSession) -> None:
        self.cfg = cfg
        self._client = client
        self._backend = backend
        self._session = session

    def headers(self, last_event_id: str | None) -> httpx.Headers:
        """Ready this thread for a new GET resuming after ``last_event_id``: its headers."""
        self._backend.forget_thread()
        return self._session.get_headers(last_event_id)

    def open(self, headers: httpx.Headers) -> AbstractContextManager[httpx.Response]:
        return self._client.stream("GET", self.cfg.url, headers=headers)

    def retry_delay(self, parser: SSEParser) -> float:
        if parser.retry_ms is None:
            return self.cfg.sse_retry_default
        return min(parser.retry_ms / 1000.0, self.cfg.max_retry_delay)

    def idle_delay(self, delay: float, idle: int) -> float:
        """The wait before reopening a GET stream after ``idle`` streams in a row ended at once
        with nothing delivered: doubling from ``delay`` (at least ``sse_retry_default``) up to
        ``max_retry_delay``. A server that ends each stream at once, asking ``retry: 0``,
        would otherwise be reopened in a loop as fast as the network goes."""
        if idle == 0:
            return delay
        doubled = max(delay, self.cfg.sse_retry_default) * float(2 ** min(idle - 1, _MAX_DOUBLINGS))
        return min(doubled, max(delay, self.cfg.max_retry_delay))


def _is_event_stream(response: httpx.Response) -> bool:
    return response.status_code == 200 and response.headers.get("content-type", "").startswith("text/event-stream")


class StreamResumer:
    """Reads a POST's SSE reply to its end, resuming a legacy stream with ids."""

    def __init__(self, streams: GetStreams, pump: EventPump, outlet: Outlet) -> None:
        self._streams = streams
        self._pump = pump
        self._outlet = outlet

    def consume(self, post: Post, response: httpx.Response) -> None:
        cfg = self._streams.cfg
        outlet = self._outlet
        parser = SSEParser(cfg.max_frame_bytes)
        if self._pump.pump(response, parser, post).answered:
            return
        failures = 0
        # A legacy stream with SSE ids can be resumed with GET + Last-Event-ID.
        while not post.modern and parser.last_event_id and failures < cfg.reconnect_attempts:
            if outlet.silenced(post) or outlet.halt.wait(self._streams.retry_delay(parser)):
                return
            retry_ms = parser.retry_ms
            parser = SSEParser(cfg.max_frame_bytes, last_event_id=parser.last_event_id)
            parser.retry_ms = retry_ms
            outcome = self._resume(post, parser)
            if outcome is True:
                return
            failures = 0 if outcome is None else failures + 1
        if not outlet.silenced(post):
            logger.debug("stream of %s dropped before its response", post.describe())
            outlet.fail(post, OutcomeUnknown(STREAM_DROPPED, request=post.describe()))

    def _resume(self, post: Post, parser: SSEParser) -> bool | None:
        """GET with Last-Event-ID; True: response arrived, None: stream opened, delivered
        and ended again, False: could not reopen, or it ended with nothing delivered (a
        server that does so each time must not keep the request resuming in a loop)."""
        headers = self._streams.headers(parser.last_event_id)
        try:
            with self._streams.open(headers) as response:
                if not _is_event_stream(response):
                    logger.debug("resuming %s: HTTP %d", post.describe(), response.status_code)
                    return False
                pumped = self._pump.pump(response, parser, post)
                if pumped.answered:
                    return True
                return None if pumped.frames else False
        except IO_ERRORS as exc:
            logger.debug("resuming %s failed: %s", post.describe(), exc)
            return False


def _head(response: httpx.Response) -> bytes:
    """The start of a refusal's body (enough to see what it names), read best effort."""
    try:
        for chunk in response.iter_bytes():
            return chunk[:_REFUSAL_BYTES]
    except IO_ERRORS:
        pass
    return b""


class GetStream:
    """The legacy standalone GET stream and its thread."""

    def __init__(self, streams: GetStreams, pump: EventPump, outlet: Outlet) -> None:
        self._streams = streams
        self._pump = pump
        self._outlet = outlet
        self._lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the reader unless it runs already or the connection is halted."""
        with self._lock:
            if (self.thread and self.thread.is_alive()) or self._outlet.halt.is_set():
                return
            self.thread = thread = threading.Thread(target=self._loop, name="exmcp-http-get", daemon=True)
        thread.start()

    def _loop(self) -> None:
        cfg = self._streams.cfg
        halt = self._outlet.halt
        last_event_id: str | None = None
        delay = cfg.sse_retry_default
        unreachable = 0  # consecutive failures to connect at all
        refused = 0  # consecutive HTTP errors
        connected = False  # whether a GET stream was open once on this connection
        idle = 0  # consecutive streams that ended at once with nothing delivered
        while not halt.is_set():
            headers = self._streams.headers(last_event_id)
            sent_session = "mcp-session-id" in headers
            try:
                with self._streams.open(headers) as response:
                    status = response.status_code
                    if status == 405:
                        logger.debug("the server offers no GET stream (405)")
                        return
                    if not _is_event_stream(response):
                        gone = session_gone(status, _head(response)) if sent_session else None
                        if gone is not None:
                            self._outlet.report_lost(gone)
                            return
                        refused += 1
                        unreachable = 0
                        logger.warning("GET stream refused: HTTP %s", status_line(response))
                        if refused >= cfg.reconnect_attempts:
                            if connected:
                                # It worked on this session before: listeners would hear nothing
                                # from now on while the client looks ready. Start afresh instead.
                                self._outlet.report_lost(f"GET stream could not be re-opened: HTTP {status}")
                            else:
                                logger.warning("giving up the GET stream")
                            return
                    else:
                        unreachable = refused = 0
                        connected = True
                        logger.debug("GET stream connected")
                        parser = SSEParser(cfg.max_frame_bytes, last_event_id=last_event_id)
                        opened_at = time.monotonic()
                        pumped = self._pump.pump(response, parser, None)
                        brief = time.monotonic() - opened_at < _BRIEF_STREAM
                        last_event_id = parser.last_event_id or None
                        if parser.retry_ms is not None:
                            delay = self._streams.retry_delay(parser)
                        idle = idle + 1 if brief and not pumped.frames else 0
                        if not halt.is_set():
                            wait = self._streams.idle_delay(delay, idle)
                            logger.info("GET stream ended; reconnecting in %.2fs", wait)
            except IO_ERRORS as exc:
                if halt.is_set():
                    return
                unreachable += 1
                reason = f"{type(exc).__name__}: {exc}"
                logger.info("GET stream: %s (attempt %d)", reason, unreachable)
                if unreachable >= cfg.reconnect_attempts:
                    self._outlet.report_lost(f"GET stream could not reconnect: {reason}")
                    return
            if halt.wait(self._streams.idle_delay(delay, idle)):
                return
