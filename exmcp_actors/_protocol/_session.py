"""One client's MCP session (sans-IO): the connection's life, the requests in flight,
and what reaches each listener, subscription and watch.

Its shell feeds every input (``_events``) to :meth:`Session.handle` and then
performs what :attr:`Session.effects` collected, in order, before delivering the
queued messages; which thread may do so, and under which lock, is the runtime's
rule (``exmcp_actors._runtime``). The session never blocks, sleeps, starts a
thread or touches a socket, so each rule here is testable with plain calls.

Its parts: the connection's life (``_lifecycle``: the phases of ``_state``, the
handshake of ``_handshake``, reconnects), the pending-request table
(``_pending``), the registry of entries (``_registry``), legacy listeners with
the pause across a reconnect (``_listeners``), and modern subscriptions
(``_subscriptions``); each state of theirs is a table of ``_state``. The session
itself routes what the server sends and what the host asks to the part that owns
it; each part is given what it needs of the others when it is made, never the
session itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from . import _events as ev
from . import _jsonrpc as rpc
from ._config import SessionConfig
from ._errors import (
    ConnectError,
    ConnectionLost,
    Error,
    ListenerNotFound,
    ListenRequiresModern,
    NotConnected,
    ProtocolError,
    UseListen,
)
from ._filters import LOG_MESSAGE
from ._handshake import Negotiated, with_modern_meta
from ._host_checks import CANCELLED, SESSION_NOTIFICATIONS
from ._host_requests import HostRequests
from ._index import Index, ListenerIndex, dispatch, for_a_subscription, notification_parts, subscription_id_of
from ._lifecycle import Lifecycle
from ._list_cache import EVICTED_BY
from ._listeners import Listeners
from ._lists import ServerLists
from ._peer_text import peer_text
from ._pending import PendingTable
from ._ratelog import RateLimitedLog
from ._registry import Entry, Registry
from ._state import REGISTERING, UNANNOUNCED, EntryState, Pause
from ._subscriptions import Subscriptions

logger = logging.getLogger("exmcp_actors")

META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
#: Why a legacy resources/subscribe is refused before the wire (see :func:`refused_before_the_wire`).
SUBSCRIBE_NOT_ADVERTISED = ("capability_not_advertised", "resources.subscribe")


def refused_before_the_wire(message: ev.SendRequest, negotiated: Negotiated | None) -> Error | None:
    """Why a legacy request is refused without the wire, if it is: a client MUST only use the
    capabilities the server negotiated, so a server that does not advertise
    ``resources.subscribe`` is never sent one."""
    if message.method != "resources/subscribe":
        return None
    resources = negotiated.capabilities.get("resources") if negotiated is not None else None
    if isinstance(resources, dict) and resources.get("subscribe") is True:
        return None
    return Error("the server does not advertise resources.subscribe", reason=SUBSCRIBE_NOT_ADVERTISED)


def crashed(life: Lifecycle, reports: RateLimitedLog, name: str, frame: rpc.Frame, error: Exception) -> None:
    """A bug of ours tripped while handling ``frame``: the client closes with ``("crashed", ...)``.

    Carrying on would risk the worst outcome, a client that looks alive and is not: what
    the bug left half done (an answer never routed, a phase never moved) stays undone.
    The peer's bad input never comes here: where it is read, it raises :class:`ProtocolError`.
    """
    reports.error(
        "internal",
        "%s: internal error handling a frame: %s (frame %s)",
        name,
        peer_text(error),
        peer_text(frame),
        exc_info=True,
    )
    if life.closed:
        return
    reason = ("crashed", repr(error))
    if not life.connection.was_ready:  # connect() reports it, rather than return a closed client
        life.connect_error = ConnectError(f"the client crashed while connecting: {peer_text(error)}", reason=reason)
    life.stop(reason)


class Session:
    """See the module docstring. Inputs raise the library's errors where the host misused it."""

    def __init__(
        self,
        config: SessionConfig,
        ids: rpc.RequestBuilder,
        index: Index | None = None,
        name: str = "client",
        *,
        auth_context: Callable[[], str] | None = None,
    ) -> None:
        self.config = config
        self.ids = ids
        self.name = name
        #: Bad frames and stray answers from the server: logged, at a bounded rate.
        self._bad_input = RateLimitedLog(logger)
        #: Our own bugs while handling a frame: logged apart, at a bounded rate too.
        self._internal = RateLimitedLog(logger)
        self.effects = ev.Effects()
        self.pending = PendingTable(self.effects)
        self.registry = Registry(index if index is not None else ListenerIndex(), self.effects)
        self.listeners = Listeners(self.registry, self._drop, name)
        self.subscriptions = Subscriptions(
            self.registry,
            self.effects,
            ids,
            config,
            name,
            cancel_on_wire=self.cancel_on_wire,
            generation=lambda: self.generation,
            relistened=self._relistened,
        )
        self.life = Lifecycle(
            config,
            name,
            self.effects,
            ids,
            self.pending,
            self.registry,
            self.listeners,
            self.subscriptions,
            self.restore_log_level,
        )
        self.host = HostRequests(self.effects, config.host, list(config.roots), name, config.elicitations)
        #: The kept list pages and the tool book (``auth_context``: who requests are made as).
        self.lists = ServerLists(name, lambda: self.era, lambda: self.generation, auth_context)
        #: The host's log level; a modern peer gets it in every request's ``_meta``.
        self.log_level: str | None = None
        self._handlers = {**self._inputs(), **self.life.keepalive.inputs()}

    # -- what the shell reads --------------------------------------------------------------

    @property
    def status(self) -> str:
        return self.life.connection.status

    @property
    def ready(self) -> bool:
        return self.life.ready

    @property
    def generation(self) -> int:
        return self.life.generation

    @property
    def era(self) -> str | None:
        return self.life.era

    @property
    def lane_generation(self) -> int | None:
        """The connection whose reader may deliver plain notifications itself (see ``_lane``):
        only while settled (ready, legacy, not paused by a reconnect; a closed one is not ready)."""
        life = self.life
        settled = life.ready and life.era == "legacy" and self.listeners.pause is Pause.NONE
        return life.generation if settled else None

    def start(self) -> None:
        self.life.start()

    def close(self, reason: Any) -> None:
        """The client is going down: close every handle with ``reason``, fail pending work."""
        self.life.close(reason)
        self.pending.fail_all(NotConnected("the client stopped"))
        registry = self.registry
        for entry in list(registry.entries.values()):
            registry.close(entry, reason)
        for slot in list(registry.slots.values()):
            registry.retire(slot)

    def handle(self, event: Any) -> Any:
        """Feed one input; its effects wait in :attr:`effects`. Returns an answer for the host's asks."""
        return self._handlers[type(event)](event)

    def inspect(self) -> dict[str, Any]:
        registry = self.registry
        return {
            "entries": len(registry.entries),
            "indexed": len(registry.index),
            "proxies": len(registry.slots),
            "pending": len(self.pending),
            "subscriptions": len(registry.by_listen_id),
            "paused": self.listeners.pause is not Pause.NONE,
            "held": self.listeners.held_count,
            "generation": self.generation,
            "in_handler": len(self.host.in_handler),
            "host_answers": self.host.answers_seen,
        }

    # -- what the server sends -------------------------------------------------------------

    def _frames(self, message: ev.Frames) -> None:
        generation = message.generation
        on_notification, index, out = self._on_notification, self.registry.index, self.effects.out
        listeners, life, delivering, heard = self.listeners, self.life, Pause.NONE, self.lists.heard
        for frame in message.frames:
            if generation != life.generation:
                return  # this connection is gone (a failed handshake answer earlier in the batch)
            try:
                parts = notification_parts(frame)
                if parts is None:
                    self._on_frame(frame)
                    continue
                if parts[0] in EVICTED_BY:
                    heard(parts[0])  # before anyone hears it: a refetch it prompts must miss the cache
                if listeners.pause is not delivering or for_a_subscription(*parts):
                    on_notification(parts[0], parts[1])
                else:
                    dispatch(index, parts[0], parts[1], out)
            except ProtocolError as error:  # the peer's fault: one bad frame never takes the client down
                self._bad_input.warning("invalid", "%s: skipped an invalid frame from the server: %s", self.name, error)
            except Exception as error:  # ours, whatever the frame was: never blamed on the peer
                self._internal_error(frame, error)
                return  # the client is closing: the rest of the batch would meet the same state

    def _internal_error(self, frame: rpc.Frame, error: Exception) -> None:
        crashed(self.life, self._internal, self.name, frame, error)

    def _on_frame(self, frame: rpc.Frame) -> None:
        """Act on a frame that is not a plain notification; raises ProtocolError for an invalid one."""
        if type(frame) is rpc.RequestFailed:
            self._on_answer(frame)
            return
        msg = rpc.classify(frame)
        if isinstance(msg, rpc.Notification):
            self._on_notification(msg.method, msg.params if isinstance(msg.params, dict) else {})
        elif isinstance(msg, (rpc.Response, rpc.ErrorResponse)):
            self._on_answer(msg)
        elif isinstance(msg, rpc.ServerRequest):
            self._on_server_request(msg)
        else:
            raise ProtocolError(f"{msg.why} ({peer_text(msg.frame)})", reason=("invalid_frame", msg.why))

    def _on_server_request(self, msg: rpc.ServerRequest) -> None:
        if msg.method == "ping":
            self.effects.send(rpc.result_frame(msg.id, {}))
        elif not self.host.on_request(msg, self.generation):
            logger.info(
                "%s: server request %s is not supported; answering -32601", self.name, peer_text(msg.method, quote=True)
            )
            self.effects.send(rpc.error_frame(msg.id, rpc.METHOD_NOT_FOUND, f"Method not found: {msg.method}"))

    def _on_answer(self, msg: rpc.Answer) -> None:
        entry = self.subscriptions.owns(msg.id)
        if entry is not None:
            self.subscriptions.answered(entry, msg)
            return
        if self.pending.answer(msg):
            return
        if self.subscriptions.ended_by_server(msg.id):
            logger.debug("%s: the answer to listen %s, which the server cancelled, skipped", self.name, msg.id)
        elif isinstance(msg, rpc.RequestFailed):  # finished meanwhile (timed out, cancelled): no one waits
            logger.debug("%s: request %s is no longer pending: %s", self.name, peer_text(msg.id, quote=True), msg.error)
        else:
            self._bad_input.warning(
                "unknown-id",
                "%s: a response to an unknown request id %s was skipped",
                self.name,
                peer_text(msg.id, quote=True),
            )

    def answer_now(self, frame: rpc.Frame) -> bool:
        """Take an answer a reader saw itself (the shell's reader shortcut): only the answer to a host's
        pending request; False for anything else, which goes to the client actor as usual."""
        msg = rpc.classify(frame)
        if not isinstance(msg, (rpc.Response, rpc.ErrorResponse)) or not self.pending.awaits_host(msg.id):
            return False
        return self.pending.answer(msg)

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == CANCELLED and self.subscriptions.cancelled_by_server(params):
            return
        if method in SESSION_NOTIFICATIONS and self.host.on_notification(method, params):
            return self.listeners.consumed(method, params)  # taken, yet a raw hook may name it
        if method == LOG_MESSAGE and self.era == "modern" and subscription_id_of(params) is None:
            self.subscriptions.log_message(params)
        elif for_a_subscription(method, params):
            subscription_id = subscription_id_of(params)
            if subscription_id is not None and not isinstance(subscription_id, (str, int, float)):
                why = "is stamped with a subscription id that is no string or number"
                raise ProtocolError(f"{peer_text(method)} {why}: {peer_text(subscription_id, quote=True)}")
            self.subscriptions.on_notification(subscription_id, method, params)
        elif self.listeners.pause is not Pause.NONE:
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
            params = self._modern_params(params)
        elif (refused := refused_before_the_wire(message, self.life.negotiated)) is not None:
            self.effects.reject(message.future, refused)
            return
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
            params = self._modern_params(params)
        self.effects.do(ev.CancelOnWire(request_id, rpc.notification("notifications/cancelled", params)))

    def _modern_params(self, params: dict[str, Any] | None) -> dict[str, Any]:
        merged = with_modern_meta(params, self.config.client_info, self.config.capabilities)
        if self.log_level is not None:
            merged["_meta"].setdefault(META_LOG_LEVEL, self.log_level)
        return merged

    # -- the host's side -------------------------------------------------------------------

    def _host_answered(self, message: ev.HostAnswered) -> None:
        self.host.answered(message, self.generation, self.life.negotiated)

    def _set_roots(self, message: ev.SetRoots) -> None:
        self.host.set_roots(message, self.ready and self.era == "legacy")

    def _set_log_level(self, message: ev.SetLogLevel) -> None:
        """Legacy: ``logging/setLevel`` (answered through the future); modern: every later request."""
        self.log_level = message.level
        if self.era == "modern":
            self.effects.resolve(message.future, {})
        else:
            request_id = self.ids.next_id()
            self._send_request(ev.SendRequest(request_id, "logging/setLevel", {"level": message.level}, message.future))

    def restore_log_level(self) -> None:
        """A new legacy connection: the server forgot the level the host set."""
        if self.log_level is not None:
            self._set_log_level(ev.SetLogLevel(self.log_level, None))

    # -- handles ---------------------------------------------------------------------------

    def _check_ready(self, era: str) -> None:
        if not self.ready:
            raise NotConnected(f"the client is {self.status}")
        if self.era != era:
            raise UseListen() if era == "legacy" else ListenRequiresModern()

    def _register_listener(self, message: ev.RegisterListener) -> None:
        self._check_ready("legacy")
        flt, subscriber = message.flt, message.subscriber
        self.listeners.register(message.handle, message.kind, flt, subscriber, activate=message.activate)

    def _activate_listener(self, message: ev.ActivateListener) -> None:
        self.listeners.activate(message.listener_id, self.ready, self.status)

    def _abandon_listener(self, message: ev.AbandonListener) -> None:
        self.listeners.abandon(message.listener_id)

    def _open_subscription(self, message: ev.OpenSubscription) -> None:
        self._check_ready("modern")
        self.subscriptions.open(
            message.handle, message.kind, message.flt, message.subscriber, message.acknowledged, message.follows_server
        )

    def _remove_handle(self, message: ev.RemoveHandle) -> None:
        """Remove a handle for its host. The host, not the actor, then asks the worker to
        release its URIs, so unsubscribe returns once the wire is done and the actor never waits."""
        entry = self.registry.entries.get(message.handle_id)
        if entry is None or entry.state in REGISTERING:
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
            if entry.state is EntryState.PENDING:
                entry.to(EntryState.DEAD)  # its registering caller releases what it acquired
                continue
            logger.debug("%s: subscriber of %r is gone; removing it", self.name, entry.handle)
            self._drop(entry)

    def _overflowed(self, message: ev.Overflowed) -> None:
        entry = self.registry.entries.get(message.handle_id)
        if entry is None or entry.state in UNANNOUNCED:
            return  # removed meanwhile (or never delivered to: nothing can have overflowed)
        logger.warning(
            "%s: %r had more messages waiting than its max_pending allows; it is closed", self.name, entry.handle
        )
        self._drop(entry)

    def _drop(self, entry: Entry) -> None:
        """Remove an entry no message can reach any more: end it on the wire, release its URIs."""
        if entry.era == "modern":
            self.subscriptions.cancel_on_wire(entry)
        self.registry.release(entry)
        self.registry.forget(entry.handle.id)

    def _resubscribed(self, report: ev.ResubscribeReport) -> None:
        if report.generation != self.generation or not self.ready:
            logger.debug("%s: discarding a stale resubscribe report", self.name)
            return
        self.listeners.resume(report)
        self.life.resubscribed()

    def _relistened(self, handle_id: Any) -> None:
        """A subscription a reconnect re-listened is acknowledged again (the life is made after
        the subscriptions, so they reach it through here)."""
        self.life.relistened(handle_id)

    def _relisten(self, message: ev.Relisten) -> None:
        self.subscriptions.relisten(message, self.ready and self.era == "modern")

    def accepts(self, event: Any) -> bool:
        return type(event) in self._handlers

    def _inputs(self) -> dict[type, Callable[[Any], Any]]:
        life = self.life
        return {
            ev.Opened: life.opened,
            ev.OpenFailed: life.open_failed,
            ev.Frames: self._frames,
            ev.Lost: life.lost,
            ev.SendFailed: self._send_failed,
            ev.PeerReading: life.peer_reading,
            ev.ProbeTimeout: life.probe_timeout,
            ev.StageTimeout: life.stage_timeout,
            ev.SendRequest: self._send_request,
            ev.CancelRequest: self._cancel_request,
            ev.RegisterListener: self._register_listener,
            ev.ActivateListener: self._activate_listener,
            ev.AbandonListener: self._abandon_listener,
            ev.RemoveHandle: self._remove_handle,
            ev.OpenSubscription: self._open_subscription,
            ev.CancelSubscription: self.subscriptions.cancel,
            ev.SubscriberDied: self._subscriber_died,
            ev.Overflowed: self._overflowed,
            ev.ResubscribeReport: self._resubscribed,
            ev.Relisten: self._relisten,
            ev.ResyncDone: self.subscriptions.resync_done,
            ev.HostAnswered: self._host_answered,
            ev.SetRoots: self._set_roots,
            ev.SetLogLevel: self._set_log_level,
            ev.CachedPage: self.lists.cached,
            ev.StorePage: self.lists.store,
            ev.AuthContextNow: self.lists.context,
            ev.LearnTools: self.lists.learn,
        }
