"""What goes into a session and what comes out of it (sans-IO): small frozen types.

Inputs are the client actor's messages: transport events (tagged with the
generation of the connection they belong to, so a late event of a dropped
connection is recognised and ignored), host commands, and timers or helper
threads reporting back. Effects are what the session asks its shell to do;
the shell performs them in order, then delivers the messages the session queued
(see :class:`Effects`).

Objects the session only passes along (futures, handles, subscribers, the
snapshot) are typed ``Any`` here: the core never calls into them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._filters import NotificationFilter
from ._jsonrpc import Frame

# -- inputs: the transport -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Opened:
    """The connector opened the transport for this generation."""

    generation: int


@dataclass(frozen=True, slots=True)
class OpenFailed:
    generation: int
    error: BaseException


@dataclass(frozen=True, slots=True)
class Frames:
    """A batch of frames the reader of this generation's connection read, in wire order."""

    generation: int
    frames: list[Frame]


@dataclass(frozen=True, slots=True)
class Lost:
    generation: int
    reason: str


@dataclass(frozen=True, slots=True)
class SendFailed:
    """The shell could not send the request with this id (the transport is closed)."""

    request_id: Any


# -- inputs: the host ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendRequest:
    request_id: Any
    method: str
    params: dict[str, Any] | None
    #: A concurrent.futures.Future the host waits on.
    future: Any


@dataclass(frozen=True, slots=True)
class CancelRequest:
    request_id: Any
    reason: str


@dataclass(frozen=True, slots=True)
class RegisterListener:
    """Step 1 of a legacy registration: the entry exists, not yet delivered to."""

    handle: Any
    kind: str
    flt: NotificationFilter
    subscriber: Any


@dataclass(frozen=True, slots=True)
class ActivateListener:
    """Step 3 (after the worker acquired the URIs): the entry is indexed and delivered to."""

    listener_id: Any


@dataclass(frozen=True, slots=True)
class AbandonListener:
    """A registration failed or timed out: forget whatever of it exists."""

    listener_id: Any


@dataclass(frozen=True, slots=True)
class RemoveHandle:
    handle_id: Any


@dataclass(frozen=True, slots=True)
class OpenSubscription:
    handle: Any
    kind: str
    flt: NotificationFilter
    subscriber: Any
    #: A Future resolved with the acknowledged NotificationFilter.
    acknowledged: Any


@dataclass(frozen=True, slots=True)
class CancelSubscription:
    handle_id: Any
    #: None: the host gave up before the acknowledgment (no closing message).
    reason: Any


# -- inputs: timers, helper threads, actors ------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProbeTimeout:
    generation: int
    request_id: Any


@dataclass(frozen=True, slots=True)
class Relisten:
    handle_id: Any
    generation: int


@dataclass(frozen=True, slots=True)
class ResyncDone:
    handle_id: Any
    listen_id: Any
    snapshot: Any
    error: Any = None


@dataclass(frozen=True, slots=True)
class SubscriberDied:
    """The subscriber with this key is dead (its proxy saw it and stopped)."""

    key: Any


# -- the refcount worker's commands and its report -----------------------------------------


@dataclass(frozen=True, slots=True)
class Acquire:
    """Take every URI for a listener, all or nothing (ask)."""

    listener_id: Any
    uris: tuple[str, ...]
    alive: Any  # Callable[[], bool]


@dataclass(frozen=True, slots=True)
class Release:
    """Release exactly the URIs a listener acquired (tell)."""

    listener_id: Any


@dataclass(frozen=True, slots=True)
class Resubscribe:
    """After a reconnect: subscribe every held URI again and report (tell)."""

    generation: int


@dataclass(frozen=True, slots=True)
class Reset:
    """Forget everything without wire traffic: the session that held it is gone."""


@dataclass(frozen=True, slots=True)
class ResubscribeReport:
    """From the worker: the outcome of a :class:`Resubscribe`."""

    generation: int
    resubscribed: frozenset[str]
    failed: dict[str, Any]


# -- effects -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """Send this frame. If ``request_id`` is set and sending fails, feed back :class:`SendFailed`."""

    message: dict[str, Any]
    request_id: Any = None


@dataclass(frozen=True, slots=True)
class CancelOnWire:
    """End an in-flight request: close its stream where the transport can (HTTP), else send ``notice``."""

    request_id: Any
    notice: dict[str, Any]


@dataclass(frozen=True, slots=True)
class OpenTransport:
    """Close what is left of the last connection, wait ``delay``, open anew for ``generation``."""

    generation: int
    delay: float


@dataclass(frozen=True, slots=True)
class ArmTimer:
    """Feed ``event`` back after ``delay`` seconds."""

    delay: float
    event: Any


@dataclass(frozen=True, slots=True)
class Resolve:
    """Complete a host's future with a result."""

    future: Any
    result: Any


@dataclass(frozen=True, slots=True)
class Reject:
    """Fail a host's future (if it is not done yet)."""

    future: Any
    error: BaseException


@dataclass(frozen=True, slots=True)
class ToWorker:
    """Tell the refcount worker."""

    message: Acquire | Release | Resubscribe | Reset


@dataclass(frozen=True, slots=True)
class StartProxy:
    """Start the proxy actor of a subscriber (sets ``slot.ref``)."""

    slot: Any


@dataclass(frozen=True, slots=True)
class RetireProxy:
    """Stop a proxy actor once the messages queued so far are delivered."""

    slot: Any


@dataclass(frozen=True, slots=True)
class TransportNegotiated:
    """Tell the transport the negotiated version (HTTP: headers and the GET stream)."""

    protocol_version: str
    era: str


@dataclass(frozen=True, slots=True)
class FetchSnapshot:
    """Refetch what a modern subscription's acknowledged filter covers, off the actor."""

    handle_id: Any
    listen_id: Any
    acknowledged: NotificationFilter


@dataclass(frozen=True, slots=True)
class Stop:
    """Close the client for good with this reason."""

    reason: Any


Effect = (
    Send
    | CancelOnWire
    | OpenTransport
    | ArmTimer
    | Resolve
    | Reject
    | ToWorker
    | StartProxy
    | RetireProxy
    | TransportNegotiated
    | FetchSnapshot
    | Stop
)

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
            self.todo.append(Resolve(future, result))

    def reject(self, future: Any, error: BaseException) -> None:
        if future is not None:
            self.todo.append(Reject(future, error))

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
