"""One request in flight as a :class:`concurrent.futures.Future`: :class:`Call`, and its time budget.

A call may take several wire rounds (a re-issue, an ``input_required`` retry, a re-listing):
``request_id`` is the id of the round on the wire now, which :meth:`Call.cancel` cancels.
The expiry timer runs on the process-wide scheduler thread, never on the call pool, so a
done-callback that blocks a pool worker cannot hold a timeout back.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

from .._protocol._errors import RequestTimeout
from .._runtime._host_pool import WorkerPool
from .._util._scheduler import TimerHandle, call_later

logger = logging.getLogger("exmcp_actors")

#: ``cancel_wire(request_id, reason)``: drop the pending entry and tell the server.
CancelWire = Callable[[Any, str], None]

#: Seconds past a call's deadline its blocking wait checks the deadline itself: its timer
#: normally settles it first.
WAIT_BACKSTOP = 0.5


class Budget:
    """When a call expires: ``timeout`` after its start (or after its latest progress, with
    ``reset``), and never later than ``max_total`` after its start."""

    __slots__ = ("_since", "max_total", "reset", "start", "timeout")

    def __init__(self, timeout: float, reset: bool = False, max_total: float | None = None) -> None:
        self.timeout = timeout
        self.reset = reset
        self.max_total = max_total
        self.start = self._since = time.monotonic()

    def deadline(self) -> float:
        due = self._since + self.timeout
        if self.max_total is not None:
            due = min(due, self.start + self.max_total)
        return due

    def progressed(self) -> bool:
        """Note a progress notification; True when it moved the deadline."""
        if not self.reset:
            return False
        self._since = time.monotonic()
        return True

    def restart(self) -> None:
        """Start the whole budget again from now."""
        self.start = self._since = time.monotonic()

    def describe(self) -> str:
        if self.max_total is not None and self.deadline() >= self.start + self.max_total:
            return f"within its max_total_timeout of {self.max_total:g}s"
        if self.reset:
            return f"within {self.timeout:g}s of its last progress"
        return f"within {self.timeout:g}s"


class Call(Future[Any]):
    """A request sent to the server, settled by its outcome: what the blocking form returns or raises.

    ``cancel()`` cancels the request on the wire (``notifications/cancelled``, or on a 2026-07-28
    Streamable HTTP server the close of the request's stream) and settles the future cancelled;
    once settled it returns False and sends nothing. Done-callbacks run on the client's call
    pool (threads ``exmcp-calls-<client name>``): they must not block.
    """

    def __init__(self, method: str, pool: WorkerPool, cancel_wire: CancelWire, budget: Budget) -> None:
        super().__init__()
        self.method = method
        self._pool = pool
        self._cancel_wire = cancel_wire
        self._budget = budget
        self._claim_lock = threading.Lock()
        self._claimed = False
        self._request_id: Any = None
        self._timer: TimerHandle | None = None
        #: A blocking step (a re-listing) keeps to the deadline itself and reports its own error.
        self._step_owns_expiry = False
        #: What to run once settled (the progress feed's end), off the settling thread.
        self._cleanup: list[Callable[[], None]] = []
        #: ``input_required`` rounds answered: a result after one depends on inputs, so no
        #: cache may keep it (the spec's caching text).
        self.input_rounds = 0

    @property
    def request_id(self) -> Any:
        """The JSON-RPC id of the request on the wire now (a re-issue or retry gets a new one)."""
        return self._request_id

    def __repr__(self) -> str:
        return f"<Call {self.method} id={self._request_id!r} {self._state.lower()}>"

    # -- settling: one winner --------------------------------------------------------------

    def _claim(self) -> bool:
        """Take the right to settle; True once (the answer, an expiry, a cancel race for it)."""
        with self._claim_lock:
            if self._claimed:
                return False
            self._claimed = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        return True

    @property
    def _open(self) -> bool:
        return not self._claimed

    def _round_sent(self, request_id: Any) -> bool:
        """Record a new round's id; False when the call was settled meanwhile (the caller
        cancels the round it just sent)."""
        with self._claim_lock:
            self._request_id = request_id
            return not self._claimed

    def _finish(self, value: Any = None, error: BaseException | None = None) -> bool:
        if not self._claim():
            return False
        try:
            if error is None:
                self.set_result(value)
            else:
                self.set_exception(error)
        except InvalidStateError:  # only the claimant settles; a host's set_result would land here
            return False
        return True

    def cancel(self) -> bool:
        """Cancel the request on the wire and settle cancelled; False when already settled."""
        return self._abandon("cancelled", None)

    def _abandon(self, reason: str, error: BaseException | None) -> bool:
        if not self._claim():
            return False
        self._cancel_quietly(self._request_id, reason)
        if error is None:
            return super().cancel()
        try:
            self.set_exception(error)
        except InvalidStateError:
            return False
        return True

    def _cancel_quietly(self, request_id: Any, reason: str) -> None:
        """A cancel on the wire that never raises: a timeout's or a cancel's own send failing
        (the client stopped meanwhile) must not hide the outcome the host gets."""
        if request_id is None:
            return
        try:
            self._cancel_wire(request_id, reason)
        except Exception as failed:  # reported, never raised to the host
            logger.info("cancelling request %r (%s) failed: %r", request_id, reason, failed)

    # -- the budget -------------------------------------------------------------------------

    def _arm(self) -> None:
        with self._claim_lock:
            if self._claimed:
                return
            old, self._timer = self._timer, call_later(max(0.0, self._budget.deadline() - time.monotonic()), self._due)
        if old is not None:
            old.cancel()

    def _wait_bound(self) -> float | None:
        """Seconds a blocking wait waits before it checks the deadline itself (see ``_wait``)."""
        deadline = self._budget.deadline()
        return None if math.isinf(deadline) else max(0.0, deadline - time.monotonic()) + WAIT_BACKSTOP

    def _progressed(self) -> None:
        """A progress notification of this call arrived (on the reader's thread)."""
        with self._claim_lock:
            moved = not self._claimed and self._budget.progressed()
        if moved:
            self._arm()

    def _due(self) -> None:
        """The timer fired: expire unless a progress moved the deadline meanwhile (a newer
        timer is armed then) or the call settled."""
        with self._claim_lock:
            if self._claimed or self._step_owns_expiry or time.monotonic() < self._budget.deadline() - 0.001:
                return
        self._abandon("timeout", RequestTimeout(f"{self.method} got no answer {self._budget.describe()}"))

    def _own_expiry(self, owned: bool) -> None:
        """While ``owned``, the timer leaves the expiry to the step running; after, it is re-armed."""
        self._step_owns_expiry = owned
        if not owned:
            self._arm()

    def _remaining(self) -> float:
        return max(self._budget.deadline() - time.monotonic(), 0.001)

    # -- callbacks run on the call pool ------------------------------------------------------

    def _invoke_callbacks(self) -> None:
        cleanup, self._cleanup = self._cleanup, []
        if not cleanup and not self._done_callbacks:  # type: ignore[attr-defined]
            return  # final once settled (a callback added later runs at once): no pool hop
        if not self._pool.submit(lambda: self._run_callbacks(cleanup)):
            self._run_callbacks(cleanup)  # the client closed its pool: here, rather than never

    def _run_callbacks(self, cleanup: list[Callable[[], None]]) -> None:
        for job in cleanup:
            try:
                job()
            except Exception:
                logger.exception("a call's cleanup failed")
        super()._invoke_callbacks()  # type: ignore[misc]
