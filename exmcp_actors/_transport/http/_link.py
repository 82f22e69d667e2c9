"""One connection, one ``open`` .. ``close``: builds the collaborators that do
the work and takes them down together.

Threads (all daemon, all joined by :meth:`HttpTransport.close`): the
``writer`` and the ``workers`` (``_dispatch.py``), and the legacy ``get``
stream reader (``_resume.py``).
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..._protocol._errors import TransportError
from .._framing import encode_message
from ._config import Config, logger
from ._dispatch import Writer
from ._exchange import Poster
from ._outlet import Outlet
from ._plumbing import TrackingBackend, make_client
from ._pump import EventPump
from ._requests import InFlight, Post
from ._resume import GetStream, GetStreams, StreamResumer
from ._session import HttpSession

if TYPE_CHECKING:
    from .._base import FrameSink

__all__ = ["Link"]

#: How long close() waits for all threads, in total.
_JOIN_SECONDS: Final = 5.0


class Link:
    """Everything one ``open`` owns. ``close`` discards it whole, so a late
    thread of an old connection can never touch the next one."""

    def __init__(
        self,
        cfg: Config,
        sink: FrameSink,
        ssl_context: ssl.SSLContext | None,
        param_headers: Callable[[str, Any], dict[str, str]] | None = None,
    ) -> None:
        self._param_headers = param_headers
        self._backend = TrackingBackend()
        self._client = make_client(cfg, self._backend, ssl_context)
        self._outlet = Outlet(sink, self._backend)
        self._session = HttpSession(cfg)
        self._inflight = InFlight(self._outlet.silenced, self._backend)
        pump = EventPump(cfg.max_frame_bytes, self._backend, self._outlet, cfg.misbehaviour)
        streams = GetStreams(cfg, self._client, self._backend, self._session)
        self._get_stream = GetStream(streams, pump, self._outlet)
        resumer = StreamResumer(streams, pump, self._outlet)
        poster = Poster(cfg, self._client, self._backend, self._session, self._inflight, self._outlet, resumer)
        self._writer = Writer(cfg, self._outlet, self._inflight, poster.run)
        self._writer.start()

    @property
    def get_thread(self) -> threading.Thread | None:
        """The legacy GET stream's reader, once started."""
        return self._get_stream.thread

    def send(self, message: dict[str, Any]) -> None:
        if self._outlet.closed:
            raise TransportError("HTTP transport is closed")
        if self._outlet.lost:
            raise TransportError("HTTP connection was lost")
        body = encode_message(message)
        post = Post(message, body, self._session.era, self._param_headers)
        self._inflight.add(post)
        self._writer.put(post)

    def cancel(self, request_id: Any) -> bool:
        post = self._inflight.cancel(request_id)
        if post is None:
            return False
        logger.debug("cancelled the stream of %s", post.describe())
        return post.modern

    def advertised(self, capabilities: dict[str, Any]) -> None:
        self._session.advertised(capabilities)

    def negotiated(self, protocol_version: str, era: str) -> None:
        self._session.negotiated(protocol_version, era)
        if era == "legacy":
            self._get_stream.start()

    def wait_get_stream(self, timeout: float) -> bool:
        """Wait until the legacy GET stream was open once (for tests and diagnostics: a server's
        message that is no answer is dropped while there is none)."""
        return self._get_stream.connected.wait(timeout)

    def wait_quiet(self, timeout: float) -> bool:
        """Wait until no request is in flight (for tests and diagnostics)."""
        return self._inflight.wait_quiet(timeout)

    def shutdown(self) -> None:
        if not self._outlet.close():
            return
        self._writer.finish()
        if not self._outlet.lost:
            self._session.delete(self._client)
        self._backend.abort_all()
        workers = self._writer.stop_workers()
        try:
            self._client.close()
        except Exception:  # best effort: a concurrent request may be mid-flight
            logger.debug("error closing the HTTP client", exc_info=True)
        deadline = time.monotonic() + _JOIN_SECONDS
        me = threading.current_thread()
        for thread in [self._writer.thread, self.get_thread, *workers]:
            if thread is None or thread is me or not thread.is_alive():
                continue
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                logger.warning("thread %s did not stop within %.0fs", thread.name, _JOIN_SECONDS)
