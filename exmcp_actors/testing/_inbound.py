"""The inbound half of one connection: a queue of client frames and the thread that has them answered in order."""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

_log = logging.getLogger("exmcp_actors.testing")


class Inbound:
    """Client frames in arrival order, each decoded and handed to ``answer`` on the handler thread.

    The owner queues under its lock, so nothing can land behind the end marker.

    Args:
        number: the connection number, for the log.
        ended: set when the connection ends; a frame still queued then is not answered.
        answer: answers one decoded message (the server's script does).
    """

    def __init__(self, number: int, ended: threading.Event, answer: Callable[[Any], None]) -> None:
        self._number = number
        self._ended = ended
        self._answer = answer
        self._inbox: queue.SimpleQueue[str | None] = queue.SimpleQueue()

    def thread(self, name: str) -> threading.Thread:
        """The handler thread (not yet started)."""
        return threading.Thread(target=self._loop, name=name, daemon=True)

    def put(self, text: str) -> None:
        """Queue one frame for the handler thread."""
        self._inbox.put(text)

    def close(self) -> None:
        """Let the handler thread finish."""
        self._inbox.put(None)

    def _loop(self) -> None:
        while True:
            text = self._inbox.get()
            if text is None or self._ended.is_set():
                return
            try:
                self._answer(json.loads(text))
            except Exception:  # keep serving the next message
                _log.exception("fake connection %d: dispatch failed", self._number)
