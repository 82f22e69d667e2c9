"""The client actor: one per connection. It owns the era, the pending requests,
the listener and subscription index, and the reconnect state.

It never blocks on I/O: frames arrive from the transport's reader thread as
batches (one actor message per batch), sends are queued on the transport's
writer, and opening or closing a transport happens on a short-lived
connector thread. Blocking work for listeners (``resources/subscribe``)
runs on the refcount worker; blocking work for modern resyncs (the snapshot)
runs on a short-lived resync thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pykka

from . import _messages as m
from ._backoff import Backoff
from ._errors import (
    ConnectError,
    ConnectionLost,
    Error,
    ListenerNotFound,
    ListenRequiresModern,
    NotConnected,
    ProtocolError,
    RequestError,
    SubscriberNotAlive,
    TransportError,
    UseListen,
)
from ._handle import Handle
from ._lane import (
    ACK_METHOD,
    DeliveryLane,
    Outbox,
    dispatch,
    flush,
    for_a_subscription,
    notification_parts,
    subscription_id_of,
)
from ._protocol import _jsonrpc as rpc
from ._protocol._filters import (
    FILTERABLE_METHODS,
    NotificationFilter,
    filter_from_wire,
)
from ._protocol._handshake import (
    META_SUBSCRIPTION_ID,
    ArmProbeTimer,
    Failed,
    Handshake,
    Negotiated,
    ProtocolMode,
    SendFrame,
    with_modern_meta,
)
from ._protocol._index import ListenerIndex
from ._refcount import Release, Reset, Resubscribe, ResubscribeReport, error_term
from ._subscriber import (
    LivenessWatcher,
    Subscriber,
    SubscriberDown,
    SubscriberProxy,
)
from ._transport._base import STREAM_DROPPED, Frame, Transport

logger = logging.getLogger("exmcp_actors")
_new_tuple = tuple.__new__

#: Events held for a modern subscription that is not live yet (before its ack, during a resync).
MAX_HELD_EVENTS = 10_000


# -- the state the facade reads without asking the actor ----------------------------------


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
    mode: ProtocolMode
    reconnect: bool
    max_reconnect_attempts: int
    backoff: Backoff
    connect_timeout: float
    probe_timeout: float
    client_info: dict[str, Any]


# -- actor messages ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    worker: pykka.ActorRef[Any]
    #: ``fetch(acknowledged_filter) -> snapshot``; blocking, run on a resync thread.
    snapshot_fetcher: Callable[[NotificationFilter], Any]


@dataclass(frozen=True, slots=True)
class Opened:
    generation: int


@dataclass(frozen=True, slots=True)
class OpenFailed:
    generation: int
    error: BaseException


@dataclass(frozen=True, slots=True)
class Frames:
    generation: int
    frames: list[Frame]


@dataclass(frozen=True, slots=True)
class Lost:
    generation: int
    reason: str


@dataclass(frozen=True, slots=True)
class ProbeTimeout:
    generation: int
    request_id: Any


@dataclass(frozen=True, slots=True)
class SendRequest:
    request_id: Any
    method: str
    params: dict[str, Any] | None
    future: Future[Any]


@dataclass(frozen=True, slots=True)
class CancelRequest:
    request_id: Any
    reason: str


@dataclass(frozen=True, slots=True)
class RegisterListener:
    handle: Handle
    kind: str
    flt: NotificationFilter
    subscriber: Subscriber


@dataclass(frozen=True, slots=True)
class ActivateListener:
    listener_id: Any


@dataclass(frozen=True, slots=True)
class AbandonListener:
    listener_id: Any


@dataclass(frozen=True, slots=True)
class RemoveHandle:
    handle_id: Any


@dataclass(frozen=True, slots=True)
class OpenSubscription:
    handle: Handle
    kind: str
    flt: NotificationFilter
    subscriber: Subscriber
    acknowledged: Future[NotificationFilter]


@dataclass(frozen=True, slots=True)
class CancelSubscription:
    handle_id: Any
    reason: Any


@dataclass(frozen=True, slots=True)
class ResyncDone:
    handle_id: Any
    listen_id: Any
    snapshot: Any
    error: Any = None


@dataclass(frozen=True, slots=True)
class Relisten:
    handle_id: Any
    generation: int


@dataclass(frozen=True, slots=True)
class Disconnect:
    pass


@dataclass(frozen=True, slots=True)
class InspectClient:
    pass


# -- bookkeeping ---------------------------------------------------------------------------


@dataclass(eq=False)
class ProxyEntry:
    """One subscriber's proxy actor and the handles it serves."""

    key: Any
    ref: pykka.ActorRef[Any]
    subscriber: Subscriber
    handle_ids: set[Any] = field(default_factory=set)


@dataclass(eq=False)
class Entry:
    """One listener, subscription or watch as the actor sees it."""

    handle: Handle
    kind: str  # "listener" | "subscription" | "watch"
    era: str  # "legacy" | "modern"
    requested: NotificationFilter
    proxy: ProxyEntry
    #: Where its messages go: its own Inbox, or its subscriber's ProxyEntry.
    route: Any
    state: str
    # modern only
    listen_id: Any = None
    acknowledged: NotificationFilter | None = None
    ack_future: Future[NotificationFilter] | None = None
    held: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    relisten_attempts: int = 0

    # Message construction: subscriptions speak their own vocabulary; listeners and
    # watches speak the legacy one, whatever the era, so watch() never branches.
    def event(self, method: str, params: dict[str, Any]) -> Any:
        # tuple.__new__ skips the NamedTuple's Python-level __new__: this runs per delivery.
        if self.kind == "subscription":
            return _new_tuple(m.SubscriptionEvent, (m.SUBSCRIPTION, self.handle, method, params))
        return _new_tuple(m.Notification, (m.NOTIFICATION, self.handle, method, params))

    def closed(self, reason: Any) -> Any:
        if self.kind == "subscription":
            return m.SubscriptionClosed(m.SUBSCRIPTION_CLOSED, self.handle, reason)
        return m.Closed(m.CLOSED, self.handle, reason)


@dataclass(eq=False)
class Pending:
    """An in-flight request: a host future, or an internal callback."""

    method: str
    future: Future[Any] | None = None
    callback: Callable[[rpc.Response | rpc.ErrorResponse], None] | None = None


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
        self._tell(Frames(self._generation, frames))

    def transport_lost(self, reason: str) -> None:
        try:
            self._tell(Lost(self._generation, reason))
        except pykka.ActorDeadError:
            pass


def _fail(future: Future[Any] | None, error: BaseException) -> None:
    if future is not None and not future.done():
        future.set_exception(error)


class ClientActor(pykka.ThreadingActor):
    """Owns one MCP connection. See the module docstring."""

    use_daemon_thread = True

    def __init__(self, config: Config, shared: SharedState, ids: rpc.RequestBuilder, name: str) -> None:
        super().__init__()
        self.config = config
        self.shared = shared
        self.ids = ids
        self.name = name
        self.worker: pykka.ActorRef[Any] | None = None
        self.handshake: Handshake | None = None
        self.pending: dict[Any, Pending] = {}
        self.entries: dict[Any, Entry] = {}
        self.index: ListenerIndex[Entry] = ListenerIndex()
        #: Readers deliver plain notifications through it; the index changes only under its lock.
        self.lane = DeliveryLane(self.index)
        self.by_listen_id: dict[Any, Entry] = {}
        self.proxies: dict[Any, ProxyEntry] = {}
        self.retiring: list[ProxyEntry] = []
        self.watcher = LivenessWatcher(f"exmcp-liveness-{name}", shared.adopt)
        self.generation = 0
        self.connected_once = False
        self.attempts = 0
        self.last_error: Any = None
        # Legacy reconnect: delivery pauses from the loss until the Reconnected messages.
        self.paused = False
        self.held: list[tuple[str, dict[str, Any]]] = []
        self.loss_snapshot: dict[Any, None] = {}
        self.closing_reason: Any = None
        self.stopping = threading.Event()
        self.transport_lock = threading.Lock()
        self.connector: threading.Thread | None = None
        self.timers: set[threading.Timer] = set()
        self._snapshot_fetcher: Callable[[NotificationFilter], Any] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        handler = self._handlers.get(type(message))
        if handler is None:
            logger.warning("%s: unexpected actor message %r", self.name, message)
            return None
        try:
            return handler(self, message)
        finally:
            self._retire_proxies()
            self._sync_lane()

    def _sync_lane(self) -> None:
        """Open the lane to the reader when the client is settled; shut it otherwise.

        Called after each handler has flushed, so the lane opens after, never before, the
        messages that settle the client (Reconnected, released held notifications)."""
        settled = (
            self.shared.status == "ready"
            and self.shared.era == "legacy"
            and not self.paused
            and not self.stopping.is_set()
        )
        self.lane.open_for(self.generation if settled else None)

    def _retire_proxies(self) -> None:
        """Stop idle proxies only after the handler flushed: their last messages go first."""
        retiring, self.retiring = self.retiring, []
        for proxy in retiring:
            proxy.ref.stop(block=False)

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
        if self.shared.status != "disconnected":
            self.shared.status = "disconnected"
        if self.shared.connect_error is None and not self.shared.ready.is_set():
            self.shared.connect_error = ConnectError(f"the client stopped while connecting: {reason!r}")
        self.shared.ready.set()
        self._fail_pending(NotConnected("the client stopped"))
        out: Outbox = {}
        for entry in list(self.entries.values()):
            self._close_entry(entry, reason, out, release=False)
        flush(out)
        for timer in list(self.timers):
            timer.cancel()
        for proxy in list(self.proxies.values()):
            self._stop_proxy(proxy)
        self._retire_proxies()
        self.watcher.close()
        if self.worker is not None:
            self.worker.stop(block=False)
        connector = self.connector
        if connector is not None and connector is not threading.current_thread():
            connector.join(self.config.connect_timeout + 1.0)
        self._close_transport()

    def _close_transport(self) -> None:
        if self.transport_lock.acquire(timeout=self.config.connect_timeout + 1.0):
            try:
                self.config.transport.close()
            except Exception:  # closing must not stop the shutdown
                logger.exception("%s: closing the transport failed", self.name)
            finally:
                self.transport_lock.release()

    def _on_start(self, message: Start) -> None:
        self.worker = message.worker
        self._snapshot_fetcher = message.snapshot_fetcher
        self._start_connector(delay=0.0)

    def _start_connector(self, delay: float) -> None:
        self.generation += 1
        self.shared.generation = self.generation
        generation = self.generation
        self.connector = threading.Thread(
            target=self._connect_attempt, args=(generation, delay), name=f"exmcp-connect-{self.name}", daemon=True
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
            transport = self.config.transport
            try:
                transport.close()
                sink = ConnectionSink(self.actor_ref, generation, self.lane)
                transport.open(sink, timeout=self.config.connect_timeout)
            except BaseException as error:  # report every failure: the actor decides what follows
                self._tell_self(OpenFailed(generation, error))
                return
            if self.stopping.is_set():
                transport.close()
                return
        self._tell_self(Opened(generation))

    def _tell_self(self, message: Any) -> None:
        try:
            self.actor_ref.tell(message)
        except pykka.ActorDeadError:
            pass

    def _on_opened(self, message: Opened) -> None:
        if message.generation != self.generation:
            return
        self.handshake = Handshake(self.config.mode, self.config.client_info, self.ids)
        self._run_handshake(self.handshake.start())

    def _on_open_failed(self, message: OpenFailed) -> None:
        if message.generation != self.generation:
            return
        self._attempt_failed(message.error)

    def _attempt_failed(self, error: BaseException | Any) -> None:
        # What the host sees in ("reconnect_exhausted", last_error): the error's own words.
        self.last_error = str(error) if isinstance(error, BaseException) else error
        if not self.connected_once:
            # The first connect fails fast: connect() reports it to the caller.
            self.shared.connect_error = (
                error if isinstance(error, ConnectError) else ConnectError(f"could not connect: {error}")
            )
            self.closing_reason = ("transport_closed", self.last_error)
            self.actor_ref.stop(block=False)
            return
        self.attempts += 1
        if self.attempts >= self.config.max_reconnect_attempts:
            logger.warning("%s: giving up after %d reconnect attempts: %s", self.name, self.attempts, error)
            self.closing_reason = ("reconnect_exhausted", self.last_error)
            self.actor_ref.stop(block=False)
            return
        delay = self.config.backoff.delay(self.attempts + 1)
        logger.info("%s: reconnect attempt %d failed (%s); next in %.2fs", self.name, self.attempts, error, delay)
        self._start_connector(delay)

    # -- the handshake ---------------------------------------------------------------------

    def _run_handshake(self, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, SendFrame):
                if action.request_id is not None:
                    self.pending[action.request_id] = Pending(action.message["method"], callback=self._handshake_answer)
                if not self._send(action.message):
                    return
            elif isinstance(action, ArmProbeTimer):
                self._arm_timer(self.config.probe_timeout, ProbeTimeout(self.generation, action.request_id))
            elif isinstance(action, Negotiated):
                self._negotiated(action)
            elif isinstance(action, Failed):
                self._handshake_failed(action.error)

    def _handshake_answer(self, answer: rpc.Response | rpc.ErrorResponse) -> None:
        if self.handshake is not None:
            self._run_handshake(self.handshake.on_answer(answer))

    def _on_probe_timeout(self, message: ProbeTimeout) -> None:
        if (
            message.generation != self.generation
            or self.handshake is None
            or not self.handshake.owns(message.request_id)
        ):
            return
        logger.info(
            "%s: no answer to server/discover in %.1fs; trying initialize", self.name, self.config.probe_timeout
        )
        self.pending.pop(message.request_id, None)
        self._run_handshake(self.handshake.probe_timed_out(message.request_id))

    def _arm_timer(self, delay: float, message: Any) -> None:
        timer = threading.Timer(delay, self._timer_fired, args=(message,))
        timer.daemon = True
        timer.name = f"exmcp-timer-{self.name}"
        self.timers.add(timer)
        timer.start()
        self.shared.adopt(timer)

    def _timer_fired(self, message: Any) -> None:
        self.timers.discard(threading.current_thread())
        self._tell_self(message)

    def _handshake_failed(self, error: ConnectError) -> None:
        logger.warning("%s: handshake failed: %s", self.name, error)
        self._drop_connection()
        self._attempt_failed(error)

    def _drop_connection(self) -> None:
        """Forget the current connection: its late frames and answers are ignored from now on,
        by this actor and by the delivery lane alike."""
        self.lane.open_for(None)
        self.generation += 1
        self.shared.generation = self.generation
        self._fail_pending(ConnectionLost("the connection was lost"))

    def _negotiated(self, result: Negotiated) -> None:
        previous_era = self.shared.era
        self.shared.era = result.era
        self.shared.protocol_version = result.protocol_version
        self.shared.server_info = result.server_info
        self.shared.server_capabilities = result.capabilities
        self.shared.instructions = result.instructions
        self.attempts = 0
        try:
            self.config.transport.negotiated(result.protocol_version, result.era)
        except Exception:
            logger.exception("%s: transport rejected the negotiated version", self.name)
        first = not self.connected_once
        self.connected_once = True
        self.shared.status = "ready"
        logger.info("%s: ready, MCP %s (%s era)", self.name, result.protocol_version, result.era)
        if first:
            self.shared.ready.set()
            return
        out: Outbox = {}
        if previous_era != result.era:
            self._era_changed(result.era, out)
        if result.era == "legacy":
            assert self.worker is not None
            self.worker.tell(Resubscribe(self.generation))
        else:
            self._resume_after_legacy_pause(out)
            for entry in list(self.entries.values()):
                if entry.era == "modern" and entry.state == "relistening" and entry.listen_id is None:
                    self._send_listen(entry)
        flush(out)

    def _era_changed(self, era: str, out: Outbox) -> None:
        logger.warning("%s: the peer now speaks the %s era", self.name, era)
        if era == "modern" and self.worker is not None:
            # The legacy session and its subscriptions are gone with the old connection.
            self.worker.tell(Reset())
        for entry in list(self.entries.values()):
            if entry.era == era:
                continue
            if entry.kind == "watch" and era == "modern":
                self._convert_watch_to_modern(entry)
                continue
            self._close_entry(entry, ("era_changed", era), out, release=False)

    # -- transport events ------------------------------------------------------------------

    def _on_lost(self, message: Lost) -> None:
        if message.generation != self.generation:
            return
        logger.warning("%s: transport lost: %s", self.name, message.reason)
        self.last_error = message.reason
        self._drop_connection()
        if not self.connected_once:
            self._attempt_failed(ConnectError(f"the connection closed during the handshake: {message.reason}"))
            return
        out: Outbox = {}
        if not self.config.reconnect:
            self.closing_reason = ("transport_closed", message.reason)
            self.actor_ref.stop(block=False)
            return
        if self.shared.status == "reconnecting":
            # The attempt opened but was lost before it was ready: it counts as a failed attempt.
            self._attempt_failed(ConnectError(f"the connection closed during the handshake: {message.reason}"))
            return
        self.shared.status = "reconnecting"
        if self.shared.era == "legacy":
            self.paused = True
            for handle_id, entry in self.entries.items():
                if entry.era == "legacy" and entry.state == "active":
                    self.loss_snapshot[handle_id] = None
        for entry in list(self.entries.values()):
            if entry.era == "modern":
                # Live, mid-snapshot or mid-re-listen alike: re-listen on the next connection.
                self._begin_resync(entry, out)
        flush(out)
        self.attempts = 0
        self._start_connector(self.config.backoff.delay(1))

    def _on_frames(self, message: Frames) -> None:
        try:
            if message.generation == self.generation:
                self._handle_frames(message.frames)
        finally:
            self.lane.handled()  # after the flush: the reader may deliver again

    def _handle_frames(self, frames: list[Frame]) -> None:
        out: Outbox = {}
        on_notification, index = self._on_notification, self.index
        for frame in frames:
            try:
                parts = notification_parts(frame)
                if parts is None:
                    self._handle_frame(frame, out)
                elif self.paused or for_a_subscription(*parts):
                    on_notification(parts[0], parts[1], out)
                else:
                    dispatch(index, parts[0], parts[1], out)
            except Exception:  # one bad frame must never take the client down
                logger.exception("%s: failed to handle frame %.200r", self.name, frame)
        flush(out)

    def _handle_frame(self, frame: Frame, out: Outbox) -> None:
        msg = rpc.classify(frame)
        if isinstance(msg, rpc.Notification):
            self._on_notification(msg.method, msg.params if isinstance(msg.params, dict) else {}, out)
        elif isinstance(msg, (rpc.Response, rpc.ErrorResponse)):
            self._on_answer(msg, out)
        elif isinstance(msg, rpc.ServerRequest):
            self._on_server_request(msg)
        else:
            logger.warning("%s: skipped an invalid frame from the server: %s (%.200r)", self.name, msg.why, msg.frame)

    def _on_server_request(self, msg: rpc.ServerRequest) -> None:
        if msg.method == "ping":
            self._send(rpc.result_frame(msg.id, {}))
        else:
            logger.info("%s: server request %r is not supported; answering -32601", self.name, msg.method)
            self._send(rpc.error_frame(msg.id, rpc.METHOD_NOT_FOUND, f"Method not found: {msg.method}"))

    def _on_answer(self, msg: rpc.Response | rpc.ErrorResponse, out: Outbox) -> None:
        entry = self.by_listen_id.get(msg.id)
        if entry is not None:
            self._listen_answered(entry, msg, out)
            return
        pending = self.pending.pop(msg.id, None)
        if pending is None:
            logger.warning("%s: a response to an unknown request id %r was skipped", self.name, msg.id)
            return
        if pending.callback is not None:
            pending.callback(msg)
            return
        future = pending.future
        if future is None or future.done():
            return
        if isinstance(msg, rpc.Response):
            future.set_result(msg.result)
        elif _is_transport_failure(msg):
            # Made up by the transport (HTTP): the same exception as a drop on any other transport.
            future.set_exception(ConnectionLost(f"{pending.method}: {msg.message} ({msg.data})"))
        else:
            future.set_exception(RequestError(msg.code, msg.message, msg.data))

    def _on_notification(self, method: str, params: dict[str, Any], out: Outbox) -> None:
        if for_a_subscription(method, params):
            self._on_subscription_frame(subscription_id_of(params), method, params, out)
            return
        if self.paused:
            if method in FILTERABLE_METHODS:
                self.held.append((method, params))
            return
        dispatch(self.index, method, params, out)

    # -- requests --------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> bool:
        try:
            self.config.transport.send(message)
        except TransportError as error:
            logger.warning("%s: send failed: %s", self.name, error)
            return False
        return True

    def _on_send_request(self, message: SendRequest) -> None:
        future = message.future
        if self.shared.status != "ready":
            _fail(future, NotConnected(f"the client is {self.shared.status}"))
            return
        params = message.params
        if self.shared.era == "modern":
            params = with_modern_meta(params, self.config.client_info)
        self.pending[message.request_id] = Pending(message.method, future=future)
        if not self._send(rpc.RequestBuilder.request(message.method, params, message.request_id)):
            self.pending.pop(message.request_id, None)
            _fail(future, ConnectionLost("the transport is closed"))

    def _on_cancel_request(self, message: CancelRequest) -> None:
        pending = self.pending.pop(message.request_id, None)
        if pending is None:
            return
        self._cancel_on_wire(message.request_id, message.reason)

    def _cancel_on_wire(self, request_id: Any, reason: str) -> None:
        if self.shared.status != "ready":
            return
        if self.config.transport.cancel_stream(request_id):
            return
        params: dict[str, Any] = {"requestId": request_id, "reason": reason}
        if self.shared.era == "modern":
            params = with_modern_meta(params, self.config.client_info)
        self._send(rpc.notification("notifications/cancelled", params))

    def _fail_pending(self, error: Error) -> None:
        pending, self.pending = self.pending, {}
        for item in pending.values():
            _fail(item.future, error)

    # -- legacy listeners ------------------------------------------------------------------

    def _check_ready(self, era: str) -> None:
        if self.shared.status != "ready":
            raise NotConnected(f"the client is {self.shared.status}")
        if self.shared.era != era:
            raise UseListen() if era == "legacy" else ListenRequiresModern()

    def _proxy_for(self, subscriber: Subscriber) -> ProxyEntry:
        proxy = self.proxies.get(subscriber.key)
        if proxy is None:
            proxy = ProxyEntry(subscriber.key, self._start_proxy(subscriber), subscriber)
            self.proxies[subscriber.key] = proxy
        return proxy

    def _start_proxy(self, subscriber: Subscriber) -> pykka.ActorRef[Any]:
        ref = SubscriberProxy.start(subscriber.key, subscriber.target, self.actor_ref, self.shared.adopt_current_thread)
        if subscriber.watched:
            self.watcher.watch(subscriber.key, subscriber.alive, ref)
        return ref

    def _add_entry(
        self, handle: Handle, kind: str, era: str, flt: NotificationFilter, subscriber: Subscriber, state: str
    ) -> Entry:
        proxy = self._proxy_for(subscriber)
        route = proxy if subscriber.target is not None else handle._inbox
        entry = Entry(handle, kind, era, flt, proxy, route, state)
        self.entries[handle.id] = entry
        proxy.handle_ids.add(handle.id)
        return entry

    def _on_register_listener(self, message: RegisterListener) -> None:
        self._check_ready("legacy")
        if not message.subscriber.alive():
            raise SubscriberNotAlive()
        self._add_entry(message.handle, message.kind, "legacy", message.flt, message.subscriber, "pending")

    def _on_activate_listener(self, message: ActivateListener) -> None:
        entry = self.entries.get(message.listener_id)
        # Asked directly too: the liveness watcher polls, and may not have noticed yet.
        if entry is None or entry.state == "dead" or not entry.proxy.subscriber.alive():
            self._forget_entry(message.listener_id)
            raise SubscriberNotAlive()
        if self.shared.status != "ready":
            self._forget_entry(message.listener_id)
            raise NotConnected(f"the client is {self.shared.status}")
        entry.state = "active"
        self.lane.index_add(entry.handle.id, entry.requested, entry)

    def _on_abandon_listener(self, message: AbandonListener) -> None:
        self._forget_entry(message.listener_id)

    def _forget_entry(self, handle_id: Any) -> Entry | None:
        """Remove an entry from every table (no message, no release); stop its proxy if idle."""
        entry = self.entries.pop(handle_id, None)
        if entry is None:
            return None
        self.lane.index_remove(handle_id)
        self.loss_snapshot.pop(handle_id, None)
        if entry.listen_id is not None:
            self.by_listen_id.pop(entry.listen_id, None)
        entry.proxy.handle_ids.discard(handle_id)
        if not entry.proxy.handle_ids:
            self._stop_proxy(entry.proxy)
        return entry

    def _stop_proxy(self, proxy: ProxyEntry) -> None:
        if self.proxies.get(proxy.key) is proxy:
            del self.proxies[proxy.key]
        self.watcher.unwatch(proxy.key)
        self.retiring.append(proxy)

    def _release(self, entry: Entry) -> None:
        if entry.era == "legacy" and entry.state == "active" and entry.requested.uris and self.worker is not None:
            try:
                self.worker.tell(Release(entry.handle.id))
            except pykka.ActorDeadError:
                pass  # the worker stopped: the client is going down, and its session with it

    def _on_remove_handle(self, message: RemoveHandle) -> None:
        """Remove a handle for its host. The host, not this actor, then asks the worker to
        release its URIs, so unsubscribe returns once the wire is done and this actor never waits."""
        entry = self.entries.get(message.handle_id)
        if entry is None or entry.state in ("pending", "dead"):
            raise ListenerNotFound()
        if entry.era == "modern":
            self._cancel_subscription(entry)
        self._forget_entry(message.handle_id)

    def _on_subscriber_down(self, message: SubscriberDown) -> None:
        proxy = self.proxies.get(message.key)
        if proxy is None or proxy.ref.actor_urn != message.proxy_urn:
            return
        if not message.died:
            # Someone else stopped the proxy (ActorRegistry.stop_all, say), not its subscriber's
            # death: the subscriber still needs one, at least to receive its closing messages.
            logger.info("%s: subscriber proxy %s was stopped from outside; starting a new one", self.name, proxy.key)
            proxy.ref = self._start_proxy(proxy.subscriber)
            return
        del self.proxies[message.key]
        self.watcher.unwatch(message.key)
        for handle_id in list(proxy.handle_ids):
            entry = self.entries.get(handle_id)
            if entry is None:
                continue
            if entry.state == "pending":
                entry.state = "dead"  # its registering caller releases what it acquired
                continue
            logger.debug("%s: subscriber of %r is gone; removing it", self.name, entry.handle)
            if entry.era == "modern":
                self._cancel_subscription(entry)
            self._release(entry)
            proxy.handle_ids.discard(handle_id)
            self._forget_entry(handle_id)

    def _close_entry(self, entry: Entry, reason: Any, out: Outbox, *, release: bool) -> None:
        """Deliver the one closing message and forget the entry."""
        if release:
            self._release(entry)
        if entry.state not in ("pending", "dead", "awaiting_ack"):
            _emit(out, entry, entry.closed(reason))
        if entry.ack_future is not None:
            _fail(entry.ack_future, NotConnected(f"closed: {reason!r}"))
        self._forget_entry(entry.handle.id)

    def _on_resubscribe_report(self, report: ResubscribeReport) -> None:
        if report.generation != self.generation or self.shared.status != "ready":
            logger.debug("%s: discarding a stale resubscribe report", self.name)
            return
        out: Outbox = {}
        self._resume_after_legacy_pause(out, report)
        flush(out)

    def _resume_after_legacy_pause(self, out: Outbox, report: ResubscribeReport | None = None) -> None:
        """Tell every listener that existed at the loss, then release what was held, in order."""
        for handle_id in self.loss_snapshot:
            entry = self.entries.get(handle_id)
            if entry is None or entry.era != "legacy" or entry.state != "active":
                continue
            uris = entry.requested.uris
            resubscribed = [u for u in uris if report is not None and u in report.resubscribed]
            failed = [(u, report.failed[u]) for u in uris if report is not None and u in report.failed]
            _emit(
                out,
                entry,
                m.Reconnected(m.RECONNECTED, entry.handle, {"resubscribed": resubscribed, "failed": failed}),
            )
        self.loss_snapshot = {}
        self.paused = False
        held, self.held = self.held, []
        for method, params in held:
            dispatch(self.index, method, params, out)

    # -- modern subscriptions --------------------------------------------------------------

    def _on_open_subscription(self, message: OpenSubscription) -> None:
        self._check_ready("modern")
        if not message.subscriber.alive():
            raise SubscriberNotAlive()
        entry = self._add_entry(message.handle, message.kind, "modern", message.flt, message.subscriber, "awaiting_ack")
        entry.ack_future = message.acknowledged
        self._send_listen(entry)

    def _send_listen(self, entry: Entry) -> None:
        if entry.listen_id is not None:
            self.by_listen_id.pop(entry.listen_id, None)
        entry.listen_id = f"listen-{self.ids.next_id()}"
        entry.held = [] if entry.state == "awaiting_ack" else entry.held
        self.by_listen_id[entry.listen_id] = entry
        handle = entry.handle
        if hasattr(handle, "subscription_id"):
            handle.subscription_id = entry.listen_id
        params = with_modern_meta({"notifications": entry.requested.as_dict()}, self.config.client_info)
        self._send(rpc.RequestBuilder.request("subscriptions/listen", params, entry.listen_id))

    def _on_subscription_frame(self, subscription_id: Any, method: str, params: dict[str, Any], out: Outbox) -> None:
        entry = self.by_listen_id.get(subscription_id)
        if entry is None:
            logger.warning("%s: %s for unknown subscription id %r skipped", self.name, method, subscription_id)
            return
        if method == ACK_METHOD:
            self._acknowledged(entry, params, out)
            return
        if method not in FILTERABLE_METHODS:
            logger.debug("%s: %s on subscription %r (not an event) skipped", self.name, method, subscription_id)
            return
        if entry.acknowledged is None or entry.state in ("awaiting_ack", "resyncing", "relistening"):
            if len(entry.held) < MAX_HELD_EVENTS:
                entry.held.append((method, params))
            else:
                logger.warning("%s: too many events held for %r; dropping", self.name, entry.handle)
            return
        if entry.acknowledged.enables(method, params, sub_resources=True):
            _emit(out, entry, entry.event(method, _unstamped(params)))
        else:
            logger.info("%s: event %s outside the acknowledged filter of %r dropped", self.name, method, entry.handle)

    def _acknowledged(self, entry: Entry, params: dict[str, Any], out: Outbox) -> None:
        ack = filter_from_wire(params.get("notifications"))
        if ack is None or not ack.is_within(entry.requested):
            acked = params.get("notifications")
            why = f"acknowledgment {acked!r} is wider than the request {entry.requested.as_dict()!r}"
            if ack is None:
                why = f"malformed acknowledgment {acked!r}"
            logger.error("%s: %s; closing the subscription", self.name, why)
            self._cancel_subscription(entry)
            if entry.state == "awaiting_ack":
                _fail(
                    entry.ack_future, ProtocolError(why, reason=("invalid_acknowledgment", params.get("notifications")))
                )
                self._forget_entry(entry.handle.id)
            else:
                self._close_entry(entry, ("protocol_error", why), out, release=False)
            return
        first = entry.state == "awaiting_ack"
        entry.acknowledged = ack
        handle = entry.handle
        if hasattr(handle, "acknowledged_filter"):
            handle.acknowledged_filter = ack.as_dict()
        if first:
            entry.state = "live"
            future, entry.ack_future = entry.ack_future, None
            if future is not None and not future.done():
                future.set_result(ack)
            self._release_held(entry, out)
            return
        if entry.kind == "watch":
            # A watch has no snapshot: the re-listen reports like a legacy reconnect.
            report = {"resubscribed": list(ack.uris), "failed": []}
            _emit(out, entry, m.Reconnected(m.RECONNECTED, handle, report))
            entry.state = "live"
            self._release_held(entry, out)
            return
        entry.state = "resyncing"
        self._fetch_snapshot(entry)

    def _release_held(self, entry: Entry, out: Outbox) -> None:
        held, entry.held = entry.held, []
        ack = entry.acknowledged
        for method, params in held:
            if ack is not None and ack.enables(method, params, sub_resources=True):
                _emit(out, entry, entry.event(method, _unstamped(params)))

    def _listen_answered(self, entry: Entry, msg: rpc.Response | rpc.ErrorResponse, out: Outbox) -> None:
        if isinstance(msg, rpc.Response):
            if entry.state == "awaiting_ack":
                _fail(entry.ack_future, ProtocolError("the server ended the subscription before acknowledging it"))
                self._forget_entry(entry.handle.id)
                return
            self._close_entry(entry, ("complete", msg.result), out, release=False)
            return
        error = RequestError(msg.code, msg.message, msg.data)
        if _is_transport_failure(msg) and entry.state != "awaiting_ack":
            # HTTP: this subscription's stream dropped, or its re-listen could not reach the
            # server. Not the server's answer: re-listen after a backoff (or on reconnect).
            self._begin_resync(entry, out)
            entry.relisten_attempts += 1
            if entry.relisten_attempts > self.config.max_reconnect_attempts:
                self._close_entry(entry, ("reconnect_exhausted", error.as_term()), out, release=False)
                return
            self._arm_timer(
                self.config.backoff.delay(entry.relisten_attempts), Relisten(entry.handle.id, self.generation)
            )
            return
        if entry.state == "awaiting_ack":
            _fail(entry.ack_future, error)
            self._forget_entry(entry.handle.id)
            return
        if entry.state in ("resyncing", "relistening") and entry.kind == "subscription":
            _emit(out, entry, m.SubscriptionResync(m.SUBSCRIPTION_RESYNC, entry.handle, ("failed", error.as_term())))
        self._close_entry(entry, ("error", error.as_term()), out, release=False)

    def _begin_resync(self, entry: Entry, out: Outbox) -> None:
        if entry.state == "awaiting_ack":
            # Never acknowledged: the listen() call is still waiting; fail it.
            _fail(entry.ack_future, ConnectionLost("the connection was lost before the acknowledgment"))
            self._forget_entry(entry.handle.id)
            return
        if entry.state == "live" and entry.kind == "subscription":
            _emit(out, entry, m.SubscriptionResync(m.SUBSCRIPTION_RESYNC, entry.handle, "started"))
        entry.state = "relistening"
        if entry.listen_id is not None:
            self.by_listen_id.pop(entry.listen_id, None)
            entry.listen_id = None

    def _on_relisten(self, message: Relisten) -> None:
        entry = self.entries.get(message.handle_id)
        if entry is None or entry.state != "relistening" or message.generation != self.generation:
            return
        if self.shared.status == "ready" and self.shared.era == "modern":
            self._send_listen(entry)

    def _fetch_snapshot(self, entry: Entry) -> None:
        ack = entry.acknowledged
        assert ack is not None and entry.listen_id is not None
        listen_id = entry.listen_id
        fetch = self._snapshot_fetcher
        thread = threading.Thread(
            target=self._run_snapshot,
            args=(fetch, entry.handle.id, listen_id, ack),
            name=f"exmcp-resync-{self.name}",
            daemon=True,
        )
        thread.start()
        self.shared.adopt(thread)

    def _run_snapshot(self, fetch: Any, handle_id: Any, listen_id: Any, ack: NotificationFilter) -> None:
        try:
            snapshot = fetch(ack)
        except BaseException as error:  # reported to the subscriber as ("failed", reason)
            self._tell_self(ResyncDone(handle_id, listen_id, None, error_term(error)))
        else:
            self._tell_self(ResyncDone(handle_id, listen_id, snapshot))

    def _on_resync_done(self, message: ResyncDone) -> None:
        entry = self.entries.get(message.handle_id)
        if entry is None or entry.listen_id != message.listen_id or entry.state != "resyncing":
            return  # stale: the subscription dropped again or was closed meanwhile
        out: Outbox = {}
        state = ("complete", message.snapshot) if message.error is None else ("failed", message.error)
        _emit(out, entry, m.SubscriptionResync(m.SUBSCRIPTION_RESYNC, entry.handle, state))
        entry.state = "live"
        entry.relisten_attempts = 0
        self._release_held(entry, out)
        flush(out)

    def _cancel_subscription(self, entry: Entry) -> None:
        if entry.listen_id is not None:
            self._cancel_on_wire(entry.listen_id, "cancelled by the client")
            self.by_listen_id.pop(entry.listen_id, None)
            entry.listen_id = None

    def _on_cancel_subscription(self, message: CancelSubscription) -> None:
        entry = self.entries.get(message.handle_id)
        if entry is None:
            raise ListenerNotFound()
        out: Outbox = {}
        self._cancel_subscription(entry)
        if message.reason is None:
            _fail(entry.ack_future, ListenerNotFound("cancelled before the acknowledgment"))
            self._forget_entry(entry.handle.id)
        else:
            self._close_entry(entry, message.reason, out, release=False)
        flush(out)

    def _convert_watch_to_modern(self, entry: Entry) -> None:
        """A legacy watch whose peer turned modern carries on as a subscription."""
        self.lane.index_remove(entry.handle.id)
        self.loss_snapshot.pop(entry.handle.id, None)
        entry.era = "modern"
        entry.state = "relistening"
        entry.acknowledged = None
        self._send_listen(entry)

    # -- disconnect and inspection ---------------------------------------------------------

    def _on_disconnect(self, message: Disconnect) -> None:
        self.closing_reason = "disconnected"
        if self.worker is not None:
            self.worker.tell(Reset())  # disconnect sends no unsubscribe
        self.actor_ref.stop(block=False)

    def _on_inspect(self, message: InspectClient) -> dict[str, Any]:
        return {
            "entries": len(self.entries),
            "indexed": len(self.index),
            "proxies": len(self.proxies),
            "pending": len(self.pending),
            "subscriptions": len(self.by_listen_id),
            "paused": self.paused,
            "generation": self.generation,
        }

    _handlers: dict[type, Callable[[ClientActor, Any], Any]] = {
        Start: _on_start,
        Opened: _on_opened,
        OpenFailed: _on_open_failed,
        Frames: _on_frames,
        Lost: _on_lost,
        ProbeTimeout: _on_probe_timeout,
        SendRequest: _on_send_request,
        CancelRequest: _on_cancel_request,
        RegisterListener: _on_register_listener,
        ActivateListener: _on_activate_listener,
        AbandonListener: _on_abandon_listener,
        RemoveHandle: _on_remove_handle,
        SubscriberDown: _on_subscriber_down,
        ResubscribeReport: _on_resubscribe_report,
        OpenSubscription: _on_open_subscription,
        CancelSubscription: _on_cancel_subscription,
        ResyncDone: _on_resync_done,
        Relisten: _on_relisten,
        Disconnect: _on_disconnect,
        InspectClient: _on_inspect,
    }


def _emit(out: Outbox, entry: Entry, message: Any) -> None:
    """Queue one message for an entry's subscriber; the handler flushes ``out`` at its end."""
    items = out.get(entry.route)
    if items is None:
        items = out[entry.route] = []
    items.append(message)


def _is_transport_failure(msg: rpc.ErrorResponse) -> bool:
    """Whether an error answer was made up by the transport (a dropped stream, an unreachable
    server, an HTTP 5xx) rather than sent by the server as its answer."""
    data = msg.data
    if not isinstance(data, dict):
        return False
    if msg.code == STREAM_DROPPED and data.get("streamDropped"):
        return True
    status = data.get("httpStatus")
    return "transportError" in data or (isinstance(status, int) and status >= 500)


def _unstamped(params: dict[str, Any]) -> dict[str, Any]:
    """Event params without the subscription id stamp, so they read like legacy ones."""
    meta = params.get("_meta")
    if not isinstance(meta, dict) or META_SUBSCRIPTION_ID not in meta:
        return params
    rest = {key: value for key, value in meta.items() if key != META_SUBSCRIPTION_ID}
    clean = {key: value for key, value in params.items() if key != "_meta"}
    if rest:
        clean["_meta"] = rest
    return clean
