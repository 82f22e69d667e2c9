"""The GET side: the legacy standalone GET stream, and the resumption of a
dropped POST stream, both with ``Last-Event-ID`` after the server's ``retry:``.

* Pacing, the same for every reopening (see :class:`GetStreams`): after the server's
  ``retry:`` (else ``sse_retry_default``), never less than :data:`MIN_RETRY_DELAY` nor more
  than ``max_retry_delay``; after attempts in a row that ended at once (a refusal, a failure
  to connect, a stream closed within a second that delivered nothing or had asked a
  ``retry:`` below the floor) each wait doubles, with jitter, up to ``max_retry_delay``. A
  server that answers ``retry: 0`` and ends each stream at once is reopened ever more slowly,
  not hundreds of times a second; one that polls (each stream delivers, then ends, as the
  SDKs' ``closeSSE`` does) at a ``retry:`` the floor allows is reopened after it every time.
* ``get`` thread: the legacy standalone GET stream reader, started by
  :meth:`HttpTransport.negotiated` in the legacy era. 405 means the server
  has none (fine). When the stream ends it reconnects, paced as above, with
  ``Last-Event-ID``; ``reconnect_attempts`` failures in a row to connect at
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
  ``Last-Event-ID``, as the 2025-11-25 revision specifies, paced as above; a resumed stream
  that ends with nothing delivered counts as a failed resumption.
"""

from __future__ import annotations

import random
import threading
import time
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Final

import httpx

from ..._protocol._errors import OutcomeUnknown
from ..._util._redact import redact_url
from ._config import IO_ERRORS, Config, io_error_text, logger, status_line
from ._session import session_gone
from ._sse import SSEParser

if TYPE_CHECKING:
    from ._outlet import Outlet
    from ._plumbing import TrackingBackend
    from ._pump import EventPump
    from ._requests import Post
    from ._session import HttpSession

__all__ = ["MIN_RETRY_DELAY", "STREAM_DROPPED", "GetStream", "GetStreams", "StreamResumer"]

#: ``ExchangeFailed.what`` when a response stream ended before the request's answer.
STREAM_DROPPED: Final = "the response stream dropped before the answer"

#: How much of a GET refusal's body is read to see whether it names the session.
_REFUSAL_BYTES = 4096
#: The least wait before reopening a stream, in seconds, whatever ``retry:`` asked (Firefox's
#: EventSource has the same floor); less when the host caps waits lower (``max_retry_delay``).
MIN_RETRY_DELAY: Final = 0.5
#: A stream that ends sooner than this after it opened ended at once: the next wait doubles
#: (see :meth:`GetStreams.pace`). One that lived longer had its turn.
_BRIEF_STREAM: Final = 1.0
#: Past this many, quick ends in a row wait no longer (the cap is reached long before).
_MAX_DOUBLINGS: Final = 16
#: Up to this share of a doubled wait is added at random, so clients dropped together by a
#: server do not all come back in step.
_JITTER: Final = 0.25


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

    def no_get_stream(self) -> None:
        """A legacy server answered GET with 405: unless it promised no pushes, say once that it
        cannot keep that promise (stateless serving, the TypeScript SDK v2's default, does this)."""
        promised, cfg = self._session.promised, self.cfg
        if not promised or cfg.warned_deaf.is_set():
            return
        cfg.warned_deaf.set()
        how = "" if self._session.has_session else " and no session (it serves MCP 2025 statelessly)"
        logger.warning(
            "%s advertises %s but has no GET stream (HTTP 405)%s, so it cannot send notifications "
            "outside a request's response: a legacy watch or listener of it hears nothing "
            "(if it speaks MCP 2026-07-28, connect with protocol='auto' or 'modern')",
            redact_url(cfg.url),
            " and ".join(promised),
            how,
        )

    def retry_delay(self, parser: SSEParser) -> float:
        """The wait the stream's ``retry:`` asks for, between the floor and ``max_retry_delay``;
        ``sse_retry_default`` (the host's own) when it asked none."""
        if parser.retry_ms is None:
            return self.cfg.sse_retry_default
        return min(max(parser.retry_ms / 1000.0, self._floor()), self.cfg.max_retry_delay)

    def pace(self, delay: float, quick: int) -> float:
        """The wait before reopening a stream after ``quick`` attempts in a row ended at once:
        ``delay`` after none, then doubling from it (at least the floor), with jitter, up to
        ``max_retry_delay``. A server that ends each stream at once, asking ``retry: 0``,
        would otherwise be reopened in a loop as fast as the network goes."""
        if quick == 0:
            return delay
        doubled = max(delay, self._floor()) * float(2 ** min(quick - 1, _MAX_DOUBLINGS))
        return min(doubled, max(delay, self.cfg.max_retry_delay)) * (1.0 + random.uniform(0.0, _JITTER))

    def _floor(self) -> float:
        return min(MIN_RETRY_DELAY, self.cfg.max_retry_delay)

    def ended_at_once(self, opened_at: float, delivered: bool, retry_ms: int | None) -> bool:
        """Whether an attempt made at ``opened_at`` (``time.monotonic()``) ended at once, so the
        next wait doubles: it ended within :data:`_BRIEF_STREAM`, and delivered nothing or was
        paced by a ``retry:`` (``retry_ms``, None for none) below the floor. A server whose
        streams deliver and end at a pace the floor allows is polling, as SSE lets it: its
        ``retry:`` is honoured each time, as EventSource and the official SDK clients do."""
        if time.monotonic() - opened_at >= _BRIEF_STREAM:
            return False
        asked = self.cfg.sse_retry_default if retry_ms is None else retry_ms / 1000.0
        return not delivered or asked < self._floor()


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
        quick = 0  # resumptions in a row that ended at once (see GetStreams.ended_at_once)
        streams = self._streams
        # A legacy stream with SSE ids can be resumed with GET + Last-Event-ID.
        while not post.modern and parser.last_event_id and failures < cfg.reconnect_attempts:
            if outlet.silenced(post) or outlet.halt.wait(streams.pace(streams.retry_delay(parser), quick)):
                return
            retry_ms = parser.retry_ms
            parser = SSEParser(cfg.max_frame_bytes, last_event_id=parser.last_event_id)
            parser.retry_ms = retry_ms
            opened_at = time.monotonic()
            outcome = self._resume(post, parser)
            if outcome is True:
                return
            failures = 0 if outcome is None else failures + 1
            quick = quick + 1 if streams.ended_at_once(opened_at, outcome is None, parser.retry_ms) else 0
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
            logger.debug("resuming %s failed: %s", post.describe(), io_error_text(exc))
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
        #: Set once a GET stream was open on this connection (for tests and diagnostics).
        self.connected = threading.Event()

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
        retry_ms: int | None = None  # the server's last retry:, which delay honours
        unreachable = 0  # consecutive failures to connect at all
        refused = 0  # consecutive HTTP errors
        connected = False  # whether a GET stream was open once on this connection
        quick = 0  # consecutive attempts that ended at once (see GetStreams.ended_at_once)
        while not halt.is_set():
            headers = self._streams.headers(last_event_id)
            sent_session = "mcp-session-id" in headers
            opened_at = time.monotonic()
            delivered = False
            try:
                with self._streams.open(headers) as response:
                    status = response.status_code
                    if status == 405:
                        logger.debug("the server offers no GET stream (405)")
                        self._streams.no_get_stream()
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
                        self.connected.set()
                        logger.debug("GET stream connected")
                        parser = SSEParser(cfg.max_frame_bytes, last_event_id=last_event_id)
                        delivered = self._pump.pump(response, parser, None).frames > 0
                        last_event_id = parser.last_event_id or None
                        if parser.retry_ms is not None:
                            delay = self._streams.retry_delay(parser)
                            retry_ms = parser.retry_ms
            except IO_ERRORS as exc:
                if halt.is_set():
                    return
                unreachable += 1
                reason = io_error_text(exc)
                logger.info("GET stream: %s (attempt %d)", reason, unreachable)
                if unreachable >= cfg.reconnect_attempts:
                    self._outlet.report_lost(f"GET stream could not reconnect: {reason}")
                    return
            if halt.is_set():
                return  # stopped while it streamed: nothing is reopened, so nothing is said
            quick = quick + 1 if self._streams.ended_at_once(opened_at, delivered, retry_ms) else 0
            wait = self._streams.pace(delay, quick)
            logger.info("GET stream: reopening in %.2fs (%d in a row ended at once)", wait, quick)
            if halt.wait(wait):
                return
