"""Who runs each POST, and in which order they reach the wire.

* ``writer``: takes messages in ``send`` order. A notification or a response
  is POSTed right there (the server answers 202 at once), so it reaches the
  server before anything sent after it (``notifications/initialized`` before
  the next request). A request is handed to a worker, and the writer waits
  until that request's body is on the wire before taking the next message.
* ``workers``: an elastic pool, one busy worker per in-flight request; a new
  worker is started whenever none is idle, because a listen POST may run for
  hours and must not starve other requests. Idle workers exit after a while.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from ..._protocol._errors import ExchangeFailed
from ._config import Config, logger

if TYPE_CHECKING:
    from ._outlet import Outlet
    from ._requests import InFlight, Post

__all__ = ["Workers", "Writer"]

#: Idle pool workers exit after this many seconds.
_WORKER_IDLE_SECONDS: Final = 30.0


class Workers:
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


class Writer:
    """The writer thread: messages leave in ``send`` order, requests via the workers."""

    def __init__(self, cfg: Config, outlet: Outlet, inflight: InFlight, run: Callable[[Post], None]) -> None:
        self._cfg = cfg
        self._outlet = outlet
        self._inflight = inflight
        #: Runs one message's HTTP exchange; must not raise.
        self._run = run
        self._outbox: queue.SimpleQueue[Post | None] = queue.SimpleQueue()
        self._workers = Workers("exmcp-http-post")
        self.thread = threading.Thread(target=self._loop, name="exmcp-http-writer", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def put(self, post: Post) -> None:
        self._outbox.put(post)

    def finish(self) -> None:
        """The writer exits once it reaches this point of the outbox."""
        self._outbox.put(None)

    def stop_workers(self) -> list[threading.Thread]:
        return self._workers.stop()

    def _loop(self) -> None:
        while True:
            post = self._outbox.get()
            if post is None:
                return
            if self._outlet.halt.is_set():
                self._inflight.remove(post)
            elif not post.has_id:
                self._run(post)
            else:
                try:
                    started = self._workers.submit(functools.partial(self._run, post))
                except RuntimeError as exc:  # no thread to be had: fail this one, go on
                    logger.error("cannot start a worker for %s: %s", post.describe(), exc)
                    self._outlet.fail(post, ExchangeFailed(f"no thread to run the exchange: {exc}"))
                    post.cancelled = True  # its queued job must not run later
                    started = False
                if started:
                    # Keep wire order: the next message waits until this body is sent.
                    post.written.wait(self._cfg.io_timeout)
                else:
                    self._inflight.remove(post)
