"""The client actor: one per connection, a thin shell around the sans-IO session.

It turns what happens into inputs of :class:`~._protocol._session.Session`
(frames and losses from the transport's reader thread, host commands, timers,
the refcount worker's reports, proxies stopping) and performs the effects the
session returns: sends, timers, opening the transport on a connector thread,
completing host futures, telling the worker, starting and retiring subscriber
proxies, then delivering the queued messages.

It never blocks on I/O: frames arrive as batches (one actor message per batch),
sends are queued on the transport's writer, opening and closing a transport
happens on a short-lived connector thread, and a modern resync's snapshot is
fetched on a short-lived resync thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pykka

from .._protocol import _events as ev
from .._protocol._config import SessionConfig
from .._protocol._errors import error_term
from .._protocol._filters import NotificationFilter
from .._protocol._index import ListenerIndex
from .._protocol._jsonrpc import Frame, RequestBuilder
from .._protocol._session import Session
from .._protocol._state import Phase
from .._transport._base import Transport
from .._util._scheduler import TimerHandle, call_later
from ._host_pool import HostRuntime
from ._lane import DeliveryLane, flush
from ._monitor import SessionDoor, settle
from ._subscriber_proxy import CUT, FINAL_ONLY, LivenessWatcher, Subscriber, SubscriberDown, SubscriberProxy, cut

logger = logging.getLogger("exmcp_actors")


@dataclass
class SharedState:
    """Written only by the actor; read by the facade from any thread."""

    status: str = "connecting"
    era: str | None = None
    protocol_version: str | None = None
    server_info: dict[str, Any] = field(default_factory=dict)
    server_capabilities: dict[str, Any] = field(default_factory=dict)
    instructions: str | None = None
    generation: int = 0
    ready: threading.Event = field(default_factory=threading.Event)
    connect_error: BaseException | None = None
    #: Set when the client actor has finished shutting down (pykka's actor_stopped comes earlier).
    finished: threading.Event = field(default_factory=threading.Event)
    #: Threads the client started, so disconnect() can wait for all of them.
    children: list[threading.Thread] = field(default_factory=list)
    children_lock: threading.Lock = field(default_factory=threading.Lock)
    #: The handles a host's disconnect() closed: nothing new reaches them once it returns.
    disconnected_handles: list[Any] = field(default_factory=list)
    #: Where host threads run the inputs that need no actor (set by the actor; see ``_door``).
    door: SessionDoor | None = None

    def adopt(self, thread: threading.Thread) -> None:
        """Remember a thread (forgetting finished ones) so disconnect() can join it."""
        with self.children_lock:
            self.children[:] = [t for t in self.children if t.is_alive()]
            self.children.append(thread)

    def adopt_current_thread(self) -> None:
        self.adopt(threading.current_thread())


@dataclass(frozen=True, slots=True)
class Config:
    transport: Transport
    connect_timeout: float
    session: SessionConfig
    #: Runs the host's handlers and callbacks (off the actor).
    host: HostRuntime | None = None


# -- messages only the shell handles -------------------------------------------------------


class Start(NamedTuple):
    """Begin: the worker is running; open the first connection."""

    worker: pykka.ActorRef[Any]
    #: ``fetch(acknowledged_filter) -> snapshot``; blocking, run on a resync thread.
    snapshot_fetcher: Callable[[NotificationFilter], Any]


class Disconnect(NamedTuple):
    """The host disconnects: every handle is closed with ``"disconnected"``."""


class InspectClient(NamedTuple):
    """Internal counters, for tests and diagnostics (ask)."""


class ConnectionSink:
    """The FrameSink of one connection: tags what it reads with the connection's generation,
    and delivers what it may through the lane (see ``_lane``)."""

    __slots__ = ("_generation", "_lane", "_tell")

    def __init__(self, actor_ref: pykka.ActorRef[Any], generation: int, lane: DeliveryLane) -> None:
        self._tell = actor_ref.tell
        self._generation = generation
        self._lane = lane

    def frames_received(self, frames: list[Frame]) -> None:
        try:
            self._lane.take(self._generation, frames, self._forward)
        except pykka.ActorDeadError:
            pass

    def _forward(self, frames: list[Frame]) -> None:
        self._tell(ev.Frames(self._generation, frames))

    def transport_lost(self, reason: str) -> None:
        try:
            self._tell(ev.Lost(self._generation, reason))
        except pykka.ActorDeadError:
            pass


class ClientActor(pykka.ThreadingActor):
    """Owns one MCP connection. See the module docstring."""

    use_daemon_thread = True

    def __init__(self, config: Config, shared: SharedState, ids: RequestBuilder, name: str) -> None:
        super().__init__()
        self.config = config
        self.transport = config.transport
        self.shared = shared
        self.name = name
        #: Readers deliver plain notifications through it; the session changes the index under its lock.
        self.lane = DeliveryLane(ListenerIndex())
        self.session = Session(config.session, ids, self.lane, name)
        #: Every input runs under its lock; host and reader threads run a few themselves.
        self.door = shared.door = SessionDoor(self.session, self.transport)
        self.lane.answer = self.door.answer
        self.watcher = LivenessWatcher(f"exmcp-liveness-{name}")
        self.worker: pykka.ActorRef[Any] | None = None
        self.fetch_snapshot: Callable[[NotificationFilter], Any] | None = None
        self.retiring: list[Any] = []
        self.closing_reason: Any = None
        self.stopping = threading.Event()
        self.transport_lock = threading.Lock()
        self.connector: threading.Thread | None = None
        #: Armed on the process-wide scheduler; cancelled at shutdown.
        self.timers: set[TimerHandle] = set()

    # -- inputs ----------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        handler = self._handlers.get(type(message), ClientActor._to_session)
        with self.door.lock:
            try:
                return handler(self, message)
            finally:
                self._perform()

    def _to_session(self, message: Any) -> Any:
        if not self.session.accepts(message):
            logger.warning("%s: unexpected actor message %r", self.name, message)
            return None
        return self.session.handle(message)

    def _on_start(self, message: Start) -> None:
        self.worker = message.worker
        self.fetch_snapshot = message.snapshot_fetcher
        self.session.start()

    def _on_frames(self, message: ev.Frames) -> None:
        try:
            self._handle_frames(message)
        finally:
            self.lane.handled()  # after the flush: the reader may deliver again

    def _handle_frames(self, message: ev.Frames) -> None:
        """Handle a batch (the session skips frames of an older connection), then deliver."""
        try:
            self.session.handle(message)
        finally:
            self._perform()

    def _on_subscriber_down(self, message: SubscriberDown) -> None:
        slot = self.session.registry.slots.get(message.key)
        if slot is None or slot.ref.actor_urn != message.proxy_urn:
            return
        if not message.died:
            # Someone else stopped the proxy (ActorRegistry.stop_all, say), not its subscriber's
            # death: the subscriber still needs one, at least to receive its closing messages.
            logger.info("%s: subscriber proxy %s was stopped from outside; starting a new one", self.name, slot.key)
            slot.ref = self._start_proxy(slot.subscriber)
            return
        self.watcher.unwatch(message.key)
        entries = self.session.registry.entries
        handles = [entries[i].handle for i in slot.handle_ids if i in entries]
        self.session.handle(ev.SubscriberDied(message.key))
        self._perform()
        for handle in handles:  # after the flush: what reached an inbox before stays readable
            cut(handle, CUT)
            handle._finish()

    def _on_disconnect(self, message: Disconnect) -> None:
        self.closing_reason = "disconnected"
        # The backlog queued for slow subscribers is dropped; their closing message still goes.
        handles = [entry.handle for entry in self.session.registry.entries.values()]
        for handle in handles:
            cut(handle, FINAL_ONLY)
        self.shared.disconnected_handles = handles
        self._to_worker(ev.ToWorker(ev.Reset()))  # disconnect sends no unsubscribe
        self.actor_ref.stop(block=False)

    def _on_inspect(self, message: InspectClient) -> dict[str, Any]:
        return self.session.inspect()

    _handlers: dict[type, Callable[[ClientActor, Any], Any]] = {
        Start: _on_start,
        ev.Frames: _on_frames,
        SubscriberDown: _on_subscriber_down,
        Disconnect: _on_disconnect,
        InspectClient: _on_inspect,
    }

    # -- effects ---------------------------------------------------------------------------

    def _perform(self) -> None:
        """Carry out what the session asked for, in order; then deliver; then settle the lane."""
        session = self.session
        published = False
        while True:
            todo, out = session.effects.take()
            if not todo and not out:
                break
            if session.lane_generation is None:
                self.lane.open_for(None)  # nothing the reader delivers may pass what follows
            for effect in todo:
                self._effects[type(effect)](self, effect)
            self._publish()  # before the flush: a host woken by a message sees the status behind it
            published = True
            flush(out)
        if not published:
            self._publish()  # a move with no effect (a close with nothing open) is published too
        retiring, self.retiring = self.retiring, []
        for slot in retiring:  # only after the flush: their last messages go first
            slot.ref.stop(block=False)
        # Opened after, never before, the messages that settle the client (Reconnected,
        # released held notifications).
        self.lane.open_for(None if self.stopping.is_set() else session.lane_generation)

    def _publish(self) -> None:
        life, shared = self.session.life, self.shared
        shared.generation = life.generation
        negotiated = life.negotiated
        if negotiated is not None:
            shared.era = negotiated.era
            shared.protocol_version = negotiated.protocol_version
            shared.server_info = negotiated.server_info
            shared.server_capabilities = negotiated.capabilities
            shared.instructions = negotiated.instructions
        if life.connect_error is not None:
            shared.connect_error = life.connect_error
        shared.status = life.connection.status
        # connect() waits for this: the first READY, or the end (its error is set by then).
        if not shared.ready.is_set() and (life.connection.was_ready or life.connection.phase is Phase.CLOSED):
            shared.ready.set()

    def _send(self, effect: ev.Send) -> None:
        self.door.send(effect)

    def _cancel_on_wire(self, effect: ev.CancelOnWire) -> None:
        if not self.transport.cancel_stream(effect.request_id):
            self._send(ev.Send(effect.notice))

    def _open_transport(self, effect: ev.OpenTransport) -> None:
        self.connector = threading.Thread(
            target=self._connect_attempt,
            args=(effect.generation, effect.delay),
            name=f"exmcp-connect-{self.name}",
            daemon=True,
        )
        self.connector.start()
        self.shared.adopt(self.connector)

    def _connect_attempt(self, generation: int, delay: float) -> None:
        """Connector thread: close what is left of the last connection, wait, open anew."""
        if delay > 0 and self.stopping.wait(delay):
            return
        with self.transport_lock:
            if self.stopping.is_set():
                return
            try:
                self.transport.close()
                sink = ConnectionSink(self.actor_ref, generation, self.lane)
                self.transport.open(sink, timeout=self.config.connect_timeout)
            except BaseException as error:  # report every failure: the session decides what follows
                self._tell_self(ev.OpenFailed(generation, error))
                return
            if self.stopping.is_set():
                self.transport.close()
                return
        self._tell_self(ev.Opened(generation))

    def _tell_self(self, message: Any) -> None:
        try:
            self.actor_ref.tell(message)
        except pykka.ActorDeadError:
            pass

    def _arm_timer(self, effect: ev.ArmTimer) -> None:
        # On the shared scheduler thread, not a thread per timer (issue 14).
        if len(self.timers) >= 64:  # forget fired ones now and then, so the set stays small
            self.timers = {t for t in self.timers if not t.done}
        self.timers.add(call_later(effect.delay, self._tell_self, effect.event))

    def _settle(self, effect: ev.Settle) -> None:
        settle(effect)

    def _to_worker(self, effect: ev.ToWorker) -> None:
        if self.worker is not None:
            try:
                self.worker.tell(effect.message)
            except pykka.ActorDeadError:
                pass  # the worker stopped: the client is going down, and its session with it

    def _start_proxy(self, subscriber: Subscriber) -> pykka.ActorRef[Any]:
        ref = SubscriberProxy.start(subscriber.key, subscriber.target, self.actor_ref, self.shared.adopt_current_thread)
        if subscriber.watched:
            self.watcher.watch(subscriber.key, subscriber.alive, ref)
        return ref

    def _on_start_proxy(self, effect: ev.StartProxy) -> None:
        effect.slot.ref = self._start_proxy(effect.slot.subscriber)

    def _retire_proxy(self, effect: ev.RetireProxy) -> None:
        self.watcher.unwatch(effect.slot.key)
        self.retiring.append(effect.slot)

    def _transport_negotiated(self, effect: ev.TransportNegotiated) -> None:
        try:
            self.transport.negotiated(effect.protocol_version, effect.era)
        except Exception:
            logger.exception("%s: transport rejected the negotiated version", self.name)

    def _fetch(self, effect: ev.FetchSnapshot) -> None:
        thread = threading.Thread(target=self._run_fetch, args=(effect,), name=f"exmcp-resync-{self.name}", daemon=True)
        thread.start()
        self.shared.adopt(thread)

    def _run_fetch(self, effect: ev.FetchSnapshot) -> None:
        fetch = self.fetch_snapshot
        assert fetch is not None
        try:
            snapshot = fetch(effect.acknowledged)
        except BaseException as error:  # reported to the subscriber as ("failed", reason)
            self._tell_self(ev.ResyncDone(effect.handle_id, effect.listen_id, None, error_term(error)))
        else:
            self._tell_self(ev.ResyncDone(effect.handle_id, effect.listen_id, snapshot))

    def _run_host_handler(self, effect: ev.RunHostHandler) -> None:
        assert self.config.host is not None  # the session asks only for handlers the host gave
        self.config.host.run(effect, self._tell_self)

    def _progress(self, effect: ev.ProgressNoted) -> None:
        if self.config.host is not None:
            self.config.host.progress(effect)

    def _task_status(self, effect: ev.TaskStatusNoted) -> None:
        if self.config.host is not None:
            self.config.host.task_status(effect)

    def _stop_client(self, effect: ev.Stop) -> None:
        self.closing_reason = effect.reason
        self.actor_ref.stop(block=False)

    _effects: dict[type, Callable[[ClientActor, Any], None]] = {
        ev.Send: _send,
        ev.CancelOnWire: _cancel_on_wire,
        ev.OpenTransport: _open_transport,
        ev.ArmTimer: _arm_timer,
        ev.Settle: _settle,
        ev.ToWorker: _to_worker,
        ev.StartProxy: _on_start_proxy,
        ev.RetireProxy: _retire_proxy,
        ev.TransportNegotiated: _transport_negotiated,
        ev.FetchSnapshot: _fetch,
        ev.RunHostHandler: _run_host_handler,
        ev.ProgressNoted: _progress,
        ev.TaskStatusNoted: _task_status,
        ev.Stop: _stop_client,
    }

    # -- lifecycle -------------------------------------------------------------------------

    def on_start(self) -> None:
        self.shared.adopt_current_thread()

    def on_stop(self) -> None:
        reason = self.closing_reason if self.closing_reason is not None else ("shutdown", "normal")
        try:
            self._shutdown(reason)
        finally:
            self.shared.finished.set()

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        logger.error("%s: client actor failed: %r", self.name, exception_value)
        try:
            self._shutdown(("crashed", repr(exception_value)))
        finally:
            self.shared.finished.set()

    def _shutdown(self, reason: Any) -> None:
        """Close every handle with ``reason``, fail pending work, release every resource."""
        self.stopping.set()
        self.lane.open_for(None)  # the closing messages come after anything a reader delivers
        with self.door.lock:
            self.session.close(reason)
            self._perform()
        for timer in list(self.timers):
            timer.cancel()
        self.watcher.close()
        if self.config.host is not None:
            self.config.host.close()
        if self.worker is not None:
            self.worker.stop(block=False)
        connector = self.connector
        if connector is not None and connector is not threading.current_thread():
            connector.join(self.config.connect_timeout + 1.0)
        if self.transport_lock.acquire(timeout=self.config.connect_timeout + 1.0):
            try:
                self.transport.close()
            except Exception:  # closing must not stop the shutdown
                logger.exception("%s: closing the transport failed", self.name)
            finally:
                self.transport_lock.release()
