"""What goes into a session and what comes out of it (sans-IO): small immutable tuples.

Inputs are transport events (tagged with the generation of the connection they
belong to, so a late event of a dropped connection is recognised and ignored),
host commands, and timers or helper threads reporting back. Effects are what the
session asks its shell to do; the shell performs them in order, then delivers the
messages the session queued (see :class:`Effects`). Who feeds the inputs and
performs the effects, on which thread: ``exmcp_actors._runtime``.

Objects the session only passes along (futures, handles, subscribers, the
snapshot) are typed ``Any`` here: the core never calls into them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from ._filters import NotificationFilter
from ._jsonrpc import Frame
from ._state import Stage

# -- inputs: the transport -----------------------------------------------------------------


class Opened(NamedTuple):
    """The connector opened the transport for this generation."""

    generation: int
    #: The transport tells when the peer has read what it was sent (``PeerReading``): the
    #: probe's clock waits for that, so a server's start-up does not count as its silence.
    reading_reported: bool = False


class PeerReading(NamedTuple):
    """The peer of this generation's connection has read what it was sent (a stdio child its stdin)."""

    generation: int


class OpenFailed(NamedTuple):
    """The connector could not open the transport for this generation; ``out_of_time``: the
    open ran until the time it was given was up (the open stage's timeout, in effect)."""

    generation: int
    error: BaseException
    out_of_time: bool = False


class Frames(NamedTuple):
    """A batch of frames the reader of this generation's connection read, in wire order."""

    generation: int
    frames: list[Frame]


class Lost(NamedTuple):
    """The connection of this generation ended (the reader says why)."""

    generation: int
    reason: str


class SendFailed(NamedTuple):
    """The shell could not send the request with this id (the transport is closed)."""

    request_id: Any


# -- inputs: the host ----------------------------------------------------------------------


class SendRequest(NamedTuple):
    """A host's request, answered through its future."""

    request_id: Any
    method: str
    params: dict[str, Any] | None
    #: A concurrent.futures.Future the host waits on.
    future: Any


class CancelRequest(NamedTuple):
    """The host stopped waiting for a request (a timeout): cancel it on the wire."""

    request_id: Any
    reason: str


class RegisterListener(NamedTuple):
    """Step 1 of a legacy registration: the entry exists, not yet delivered to.

    With ``activate``, steps 1 and 3 at once: nothing is left for the worker to acquire
    (no URIs, or every one held already), so the entry is indexed and delivered to now.
    """

    handle: Any
    kind: str
    flt: NotificationFilter
    subscriber: Any
    activate: bool = False


class ActivateListener(NamedTuple):
    """Step 3 (after the worker acquired the URIs): the entry is indexed and delivered to."""

    listener_id: Any


class AbandonListener(NamedTuple):
    """A registration failed or timed out: forget whatever of it exists."""

    listener_id: Any


class RemoveHandle(NamedTuple):
    """The host removes a listener, watch or subscription (no closing message follows)."""

    handle_id: Any


class OpenSubscription(NamedTuple):
    """A modern ``subscriptions/listen`` for a handle; the host waits for its acknowledgment."""

    handle: Any
    kind: str
    flt: NotificationFilter
    subscriber: Any
    #: A Future resolved with the acknowledged NotificationFilter.
    acknowledged: Any
    #: A subscription that listens again after the server's graceful answer (a catalog's).
    follows_server: bool = False


class CancelSubscription(NamedTuple):
    """The host cancels a subscription."""

    handle_id: Any
    #: None: the host gave up before the acknowledgment (no closing message).
    reason: Any


class SetRoots(NamedTuple):
    """The host replaced its roots (a legacy peer hears ``notifications/roots/list_changed``)."""

    roots: list[dict[str, Any]]


class SetLogLevel(NamedTuple):
    """The host's log level: ``logging/setLevel`` on a legacy peer, every request's ``_meta`` on a modern one."""

    level: str
    #: A Future resolved once the level is applied (legacy: the wire answer).
    future: Any


class HostAnswered(NamedTuple):
    """A host handler finished a server request: its ``result``, or the ``error`` it raised."""

    request_id: Any
    generation: int
    result: Any = None
    error: Any = None


class CachedPage(NamedTuple):
    """A list page the host wants: a fresh kept one if ``use`` (else none), and the ticket to
    store what it fetches (answers a ``PageLookup``; see ``_list_cache``)."""

    method: str
    cursor: Any
    use: bool


class AuthContextNow(NamedTuple):
    """Who the transport makes requests as now: an opaque string (``Transport.auth_context``),
    for a cache kept outside the session (a resource watch's read)."""


class StorePage(NamedTuple):
    """A fetched list page, as JSON, with its cache hints: kept if its ticket still holds."""

    ticket: Any
    data: bytes
    ttl_ms: int
    scope: str


class LearnTools(NamedTuple):
    """Tools a listing returned (answers those the host may see; see ``_tool_book``)."""

    tools: list[Any]
    #: A whole listing (every page from the first), not one page of it.
    complete: bool


# -- inputs: timers, helper threads, actors ------------------------------------------------


class ProbeTimeout(NamedTuple):
    """The ``server/discover`` probe of this generation got no answer in time."""

    generation: int
    request_id: Any


class StageTimeout(NamedTuple):
    """A stage of this generation's connect or reconnect ran out of time (see ``_stages``)."""

    generation: int
    stage: Stage
    #: Which entry into a stage armed it: only the stage in hand counts.
    serial: int


class IdleFor(NamedTuple):
    """This generation's connection received nothing for the keepalive's seconds: probe it."""

    generation: int


class KeepaliveTimeout(NamedTuple):
    """The keepalive probe with this id, of this generation's connection, went unanswered."""

    generation: int
    request_id: Any


class Relisten(NamedTuple):
    """The backoff after a subscription's own stream dropped is over: listen again."""

    handle_id: Any
    generation: int


class ResyncDone(NamedTuple):
    """The snapshot of a modern resync was fetched (or failed: ``error``)."""

    handle_id: Any
    listen_id: Any
    snapshot: Any
    error: Any = None


class Overflowed(NamedTuple):
    """A handle's pending messages passed its bound: it got its closing message; remove it."""

    handle_id: Any


class SubscriberDied(NamedTuple):
    """The subscriber with this key is dead (its proxy saw it and stopped)."""

    key: Any


# -- the refcount worker's commands and its report -----------------------------------------


class Release(NamedTuple):
    """Release exactly the URIs a listener acquired (tell)."""

    listener_id: Any


class Resubscribe(NamedTuple):
    """After a reconnect: subscribe every held URI again, concurrently, and report (tell)."""

    generation: int
    #: Seconds each wire call may take; a URI not answered in time is reported as failed.
    timeout: float | None = None


class Reset(NamedTuple):
    """Forget everything without wire traffic: the session that held it is gone."""


class ResubscribeReport(NamedTuple):
    """From the worker: the outcome of a :class:`Resubscribe`."""

    generation: int
    resubscribed: frozenset[str]
    failed: dict[str, Any]


# -- effects -------------------------------------------------------------------------------


class Send(NamedTuple):
    """Send this frame. If ``request_id`` is set and sending fails, feed back :class:`SendFailed`."""

    message: dict[str, Any]
    request_id: Any = None


class CancelOnWire(NamedTuple):
    """End an in-flight request: close its stream where the transport can (HTTP), else send
    ``notice`` (None: nothing to send, the server ended it itself)."""

    request_id: Any
    notice: dict[str, Any] | None


class OpenTransport(NamedTuple):
    """Close what is left of the last connection, wait ``delay``, open anew for ``generation``."""

    generation: int
    delay: float


class ArmTimer(NamedTuple):
    """Feed ``event`` back after ``delay`` seconds."""

    delay: float
    event: Any


class DisarmTimers(NamedTuple):
    """Cancel every armed timer whose event is of one of these types: they could only find
    their work done, and an idle client must not wake for them."""

    kinds: tuple[type, ...]


class WatchIdle(NamedTuple):
    """Tell ``IdleFor(generation)`` once its connection received nothing for ``seconds``, and again
    each time it stays so; None: stop watching (the connection is gone)."""

    generation: int
    seconds: float | None


class Settle(NamedTuple):
    """Complete a host's future: with ``result``, or with ``error`` when it is set (unless done)."""

    future: Any
    result: Any = None
    error: BaseException | None = None


class ToWorker(NamedTuple):
    """Tell the refcount worker."""

    message: Release | Resubscribe | Reset


class StartProxy(NamedTuple):
    """Start the proxy actor of a subscriber (sets ``slot.ref``)."""

    slot: Any


class RetireProxy(NamedTuple):
    """Stop a proxy actor once the messages queued so far are delivered."""

    slot: Any


class TransportNegotiated(NamedTuple):
    """Tell the transport the negotiated version (HTTP: headers and the GET stream)."""

    protocol_version: str
    era: str
    #: What the server advertised (HTTP: whether a server with no GET stream promises pushes).
    capabilities: dict[str, Any]


class FetchSnapshot(NamedTuple):
    """Refetch what a modern subscription's acknowledged filter covers, off the actor."""

    handle_id: Any
    listen_id: Any
    acknowledged: NotificationFilter


class RunHostHandler(NamedTuple):
    """Run the host's handler for a server request off the actor; feed back :class:`HostAnswered`."""

    method: str
    request_id: Any
    params: dict[str, Any]
    generation: int


class ProgressNoted(NamedTuple):
    """A checked ``notifications/progress``: pass it to the callback of its token, in order."""

    params: dict[str, Any]


class TaskStatusNoted(NamedTuple):
    """A checked ``notifications/tasks/status``: pass it to the task handle of its id."""

    params: dict[str, Any]


class ElicitationCompleted(NamedTuple):
    """A ``notifications/elicitation/complete`` for an elicitation the client saw: pass it to
    the elicitation handler's ``on_complete`` hook, if it has one."""

    params: dict[str, Any]


class Stop(NamedTuple):
    """Close the client for good with this reason."""

    reason: Any


Effect = (
    Send
    | CancelOnWire
    | OpenTransport
    | ArmTimer
    | DisarmTimers
    | Settle
    | ToWorker
    | StartProxy
    | RetireProxy
    | TransportNegotiated
    | FetchSnapshot
    | RunHostHandler
    | ProgressNoted
    | TaskStatusNoted
    | ElicitationCompleted
    | Stop
    | WatchIdle
)

#: Effects performed once the thread that ran the input has let go of the session monitor:
#: completing a future may run code that is not the library's (a done-callback), and no such
#: code runs under a lock of the library. Every other effect is performed under the monitor,
#: in order, by whichever thread ran the input (see ``exmcp_actors._runtime``).
PERFORMED_AFTER_THE_LOCK: Final = frozenset({Settle})

#: Messages for subscribers: per route (an inbox, or a proxy slot), in order.
Outbox = dict[Any, list[Any]]


@dataclass(slots=True)
class Effects:
    """What one input produced: effects in order, then the messages for subscribers.

    Shared by the session's parts; the shell takes it after each input."""

    todo: list[Effect] = field(default_factory=list)
    out: Outbox = field(default_factory=dict)

    def do(self, effect: Effect) -> None:
        self.todo.append(effect)

    def send(self, message: dict[str, Any], request_id: Any = None) -> None:
        self.todo.append(Send(message, request_id))

    def resolve(self, future: Any, result: Any) -> None:
        if future is not None:
            self.todo.append(Settle(future, result))

    def reject(self, future: Any, error: BaseException) -> None:
        if future is not None:
            self.todo.append(Settle(future, None, error))

    def emit(self, route: Any, message: Any) -> None:
        """Queue a message for a subscriber; delivered after the effects."""
        items = self.out.get(route)
        if items is None:
            items = self.out[route] = []
        items.append(message)

    def take(self) -> tuple[list[Effect], Outbox]:
        todo, out = self.todo, self.out
        self.todo, self.out = [], {}
        return todo, out
