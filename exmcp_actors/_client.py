"""The public face: ``connect()`` and the thread-safe :class:`Client` facade."""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pykka

from ._actor import (
    AbandonListener,
    ActivateListener,
    CancelRequest,
    CancelSubscription,
    ClientActor,
    Config,
    Disconnect,
    InspectClient,
    OpenSubscription,
    RegisterListener,
    RemoveHandle,
    SendRequest,
    SharedState,
    Start,
)
from ._backoff import Backoff
from ._errors import ConnectError, Error, NotConnected, ProtocolError, RequestTimeout, UseListen
from ._handle import Handle
from ._listener import Listener
from ._protocol._filters import PROMPTS, RESOURCES, TOOLS, NotificationFilter, normalize_filter
from ._protocol._handshake import PROTOCOL_MODES, ProtocolMode
from ._protocol._jsonrpc import RequestBuilder
from ._refcount import Acquire, Inspect, RefcountWorker, Release
from ._subscriber import Inbox, Subscriber, resolve_subscriber
from ._subscription import Subscription, Watch
from ._transport._base import Transport

logger = logging.getLogger("exmcp_actors")

DEFAULT_CLIENT_INFO = {"name": "exmcp_actors", "version": "0.1.0"}
#: Most pages a list_* call follows before deciding the server loops.
MAX_PAGES = 10_000
_client_numbers = itertools.count(1)


def make_transport(transport: Any) -> Transport:
    """A Transport from what the host passed: a Transport, a URL string, or an argv list."""
    if isinstance(transport, Transport):
        return transport
    if isinstance(transport, str):
        scheme = transport.split(":", 1)[0].lower()
        if scheme in ("ws", "wss"):
            from ._transport._websocket import WebSocketTransport

            return WebSocketTransport(transport)
        if scheme in ("http", "https"):
            from ._transport.http import HttpTransport

            return HttpTransport(transport)
        raise ValueError(f"unsupported URL scheme {scheme!r} in {transport!r}: use ws://, wss://, http:// or https://")
    if isinstance(transport, Sequence) and transport and all(isinstance(a, str) for a in transport):
        from ._transport._stdio import StdioTransport

        return StdioTransport(list(transport))
    raise TypeError(
        "transport must be a Transport, a ws:// / http:// URL string, or a non-empty argv list of strings, "
        f"got {transport!r}"
    )


def _check_timeout(name: str, value: Any) -> float:
    # NaN and infinity are refused too: every wait here must end.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


class Client:
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
    ) -> None:
        self._ref = actor_ref
        self._shared = shared
        self._ids = ids
        self._request_timeout = request_timeout
        self._worker: pykka.ActorRef[Any] | None = None
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
    def instructions(self) -> str | None:
        return self._shared.instructions

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

    def request(self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None) -> Any:
        """Send a raw request and return its ``result``.

        Raises:
            RequestError: the server answered with an error.
            RequestTimeout: no answer in time (``notifications/cancelled`` is sent).
            NotConnected: the client is not ready, or the connection dropped meanwhile.
        """
        if not isinstance(method, str) or not method:
            raise TypeError(f"method must be a non-empty string, got {method!r}")
        if params is not None and not isinstance(params, dict):
            raise TypeError(f"params must be a dict or None, got {type(params).__name__}")
        wait = self._request_timeout if timeout is None else _check_timeout("timeout", timeout)
        request_id = self._ids.next_id()
        future: Future[Any] = Future()
        try:
            self._ref.tell(SendRequest(request_id, method, params, future))
        except pykka.ActorDeadError:
            raise NotConnected("the client is disconnected") from None
        try:
            return future.result(wait)
        except FutureTimeout:
            try:
                self._ref.tell(CancelRequest(request_id, "timeout"))
            except pykka.ActorDeadError:
                pass
            raise RequestTimeout(f"{method} got no answer within {wait}s") from None

    def _paginate(self, method: str, key: str, timeout: float | None) -> list[Any]:
        items: list[Any] = []
        cursor: Any = None
        seen: set[Any] = set()
        for _ in range(MAX_PAGES):
            result = self.request(method, {"cursor": cursor} if cursor is not None else None, timeout=timeout)
            page = result.get(key) if isinstance(result, dict) else None
            if not isinstance(page, list):
                raise ProtocolError(f"{method} result has no {key!r} list: {result!r}")
            items.extend(page)
            cursor = result.get("nextCursor")
            if cursor is None:
                return items
            if cursor in seen:
                raise ProtocolError(f"{method} repeated the cursor {cursor!r}")
            seen.add(cursor)
        raise ProtocolError(f"{method} returned more than {MAX_PAGES} pages")

    # -- MCP requests ----------------------------------------------------------------------

    def ping(self, *, timeout: float | None = None) -> None:
        """``ping`` (legacy peers only: 2026-07-28 has no ping)."""
        if self.era == "modern":
            raise Error("ping does not exist in MCP 2026-07-28", reason=("legacy_only", "ping"))
        self.request("ping", timeout=timeout)

    def list_tools(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every tool, all pages followed."""
        return self._paginate("tools/list", "tools", timeout)

    def list_resources(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every resource, all pages followed."""
        return self._paginate("resources/list", "resources", timeout)

    def list_prompts(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every prompt, all pages followed."""
        return self._paginate("prompts/list", "prompts", timeout)

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *, timeout: float | None = None) -> Any:
        """``tools/call``; returns the result dict."""
        return self.request("tools/call", {"name": name, "arguments": arguments or {}}, timeout=timeout)

    def read_resource(self, uri: str, *, timeout: float | None = None) -> Any:
        """``resources/read``; returns the result dict."""
        return self.request("resources/read", {"uri": uri}, timeout=timeout)

    def get_prompt(self, name: str, arguments: dict[str, Any] | None = None, *, timeout: float | None = None) -> Any:
        """``prompts/get``; returns the result dict."""
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        return self.request("prompts/get", params, timeout=timeout)

    def subscribe_resource(self, uri: str, *, timeout: float | None = None) -> None:
        """Direct ``resources/subscribe``: NOT refcounted with listeners (legacy only)."""
        self._legacy_only("resources/subscribe")
        self.request("resources/subscribe", {"uri": uri}, timeout=timeout)

    def unsubscribe_resource(self, uri: str, *, timeout: float | None = None) -> None:
        """Direct ``resources/unsubscribe``: also silences listeners naming ``uri`` (legacy only)."""
        self._legacy_only("resources/unsubscribe")
        self.request("resources/unsubscribe", {"uri": uri}, timeout=timeout)

    def _legacy_only(self, method: str) -> None:
        if self.era == "modern":
            raise UseListen(f"{method} does not exist in MCP 2026-07-28; use listen()")

    # -- legacy listeners ------------------------------------------------------------------

    def subscribe_notifications(self, filter: Any, subscriber: Any = None, timeout: float = 5.0) -> Listener:
        """Register a legacy listener (MCP 2024-11-05 .. 2025-11-25).

        Args:
            filter: ``toolsListChanged`` / ``promptsListChanged`` / ``resourcesListChanged``
                (booleans) and ``resourceSubscriptions`` (URIs).
            subscriber: None (the calling thread, inbox on the listener), a Thread,
                a pykka ActorRef, or an object with ``put()``.
            timeout: seconds for the whole registration, including ``resources/subscribe``.

        Raises:
            FilterError, NotConnected, UseListen, SubscriberNotAlive, SubscribeFailed, RequestTimeout.
        """
        flt = normalize_filter(filter)
        listener = self._register_listener(flt, subscriber, timeout, kind="listener")
        assert isinstance(listener, Listener)
        return listener

    def _new_handle(self, flt: NotificationFilter, subscriber: Any, kind: str, era: str) -> tuple[Handle, Subscriber]:
        """The host's handle, with its own inbox unless its subscriber is an actor or a put() object."""
        resolved = resolve_subscriber(subscriber)
        handle_id = f"{kind}-{self._ids.next_id()}"
        inbox = Inbox() if resolved.target is None else None
        if kind == "watch":
            return Watch(handle_id, self, resolved.owner, flt, inbox, era), resolved
        if kind == "subscription":
            return Subscription(handle_id, self, resolved.owner, flt, inbox), resolved
        return Listener(handle_id, self, resolved.owner, flt, inbox), resolved

    def _register_listener(self, flt: NotificationFilter, subscriber: Any, timeout: float, *, kind: str) -> Handle:
        wait = _check_timeout("timeout", timeout)
        deadline = time.monotonic() + wait
        handle, resolved = self._new_handle(flt, subscriber, kind, "legacy")
        handle_id = handle.id
        try:
            self._ask(RegisterListener(handle, kind, flt, resolved), wait)
            if flt.uris:
                self._acquire(handle_id, flt.uris, resolved.alive, deadline, wait)
            self._ask(ActivateListener(handle_id), max(0.1, deadline - time.monotonic()))
        except BaseException:
            # Whatever failed, and even if a timed-out ask is still queued: the abandon is queued
            # behind it on the client, the release behind any acquisition on the worker, so
            # nothing of this registration survives (both are no-ops when there is nothing left).
            self._tell(AbandonListener(handle_id))
            if flt.uris:
                self._release_on_worker(handle_id)
            raise
        return handle

    def _acquire(self, handle_id: Any, uris: tuple[str, ...], alive: Any, deadline: float, wait: float) -> None:
        worker = self._worker
        assert worker is not None
        try:
            worker.ask(Acquire(handle_id, uris, alive), timeout=max(0.0, deadline - time.monotonic()))
        except pykka.Timeout:
            raise RequestTimeout(f"resources/subscribe did not finish within {wait}s") from None
        except pykka.ActorDeadError:
            raise NotConnected("the client is disconnected") from None

    def _release_on_worker(self, handle_id: Any) -> None:
        """Queue a release: the worker drops exactly what this handle holds, if anything."""
        if self._worker is not None:
            try:
                self._worker.tell(Release(handle_id))
            except pykka.ActorDeadError:
                pass

    def _tell(self, message: Any) -> None:
        try:
            self._ref.tell(message)
        except pykka.ActorDeadError:
            pass

    def unsubscribe_notifications(self, listener: Listener, timeout: float = 5.0) -> None:
        """Remove a listener and release its URIs. No closing message follows.

        Raises:
            ListenerNotFound: it was already removed or closed. On a stopped client this is a no-op.
        """
        if not isinstance(listener, Listener):
            raise TypeError(f"expected a Listener, got {type(listener).__name__}")
        self._remove_handle(listener, timeout=timeout)

    def _remove_handle(self, handle: Handle, *, timeout: float) -> None:
        if handle.client is not self:
            raise ValueError(f"{handle!r} belongs to another client")
        if not self._ref.is_alive():
            return  # a stopped client holds nothing: nothing to remove
        wait = _check_timeout("timeout", timeout)
        deadline = time.monotonic() + wait
        try:
            self._ask(RemoveHandle(handle.id), wait)
        except NotConnected:
            return
        except RequestTimeout:
            # The removal is still queued and will happen; its URIs must go with it.
            self._release_on_worker(handle.id)
            raise
        handle._finish()
        if self._worker is not None:
            # Waits for the wire unsubscribe, so it is done when this returns; a handle that
            # holds no URIs (categories only, or modern) makes this a no-op on the worker.
            try:
                self._worker.ask(Release(handle.id), timeout=max(0.0, deadline - time.monotonic()))
            except (pykka.Timeout, pykka.ActorDeadError):
                pass  # still queued on the worker, or the client stopped meanwhile

    # -- modern subscriptions --------------------------------------------------------------

    def listen(self, filter: Any, subscriber: Any = None, timeout: float = 5.0) -> Subscription:
        """Open a ``subscriptions/listen`` stream (MCP 2026-07-28 peers only) and wait for its acknowledgment.

        Raises:
            FilterError, NotConnected, ListenRequiresModern, SubscriberNotAlive,
            ProtocolError (a wider acknowledgment), RequestError, RequestTimeout.
        """
        flt = normalize_filter(filter, allow_tasks=True)
        handle = self._open_subscription(flt, subscriber, timeout, kind="subscription")
        assert isinstance(handle, Subscription)
        return handle

    def _open_subscription(self, flt: NotificationFilter, subscriber: Any, timeout: float, *, kind: str) -> Handle:
        wait = _check_timeout("timeout", timeout)
        deadline = time.monotonic() + wait
        handle, resolved = self._new_handle(flt, subscriber, kind, "modern")
        handle_id = handle.id
        acknowledged: Future[NotificationFilter] = Future()
        self._ask(OpenSubscription(handle, kind, flt, resolved, acknowledged), wait)
        try:
            acknowledged.result(max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            self._tell(CancelSubscription(handle_id, None))
            raise RequestTimeout(f"subscriptions/listen was not acknowledged within {wait}s") from None
        return handle

    def _cancel_subscription(self, subscription: Subscription, *, timeout: float) -> None:
        if not self._ref.is_alive():
            return
        try:
            self._ask(CancelSubscription(subscription.id, "cancelled"), _check_timeout("timeout", timeout))
        except NotConnected:
            return

    def _snapshot(self, ack: NotificationFilter) -> dict[str, Any]:
        """What a resync refetches, according to the acknowledged filter."""
        snapshot: dict[str, Any] = {}
        if TOOLS in ack.categories:
            snapshot["tools"] = self.list_tools()
        if PROMPTS in ack.categories:
            snapshot["prompts"] = self.list_prompts()
        if RESOURCES in ack.categories:
            snapshot["resources"] = self.list_resources()
        if ack.uris:
            snapshot["resourceContents"] = {uri: self.read_resource(uri) for uri in ack.uris}
        return snapshot

    # -- era-agnostic ----------------------------------------------------------------------

    def watch(self, filter: Any, subscriber: Any = None, timeout: float = 5.0) -> Watch:
        """Listen in whichever era the peer speaks, with the legacy message vocabulary.

        A legacy listener on a legacy peer, a ``subscriptions/listen`` on a modern
        one; messages are :class:`Notification`, :class:`Reconnected` and
        :class:`Closed` either way. A watch carries on (as a subscription) when a
        legacy peer comes back modern after a reconnect.
        """
        if self.era == "modern":
            flt = normalize_filter(filter, allow_tasks=True)
            handle = self._open_subscription(flt, subscriber, timeout, kind="watch")
        else:
            flt = normalize_filter(filter)
            handle = self._register_listener(flt, subscriber, timeout, kind="watch")
        assert isinstance(handle, Watch)
        return handle

    # -- lifecycle -------------------------------------------------------------------------

    def disconnect(self, timeout: float = 5.0) -> None:
        """Close the transport and every handle (``Closed(..., "disconnected")``). Idempotent."""
        wait = _check_timeout("timeout", timeout)
        try:
            self._ref.tell(Disconnect())
        except pykka.ActorDeadError:
            pass
        self._wait_stopped(wait)

    def _wait_stopped(self, timeout: float) -> None:
        """Wait for the client actor, then every actor and thread it started, to end."""
        deadline = time.monotonic() + timeout
        self._shared.finished.wait(timeout)
        if self._worker is not None:
            self._worker.actor_stopped.wait(max(0.0, deadline - time.monotonic()))
        with self._shared.children_lock:
            children = list(self._shared.children)
        for child in children:
            if child is not threading.current_thread():
                child.join(max(0.0, deadline - time.monotonic()))

    def _inspect(self, timeout: float = 5.0) -> dict[str, Any]:
        """Internal counters, for tests and diagnostics."""
        state = dict(self._ask(InspectClient(), timeout))
        if self._worker is not None and self._worker.is_alive():
            state["refcount"] = self._worker.ask(Inspect(), timeout=timeout)
        return state

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.disconnect()


def connect(
    transport: Any,
    protocol: ProtocolMode = "auto",
    reconnect: bool = True,
    max_reconnect_attempts: int = 10,
    backoff: Backoff | None = None,
    request_timeout: float = 30.0,
    client_info: dict[str, Any] | None = None,
    *,
    connect_timeout: float = 10.0,
    probe_timeout: float = 3.0,
) -> Client:
    """Connect to an MCP server and return a ready :class:`Client`.

    Args:
        transport: a Transport, a ``ws://``/``wss://``/``http://``/``https://`` URL, or an argv list (stdio).
        protocol: ``"auto"`` (probe ``server/discover``, fall back to ``initialize``),
            ``"legacy"`` or ``"modern"``.
        reconnect: reopen the transport after a loss (listeners survive).
        max_reconnect_attempts: failed attempts in a row before giving up.
        backoff: delays between attempts.
        request_timeout: default seconds for each request.
        client_info: ``{"name": ..., "version": ...}`` sent to the server.
        connect_timeout: seconds for opening the transport and the whole handshake.
        probe_timeout: seconds the ``server/discover`` probe may take before ``auto`` falls back.

    Raises:
        ConnectError: the transport could not be opened or the handshake failed.
    """
    if protocol not in PROTOCOL_MODES:
        raise ValueError(f"protocol must be one of {PROTOCOL_MODES}, got {protocol!r}")
    if (
        isinstance(max_reconnect_attempts, bool)
        or not isinstance(max_reconnect_attempts, int)
        or max_reconnect_attempts < 1
    ):
        raise ValueError(f"max_reconnect_attempts must be a positive integer, got {max_reconnect_attempts!r}")
    if backoff is not None and not isinstance(backoff, Backoff):
        raise TypeError(f"backoff must be a Backoff, got {type(backoff).__name__}")
    if client_info is not None and not (isinstance(client_info, dict) and isinstance(client_info.get("name"), str)):
        raise ValueError(f"client_info must be a dict with a 'name' string, got {client_info!r}")
    config = Config(
        transport=make_transport(transport),
        mode=protocol,
        reconnect=bool(reconnect),
        max_reconnect_attempts=max_reconnect_attempts,
        backoff=backoff or Backoff(),
        connect_timeout=_check_timeout("connect_timeout", connect_timeout),
        probe_timeout=_check_timeout("probe_timeout", probe_timeout),
        client_info=dict(client_info or DEFAULT_CLIENT_INFO),
    )
    request_wait = _check_timeout("request_timeout", request_timeout)
    name = f"c{next(_client_numbers)}"
    shared = SharedState()
    ids = RequestBuilder()
    ref = ClientActor.start(config, shared, ids, name)
    client = Client(ref, shared, ids, request_wait, name)
    # The worker's wire calls go out through the client like any other request.
    worker = RefcountWorker.start(client.request, ref, shared.adopt_current_thread)
    client._worker = worker
    ref.tell(Start(worker, client._snapshot))
    # Opening, the probe and the handshake each have their own timeout; this bounds the sum.
    deadline = config.connect_timeout * 2 + config.probe_timeout + 1.0
    if not shared.ready.wait(deadline):
        client.disconnect()
        raise ConnectError(f"no connection to {config.transport.describe()} within {deadline:.1f}s", reason="timeout")
    if shared.connect_error is not None:
        client._wait_stopped(config.connect_timeout + 1.0)
        error = shared.connect_error
        raise error if isinstance(error, ConnectError) else ConnectError(str(error))
    return client
