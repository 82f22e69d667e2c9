"""What the session asks for, carried out: one performer per effect type (:data:`PERFORMERS`).

Every performer here is short and never blocks: a send queues a frame on the transport, a
timer is armed on the shared scheduler, a thread or an actor is started, an actor is told.
None runs code of the host. So any thread that holds the session monitor may perform them
(the rule: ``exmcp_actors._runtime``); the effects in ``PERFORMED_AFTER_THE_LOCK`` (settling a
host's future) are collected instead and performed once the monitor is let go.

After the effects of one input come its deliveries (:func:`~._lane.flush`), then the proxies
retired by it are stopped (so their last messages go first), then the delivery lane is opened
again if the client is settled.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from .._delivery._targets import Subscriber
from .._protocol import _events as ev
from .._protocol._config import SessionConfig
from .._protocol._errors import TransportError, error_term
from .._protocol._filters import NotificationFilter
from .._protocol._registry import ProxySlot as Slot
from .._protocol._session import Session
from .._protocol._state import Phase
from .._transport._base import FrameSink, Transport
from .._util._scheduler import TimerHandle, call_later
from ._host_pool import HostRuntime
from ._idle import IdleWatch
from ._lane import DeliveryLane, flush
from ._lazy_worker import LazyWorker
from ._shared import SharedState
from ._subscriber_proxy import InboxStopHook, LivenessWatcher, ProxyRef, SubscriberProxy

logger = logging.getLogger("exmcp_actors")

#: Timers kept before fired ones are forgotten (so the set stays small).
_TIMER_SWEEP = 64


@dataclass(frozen=True, slots=True)
class Config:
    transport: Transport
    connect_timeout: float
    session: SessionConfig
    #: Runs the host's handlers and callbacks (off the library's locks and actors).
    host: HostRuntime | None = None
    #: When (``time.monotonic()``) the first connect must be done: its open gets what is left.
    connect_deadline: float | None = None


class Shell:
    """The effects of one client's session, for whichever thread holds its monitor.

    It owns the transport, the connector thread, the timers, the proxies' starting and
    stopping, and the published :class:`SharedState`.
    """

    def __init__(self, config: Config, shared: SharedState, lane: DeliveryLane, name: str) -> None:
        self.config = config
        self.transport = config.transport
        self.shared = shared
        self.lane = lane
        self.name = name
        self.watcher = shared.liveness = LivenessWatcher(f"exmcp-liveness-{name}")
        #: The keepalive's watch for a silent connection (armed only with a keepalive).
        self.idle = IdleWatch(self.tell_actor)
        self.worker: LazyWorker | None = None
        self.fetch_snapshot: Callable[[NotificationFilter], Any] | None = None
        #: Why the client is stopping (a Stop effect, or a host's disconnect()).
        self.closing_reason: Any = None
        #: Set when the client begins shutting down: nothing is opened again after it.
        self.stopping = threading.Event()
        #: Held by a connector thread while it opens the transport, and by the shutdown.
        self.transport_lock = threading.Lock()
        self.connector: threading.Thread | None = None
        #: Armed on the process-wide scheduler, with the type of the event each feeds back
        #: (what ``DisarmTimers`` picks by); cancelled at shutdown.
        self.timers: dict[TimerHandle, type] = {}
        self._retiring: list[Slot] = []
        #: What the last publish() saw (see there).
        self._published: tuple[Any, ...] | None = None
        #: What the last perform() left settled (see ``_settlement``).
        self._settled: tuple[Any, ...] | None = None
        self._proxy_lock = threading.Lock()
        self._actor: pykka.ActorRef[Any] | None = None
        self._sink: Callable[[int], FrameSink] | None = None
        #: The first open's deadline, then None: a reconnect's open gets connect_timeout.
        self._first_deadline = config.connect_deadline
        #: A connector is inside ``transport.open()`` (a leaf lock, held for nothing else).
        self._opening = False
        self._opening_lock = threading.Lock()

    def attach(self, actor: pykka.ActorRef[Any], sink: Callable[[int], FrameSink]) -> None:
        """The client actor, which timers, connectors and proxies report to, and how to make
        the sink of one connection generation."""
        self._actor = actor
        self._sink = sink

    def tell_actor(self, message: Any) -> None:
        """Hand an input to the client actor's mailbox (a stopped actor takes nothing)."""
        if self._actor is None:
            return
        try:
            self._actor.tell(message)
        except pykka.ActorDeadError:
            pass

    # -- the loop the monitor runs ---------------------------------------------------------

    def perform(self, session: Session, settles: list[ev.Settle]) -> None:
        """Carry out what the session queued, in order; then deliver; then settle the lane."""
        effects = session.effects
        if not effects.todo and not effects.out and not self._retiring and self._settled_as_before(session):
            return  # most commands (a held-URI registration, a removal) queue and change nothing
        published = False
        while True:
            todo, out = session.effects.take()
            if not todo and not out:
                break
            if session.lane_generation is None:
                self.lane.open_for(None)  # nothing the reader delivers may pass what follows
            for effect in todo:
                if type(effect) in ev.PERFORMED_AFTER_THE_LOCK:
                    settles.append(effect)  # type: ignore[arg-type]
                    continue
                try:
                    PERFORMERS[type(effect)](self, session, effect)
                except Exception:  # a bug of ours: the effects after it still run
                    logger.exception("%s: internal error performing %s", self.name, type(effect).__name__)
            self.publish(session)  # before the flush: a host woken by a message sees the status behind it
            published = True
            flush(out, self.replace_proxy)
        if not published:
            self.publish(session)  # a move with no effect (a close with nothing open) is published too
        retiring, self._retiring = self._retiring, []
        for slot in retiring:  # only after the flush: their last messages go first
            slot.ref.stop(block=False)
        # Opened after, never before, the messages that settle the client (Reconnected,
        # released held notifications).
        self.lane.open_for(None if self.stopping.is_set() else session.lane_generation)
        self._settled = self._settlement(session)

    def _settlement(self, session: Session) -> tuple[Any, ...]:
        """Everything the published state and the lane's opening follow from."""
        life = session.life
        return (
            life.generation,
            life.connection.phase,
            life.negotiated,
            life.connect_error,
            session.listeners.pause,
            self.stopping.is_set(),
        )

    def _settled_as_before(self, session: Session) -> bool:
        """Whether nothing the facade reads, nor the lane's opening, changed since the last perform."""
        last = self._settled
        if last is None:
            return False
        life = session.life
        return (
            life.generation == last[0]
            and life.connection.phase is last[1]
            and life.negotiated is last[2]
            and life.connect_error is last[3]
            and session.listeners.pause is last[4]
            and self.stopping.is_set() is last[5]
        )

    def publish(self, session: Session) -> None:
        life, shared = session.life, self.shared
        # What the facade reads changes only with these: most inputs leave them alone.
        last = self._published
        if (
            last is not None
            and life.generation == last[0]
            and life.connection.phase is last[1]
            and life.negotiated is last[2]
            and life.connect_error is last[3]
        ):
            return
        self._published = (life.generation, life.connection.phase, life.negotiated, life.connect_error)
        shared.generation = life.generation
        negotiated = life.negotiated
        if negotiated is not None:
            shared.era = negotiated.era
            shared.protocol_version = negotiated.protocol_version
            shared.server_info = negotiated.server_info
            shared.server_capabilities = negotiated.capabilities
            shared.instructions = negotiated.instructions
            shared.discover_result = negotiated.raw if negotiated.era == "modern" else None
        if life.connect_error is not None:
            shared.connect_error = life.connect_error
        shared.status = life.connection.status
        # connect() waits for this: the first READY, or the end (its error is set by then).
        if not shared.ready.is_set() and (life.connection.was_ready or life.connection.phase is Phase.CLOSED):
            shared.ready.set()

    # -- proxies ---------------------------------------------------------------------------

    def start_proxy(self, subscriber: Subscriber) -> ProxyRef:
        assert self._actor is not None
        ref: ProxyRef
        if subscriber.target is None:  # a thread: its inboxes need no proxy, only the stop hook
            ref = InboxStopHook(subscriber.key, self._actor)
        else:
            adopt = self.shared.adopt_current_thread
            ref = SubscriberProxy.start(subscriber.key, subscriber.target, self._actor, adopt)
        if subscriber.watched:
            self.watcher.watch(subscriber.key, subscriber.alive, ref, subscriber.end)
        return ref

    def replace_proxy(self, slot: Slot, found: ProxyRef | None) -> ProxyRef:
        """Start a slot's proxy if the slot still has what was ``found`` there: None (not
        started yet: the registration's StartProxy, or a reader that delivers before it) or a
        proxy stopped from outside (not by its subscriber's death). Once, whichever thread
        comes first (a reader or a monitor holder); the others get the one it started."""
        with self._proxy_lock:
            if slot.ref is found:
                if found is not None:
                    logger.info("%s: proxy of %s stopped from outside; starting another", self.name, slot.key)
                slot.ref = self.start_proxy(slot.subscriber)
            return slot.ref

    # -- the performers --------------------------------------------------------------------

    def _send(self, session: Session, effect: ev.Send) -> None:
        try:
            self.transport.send(effect.message)
        except TransportError as error:
            logger.warning("%s: send failed: %s", self.name, error)
        except Exception:  # a bug of ours in a transport: its request must still fail, not hang
            logger.exception("%s: internal error sending a frame", self.name)
        else:
            return
        if effect.request_id is not None:
            session.handle(ev.SendFailed(effect.request_id))  # its effects join this loop

    def _cancel_on_wire(self, session: Session, effect: ev.CancelOnWire) -> None:
        if not self.transport.cancel_stream(effect.request_id) and effect.notice is not None:
            self._send(session, ev.Send(effect.notice))

    def _open_transport(self, session: Session, effect: ev.OpenTransport) -> None:
        timeout = self.config.connect_timeout
        if self._first_deadline is not None:
            # One deadline for the whole connect(): the open gets what is left of it.
            timeout = min(timeout, max(0.0, self._first_deadline - time.monotonic()))
            self._first_deadline = None
        self.connector = threading.Thread(
            target=self._connect_attempt,
            args=(effect.generation, effect.delay, timeout),
            name=f"exmcp-connect-{self.name}",
            daemon=True,
        )
        self.connector.start()
        self.shared.adopt(self.connector)

    def _connect_attempt(self, generation: int, delay: float, timeout: float) -> None:
        """Connector thread: close what is left of the last connection, wait, open anew within ``timeout``."""
        if delay > 0 and self.stopping.wait(delay):
            return
        assert self._sink is not None
        with self.transport_lock:
            if self.stopping.is_set():
                return
            started = None
            try:
                self.transport.close()
                with self._opening_lock:  # stopping is set before abort_open() looks here
                    if self.stopping.is_set():
                        return
                    self._opening = True
                started = time.monotonic()
                self.transport.open(self._sink(generation), timeout=timeout)
            except BaseException as error:  # report every failure: the session decides what follows
                out_of_time = started is not None and time.monotonic() - started >= timeout
                self.tell_actor(ev.OpenFailed(generation, error, out_of_time))
                return
            finally:
                with self._opening_lock:
                    self._opening = False
            if self.stopping.is_set():
                self.transport.close()
                return
        self.tell_actor(ev.Opened(generation, self.transport.reports_reading))

    def abort_open(self) -> None:
        """Once stopping is set: wake a connector blocked in ``transport.open()``, so that the
        shutdown does not wait out the open's timeout (no open starts after this)."""
        with self._opening_lock:
            opening = self._opening
        if opening:
            try:
                self.transport.abort_open()
            except Exception:  # the shutdown must go on
                logger.exception("%s: aborting the open in progress failed", self.name)

    def _arm_timer(self, session: Session, effect: ev.ArmTimer) -> None:
        if len(self.timers) >= _TIMER_SWEEP:
            self.timers = {timer: kind for timer, kind in self.timers.items() if not timer.done}
        self.timers[call_later(effect.delay, self.tell_actor, effect.event)] = type(effect.event)

    def _disarm_timers(self, session: Session, effect: ev.DisarmTimers) -> None:
        for timer in [timer for timer, kind in self.timers.items() if kind in effect.kinds]:
            timer.cancel()
            del self.timers[timer]

    def _watch_idle(self, session: Session, effect: ev.WatchIdle) -> None:
        self.idle.watch(effect.generation, None if self.stopping.is_set() else effect.seconds)

    def _to_worker(self, session: Session, effect: ev.ToWorker) -> None:
        if self.worker is not None:
            try:
                self.worker.tell(effect.message)
            except pykka.ActorDeadError:
                pass  # the worker stopped: the client is going down, and its session with it

    def _start_proxy(self, session: Session, effect: ev.StartProxy) -> None:
        self.replace_proxy(effect.slot, None)  # unless a reader started it already

    def _retire_proxy(self, session: Session, effect: ev.RetireProxy) -> None:
        self.watcher.unwatch(effect.slot.key)
        self._retiring.append(effect.slot)

    def _transport_negotiated(self, session: Session, effect: ev.TransportNegotiated) -> None:
        try:
            self.transport.server_capabilities(effect.capabilities)
            self.transport.negotiated(effect.protocol_version, effect.era)
        except Exception:
            logger.exception("%s: transport rejected the negotiated version", self.name)

    def _fetch(self, session: Session, effect: ev.FetchSnapshot) -> None:
        thread = threading.Thread(target=self._run_fetch, args=(effect,), name=f"exmcp-resync-{self.name}", daemon=True)
        thread.start()
        self.shared.adopt(thread)

    def _run_fetch(self, effect: ev.FetchSnapshot) -> None:
        """Resync thread: refetch the snapshot (host-style requests), report to the actor."""
        fetch = self.fetch_snapshot
        assert fetch is not None
        try:
            snapshot = fetch(effect.acknowledged)
        except BaseException as error:  # reported to the subscriber as ("failed", reason)
            self.tell_actor(ev.ResyncDone(effect.handle_id, effect.listen_id, None, error_term(error)))
        else:
            self.tell_actor(ev.ResyncDone(effect.handle_id, effect.listen_id, snapshot))

    def _run_host_handler(self, session: Session, effect: ev.RunHostHandler) -> None:
        assert self.config.host is not None  # the session asks only for handlers the host gave
        self.config.host.run(effect, self.tell_actor)

    def _progress(self, session: Session, effect: ev.ProgressNoted) -> None:
        if self.config.host is not None:
            self.config.host.progress(effect)

    def _task_status(self, session: Session, effect: ev.TaskStatusNoted) -> None:
        if self.config.host is not None:
            self.config.host.task_status(effect)

    def _elicitation_completed(self, session: Session, effect: ev.ElicitationCompleted) -> None:
        if self.config.host is not None:
            self.config.host.elicitation_completed(effect)

    def _stop_client(self, session: Session, effect: ev.Stop) -> None:
        self.closing_reason = effect.reason
        if self._actor is not None:
            self._actor.stop(block=False)


#: Effect type -> its performer; every effect type but those performed after the lock.
PERFORMERS: dict[type, Callable[[Shell, Session, Any], None]] = {
    ev.Send: Shell._send,
    ev.CancelOnWire: Shell._cancel_on_wire,
    ev.OpenTransport: Shell._open_transport,
    ev.ArmTimer: Shell._arm_timer,
    ev.DisarmTimers: Shell._disarm_timers,
    ev.ToWorker: Shell._to_worker,
    ev.StartProxy: Shell._start_proxy,
    ev.RetireProxy: Shell._retire_proxy,
    ev.TransportNegotiated: Shell._transport_negotiated,
    ev.FetchSnapshot: Shell._fetch,
    ev.RunHostHandler: Shell._run_host_handler,
    ev.ProgressNoted: Shell._progress,
    ev.TaskStatusNoted: Shell._task_status,
    ev.ElicitationCompleted: Shell._elicitation_completed,
    ev.Stop: Shell._stop_client,
    ev.WatchIdle: Shell._watch_idle,
}
