"""Keepalive (sans-IO): probe a connection that has been silent too long, and take an
unanswered probe as a lost connection.

The shell watches for the silence (``WatchIdle``: it compares a last-received stamp when
its timer fires, so traffic costs no timer churn) and reports it as ``IdleFor``. The probe
is the era's cheapest request: ``ping`` for a legacy peer, ``server/discover`` for a
2026-07-28 one (which has no ping). Any answer, an error too, says the peer is there; no
answer within :func:`probe_bound`, or the transport failing the probe, is a loss, which
the connection's life handles as any other (a reconnect, or the client's close with
``("keepalive_timeout", seconds)``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from . import _events as ev
from ._config import SessionConfig
from ._errors import TransportError
from ._handshake import with_modern_meta
from ._jsonrpc import Answer, RequestBuilder, RequestFailed
from ._peer_text import peer_text
from ._pending import PendingTable

logger = logging.getLogger("exmcp_actors")

#: The longest a probe waits for its answer, whatever the keepalive: a live peer answers a
#: ping at once, and a long keepalive must not also mean a long wait to notice a dead peer.
MAX_PROBE_WAIT: Final = 10.0


def probe_bound(keepalive: float) -> float:
    """Seconds a keepalive probe may go unanswered."""
    return min(keepalive, MAX_PROBE_WAIT)


class Keepalive:
    """The keepalive part of a session.

    ``current(generation)`` says whether an event belongs to the ready connection in hand and
    gives its era; ``lost(reason_term, text)`` takes that connection as lost."""

    def __init__(
        self,
        config: SessionConfig,
        effects: ev.Effects,
        ids: RequestBuilder,
        pending: PendingTable,
        current: Callable[[int], str | None],
        lost: Callable[[Any, str], None],
    ) -> None:
        self._config = config
        self._fx = effects
        self._ids = ids
        self._pending = pending
        self._current = current
        self._lost = lost
        #: The probe in flight: (generation, request id), or None.
        self._probe: tuple[int, Any] | None = None
        #: Probes sent and answered, for tests and diagnostics.
        self.sent = 0
        self.answered = 0

    def inputs(self) -> dict[type, Callable[[Any], None]]:
        """The session inputs it handles, and how."""
        return {ev.IdleFor: self.idle, ev.KeepaliveTimeout: self.timed_out}

    def idle(self, message: ev.IdleFor) -> None:
        """The connection was silent for the keepalive's seconds: probe it (once at a time)."""
        seconds = self._config.keepalive
        era = self._current(message.generation)
        if seconds is None or era is None:
            return
        probe = self._probe
        if probe is not None and probe[0] == message.generation:
            return  # its answer, or its timeout, is still to come
        request_id = self._ids.next_id()
        if era == "legacy":
            method, params = "ping", None
        else:
            method = "server/discover"
            params = with_modern_meta(None, self._config.client_info, self._config.capabilities)
        self._probe = (message.generation, request_id)
        self._pending.add(request_id, method, callback=self._answer)
        self.sent += 1
        self._fx.send(RequestBuilder.request(method, params, request_id), request_id)
        self._fx.do(ev.ArmTimer(probe_bound(seconds), ev.KeepaliveTimeout(message.generation, request_id)))

    def _answer(self, answer: Answer) -> None:
        probe, self._probe = self._probe, None
        if probe is None or probe[1] != answer.id:
            return
        if isinstance(answer, RequestFailed) and isinstance(answer.error, TransportError):
            # The transport could not carry the probe (an HTTP POST refused): the peer is gone.
            text = f"the keepalive probe failed: {peer_text(str(answer.error), 1000)}"
            self._lost(("keepalive_failed", peer_text(str(answer.error), 1000)), text)
            return
        self.answered += 1

    def timed_out(self, message: ev.KeepaliveTimeout) -> None:
        probe = self._probe
        if probe != (message.generation, message.request_id) or self._current(message.generation) is None:
            return
        self._probe = None
        self._pending.pop(message.request_id)
        seconds = self._config.keepalive
        assert seconds is not None  # only a keepalive arms this timer
        bound = probe_bound(seconds)
        self._lost(("keepalive_timeout", seconds), f"no answer to a keepalive probe in {bound:g}s")
