"""Where the host's own code runs: sampling and elicitation handlers, progress callbacks,
task status. Never on a transport's reader thread nor on the client actor, so a slow
handler stops neither notifications nor other requests.

:class:`WorkerPool` is a small bounded pool of daemon threads (a hung handler never
keeps the process alive); :class:`HostRuntime` holds one client's handlers, the
progress callbacks of its calls in flight and its task handles.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, Generic, NamedTuple, TypeVar

from .._protocol._elicit import SeenElicitations
from .._protocol._events import ElicitationCompleted, HostAnswered, ProgressNoted, RunHostHandler, TaskStatusNoted
from .._protocol._host_checks import ELICITATION, SAMPLING, HostAbilities, check_request, finish_answer
from .._protocol._peer_text import peer_text
from .._protocol._ratelog import RateLimitedLog
from .._util._threads import start_daemon

logger = logging.getLogger("exmcp_actors")

Handler = Callable[[dict[str, Any]], Any]
#: ``on_request(method, params) -> result dict``.
RequestHandler = Callable[[str, dict[str, Any]], Any]
_STOP = object()
#: Statuses of task ids with no handle yet, kept for that many tasks.
MAX_EARLY_TASKS = 64
T = TypeVar("T")
#: What the server hears when ``on_request`` raised (never the exception's own text).
CUSTOM_FAILED = "internal error"


#: Seconds a closing client waits for its call pool's workers to end.
CALL_POOL_JOIN = 1.0


class WorkerPool:
    """At most ``size`` daemon threads, started as work arrives; jobs run in submission order."""

    def __init__(self, name: str, size: int) -> None:
        self._name = name
        self._size = size
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # workers waiting for a job
        self._queued = 0  # jobs not yet taken by a worker
        self._closed = False

    def submit(self, job: Callable[[], None]) -> bool:
        """Queue ``job``; False (and nothing queued) once the pool is closed, or when it has no
        worker and the interpreter, exiting, starts none."""
        with self._lock:
            if self._closed:
                return False
            self._queued += 1
            if self._queued > self._idle and len(self._threads) < self._size:
                thread = start_daemon(self._work, f"{self._name}-{len(self._threads)}")
                if thread is not None:
                    self._threads.append(thread)
                elif not self._threads:  # none may start (see start_daemon), and none runs
                    self._queued -= 1
                    return False  # as a closed pool: the caller does without it
                # else a worker already started takes the job
        self._jobs.put(job)
        return True

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._jobs.get()
            with self._lock:
                self._idle -= 1
                self._queued -= 1
            if job is _STOP:
                return
            try:
                job()
            except Exception:  # the job reports its own errors; this keeps the worker alive
                logger.exception("%s: a host job failed", self._name)

    def close(self) -> None:
        """No new jobs; idle workers end (a worker still in a host's handler ends after it)."""
        with self._lock:
            self._closed = True
            self._queued += len(self._threads)
        for _ in self._threads:
            self._jobs.put(_STOP)

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds in all for the workers to end (never for this thread)."""
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))


class ProgressFeed:
    """One call's progress callback: its notifications, called one at a time, in order."""

    def __init__(
        self, callback: Callable[[dict[str, Any]], Any], pool: WorkerPool, arrived: Callable[[], None] | None = None
    ) -> None:
        self._callback = callback
        self._pool = pool
        self._arrived = arrived
        self._items: deque[dict[str, Any]] = deque()
        self._lock = threading.Lock()
        self._running = False
        self._drained = threading.Event()
        self._drained.set()

    def put(self, params: dict[str, Any]) -> None:
        if self._arrived is not None:  # as it arrives, not as the callback gets it: a timeout restarts now
            self._arrived()
        with self._lock:
            self._items.append(params)
            if self._running:
                return
            self._running = True
            self._drained.clear()
        if not self._pool.submit(self._drain):
            # No worker may take it (the client closes), and this thread may hold the session's
            # monitor, where no host code runs: it waits for the next put() a worker takes, or
            # for the call's end (wait_drained).
            with self._lock:
                self._running = False

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._items:
                    self._running = False
                    self._drained.set()
                    return
                params = self._items.popleft()
            try:
                self._callback(params)
            except Exception:
                logger.exception("a progress callback raised; the call goes on")

    def wait_drained(self, timeout: float) -> bool:
        """Wait until every notification received so far was passed to the callback (here,
        those no worker could take: see :meth:`put`)."""
        with self._lock:
            left = not self._running and bool(self._items)
            self._running = self._running or left
        if left:
            self._drain()
        return self._drained.wait(timeout)


class TaskFeed(NamedTuple):
    """Where one task handle takes its statuses (the handle is the host's; these are its doors)."""

    #: ``noted(params)``: a status for the task.
    noted: Callable[[dict[str, Any]], None]
    #: ``ended()``: no status can come any more (the client closed).
    ended: Callable[[], None]


class Book(Generic[T]):
    """A dict the actor reads and host threads write."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[Any, T] = {}

    def put(self, key: Any, item: T) -> None:
        with self._lock:
            self._items[key] = item

    def pop(self, key: Any) -> None:
        with self._lock:
            self._items.pop(key, None)

    def get(self, key: Any) -> T | None:
        with self._lock:
            return self._items.get(key)

    def drain(self) -> list[T]:
        """Every item, leaving the book empty."""
        with self._lock:
            items, self._items = list(self._items.values()), {}
        return items


class HostRuntime:
    """One client's host side, shared by its actor (which submits) and its facade (which registers)."""

    def __init__(
        self,
        name: str,
        sampling: Handler | None = None,
        elicitation: Handler | None = None,
        roots: bool = False,
        *,
        on_request: RequestHandler | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        sampling_tools: bool = False,
        elicitation_modes: tuple[str, ...] = ("form",),
    ) -> None:
        self.name = name
        #: The roots as the facade last set them (the session keeps its own copy for legacy peers).
        self.roots: list[dict[str, Any]] = []
        self.handlers: dict[str, Handler] = {}
        if sampling is not None:
            self.handlers[SAMPLING] = sampling
        if elicitation is not None:
            self.handlers[ELICITATION] = elicitation
        #: ``connect(on_request=)``: answers the server requests no other handler takes.
        self.on_request = on_request
        self.abilities = HostAbilities(
            sampling=sampling is not None,
            elicitation=elicitation is not None,
            roots=roots,
            custom=on_request is not None,
            extensions=dict(extensions or {}),
            sampling_tools=sampling_tools,
            elicitation_modes=elicitation_modes,
        )
        #: A handler that raises or returns junk may do so for every request: its errors are rate-limited.
        self._bad_answers = RateLimitedLog(logger)
        #: The URL elicitations handed to the handler (shared with the session, which takes them).
        self.elicitations = SeenElicitations()
        self.handler_pool = WorkerPool(f"exmcp-host-{name}", 4)
        self.callback_pool = WorkerPool(f"exmcp-callbacks-{name}", 2)
        #: Where calls' futures settle and their done-callbacks run (see ``_api._call``).
        self.call_pool = WorkerPool(f"exmcp-calls-{name}", 4)
        #: The progress callbacks of calls in flight, by progress token.
        self.feeds: Book[ProgressFeed] = Book()
        #: Task handles not yet terminal, by task id.
        self.tasks: Book[TaskFeed] = Book()
        self._early: dict[str, list[dict[str, Any]]] = {}
        self._early_lock = threading.Lock()
        #: Set by :meth:`close` (under ``_early_lock``): a handle adopted later ends at once.
        self._closed = False

    # -- server requests -------------------------------------------------------------------

    def run(self, effect: RunHostHandler, tell: Callable[[Any], None]) -> None:
        """Run a handler on the pool; its outcome goes back to the actor through ``tell``."""
        handler = self.handlers.get(effect.method)
        if handler is None:
            self._submit_handler(partial(self._run_custom, effect, tell), effect, tell)
            return

        def job() -> None:
            try:
                result = handler(effect.params)
            except Exception as error:  # answered as a JSON-RPC error; the client stays ready
                logger.warning("%s: the %s handler raised %r", self.name, effect.method, error)
                tell(HostAnswered(effect.request_id, effect.generation, error=str(error) or type(error).__name__))
            else:
                tell(HostAnswered(effect.request_id, effect.generation, result=result))

        self._submit_handler(job, effect, tell)

    def _submit_handler(self, job: Callable[[], None], effect: RunHostHandler, tell: Callable[[Any], None]) -> None:
        """Run a server request's handler on the pool; when none of its workers may (the client
        closes), the server is answered with an error, never left waiting."""
        if self.handler_pool.submit(job):
            return
        logger.info("%s: the server's %s request is refused: the client is closing", self.name, effect.method)
        tell(HostAnswered(effect.request_id, effect.generation, error="the client is closing"))

    def _run_custom(self, effect: RunHostHandler, tell: Callable[[Any], None]) -> None:
        """``on_request`` for a method the library does not know. Its exception's text may carry
        the host's secrets: the server hears only that it failed. The log has it escaped, as the
        server's params may be in it (so no traceback, whose text no one escapes)."""
        assert self.on_request is not None
        try:
            result = self.on_request(effect.method, effect.params)
        except Exception as error:
            self._bad_answers.error(
                "on_request",
                "%s: on_request raised %s for the server request %s; answering -32603",
                self.name,
                peer_text(error, quote=True),
                peer_text(effect.method, quote=True),
            )
            tell(HostAnswered(effect.request_id, effect.generation, error=CUSTOM_FAILED))
        else:
            tell(HostAnswered(effect.request_id, effect.generation, result=result))

    def answer_now(self, method: str, params: Any) -> tuple[Any, str | None]:
        """Answer one embedded request of a 2026-07-28 ``input_required`` result in this thread:
        ``(result, None)`` or ``(None, why)``."""
        if not self.abilities.answers(method):
            return None, f"this client does not handle {peer_text(method)}"
        params = {} if params is None else params
        why = check_request(method, params, self.abilities)
        if why is not None:
            return None, why
        if method == ELICITATION and isinstance(params, dict) and params.get("mode") == "url":
            self.elicitations.note(params.get("elicitationId"))
        if method not in self.handlers:
            return {"roots": [dict(root) for root in self.roots]}, None
        try:
            result = self.handlers[method](params)
        except Exception as error:
            return None, f"the host's {method} handler failed: {error}"
        finished, why = finish_answer(method, params, result)
        if why is not None:
            self._bad_answers.error(method, "%s: %s; the call fails, nothing is sent", self.name, why)
        return finished, why

    def elicitation_completed(self, effect: ElicitationCompleted) -> None:
        """Pass a completion to the elicitation handler's ``on_complete`` hook, on the callback pool."""
        hook = getattr(self.handlers.get(ELICITATION), "on_complete", None)
        if not callable(hook):
            return

        def job() -> None:
            try:
                hook(effect.params)
            except Exception as error:
                logger.warning("%s: the elicitation handler's on_complete raised %r", self.name, error)

        if not self.callback_pool.submit(job):
            logger.info("%s: the elicitation's on_complete is not called: the client is closing", self.name)

    # -- progress and tasks ----------------------------------------------------------------

    def watch_progress(
        self, token: Any, callback: Callable[[dict[str, Any]], Any], arrived: Callable[[], None] | None = None
    ) -> ProgressFeed:
        feed = ProgressFeed(callback, self.callback_pool, arrived)
        self.feeds.put(token, feed)
        return feed

    def progress(self, effect: ProgressNoted) -> None:
        feed = self.feeds.get(effect.params["progressToken"])
        if feed is not None:
            feed.put(effect.params)

    def task_status(self, effect: TaskStatusNoted) -> None:
        params = effect.params
        with self._early_lock:
            feed = self.tasks.get(params["taskId"])
            if feed is None:
                # A status may come before call_tool has made the task's handle: keep the latest of a few
                # (only the latest, so a server repeating statuses costs nothing more).
                self._early[params["taskId"]] = [params]
                while len(self._early) > MAX_EARLY_TASKS:
                    self._early.pop(next(iter(self._early)))
                return
        feed.noted(params)

    def adopt_task(self, task_id: str, feed: TaskFeed) -> None:
        """Route a new task handle's statuses to ``feed``, the ones that came before it first."""
        with self._early_lock:
            closed = self._closed
            if not closed:
                self.tasks.put(task_id, feed)
            # Under the lock: a later status, which finds the feed here, waits until these are taken.
            for params in self._early.pop(task_id, []):
                feed.noted(params)
        if closed:  # made as the client closed: no status can come, and nothing would end it
            feed.ended()

    def close(self) -> None:
        self.handler_pool.close()
        self.callback_pool.close()
        self.call_pool.close()
        # Idle workers end at once; one still in a done-callback (which must not block) is not waited for long.
        self.call_pool.join(CALL_POOL_JOIN)
        with self._early_lock:  # from here on adopt_task() ends a handle rather than keeping it
            self._closed = True
        for feed in self.tasks.drain():  # their readers stop waiting: no status can come any more
            feed.ended()
