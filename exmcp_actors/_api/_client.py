"""The thread-safe :class:`Client` facade: registrations, removals and the lifecycle of one connection."""

from __future__ import annotations

import copy
import logging
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pykka

from .._delivery._bound import DEFAULT_MAX_PENDING, Bound, check_max_pending
from .._delivery._inbox import Inbox
from .._delivery._targets import CUT, FINAL_ONLY, Subscriber, cut, resolve_subscriber
from .._protocol._errors import (
    ListenerNotFound,
    NotConnected,
    RequestTimeout,
    UseListen,
)
from .._protocol._events import (
    AbandonListener,
    ActivateListener,
    CancelSubscription,
    OpenSubscription,
    Overflowed,
    RegisterListener,
    RemoveHandle,
)
from .._protocol._extensions import server_extensions
from .._protocol._filters import PROMPTS, RESOURCES, TOOLS, NotificationFilter, normalize_filter
from .._protocol._jsonrpc import RequestBuilder
from .._runtime._client_actor import Disconnect, InspectClient
from .._runtime._host_pool import HostRuntime
from .._runtime._lazy_worker import LazyWorker
from .._runtime._refcount_worker import Inspect, SharedBook, inspect_book
from .._runtime._shared import SharedState
from .._util._checks import check_timeout
from ._calls import ServerCalls
from ._catalog import CatalogCalls
from ._handle import FilteredHandle, Handle
from ._listener import Listener
from ._resource_watch import ResourceWatchCalls
from ._subscription import Subscription, Watch
from ._wire_turn import WireTurn

logger = logging.getLogger("exmcp_actors")


def remaining(deadline: float) -> float:
    """What is left of a deadline for a last short step (never less than 0.1 s)."""
    return max(0.1, deadline - time.monotonic())


class Client(ServerCalls, CatalogCalls, ResourceWatchCalls):
    """A connection to one MCP server. Thread-safe: call it from any thread.

    Create it with :func:`connect`. Every blocking call takes ``timeout=`` in seconds.
    """

    def __init__(
        self,
        actor_ref: pykka.ActorRef[Any],
        shared: SharedState,
        ids: RequestBuilder,
        request_timeout: float,
        name: str,
        host: HostRuntime | None = None,
    ) -> None:
        self._ref = actor_ref
        assert shared.monitor is not None  # set as the client actor was made
        self._monitor = shared.monitor
        self._host = host if host is not None else HostRuntime(name)
        self._shared = shared
        self._ids = ids
        self._request_timeout = request_timeout
        self._worker: LazyWorker | None = None
        #: The refcount book the worker shares, for the no-wire shortcuts (set by connect()).
        self._book: SharedBook | None = None
        #: Where this client's host threads take and give back URIs (set by connect()).
        self._turn: WireTurn | None = None
        #: Every handle's bound calls it on overflow (one bound method, not one per handle).
        self._on_overflow = self._overflowed
        self.name = name

    # -- state -----------------------------------------------------------------------------

    @property
    def status(self) -> str:
        """``"connecting"``, ``"ready"``, ``"reconnecting"`` or ``"disconnected"``."""
        return self._shared.status

    @property
    def protocol_version(self) -> str | None:
        return self._shared.protocol_version

    @property
    def era(self) -> str | None:
        """``"legacy"`` (2024-11-05 .. 2025-11-25) or ``"modern"`` (2026-07-28)."""
        return self._shared.era

    @property
    def server_info(self) -> dict[str, Any]:
        return self._shared.server_info

    @property
    def server_capabilities(self) -> dict[str, Any]:
        return self._shared.server_capabilities

    @property
    def server_extensions(self) -> dict[str, Any]:
        """The extensions (SEP-2133) the server declared, ``{identifier: settings}``, from its
        ``initialize`` result or ``server/discover``: a copy, ``{}`` when it declared none."""
        return copy.deepcopy(server_extensions(self._shared.server_capabilities))

    @property
    def instructions(self) -> str | None:
        return self._shared.instructions

    @property
    def discover_result(self) -> dict[str, Any] | None:
        """The ``server/discover`` result of a 2026-07-28 connection (None on a legacy one):
        keep it, and ``connect(..., discover_result=...)`` connects with no round trip."""
        result = self._shared.discover_result
        return None if result is None else dict(result)

    @property
    def actor_ref(self) -> pykka.ActorRef[Any]:
        """The client actor, for hosts that want to watch it (``actor_ref.actor_stopped``)."""
        return self._ref

    def __repr__(self) -> str:
        return f"<Client {self.name} {self.status} {self.protocol_version or ''}>"

    # -- plumbing --------------------------------------------------------------------------

    def _ask(self, message: Any, timeout: float) -> Any:
        try:
            return self._ref.ask(message, timeout=timeout)
        except pykka.ActorDeadError:
            raise NotConnected("the client is disconnected") from None
        except pykka.Timeout:
            raise RequestTimeout(f"the client did not answer within {timeout}s") from None

    # -- legacy listeners ------------------------------------------------------------------

    def subscribe_notifications(
        self, filter: Any, subscriber: Any = None, timeout: float = 5.0, *, max_pending: int = DEFAULT_MAX_PENDING
    ) -> Listener:
        """Register a legacy listener (MCP 2024-11-05 .. 2025-11-25).

        Args:
            filter: ``toolsListChanged`` / ``promptsListChanged`` / ``resourcesListChanged``
                (booleans) and ``resourceSubscriptions`` (URIs).
            subscriber: None (the calling thread, inbox on the listener), a Thread,
                a pykka ActorRef, or an object with ``put()``.
            timeout: seconds for the whole registration, including ``resources/subscribe``.
            max_pending: how many messages may wait for the subscriber; past it change signals
                are coalesced and anything else closes the listener with ``("overflow", max_pending)``.

        Raises:
            FilterError, NotConnected, UseListen, SubscriberNotAlive, SubscribeFailed, RequestTimeout.
        """
        flt = normalize_filter(filter, allow_tasks=self.era == "modern")
        if flt.task_ids is not None:
            # A listen() filter given to the legacy API on a modern peer: name the API to use.
            raise UseListen("taskIds belongs to listen(), and this server speaks MCP 2026-07-28: use listen()")
        listener = self._register_listener(flt, subscriber, timeout, max_pending, kind="listener")
        assert isinstance(listener, Listener)
        return listener

    def _new_handle(
        self, flt: NotificationFilter, subscriber: Any, kind: str, era: str, max_pending: int
    ) -> tuple[Handle, Subscriber]:
        """The host's handle, with its own inbox unless its subscriber is an actor or a put() object."""
        resolved = resolve_subscriber(subscriber)
        handle_id = f"{kind}-{self._ids.next_id()}"
        bound = Bound(max_pending, self._on_overflow, handle_id)
        inbox = Inbox(bound) if resolved.target is None else None
        handle: Handle
        if kind == "watch":
            handle = Watch(handle_id, self, resolved.owner, flt, inbox, era)
        elif kind == "subscription":
            handle = Subscription(handle_id, self, resolved.owner, flt, inbox)
        else:
            handle = Listener(handle_id, self, resolved.owner, flt, inbox)
        handle._bound = bound
        return handle, resolved

    def _register_listener(
        self, flt: NotificationFilter, subscriber: Any, timeout: float, max_pending: int, *, kind: str
    ) -> Handle:
        wait = check_timeout("timeout", timeout)
        limit = check_max_pending(max_pending)
        deadline = time.monotonic() + wait
        handle, resolved = self._new_handle(flt, subscriber, kind, "legacy", limit)
        handle_id = handle.id
        uris = flt.uris
        try:
            if not uris or self._held_path(handle_id, uris):
                # Nothing for the wire (no URIs, or every one held already and taken on this
                # thread): registered and activated in one step.
                self._register_now(RegisterListener(handle, kind, flt, resolved, activate=True), wait)
            elif self._ready_for("legacy"):
                # The likely case: the URIs first (checking the subscriber before each wire call),
                # then one step that checks again and releases if it refuses.
                self._acquire(handle_id, uris, resolved.alive, deadline, wait)
                self._register_now(RegisterListener(handle, kind, flt, resolved, activate=True), remaining(deadline))
            else:
                # Registered first: the session says why it cannot (era, status) before any wire call.
                self._run(RegisterListener(handle, kind, flt, resolved), wait)
                self._acquire(handle_id, uris, resolved.alive, deadline, wait)
                self._run(ActivateListener(handle_id), remaining(deadline))
        except BaseException:
            # Whatever failed: forget what of it exists, and give back whatever this handle still
            # holds (both are no-ops when there is nothing left), on this thread while it can.
            self._abandon(handle_id, deadline)
            if self._turn is not None:
                self._turn.give_back_quietly(handle_id, time.monotonic() + remaining(deadline))
            raise
        return handle

    def _register_now(self, message: RegisterListener, wait: float) -> None:
        """Register and activate in one step, on this thread."""
        self._run(message, wait)

    def _abandon(self, handle_id: Any, deadline: float) -> None:
        """Forget a registration that failed, within what is left of its deadline; if the session
        stays busy past it, the client actor does it next (an abandon sends nothing, so running
        it later reorders nothing on the wire). Never raises over the failure being handled."""
        message = AbandonListener(handle_id)
        try:
            self._run(message, remaining(deadline))
        except RequestTimeout:
            self._monitor.defer(message)  # to the client actor: this thread does not hold it
        except Exception:
            logger.exception("%s: forgetting the failed registration %s failed", self.name, handle_id)

    def _held_path(self, handle_id: Any, uris: tuple[str, ...]) -> bool:
        """Take every URI on this thread if all are held already (see ``_refcount_worker``)."""
        return self._ready_for("legacy") and self._book is not None and self._book.take_held(handle_id, uris)

    def _ready_for(self, era: str) -> bool:
        """A hint only (the client actor decides): the client looked ready in ``era`` just now."""
        shared = self._shared
        return shared.status == "ready" and shared.era == era

    def _acquire(self, handle_id: Any, uris: tuple[str, ...], alive: Any, deadline: float, wait: float) -> None:
        """Take the URIs on this thread, in this client's one wire turn (see ``_wire_turn``)."""
        assert self._turn is not None
        self._turn.take(handle_id, uris, alive, deadline, wait)

    def _overflowed(self, handle_id: Any) -> None:
        # Raised inside a delivery, where the session cannot be entered again: run next.
        self._monitor.defer(Overflowed(handle_id))

    def unsubscribe_notifications(self, listener: Listener, timeout: float = 5.0) -> None:
        """Remove a listener (or a legacy watch) and release its URIs. No closing message follows.

        Raises:
            ListenerNotFound: it was already removed or closed, or belongs to another client.
                On a stopped client this is a no-op.
            RequestTimeout: the session, or the wire turn its unsubscribe needs, stayed busy past
                ``timeout``; once the listener is removed its URIs are still released, later.
            TypeError: ``listener`` is not a listener.
        """
        if not isinstance(listener, FilteredHandle):
            raise TypeError(f"unsubscribe_notifications() takes a Listener, got {type(listener).__name__}")
        self._remove_handle(listener, timeout=timeout)

    def _check_own(self, handle: Handle) -> None:
        if handle.client is not self:
            raise ListenerNotFound(f"{handle!r} belongs to another client ({handle.client!r}), not to {self!r}")

    def _remove_handle(self, handle: Handle, *, timeout: float, release_later: bool = False) -> None:
        """``release_later``: URIs whose release cannot be sent within ``timeout`` are released
        by the worker later, without raising RequestTimeout (a handle's ``close()``)."""
        self._check_own(handle)
        wait = check_timeout("timeout", timeout)
        # From here on nothing new starts being delivered to it, whatever the outcome below.
        cut(handle, CUT)
        if not self._ref.is_alive():
            return  # a stopped client holds nothing: nothing to remove
        deadline = time.monotonic() + wait
        try:
            self._run(RemoveHandle(handle.id), wait)
        except ListenerNotFound:
            if self._shared.status == "disconnected":
                return  # the client stopped meanwhile, and closed it: nothing left to remove
            raise
        handle._finish()
        if self._turn is None:
            return
        try:
            # Its unsubscribes (if any) are on the wire, and answered, when this returns.
            self._turn.give_back(handle.id, deadline, wait)
        except RequestTimeout:
            if not release_later:
                raise

    # -- modern subscriptions --------------------------------------------------------------

    def listen(
        self, filter: Any, subscriber: Any = None, timeout: float = 5.0, *, max_pending: int = DEFAULT_MAX_PENDING
    ) -> Subscription:
        """Open a ``subscriptions/listen`` stream (MCP 2026-07-28 peers only) and wait for its acknowledgment.

        ``max_pending`` bounds the messages waiting for the subscriber, as for
        :meth:`subscribe_notifications` (the closing message is a ``SubscriptionClosed``).

        Raises:
            FilterError, NotConnected, ListenRequiresModern, SubscriberNotAlive,
            ProtocolError (a wider acknowledgment), RequestError, RequestTimeout.
        """
        flt = normalize_filter(filter, allow_tasks=True, allow_methods=False)
        handle = self._open_subscription(flt, subscriber, timeout, max_pending, kind="subscription")
        assert isinstance(handle, Subscription)
        return handle

    def _open_subscription(
        self,
        flt: NotificationFilter,
        subscriber: Any,
        timeout: float,
        max_pending: int,
        *,
        kind: str,
        follows_server: bool = False,
    ) -> Handle:
        """Open a modern subscription or watch and wait for its acknowledgment.
        ``follows_server``: listen again after the server's graceful answer too (a catalog's)."""
        wait = check_timeout("timeout", timeout)
        limit = check_max_pending(max_pending)
        deadline = time.monotonic() + wait
        handle, resolved = self._new_handle(flt, subscriber, kind, "modern", limit)
        handle_id = handle.id
        acknowledged: Future[NotificationFilter] = Future()
        self._run(OpenSubscription(handle, kind, flt, resolved, acknowledged, follows_server), wait)
        try:
            acknowledged.result(max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            try:
                # Waits for the session as long as any command does (not only what is left of the
                # deadline), like a timed-out request's cancellation: given up, the listen would
                # stay open on the server with no handle to end it.
                self._run(CancelSubscription(handle_id, None))
            except ListenerNotFound:
                pass  # ended meanwhile: nothing left to cancel
            raise RequestTimeout(f"subscriptions/listen was not acknowledged within {wait}s") from None
        return handle

    def _cancel_subscription(self, subscription: Subscription, *, timeout: float) -> None:
        self._check_own(subscription)
        wait = check_timeout("timeout", timeout)
        cut(subscription, FINAL_ONLY)  # its backlog is dropped; its closing message still goes
        if not self._ref.is_alive():
            return
        try:
            self._run(CancelSubscription(subscription.id, "cancelled"), wait)
        except ListenerNotFound:
            if self._shared.status == "disconnected":
                return  # the client stopped meanwhile, and closed it
            raise

    def _snapshot(self, ack: NotificationFilter) -> dict[str, Any]:
        """What a resync refetches, according to the acknowledged filter: from the server, since
        a list_changed may have gone unheard while the stream was down (the fresh pages are kept)."""
        snapshot: dict[str, Any] = {}
        if TOOLS in ack.categories:
            snapshot["tools"] = self.list_tools(cache=False)
        if PROMPTS in ack.categories:
            snapshot["prompts"] = self.list_prompts(cache=False)
        if RESOURCES in ack.categories:
            snapshot["resources"] = self.list_resources(cache=False)
        if ack.uris:
            snapshot["resourceContents"] = {uri: self.read_resource(uri) for uri in ack.uris}
        return snapshot

    # -- era-agnostic ----------------------------------------------------------------------

    def watch(
        self, filter: Any, subscriber: Any = None, timeout: float = 5.0, *, max_pending: int = DEFAULT_MAX_PENDING
    ) -> Watch:
        """Listen in whichever era the peer speaks, with the legacy message vocabulary.

        A legacy listener on a legacy peer, a ``subscriptions/listen`` on a modern
        one; messages are :class:`Notification`, :class:`Reconnected` and
        :class:`Closed` either way. A watch carries on (as a subscription) when a
        legacy peer comes back modern after a reconnect. ``max_pending`` as for
        :meth:`subscribe_notifications`.
        """
        if self.era == "modern":
            flt = normalize_filter(filter, allow_tasks=True, allow_methods=False)
            handle = self._open_subscription(flt, subscriber, timeout, max_pending, kind="watch")
        else:
            flt = normalize_filter(filter)
            handle = self._register_listener(flt, subscriber, timeout, max_pending, kind="watch")
        assert isinstance(handle, Watch)
        return handle

    # -- lifecycle -------------------------------------------------------------------------

    def disconnect(self, timeout: float = 5.0) -> None:
        """Close the transport and every handle (``Closed(..., "disconnected")``). Idempotent."""
        wait = check_timeout("timeout", timeout)
        self._begin_disconnect()
        self._wait_stopped(wait)
        for handle in self._shared.disconnected_handles:  # a put() still blocked may finish, no more
            cut(handle, CUT)
        self._cut_resource_watches()

    def _begin_disconnect(self) -> None:
        """Ask the client actor to disconnect, and return at once (interpreter exit asks every
        client first, then waits for them all)."""
        try:
            self._ref.tell(Disconnect())
        except pykka.ActorDeadError:
            pass

    def _wait_stopped(self, timeout: float) -> None:
        """Wait for the client actor, then every actor and thread it started, to end."""
        deadline = time.monotonic() + timeout
        self._shared.finished.wait(timeout)
        if self._worker is not None:
            self._worker.actor_stopped.wait(max(0.0, deadline - time.monotonic()))
        self._shared.join_children(deadline)

    def _inspect(self, timeout: float = 5.0) -> dict[str, Any]:
        """Internal counters, for tests and diagnostics."""
        state = dict(self._ask(InspectClient(), timeout))
        worker = self._worker.started if self._worker is not None else None
        if worker is not None and worker.is_alive():
            # Asked, not read: its answer comes after the work it was given before.
            state["refcount"] = worker.ask(Inspect(), timeout=timeout)
        elif self._book is not None:
            state["refcount"] = inspect_book(self._book)  # never started: nothing is queued
        return state

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.disconnect()
