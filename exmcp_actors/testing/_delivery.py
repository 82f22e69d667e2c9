"""The outbound half of one connection: a queue of pushes and the thread that hands them to the client."""

from __future__ import annotations

import logging
import queue
import threading

from exmcp_actors.testing._codec import Wire
from exmcp_actors.testing._endpoints import Endpoint

_log = logging.getLogger("exmcp_actors.testing")


class _Stop:
    """Delivery sentinel: the client closed; deliver nothing more."""


class _Lose:
    """Delivery sentinel: flush what is queued, then end the connection."""

    def __init__(self, reason: str, graceful: bool) -> None:
        self.reason = reason
        self.graceful = graceful


class Delivery:
    """Pushes in order to one endpoint, on a thread of their own, so no pusher waits for the client.

    The owner queues under its lock, so nothing can land behind a sentinel.

    Args:
        number: the connection number, for the log.
    """

    def __init__(self, number: int) -> None:
        self._number = number
        self._outbox: queue.SimpleQueue[list[Wire] | _Stop | _Lose] = queue.SimpleQueue()
        self._client_closed = False
        self._thread: threading.Thread | None = None

    def thread(self, endpoint: Endpoint, name: str) -> threading.Thread:
        """The delivery thread for ``endpoint`` (not yet started)."""
        self._thread = threading.Thread(target=self._loop, args=(endpoint,), name=name, daemon=True)
        return self._thread

    def push(self, frames: list[Wire]) -> None:
        """Queue one push: one ``deliver`` call."""
        self._outbox.put(frames)

    def stop(self) -> None:
        """The client closed: drop what is queued and deliver nothing more."""
        self._client_closed = True
        self._outbox.put(_Stop())

    def lose(self, reason: str, *, graceful: bool) -> None:
        """Deliver what is queued, then end the connection from the server side."""
        self._outbox.put(_Lose(reason, graceful))

    def join(self, timeout: float) -> None:
        """Wait for the delivery thread to finish (not when called on it)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _loop(self, endpoint: Endpoint) -> None:
        while True:
            item = self._outbox.get()
            if isinstance(item, _Stop):
                return
            if isinstance(item, _Lose):
                try:
                    endpoint.lose(item.reason, graceful=item.graceful)
                except Exception:  # a failing sink must not stop us
                    _log.debug("fake connection %d: ending failed", self._number, exc_info=True)
                return
            if self._client_closed:
                continue  # the client closed: it must see nothing more
            try:
                endpoint.deliver(item)
            except Exception:  # a failing sink must not stop us
                _log.debug("fake connection %d: delivery failed", self._number, exc_info=True)
