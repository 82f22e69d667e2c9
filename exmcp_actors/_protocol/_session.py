"""One client's MCP session (sans-IO): the connection's life, the requests in flight,
and what reaches each listener, subscription and watch.

The client actor feeds every input (``_events``) to :meth:`Session.handle` and
then performs what :attr:`Session.effects` collected, in order, before
delivering the queued messages. The session never blocks, sleeps, starts a
thread or touches a socket, so each rule here is testable with plain calls.

Its parts: the connection's phase (``_state``) and handshake (``_handshake``),
the pending-request table (``_pending``), the registry of entries
(``_registry``), legacy listeners with the pause across a reconnect
(``_listeners``), and modern subscriptions (``_subscriptions``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import _events as ev
from . import _jsonrpc as rpc
from ._backoff import Backoff
from ._errors import ConnectError, ConnectionLost, ListenerNotFound, ListenRequiresModern, NotConnected, UseListen
from ._handshake import ArmProbeTimer, Failed, Handshake, Negotiated, ProtocolMode, SendFrame, with_modern_meta
from ._index import Index, ListenerIndex, dispatch, for_a_subscription, notification_parts, subscription_id_of
from ._listeners import Listeners
from ._pending import PendingTable
from ._registry import Registry
from ._state import ConnectionState, Move, Phase
from ._subscriptions import Subscriptions

logger = logging.getLogger("exmcp_actors")


@dataclass(frozen=True, slots=True)
class SessionConfig:
    mode: ProtocolMode
    reconnect: bool
    max_reconnect_attempts: int
    backoff: Backoff
    probe_timeout: float
    client_info: dict[str, Any]


class Session:
    """See the module docstring. Inputs raise the library's errors where the host misused it."""

    def __init__(
        self, config: SessionConfig, ids: rpc.RequestBuilder, index: Index | None = None, name: str = "client"
    ) -> None:
        self.config = config
        self.client_info = config.client_info
        self.max_reconnect_attempts = config.max_reconnect_attempts
        self.backoff = config.backoff
        self.ids = ids
        self.name = name
        self.effects = ev.Effects()
        self.connection = ConnectionState()
        #: Tags one connection: events of an earlier one are ignored.
        self.generation = 0
        self.attempts = 0
        self.last_error: Any = None
        #: Set once a Stop is asked for: the shell is closing the client.
        self.closing = False
        self.connect_error: ConnectError | None = None
        self.era: str | None = None
        self.protocol_version: str | None = None
        self.server_info: dict[str, Any] = {}
        self.server_capabilities: dict[str, Any] = {}
        self.instructions: str | None = None
        self.handshake: Handshake | None = None
        self.pending = PendingTable(self.effects)
        self.registry = Registry(index if index is not None else ListenerIndex(), self.effects)
        self.listeners = Listeners(self.registry)
        self.subscriptions = Subscriptions(self)

    # -- what the shell reads --------------------------------------------------------------

    @property
    def status(self) -> str:
        return self.connection.status

    @property
    def ready(self) -> bool:
        return self.connection.phase is Phase.READY

    @property
    def lane_generation(self) -> int | None:
        """The connection whose reader may deliver plain notifications itself (see ``_lane``):
        only while settled (ready, legacy, not paused by a reconnect, not closing)."""
        settled = self.ready and self.era == "legacy" and not self.listeners.paused and not self.closing
        return self.generation if settled else None

    def handle(self, event: Any) -> Any:
        """Feed one input; its effects wait in :attr:`effects`. Returns an answer for the host's asks."""
        return self._handlers[type(event)](self, event)

    def inspect(self) -> dict[str, Any]:
        registry = self.registry
        return {
            "entries": len(registry.entries),
            "indexed": len(registry.index),
            "proxies": len(registry.slots),
            "pending": len(self.pending),
            "subscriptions": len(registry.by_listen_id),
            "paused": self.listeners.paused,
            "generation": self.generation,
        }

    # -- the connection's life -------------------------------------------------------------

    def start(self) -> None:
        self._open(delay=0.0)

    def _open(self, delay: float) -> None:
        self.generation += 1
        self.effects.do(ev.OpenTransport(self.generation, delay))

    def _stop(self, reason: Any) -> None:
        """Close for good: from now on the client is disconnected, whatever arrives before the shell stops."""
        self.closing = True
        self.connection.move(Move.CLOSE)
        self.effects.do(ev.Stop(reason))

    def _opened(self, message: ev.Opened) -> None:
        if message.generation != self.generation:
            return
        self.handshake = Handshake(self.config.mode, self.client_info, self.ids, self.connection)
        self._run_handshake(self.handshake.start())

    def _open_failed(self, message: ev.OpenFailed) -> None:
        if message.generation == self.generation:
            self._attempt_failed(message.error)

    def _attempt_failed(self, error: BaseException | Any) -> None:
        # What the host sees in ("reconnect_exhausted", last_error): the error's own words.
        self.last_error = str(error) if isinstance(error, BaseException) else error
        if not self.connection.was_ready:
            # The first connect fails fast: connect() reports it to the caller.
            self.connect_error = (
                error if isinstance(error, ConnectError) else ConnectError(f"could not connect: {error}")
            )
            self._stop(("transport_closed", self.last_error))
            return
        self.attempts += 1
        if self.attempts >= self.max_reconnect_attempts:
            logger.warning("%s: giving up after %d reconnect attempts: %s", self.name, self.attempts, error)
            self._stop(("reconnect_exhausted", self.last_error))
            return
        delay = self.backoff.delay(self.attempts + 1)
        logger.info("%s: reconnect attempt %d failed (%s); next in %.2fs", self.name, self.attempts, error, delay)
        self.connection.move(Move.RETRY)
        self._open(delay)

    def _run_handshake(self, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, SendFrame):
                if action.request_id is not None:
                    self.pending.add(action.request_id, action.message["method"], callback=self._handshake_answer)
                self.effects.send(action.message, action.request_id)
            elif isinstance(action, ArmProbeTimer):
                timeout = ev.ProbeTimeout(self.generation, action.request_id)
                self.effects.do(ev.ArmTimer(self.config.probe_timeout, timeout))
            elif isinstance(action, Negotiated):
                self._negotiated(action)
            elif isinstance(action, Failed):
                logger.warning("%s: handshake failed: %s", self.name, action.error)
                self._drop_connection()
                self._attempt_failed(action.error)

    def _handshake_answer(self, answer: rpc.Response | rpc.ErrorResponse) -> None:
        if self.handshake is not None:
            self._run_handshake(self.handshake.on_answer(answer))

    def _probe_timeout(self, message: ev.ProbeTimeout) -> None:
        handshake = self.handshake
        if message.generation != self.generation or handshake is None or not handshake.owns(message.request_id):
            return
        logger.info(
            "%s: no answer to server/discover in %.1fs; trying initialize", self.name, self.config.probe_timeout
        )
        self.pending.pop(message.request_id)
        self._run_handshake(handshake.probe_timed_out(message.request_id))

    def _drop_connection(self) -> None:
        """Forget the current connection: its late frames and answers are ignored from now on."""
        self.generation += 1
        self.pending.fail_all(ConnectionLost("the connection was lost"))

    def _negotiated(self, result: Negotiated) -> None:
        previous_era = self.era
        self.era = result.era
        self.protocol_version = result.protocol_version
        self.server_info = result.server_info
        self.server_capabilities = result.capabilities
        self.instructions = result.instructions
        self.attempts = 0
        self.effects.do(ev.TransportNegotiated(result.protocol_version, result.era))
        first = not self.connection.was_ready
        self.connection.move(Move.NEGOTIATED)
        logger.info("%s: ready, MCP %s (%s era)", self.name, result.protocol_version, result.era)
        if first:
            return
        if previous_era != result.era:
            self._era_changed(result.era)
        if result.era == "legacy":
            self.effects.do(ev.ToWorker(ev.Resubscribe(self.generation)))
        else:
            self.listeners.resume()
            self.subscriptions.relisten_dropped()

    def _era_changed(self, era: str) -> None:
        logger.warning("%s: the peer now speaks the %s era", self.name, era)
        if era == "modern":
            # The legacy session and its subscriptions are gone with the old connection.
            self.effects.do(ev.ToWorker(ev.Reset()))
        for entry in list(self.registry.entries.values()):
            if entry.era == era:
                continue
            if entry.kind == "watch" and era == "modern":
                self.subscriptions.become_modern(entry)
                continue
            self.registry.close(entry, ("era_changed", era), release=False)

    def _lost(self, message: ev.Lost) -> None:
        if message.generation != self.generation:
            return
        logger.warning("%s: transport lost: %s", self.name, message.reason)
        self.last_error = message.reason
        self._drop_connection()
        if not self.connection.was_ready:
            self._attempt_failed(ConnectError(f"the connection closed during the handshake: {message.reason}"))
            return
        if not self.config.reconnect:
            self._stop(("transport_closed", message.reason))
            return
        if not self.ready:
            # The attempt opened but was lost before it was ready: it counts as a failed attempt.
            self._attempt_failed(ConnectError(f"the connection closed during the handshake: {message.reason}"))
            return
        self.connection.move(Move.LOST)
        if self.era == "legacy":
            self.listeners.pause()
        for entry in self.registry.of_era("modern"):
            # Live, mid-snapshot or mid-re-listen alike: re-listen on the next connection.
            self.subscriptions.stream_dropped(entry)
        self.attempts = 0
        self._open(self.backoff.delay(1))

    def close(self, reason: Any) -> None:
        """The client is going down: close every handle with ``reason``, fail pending work."""
        self.closing = True
        if self.connection.phase is not Phase.CLOSED:
            self.connection.move(Move.CLOSE)
        if self.connect_error is None and not self.connection.was_ready:
            self.connect_error = ConnectError(f"the client stopped while connecting: {reason!r}")
        self.pending.fail_all(NotConnected("the client stopped"))
        for entry in list(self.registry.entries.values()):
            self.registry.close(entry, reason, release=False)
        for slot in list(self.registry.slots.values()):
            self.registry.retire(slot)

    # -- what the server sends -------------------------------------------------------------

    def _frames(self, message: ev.Frames) -> None:
        generation = message.generation
        on_notification, index, out = self._on_notification, self.registry.index, self.effects.out
        listeners = self.listeners
        for frame in message.frames:
            if generation != self.generation:
                return  # this connection is gone (a failed handshake answer earlier in the batch)
            try:
                parts = notification_parts(frame)
                if parts is None:
                    self._on_frame(frame)
                elif listeners.paused or for_a_subscription(*parts):
                    on_notification(parts[0], parts[1])
                else:
                    dispatch(index, parts[0], parts[1], out)
            except Exception:  # one bad frame must never take the client down
                logger.exception("%s: failed to handle frame %.200r", self.name, frame)

    def _on_frame(self, frame: rpc.Frame) -> None:
        msg = rpc.classify(frame)
        if isinstance(msg, rpc.Notification):
            self._on_notification(msg.method, msg.params if isinstance(msg.params, dict) else {})
        elif isinstance(msg, (rpc.Response, rpc.ErrorResponse)):
            self._on_answer(msg)
        elif isinstance(msg, rpc.ServerRequest):
            self._on_server_request(msg)
        else:
            logger.warning("%s: skipped an invalid frame from the server: %s (%.200r)", self.name, msg.why, msg.frame)

    def _on_server_request(self, msg: rpc.ServerRequest) -> None:
        if msg.method == "ping":
            self.effects.send(rpc.result_frame(msg.id, {}))
        else:
            logger.info("%s: server request %r is not supported; answering -32601", self.name, msg.method)
            self.effects.send(rpc.error_frame(msg.id, rpc.METHOD_NOT_FOUND, f"Method not found: {msg.method}"))

    def _on_answer(self, msg: rpc.Response | rpc.ErrorResponse) -> None:
        entry = self.subscriptions.owns(msg.id)
        if entry is not None:
            self.subscriptions.answered(entry, msg)
        elif not self.pending.answer(msg):
            logger.warning("%s: a response to an unknown request id %r was skipped", self.name, msg.id)

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        if for_a_subscription(method, params):
            self.subscriptions.on_notification(subscription_id_of(params), method, params)
        elif self.listeners.paused:
            self.listeners.hold(method, params)
        else:
            dispatch(self.registry.index, method, params, self.effects.out)

    # -- requests --------------------------------------------------------------------------

    def _send_request(self, message: ev.SendRequest) -> None:
        if not self.ready:
            self.effects.reject(message.future, NotConnected(f"the client is {self.status}"))
            return
        params = message.params
        if self.era == "modern":
            params = with_modern_meta(params, self.client_info)
        self.pending.add(message.request_id, message.method, future=message.future)
        self.effects.send(rpc.RequestBuilder.request(message.method, params, message.request_id), message.request_id)

    def _send_failed(self, message: ev.SendFailed) -> None:
        pending = self.pending.pop(message.request_id)
        if pending is not None:
            self.effects.reject(pending.future, ConnectionLost("the transport is closed"))

    def _cancel_request(self, message: ev.CancelRequest) -> None:
        if self.pending.pop(message.request_id) is not None:
            self.cancel_on_wire(message.request_id, message.reason)

    def cancel_on_wire(self, request_id: Any, reason: str) -> None:
        if not self.ready:
            return
        params: dict[str, Any] = {"requestId": request_id, "reason": reason}
        if self.era == "modern":
            params = with_modern_meta(params, self.client_info)
        self.effects.do(ev.CancelOnWire(request_id, rpc.notification("notifications/cancelled", params)))

    # -- handles ---------------------------------------------------------------------------

    def _check_ready(self, era: str) -> None:
        if not self.ready:
            raise NotConnected(f"the client is {self.status}")
        if self.era != era:
            raise UseListen() if era == "legacy" else ListenRequiresModern()

    def _register_listener(self, message: ev.RegisterListener) -> None:
        self._check_ready("legacy")
        self.listeners.register(message.handle, message.kind, message.flt, message.subscriber)

    def _activate_listener(self, message: ev.ActivateListener) -> None:
        self.listeners.activate(message.listener_id, self.ready, self.status)

    def _abandon_listener(self, message: ev.AbandonListener) -> None:
        self.listeners.abandon(message.listener_id)

    def _open_subscription(self, message: ev.OpenSubscription) -> None:
        self._check_ready("modern")
        self.subscriptions.open(message.handle, message.kind, message.flt, message.subscriber, message.acknowledged)

    def _remove_handle(self, message: ev.RemoveHandle) -> None:
        """Remove a handle for its host. The host, not the actor, then asks the worker to
        release its URIs, so unsubscribe returns once the wire is done and the actor never waits."""
        entry = self.registry.entries.get(message.handle_id)
        if entry is None or entry.state in ("pending", "dead"):
            raise ListenerNotFound()
        if entry.era == "modern":
            self.subscriptions.cancel_on_wire(entry)
        self.registry.forget(message.handle_id)

    def _subscriber_died(self, message: ev.SubscriberDied) -> None:
        registry = self.registry
        slot = registry.slots.pop(message.key, None)
        if slot is None:
            return
        for handle_id in list(slot.handle_ids):
            entry = registry.entries.get(handle_id)
            if entry is None:
                continue
            if entry.state == "pending":
                entry.state = "dead"  # its registering caller releases what it acquired
                continue
            logger.debug("%s: subscriber of %r is gone; removing it", self.name, entry.handle)
            if entry.era == "modern":
                self.subscriptions.cancel_on_wire(entry)
            registry.release(entry)
            registry.forget(handle_id)

    def _resubscribed(self, report: ev.ResubscribeReport) -> None:
        if report.generation != self.generation or not self.ready:
            logger.debug("%s: discarding a stale resubscribe report", self.name)
            return
        self.listeners.resume(report)

    def _relisten(self, message: ev.Relisten) -> None:
        self.subscriptions.relisten(message, self.ready and self.era == "modern")

    def _cancel_subscription(self, message: ev.CancelSubscription) -> None:
        self.subscriptions.cancel(message)

    def _resync_done(self, message: ev.ResyncDone) -> None:
        self.subscriptions.resync_done(message)

    _handlers: dict[type, Callable[[Session, Any], Any]] = {
        ev.Opened: _opened,
        ev.OpenFailed: _open_failed,
        ev.Frames: _frames,
        ev.Lost: _lost,
        ev.SendFailed: _send_failed,
        ev.ProbeTimeout: _probe_timeout,
        ev.SendRequest: _send_request,
        ev.CancelRequest: _cancel_request,
        ev.RegisterListener: _register_listener,
        ev.ActivateListener: _activate_listener,
        ev.AbandonListener: _abandon_listener,
        ev.RemoveHandle: _remove_handle,
        ev.OpenSubscription: _open_subscription,
        ev.CancelSubscription: _cancel_subscription,
        ev.SubscriberDied: _subscriber_died,
        ev.ResubscribeReport: _resubscribed,
        ev.Relisten: _relisten,
        ev.ResyncDone: _resync_done,
    }
