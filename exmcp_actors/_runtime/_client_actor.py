"""The client actor: one per connection, the mailbox for the inputs nobody waits for.

Host threads run their commands on the session themselves, through the monitor. What
comes from threads that must never wait for the monitor (a reader whose batch the lane
cannot take, the scheduler's timers, a connector or resync thread reporting back, a
proxy's stop hook, the refcount worker's report) arrives here as a message, and the actor
runs it through the same monitor: one rule for every thread (``exmcp_actors._runtime``).
The actor also owns the client's end: its stop hook closes every handle and releases
every resource.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import pykka

from .._delivery._targets import CUT, FINAL_ONLY, cut
from .._protocol import _events as ev
from .._protocol._filters import NotificationFilter
from .._protocol._index import ListenerIndex
from .._protocol._jsonrpc import Frame, RequestBuilder
from .._protocol._session import Session
from ._effects import Config, Shell
from ._idle import IdleWatch
from ._lane import DeliveryLane
from ._lazy_worker import LazyWorker
from ._monitor import SessionMonitor
from ._shared import SharedState
from ._subscriber_proxy import SubscriberDown

logger = logging.getLogger("exmcp_actors")

_monotonic = time.monotonic

#: Seconds the shutdown waits for the monitor before closing the session anyway (a holder
#: only runs short, non-blocking steps, so this is never reached unless the library has a bug).
SHUTDOWN_MONITOR_WAIT = 10.0


class Start(NamedTuple):
    """Begin: here is the worker (started on first use); open the first connection."""

    worker: LazyWorker
    #: ``fetch(acknowledged_filter) -> snapshot``; blocking, run on a resync thread.
    snapshot_fetcher: Callable[[NotificationFilter], Any]


class Disconnect(NamedTuple):
    """The host disconnects: every handle is closed with ``"disconnected"``."""


class InspectClient(NamedTuple):
    """Internal counters, for tests and diagnostics (ask)."""


class ConnectionSink:
    """The FrameSink of one connection: tags what it reads with the connection's generation,
    and delivers what it may through the lane (see ``_lane``); with a keepalive, stamps when."""

    __slots__ = ("_generation", "_idle", "_lane", "_tell")

    def __init__(
        self, actor_ref: pykka.ActorRef[Any], generation: int, lane: DeliveryLane, idle: IdleWatch | None = None
    ) -> None:
        self._tell = actor_ref.tell
        self._generation = generation
        self._lane = lane
        self._idle = idle

    def frames_received(self, frames: list[Frame]) -> None:
        idle = self._idle
        if idle is not None:
            idle.last = _monotonic()
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

    def peer_reading(self) -> None:
        try:
            self._tell(ev.PeerReading(self._generation))
        except pykka.ActorDeadError:
            pass


class ClientActor(pykka.ThreadingActor):
    """Owns one MCP connection's end. See the module docstring."""

    use_daemon_thread = True

    def __init__(self, config: Config, shared: SharedState, ids: RequestBuilder, name: str) -> None:
        super().__init__()
        self.config = config
        self.name = name
        #: Readers deliver plain notifications through it; the session changes the index under its lock.
        self.lane = DeliveryLane(ListenerIndex())
        self.shell = Shell(config, shared, self.lane, name)
        idle = self.shell.idle if config.session.keepalive is not None else None
        ref, lane = self.actor_ref, self.lane
        self.shell.attach(ref, lambda generation: ConnectionSink(ref, generation, lane, idle))
        self.session = Session(config.session, ids, self.lane, name, auth_context=config.transport.auth_context)
        tools = self.session.lists.tools
        tools.mirrored = config.transport.mirror_tool_arguments(tools.param_headers)
        shared.tools = tools
        #: The one way into the session, for every thread (this actor included).
        self.monitor = shared.monitor = SessionMonitor(self.session, self.shell.perform)
        self.monitor.attach(self.shell.tell_actor)
        self.lane.answer = self.monitor.try_answer
        self.lane.replace = self.shell.replace_proxy

    # -- inputs ----------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        handler = self._handlers.get(type(message))
        if handler is not None:
            return handler(self, message)
        if not self.session.accepts(message):
            logger.warning("%s: unexpected actor message %r", self.name, message)
            return None
        return self.monitor.run(message)

    def _on_start(self, message: Start) -> None:
        self.shell.worker = message.worker
        self.shell.fetch_snapshot = message.snapshot_fetcher
        with self.monitor.turn() as session:
            session.start()

    def _on_frames(self, message: ev.Frames) -> None:
        try:
            self.monitor.run(message)
        finally:
            self.lane.handled()  # after the flush: the reader may deliver again

    def _on_subscriber_down(self, message: SubscriberDown) -> None:
        handles: list[Any] = []
        with self.monitor.turn() as session:
            slot = session.registry.slots.get(message.key)
            stopped = slot.ref if slot is not None else None
            if slot is None or stopped is None or stopped.actor_urn != message.proxy_urn:
                return
            if not message.died:
                # Someone else stopped the proxy (ActorRegistry.stop_all, say), not its subscriber's
                # death: the subscriber still needs one, at least to receive its closing messages.
                # (The proxy checked, not slot.ref read again: a reader may have replaced it since.)
                self.shell.replace_proxy(slot, stopped)
                return
            self.shell.watcher.unwatch(message.key)
            entries = session.registry.entries
            handles = [entries[i].handle for i in slot.handle_ids if i in entries]
            session.handle(ev.SubscriberDied(message.key))
        for handle in handles:  # after the flush: what reached an inbox before stays readable
            cut(handle, CUT)
            handle._finish()

    def _on_disconnect(self, message: Disconnect) -> None:
        with self.monitor.turn() as session:
            self.shell.closing_reason = "disconnected"
            # The backlog queued for slow subscribers is dropped; their closing message still goes.
            handles = [entry.handle for entry in session.registry.entries.values()]
            for handle in handles:
                cut(handle, FINAL_ONLY)
            self.shell.shared.disconnected_handles = handles
            session.effects.do(ev.ToWorker(ev.Reset()))  # disconnect sends no unsubscribe
        self.actor_ref.stop(block=False)

    def _on_inspect(self, message: InspectClient) -> dict[str, Any]:
        with self.monitor.turn() as session:
            state = session.inspect()
            shell = self.shell
            state["liveness"] = shell.watcher.counts()
            probes = session.life.keepalive
            state["keepalive"] = (probes.sent, probes.answered)  # probes sent, and answered
            # Armed and not yet fired: what can still wake this client.
            state["timers"] = sum(1 for timer in shell.timers if not timer.done)
            return state

    _handlers: dict[type, Callable[[ClientActor, Any], Any]] = {
        Start: _on_start,
        ev.Frames: _on_frames,
        SubscriberDown: _on_subscriber_down,
        Disconnect: _on_disconnect,
        InspectClient: _on_inspect,
    }

    # -- lifecycle -------------------------------------------------------------------------

    def on_start(self) -> None:
        self.shell.shared.adopt_current_thread()

    def on_stop(self) -> None:
        reason = self.shell.closing_reason if self.shell.closing_reason is not None else ("shutdown", "normal")
        try:
            self._shutdown(reason)
        finally:
            self.shell.shared.finished.set()

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        logger.error("%s: client actor failed: %r", self.name, exception_value)
        try:
            self._shutdown(("crashed", repr(exception_value)))
        finally:
            self.shell.shared.finished.set()

    def _shutdown(self, reason: Any) -> None:
        """Close every handle with ``reason``, fail pending work, release every resource."""
        shell = self.shell
        shell.stopping.set()
        shell.abort_open()  # a reconnect blocked in its open ends now, not at its timeout
        self.lane.open_for(None)  # the closing messages come after anything a reader delivers
        try:
            with self.monitor.turn(SHUTDOWN_MONITOR_WAIT) as session:
                session.close(reason)
        except Exception:  # the rest of the shutdown must still run
            logger.exception("%s: closing the session failed", self.name)
        for timer in list(shell.timers):
            timer.cancel()
        shell.idle.stop()
        shell.watcher.close()
        if self.config.host is not None:
            self.config.host.close()
        if shell.worker is not None:
            shell.worker.stop()
        connector = shell.connector
        if connector is not None and connector is not threading.current_thread():
            connector.join(self.config.connect_timeout + 1.0)
        if shell.transport_lock.acquire(timeout=self.config.connect_timeout + 1.0):
            try:
                shell.transport.close()
            except Exception:  # closing must not stop the shutdown
                logger.exception("%s: closing the transport failed", self.name)
            finally:
                shell.transport_lock.release()
