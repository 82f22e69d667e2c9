"""Server requests the host answers, and notifications meant for the host (sans-IO).

``sampling/createMessage`` and ``elicitation/create`` (form, or URL mode once its URL
passed ``_elicit_url``) run the host's handler:
the session emits :class:`~._events.RunHostHandler`, the shell runs it off the
reader and off the actor and feeds back :class:`~._events.HostAnswered`, which
becomes the answer frame. ``roots/list`` is answered here from the roots the
host set. A ``notifications/cancelled`` for a request still in a handler means
no answer is ever sent for it. Progress and task status go to the shell
(:class:`~._events.ProgressNoted`, :class:`~._events.TaskStatusNoted`); log
messages are checked, then routed to listeners like any notification, as is a
``notifications/elicitation/complete`` for an id the host was handed (its hook runs
through :class:`~._events.ElicitationCompleted`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from . import _events as ev
from . import _jsonrpc as rpc
from ._elicit import SeenElicitations
from ._filters import ELICITATION_COMPLETE, LOG_MESSAGE, TASK_NOTIFICATIONS
from ._host_checks import (
    CANCELLED,
    ELICITATION,
    HOST_METHODS,
    PROGRESS,
    ROOTS,
    ROOTS_CHANGED,
    SAMPLING,
    HostAbilities,
    check_cancelled,
    check_log,
    check_progress,
    check_request,
    check_task_status,
    finish_answer,
)
from ._host_tasks import TASK_METHODS, ClientTasks
from ._peer_text import peer_text
from ._ratelog import RateLimitedLog
from ._sampling_result import fit_version

if TYPE_CHECKING:
    from ._handshake import Negotiated

logger = logging.getLogger("exmcp_actors")

#: Warnings about a server's bad notifications: at most one per this many seconds.
WARN_INTERVAL = 5.0
#: Server requests waiting for a host handler at once; more get -32603 at once.
MAX_IN_HANDLERS = 64
#: Server requests the library itself knows: never handed to ``on_request``.
KNOWN_METHODS: frozenset[str] = frozenset(("ping", *HOST_METHODS, *TASK_METHODS))
#: The in-handler key of a task-augmented request: (TASK_KEY, task id), never a JSON-RPC id.
TASK_KEY = "task"


class HostRequests:
    """The session's part for what the server asks of, or tells, the host."""

    def __init__(
        self,
        effects: ev.Effects,
        abilities: HostAbilities,
        roots: list[dict[str, Any]],
        name: str,
        seen: SeenElicitations | None = None,
    ) -> None:
        self.effects = effects
        self.abilities = abilities
        self.roots = roots
        self.name = name
        #: request id -> (method, params) for requests whose handler has not answered yet.
        self.in_handler: dict[Any, tuple[str, dict[str, Any]]] = {}
        self.tasks = ClientTasks(effects)
        self.answers_seen = 0  # for tests: handler outcomes the session has taken
        self._warned_at = -WARN_INTERVAL
        self._dropped = 0
        #: The URL elicitations handed to the host: only these may be reported complete.
        self.seen = SeenElicitations() if seen is None else seen
        #: A handler that returns junk, or a server that sends junk, may do so at every request.
        self._log = RateLimitedLog(logger)

    def on_request(self, msg: rpc.ServerRequest, generation: int) -> bool:
        """Answer or start answering a request the host handles; False if it is not one."""
        method = msg.method
        if method in TASK_METHODS and (self.abilities.sampling or self.abilities.elicitation):
            self.tasks.on_request(msg)
            return True
        if not self.abilities.answers(method):
            return self._custom(msg, generation)
        params = {} if msg.params is None else msg.params  # roots/list may come without params
        why = check_request(method, params, self.abilities, needs_id=True)
        if why is not None:
            self._log.warning(
                f"refused {method}", "%s: refused a malformed %s from the server: %s", self.name, method, why
            )
            self.effects.send(rpc.error_frame(msg.id, rpc.INVALID_PARAMS, why))
        elif method == ROOTS:
            self.effects.send(rpc.result_frame(msg.id, {"roots": [dict(root) for root in self.roots]}))
        elif len(self.in_handler) >= MAX_IN_HANDLERS:
            self.effects.send(rpc.error_frame(msg.id, rpc.INTERNAL_ERROR, "the client is busy with other requests"))
        else:
            assert isinstance(params, dict)
            key: Any = msg.id
            if isinstance(params.get("task"), dict):  # task-augmented: answered now, run as a task
                task_id = self.tasks.create(msg.id, params["task"])
                if task_id is None:
                    self.effects.send(rpc.error_frame(msg.id, rpc.INTERNAL_ERROR, "the client runs too many tasks"))
                    return True
                key = (TASK_KEY, task_id)
                params = {name: value for name, value in params.items() if name != "task"}
            if method == ELICITATION and params.get("mode") == "url":
                self.seen.note(params["elicitationId"])
            self.in_handler[key] = (method, params)
            self.effects.do(ev.RunHostHandler(method, key, params, generation))
        return True

    def _custom(self, msg: rpc.ServerRequest, generation: int) -> bool:
        """A request the library does not know goes to ``on_request``; False without one (or for
        a method the library knows but this host does not answer: -32601 as ever)."""
        if not self.abilities.custom or msg.method in KNOWN_METHODS:
            return False
        if msg.params is not None and not isinstance(msg.params, dict):
            self.effects.send(rpc.error_frame(msg.id, rpc.INVALID_PARAMS, "params must be an object"))
        elif len(self.in_handler) >= MAX_IN_HANDLERS:
            self.effects.send(rpc.error_frame(msg.id, rpc.INTERNAL_ERROR, "the client is busy with other requests"))
        else:
            params = {} if msg.params is None else msg.params
            self.in_handler[msg.id] = (msg.method, params)
            self.effects.do(ev.RunHostHandler(msg.method, msg.id, params, generation))
        return True

    def answered(self, message: ev.HostAnswered, current_generation: int, negotiated: Negotiated | None = None) -> None:
        """A host handler finished: answer, unless the request was cancelled or its connection is
        gone; the ``negotiated`` revision shapes a sampling result."""
        self.answers_seen += 1
        waiting = self.in_handler.pop(message.request_id, None)
        if waiting is None or message.generation != current_generation:
            return
        method, params = waiting
        key = message.request_id
        result: dict[str, Any] | None = None
        why: str | None = f"the host's {method} handler failed: {message.error}"
        if message.error is None:
            result, why = finish_answer(method, params, message.result)
            if result is not None and method == SAMPLING:
                result, why = fit_version(result, negotiated.protocol_version if negotiated else None)
            if why is not None:
                # One kind for every custom method: the server names those, as many as it likes.
                kind = method if method in KNOWN_METHODS else "on_request"
                self._log.error(kind, "%s: %s; answering -32603, not the result", self.name, why)
                why = f"internal error: {why}"
        if isinstance(key, tuple) and key[0] == TASK_KEY:
            self.tasks.finished(key[1], result, why)
        elif result is None:
            self.effects.send(rpc.error_frame(key, rpc.INTERNAL_ERROR, str(why)))
        else:
            self.effects.send(rpc.result_frame(key, result))

    def set_roots(self, message: ev.SetRoots, legacy_ready: bool) -> None:
        self.roots = list(message.roots)
        if legacy_ready and self.abilities.roots:
            self.effects.send(rpc.notification(ROOTS_CHANGED))

    def on_notification(self, method: str, params: dict[str, Any]) -> bool:
        """Handle a notification meant for the host. True: done; False: route it to listeners."""
        if method == CANCELLED:
            why = check_cancelled(params)
            if why is None:
                self._cancelled(params.get("requestId"))
        elif method == PROGRESS:
            why = check_progress(params)
            if why is None:
                self.effects.do(ev.ProgressNoted(params))
        elif method in TASK_NOTIFICATIONS:
            why = check_task_status(params)
            if why is None:
                self.effects.do(ev.TaskStatusNoted(params))
                return False
        elif method == ELICITATION_COMPLETE:
            return self._completed(params)
        elif method == LOG_MESSAGE:
            why = check_log(params)
            if why is None:
                return False
        else:
            return False
        if why is not None:
            self._warn(method, why, params)
        return True

    def _completed(self, params: dict[str, Any]) -> bool:
        """An elicitation the host was handed reaches its hook and the listeners; another is ignored
        (the spec says so of unknown and already-completed ids)."""
        elicitation_id = params.get("elicitationId")
        if self.seen.take(elicitation_id):
            self.effects.do(ev.ElicitationCompleted(params))
            return False
        shown = peer_text(elicitation_id, quote=True)
        self._log.info("unknown-elicitation", "%s: ignored the completion of unknown elicitation %s", self.name, shown)
        return True

    def _cancelled(self, request_id: Any) -> None:
        if self.in_handler.pop(request_id, None) is not None:
            shown = peer_text(request_id, quote=True)
            logger.info("%s: the server cancelled request %s; its answer will not be sent", self.name, shown)

    def _warn(self, method: str, why: str, params: Any) -> None:
        self._dropped += 1
        now = time.monotonic()
        if now - self._warned_at >= WARN_INTERVAL:
            self._warned_at = now
            logger.warning(
                "%s: dropped a malformed %s from the server (%s; %d dropped so far): %.200r",
                self.name,
                method,
                why,
                self._dropped,
                params,
            )
