"""A connection's life (sans-IO): open, handshake, ready, lost, reconnect, stop.

It drives the phases of the state table (``_state``) and owns what describes
the current connection: its generation (events of an earlier connection are
ignored), the attempts made, the handshake and what it negotiated. What a loss
or a new connection means for listeners and subscriptions it asks of the
session's other parts, which it is given when it is made.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from . import _events as ev
from . import _jsonrpc as rpc
from ._config import SessionConfig
from ._errors import ConnectError, ConnectionLost
from ._handshake import ArmProbeTimer, Failed, Handshake, Negotiated, SendFrame
from ._keepalive import Keepalive
from ._listeners import Listeners
from ._peer_text import peer_text
from ._pending import PendingTable
from ._registry import Registry
from ._stages import StageClock, timeout_error
from ._state import ConnectionState, EntryState, Move, Phase, Stage
from ._subscriptions import Subscriptions

logger = logging.getLogger("exmcp_actors")

#: How much of a transport's reason for a failure or a loss is kept, in its texts and records.
_REASON_CHARS: Final = 1000
#: The stage of each handshake phase.
_HANDSHAKE_STAGES: Final = {Phase.PROBING: Stage.DISCOVER, Phase.INITIALIZING: Stage.INITIALIZE}


class Lifecycle:
    """The connection part of a :class:`~._session.Session`.

    ``restore_log_level()`` sets again, on a new legacy connection, the log level the host
    set (the server forgot it)."""

    def __init__(
        self,
        config: SessionConfig,
        name: str,
        effects: ev.Effects,
        ids: rpc.RequestBuilder,
        pending: PendingTable,
        registry: Registry,
        listeners: Listeners,
        subscriptions: Subscriptions,
        restore_log_level: Callable[[], None],
    ) -> None:
        self._fx = effects
        self.config = config
        self.name = name
        self._ids = ids
        self._pending = pending
        self._registry = registry
        self._listeners = listeners
        self._subscriptions = subscriptions
        self._restore_log_level = restore_log_level
        self.connection = ConnectionState()
        #: Tags one connection: events of an earlier one are ignored.
        self.generation = 0
        self.attempts = 0
        self.last_error: Any = None
        self.connect_error: ConnectError | None = None
        self.handshake: Handshake | None = None
        #: What the last handshake negotiated (None before the first).
        self.negotiated: Negotiated | None = None
        #: Every stage of a connect or reconnect runs under a deadline (see ``_stages``).
        self.stages = StageClock(self._fx, self.config.stage_timeout)
        #: The modern subscriptions a reconnect re-listened, until each is acknowledged again.
        self._relistening: set[Any] = set()
        #: The connection in hand reports when its peer reads, and it has not yet: the probe's
        #: clock is not started until then (``_unarmed_probe`` is the probe waiting for it).
        self._awaiting_reader = False
        self._unarmed_probe: Any = None
        #: Probes a silent ready connection (only with ``config.keepalive``).
        self.keepalive = Keepalive(config, effects, ids, pending, self.ready_era, self.keepalive_lost)

    @property
    def ready(self) -> bool:
        return self.connection.phase is Phase.READY

    @property
    def closed(self) -> bool:
        """Whether a stop was decided (the shell may still be closing the client)."""
        return self.connection.phase is Phase.CLOSED

    @property
    def era(self) -> str | None:
        return self.negotiated.era if self.negotiated is not None else None

    def _current(self, generation: int) -> bool:
        """Whether an event belongs to the connection in hand (and the client is not closing)."""
        return generation == self.generation and not self.closed

    def start(self) -> None:
        self._open(delay=0.0)
        self.stages.arm_connect(self.generation)

    def _open(self, delay: float) -> None:
        self.generation += 1
        self._fx.do(ev.OpenTransport(self.generation, delay))
        self.stages.enter(Stage.OPEN, self.generation, extra=delay)

    def _settle(self) -> None:
        """Every stage of this connection is done: the next loss starts a fresh count of attempts."""
        self.stages.settle()
        self.attempts = 0
        self._relistening.clear()
        self._registry.status_all("ready")  # after every Reconnected of this reconnect

    def stop(self, reason: Any) -> None:
        """Close for good: from now on the client is disconnected, whatever arrives before the shell stops."""
        self.connection.move(Move.CLOSE)
        self._fx.do(ev.Stop(reason))

    def opened(self, message: ev.Opened) -> None:
        if not self._current(message.generation):
            return
        if self.connection.was_ready:
            self._registry.status_all("connecting", {"attempt": self.attempts + 1})
        self._awaiting_reader, self._unarmed_probe = message.reading_reported, None
        # A discover result the host kept stands for the first connection; a reconnect asks afresh.
        known = None if self.connection.was_ready else self.config.discover_result
        self.handshake = Handshake(
            self.config.mode, self.config.client_info, self._ids, self.connection, self.config.capabilities, known
        )
        self._run_handshake(self.handshake.start())

    def open_failed(self, message: ev.OpenFailed) -> None:
        if not self._current(message.generation):
            return
        if message.out_of_time:
            # The same failure as the stage's own timer, whichever comes first: named alike.
            logger.info("%s: the transport did not open in time: %s", self.name, message.error)
            self._attempt_failed(timeout_error(Stage.OPEN, self.config.stage_timeout))
            return
        self._attempt_failed(message.error)

    def _attempt_failed(self, error: BaseException | Any) -> None:
        # What the host sees in ("reconnect_exhausted", last_error): the error's own words, which
        # may quote the server's (a transport's, the host's own, not always escaped).
        self.last_error = peer_text(str(error), _REASON_CHARS) if isinstance(error, BaseException) else error
        if not self.connection.was_ready:
            # The first connect fails fast: connect() reports it to the caller.
            self.connect_error = (
                error if isinstance(error, ConnectError) else ConnectError(f"could not connect: {self.last_error}")
            )
            self.stop(("transport_closed", self.last_error))
            return
        self.attempts += 1
        if self.attempts >= self.config.max_reconnect_attempts:
            logger.warning("%s: giving up after %d reconnect attempts: %s", self.name, self.attempts, error)
            self.stop(("reconnect_exhausted", self.last_error))
            return
        delay = self.config.backoff.delay(self.attempts + 1)
        logger.info("%s: reconnect attempt %d failed (%s); next in %.2fs", self.name, self.attempts, error, delay)
        self.connection.move(Move.RETRY)
        self._reconnect(delay, ("attempt_failed", self.last_error))

    def _reconnect(self, delay: float, reason: Any) -> None:
        """Open attempt ``attempts + 1`` after ``delay``; handles asking for it are told why."""
        detail = {"attempt": self.attempts + 1, "delay": delay, "reason": reason}
        self._registry.status_all("reconnecting", detail)
        self._open(delay)

    def _run_handshake(self, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, SendFrame):
                if action.request_id is not None:
                    self._pending.add(action.request_id, action.message["method"], callback=self._handshake_answer)
                self._fx.send(action.message, action.request_id)
            elif isinstance(action, ArmProbeTimer):
                if self._awaiting_reader:
                    self._unarmed_probe = action.request_id
                else:
                    self._arm_probe_timer(action.request_id)
            elif isinstance(action, Negotiated):
                self._enter_handshake_stage()  # a kept discover result negotiates with nothing asked
                self._negotiated(action)
            elif isinstance(action, Failed):
                logger.warning("%s: handshake failed: %s", self.name, action.error)
                self._drop_connection()
                self._attempt_failed(action.error)
        self._enter_handshake_stage()

    def _enter_handshake_stage(self) -> None:
        """The handshake's phase is a stage under a deadline (entering it again is no move)."""
        stage = _HANDSHAKE_STAGES.get(self.connection.phase)
        if stage is not None and self.handshake is not None:
            self.stages.enter(stage, self.generation)

    def _handshake_answer(self, answer: rpc.Answer) -> None:
        if self.handshake is not None:
            self._run_handshake(self.handshake.on_answer(answer))

    def _arm_probe_timer(self, request_id: Any) -> None:
        self._fx.do(ev.ArmTimer(self.config.probe_timeout, ev.ProbeTimeout(self.generation, request_id)))

    def peer_reading(self, message: ev.PeerReading) -> None:
        """The peer has read the probe: only its silence from now on says it is a legacy server.
        (A child still starting up, importing its SDK on a loaded machine, has not heard it yet.)"""
        if not self._current(message.generation) or not self._awaiting_reader:
            return
        self._awaiting_reader = False
        probe, self._unarmed_probe = self._unarmed_probe, None
        if probe is not None and self.handshake is not None and self.handshake.owns(probe):
            self._arm_probe_timer(probe)

    def probe_timeout(self, message: ev.ProbeTimeout) -> None:
        handshake = self.handshake
        if not self._current(message.generation) or handshake is None or not handshake.owns(message.request_id):
            return
        logger.info(
            "%s: no answer to server/discover in %.1fs; trying initialize", self.name, self.config.probe_timeout
        )
        self._pending.pop(message.request_id)
        self._run_handshake(handshake.probe_timed_out(message.request_id))

    def _drop_connection(self) -> None:
        """Forget the current connection: its late frames and answers are ignored from now on."""
        self.generation += 1
        self._pending.fail_all(ConnectionLost("the connection was lost"))
        if self.config.keepalive is not None:
            self._fx.do(ev.WatchIdle(self.generation, None))

    def _negotiated(self, result: Negotiated) -> None:
        previous_era = self.era
        self.negotiated = result
        self._fx.do(ev.TransportNegotiated(result.protocol_version, result.era, result.capabilities))
        self._registry.ready_detail = {"era": result.era, "protocolVersion": result.protocol_version}
        if self.config.keepalive is not None:
            self._fx.do(ev.WatchIdle(self.generation, self.config.keepalive))
        first = not self.connection.was_ready
        self.connection.move(Move.NEGOTIATED)
        logger.info("%s: ready, MCP %s (%s era)", self.name, result.protocol_version, result.era)
        if first:
            self._settle()
            return
        if previous_era != result.era:
            self._era_changed(result.era)
        timeout = self.config.stage_timeout
        if result.era == "legacy":
            self._fx.do(ev.ToWorker(ev.Resubscribe(self.generation, timeout)))
            self._restore_log_level()
            # Each wire call has the timeout; the margin bounds the worker itself.
            self.stages.enter(Stage.RESUBSCRIBE, self.generation, extra=timeout)
            return
        self._listeners.resume()
        self._relistening = set(self._subscriptions.relisten_dropped())
        if self._relistening:
            self.stages.enter(Stage.RELISTEN, self.generation)
        else:
            self._settle()

    def resubscribed(self) -> None:
        """The worker reported the resubscription of this connection."""
        if self.stages.stage is Stage.RESUBSCRIBE:
            self._settle()

    def relistened(self, handle_id: Any) -> None:
        """A subscription re-listened by the reconnect was acknowledged (or ended)."""
        self._relistening.discard(handle_id)
        if not self._relistening and self.stages.stage is Stage.RELISTEN:
            self._settle()

    def stage_timeout(self, message: ev.StageTimeout) -> None:
        if self.closed:
            return
        stages = self.stages
        if message.stage is Stage.CONNECT:
            if self.connection.was_ready or stages.settled:
                return
        elif message.generation != self.generation or not stages.owns(message):
            return
        if stages.stage is Stage.RELISTEN:
            entries = self._registry.entries
            waiting = [h for h in self._relistening if h in entries and entries[h].state is EntryState.RELISTENING]
            if not waiting:
                self._settle()  # the rest ended meanwhile (closed, or refused by the server)
                return
        error = stages.error(message)
        logger.warning("%s: %s", self.name, error)
        self._drop_connection()
        if self.ready:
            self._lose_ready()
        self._attempt_failed(error)

    def _era_changed(self, era: str) -> None:
        logger.warning("%s: the peer now speaks the %s era", self.name, era)
        if era == "modern":
            # The legacy session and its subscriptions are gone with the old connection.
            self._fx.do(ev.ToWorker(ev.Reset()))
        for entry in list(self._registry.entries.values()):
            if entry.era == era:
                continue
            if entry.kind == "watch" and era == "modern" and entry.state is not EntryState.DEAD:
                self._subscriptions.become_modern(entry)
                continue
            self._registry.close(entry, ("era_changed", era))

    def lost(self, message: ev.Lost) -> None:
        if not self._current(message.generation):
            return
        # Every transport's words for its loss come in here; they may quote the server's
        # (a close reason, a status line), and any transport, the host's own too, may send them.
        reason = peer_text(message.reason, _REASON_CHARS)
        logger.warning("%s: transport lost: %s", self.name, reason)
        self._lose(reason, ("transport_closed", reason))

    def ready_era(self, generation: int) -> str | None:
        """The era of the ready connection ``generation`` names; None if it names no such one."""
        return self.era if self._current(generation) and self.ready else None

    def keepalive_lost(self, term: Any, text: str) -> None:
        """The ready connection in hand left a keepalive probe unanswered: it is lost (``term``
        is the client's closing reason if it does not reconnect)."""
        logger.warning("%s: %s; the connection is taken as lost", self.name, text)
        self._lose(text, term)

    def _lose(self, reason: str, term: Any) -> None:
        """The connection in hand is gone (``reason`` in words); ``term``: the closing reason
        if the client does not reconnect, and what a reconnecting status says."""
        self.last_error = reason
        self._drop_connection()
        if not self.connection.was_ready:
            self._attempt_failed(ConnectError(f"the connection closed during the handshake: {reason}"))
            return
        if not self.config.reconnect:
            self.stop(term)
            return
        if not self.ready:
            # The attempt opened but was lost before it was ready: it counts as a failed attempt.
            self._attempt_failed(ConnectError(f"the connection closed during the handshake: {reason}"))
            return
        settled = self.stages.settled
        self._lose_ready()
        if not settled:
            # Lost again before the reconnect's resubscription finished: that attempt failed.
            self._attempt_failed(ConnectError(f"the connection closed while resubscribing: {reason}"))
            return
        self.attempts = 0
        self._reconnect(self.config.backoff.delay(1), term)

    def _lose_ready(self) -> None:
        """A ready connection is gone: hold legacy delivery, and re-listen modern subscriptions later."""
        self.connection.move(Move.LOST)
        if self.era == "legacy":
            self._listeners.pause_for_reconnect()
        for entry in self._registry.of_era("modern"):
            # Live, mid-snapshot or mid-re-listen alike: re-listen on the next connection.
            self._subscriptions.stream_dropped(entry)

    def close(self, reason: Any) -> None:
        """The client is going down for good."""
        self.connection.move(Move.CLOSE)
        if self.connect_error is None and not self.connection.was_ready:
            self.connect_error = ConnectError(f"the client stopped while connecting: {reason!r}")
