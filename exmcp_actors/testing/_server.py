"""The scriptable server: configuration, connections, and the test's API (script, observe, push, break)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Self, overload

from exmcp_actors._protocol._errors import TransportError
from exmcp_actors._transport._base import FrameSink
from exmcp_actors.testing._catalog import Catalog
from exmcp_actors.testing._codec import with_params
from exmcp_actors.testing._connection import JOIN_TIMEOUT, FakeConnection, Handler, join_connections
from exmcp_actors.testing._endpoints import MemoryEndpoint
from exmcp_actors.testing._gate import Gate
from exmcp_actors.testing._handshake import Handshake
from exmcp_actors.testing._protocol import ERAS, KINDS, PROBES, Era, ListKind, Probe, check_choice
from exmcp_actors.testing._registry import Registry
from exmcp_actors.testing._script import Script
from exmcp_actors.testing._shared import Shared
from exmcp_actors.testing._transport import MemoryTransport
from exmcp_actors.testing._websocket import WebSocketServing


def _default_capabilities() -> dict[str, Any]:
    return {
        "resources": {"subscribe": True, "listChanged": True},
        "tools": {"listChanged": True},
        "prompts": {"listChanged": True},
    }


class FakeServer:
    """A scriptable MCP peer for tests; thread-safe, and a context manager.

    Args:
        era: ``"legacy"`` answers ``initialize``; ``"modern"`` answers
            ``server/discover`` and refuses ``initialize``; ``"both"`` answers both.
        protocol_version: what a legacy ``initialize`` answers when the client
            offers a version outside :data:`LEGACY_VERSIONS`.
        capabilities: advertised capabilities (default: resources with
            subscribe and listChanged, tools and prompts with listChanged).
        server_info: ``serverInfo``
            (default ``{"name": "exmcp-fake", "version": "0"}``).
        probe: how a legacy-only server treats ``server/discover``:
            ``"error"`` (-32601), ``"silent"`` (never answers) or
            ``"discover"`` (a result listing only legacy versions).
        instructions: optional ``instructions`` for initialize/discover results.
        tools: items for ``tools/list`` (default: one ``echo`` tool).
        resources: items for ``resources/list`` (default: one text resource).
        prompts: items for ``prompts/list`` (default: one ``greet`` prompt).
        page_size: paginate the three lists with ``nextCursor`` (default: one page).
        check_meta: on a modern connection (once ``server/discover`` was
            answered), answer -32602 to a request whose ``params._meta`` lacks
            ``io.modelcontextprotocol/protocolVersion`` (the modern version) or
            ``io.modelcontextprotocol/clientCapabilities`` (an object), as
            2026-07-28 requires of every request.

    The plain attributes ``protocol_version``, ``capabilities``,
    ``server_info``, ``probe``, ``instructions``, ``page_size`` and ``check_meta`` may be
    changed at any time; they apply to messages handled afterwards.

    Built-in methods: ``initialize``, ``ping``, ``server/discover``,
    ``resources/subscribe`` / ``unsubscribe`` (tracked per connection),
    ``tools/list``, ``resources/list``, ``prompts/list``, ``tools/call``
    (echoes the arguments as text), ``resources/read``, ``prompts/get``,
    ``logging/setLevel``, ``subscriptions/listen``. Anything else with an
    id gets -32601. Replace any of them with :meth:`on`.
    """

    def __init__(
        self,
        *,
        era: Era = "legacy",
        protocol_version: str = "2025-11-25",
        capabilities: dict[str, Any] | None = None,
        server_info: dict[str, Any] | None = None,
        probe: Probe = "error",
        instructions: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        resources: list[dict[str, Any]] | None = None,
        prompts: list[dict[str, Any]] | None = None,
        page_size: int | None = None,
        check_meta: bool = True,
    ) -> None:
        check_choice("era", era, ERAS)
        check_choice("probe", probe, PROBES)
        self._shared = Shared()
        self._era: Era = era
        self.protocol_version = protocol_version
        self.capabilities: dict[str, Any] = _default_capabilities() if capabilities is None else capabilities
        self.server_info: dict[str, Any] = (
            {"name": "exmcp-fake", "version": "0"} if server_info is None else server_info
        )
        self.probe: Probe = probe
        self.instructions = instructions
        self.page_size = page_size
        self.check_meta = check_meta
        self._catalog = Catalog(self._shared.lock, lambda: self.page_size, tools, resources, prompts)
        defaults = {**Handshake(self).handlers(), **self._catalog.handlers()}
        self._script = Script(self._shared, defaults, lambda: self.check_meta)
        self._journal = self._shared.journal
        self._gate = Gate(self._shared.changed, self._shared.closing)
        self._registry = Registry(self._shared, self._script.answer)
        self._websocket = WebSocketServing(self._shared, self._gate, self._registry)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<FakeServer era={self._era} connections={self.connections}>"

    # ------------------------------------------------------------------ transports

    def transport(self, *, stream_cancel: bool = False) -> MemoryTransport:
        """A new :class:`MemoryTransport` connected to this server."""
        return MemoryTransport(self, stream_cancel=stream_cancel)

    def serve_websocket(self) -> str:
        """Serve this fake over a real WebSocket too; returns ``ws://127.0.0.1:<port>``.

        Subprotocol ``"mcp"``, one JSON message per text frame. Idempotent.
        ``refuse()`` rejects the upgrade with HTTP 503; ``drop()`` shuts the
        TCP socket without a close frame; ``close()`` sends close code 1001.
        Needs the ``websockets`` package.
        """
        return self._websocket.serve()

    def _open_memory(self, sink: FrameSink, *, timeout: float, max_frame_bytes: int) -> FakeConnection:
        self._gate.admit(timeout=timeout)
        conn = self._registry.open({}, MemoryEndpoint(sink, max_frame_bytes))
        if conn is None:
            raise TransportError("FakeServer is closed")
        return conn

    # ------------------------------------------------------------------ scripting

    @overload
    def on(self, method: str, handler: Handler, *, concurrent: bool = False) -> Handler: ...

    @overload
    def on(self, method: str, handler: None = None, *, concurrent: bool = False) -> Callable[[Handler], Handler]: ...

    def on(
        self, method: str, handler: Handler | None = None, *, concurrent: bool = False
    ) -> Handler | Callable[[Handler], Handler]:
        """Handle ``method`` with ``handler(params, ctx)``; usable as a decorator.

        The handler returns the result (``None`` means ``{}``), raises
        :class:`FakeError`, or returns :data:`NO_REPLY`; it may push with
        ``ctx.notify(...)`` first. Handlers of one connection run one at a time
        in arrival order on its handler thread; ``concurrent=True`` runs each
        call on a thread of its own instead, so a held request (waiting on an
        event the test controls) does not hold up later messages.
        Notifications (no id) reach handlers too; their return is ignored.
        """

        def register(fn: Handler) -> Handler:
            self._script.set(method, fn, concurrent=concurrent)
            return fn

        return register if handler is None else register(handler)

    def off(self, method: str) -> None:
        """Forget the handler set with :meth:`on`; any built-in one applies again."""
        self._script.remove(method)

    def default_handler(self, method: str) -> Handler | None:
        """The built-in handler of ``method``, e.g. to call it from an override."""
        return self._script.default(method)

    def set_items(self, kind: ListKind, items: list[dict[str, Any]]) -> None:
        """Replace what ``<kind>/list`` returns (tools, resources or prompts)."""
        self._catalog.set_items(kind, items)

    def set_resource_text(self, uri: str, text: str) -> None:
        """What ``resources/read`` returns for ``uri`` (else ``"contents of <uri>"``)."""
        self._catalog.set_resource_text(uri, text)

    @property
    def era(self) -> Era:
        """The era this server speaks; see :meth:`set_era`."""
        return self._era

    def set_era(self, era: Era) -> None:
        """Switch era, e.g. to ``"modern"`` before a reconnect.

        It applies to messages handled afterwards, on every connection.
        """
        check_choice("era", era, ERAS)
        self._era = era

    # ------------------------------------------------------------------ observing

    @property
    def received(self) -> list[tuple[int, Any]]:
        """A copy of every message clients sent: ``(connection_number, message)``."""
        return self._journal.copy(self._journal.received)

    @property
    def sent(self) -> list[tuple[int, Any]]:
        """A copy of everything pushed to clients: ``(connection_number, frame)``."""
        return self._journal.copy(self._journal.sent)

    @property
    def stream_cancels(self) -> list[tuple[int, Any]]:
        """``(connection_number, request_id)`` of each HTTP-like ``cancel_stream``."""
        return self._journal.copy(self._journal.stream_cancels)

    def messages(self, method: str | None = None, *, connection: int | None = None, **param_filters: Any) -> list[Any]:
        """Received messages with ``method`` (any if None) and matching params."""
        return self._journal.messages(method, connection, param_filters)

    def count(self, method: str, *, connection: int | None = None, **param_filters: Any) -> int:
        """How many received messages match.

        Example: ``server.count("resources/subscribe", uri="file:///a")``.
        """
        return len(self.messages(method, connection=connection, **param_filters))

    def wait_for(
        self,
        predicate: str | Callable[[Any], bool],
        timeout: float = 5.0,
        *,
        connection: int | None = None,
        **param_filters: Any,
    ) -> tuple[int, Any]:
        """Wait until a received message matches; returns ``(connection, message)``.

        Args:
            predicate: a method name, or a function of the message (lookup
                errors inside it count as no match).
            timeout: seconds to wait.
            connection: only look at this connection's messages.
            **param_filters: params members the message must have, e.g. ``uri=...``.

        Raises:
            AssertionError: nothing matched in time; it lists what was received.
        """
        return self._journal.wait_for(predicate, timeout, connection, param_filters)

    @property
    def connections(self) -> int:
        """How many connections were opened so far."""
        return len(self._registry)

    @property
    def open_attempts(self) -> int:
        """How many times clients tried to open a connection (refused ones too)."""
        return self._gate.attempts

    def connection(self, number: int | None = None) -> FakeConnection:
        """Connection ``number`` (1-based), or the latest one.

        Raises:
            LookupError: there is no such connection.
        """
        return self._registry.get(number)

    def wait_connections(self, n: int, timeout: float = 5.0) -> FakeConnection:
        """Wait until ``n`` connections were opened; returns connection ``n``.

        Raises:
            AssertionError: fewer than ``n`` in time.
        """
        return self._registry.wait(n, timeout)

    def subscriptions(self, conn: int | None = None) -> list[str]:
        """Legacy URIs subscribed now on connection ``conn`` (default: the latest)."""
        found = self._registry.find(conn)
        return [] if found is None else found.subscriptions

    def open_listens(self, conn: int | None = None) -> list[Any]:
        """Ids of listens still open on connection ``conn`` (default: the latest)."""
        found = self._registry.find(conn)
        return [] if found is None else found.listens

    def wait_response(self, request_id: Any, timeout: float = 5.0) -> dict[str, Any]:
        """Wait for the client's response to a :meth:`request`; returns the message.

        Raises:
            AssertionError: no response in time.
        """
        return self._journal.wait_response(request_id, timeout)

    # ------------------------------------------------------------------ pushing

    @staticmethod
    def _ensure(conn: FakeConnection, pushed: bool) -> None:
        if not pushed:
            raise RuntimeError(f"connection #{conn.number} is closed (by {conn.closed_by})")

    def notify(self, method: str, params: dict[str, Any] | None = None, *, connection: int | None = None) -> None:
        """Send a notification on ``connection`` (default: the latest).

        Raises:
            RuntimeError: that connection has ended.
            LookupError: no such connection.
        """
        conn = self.connection(connection)
        self._ensure(conn, conn.notify(method, params))

    def send(self, message: Any, *, connection: int | None = None) -> None:
        """Send any JSON value as one frame, as is. Raises like :meth:`notify`."""
        conn = self.connection(connection)
        self._ensure(conn, conn.send(message))

    def send_raw(self, data: str | bytes, *, connection: int | None = None) -> None:
        """Send one frame verbatim, e.g. ``"{not json"``.

        In memory the client gets an InvalidFrame;
        over WebSocket it is a raw text frame). Raises like :meth:`notify`."""
        conn = self.connection(connection)
        self._ensure(conn, conn.send_raw(data))

    def send_batch(self, frames: Iterable[Any], *, connection: int | None = None) -> None:
        """Deliver several frames at once: one ``frames_received`` call in memory.

        Over WebSocket it is a burst of frames. Items are messages or raw
        ``str``/``bytes``. Raises like :meth:`notify`.
        """
        conn = self.connection(connection)
        self._ensure(conn, conn.send_batch(frames))

    def request(self, method: str, params: dict[str, Any] | None = None, *, connection: int | None = None) -> str:
        """Send a server-to-client request; returns its id (``"fake-<n>"``).

        Wait for the answer with :meth:`wait_response`.
        """
        conn = self.connection(connection)
        request_id = self._journal.next_request_id()
        message = with_params({"jsonrpc": "2.0", "id": request_id, "method": method}, params)
        self._ensure(conn, conn.send(message))
        return request_id

    def updated(self, uri: str, *, connection: int | None = None) -> None:
        """Send legacy ``notifications/resources/updated {uri}``, subscribed or not."""
        self.notify("notifications/resources/updated", {"uri": uri}, connection=connection)

    def list_changed(self, kind: ListKind, *, connection: int | None = None) -> None:
        """Send ``notifications/<kind>/list_changed`` (no params)."""
        check_choice("kind", kind, KINDS)
        self.notify(f"notifications/{kind}/list_changed", connection=connection)

    def event(
        self, subscription_id: Any, method: str, params: dict[str, Any] | None = None, *, connection: int | None = None
    ) -> None:
        """Send a modern event stamped with ``_meta[SUBSCRIPTION_ID_KEY]``.

        It goes on the open connection where that listen is open, else on the
        latest connection (so a stale id can be tested). Raises like :meth:`notify`.
        """
        conn = self._registry.for_listen(subscription_id, connection)
        self._ensure(conn, conn.event(method, params, subscription_id=subscription_id))

    def close_subscription(
        self, subscription_id: Any, result: dict[str, Any] | None = None, *, connection: int | None = None
    ) -> None:
        """Gracefully end a listen by answering it.

        ``result`` defaults to
        ``{"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: id}}``.
        Raises like :meth:`notify`.
        """
        conn = self._registry.for_listen(subscription_id, connection)
        self._ensure(conn, conn.close_subscription(subscription_id, result))

    # ------------------------------------------------------------------ faults

    def drop(self, reason: str = "connection dropped by FakeServer", *, connection: int | None = None) -> None:
        """Abruptly lose ``connection`` (default: the latest).

        Frames already pushed are delivered first, then the client's sink gets
        ``transport_lost(reason)`` once (memory) or the TCP socket is shut
        without a close frame (WebSocket). No-op if it already ended.
        """
        self.connection(connection).drop(reason)

    def refuse(self, n: int | None = None, *, hang: bool = False) -> None:
        """Refuse the next ``n`` open attempts (if None, all until :meth:`accept`).

        A refused open raises TransportError (memory) or gets HTTP 503
        (WebSocket). With ``hang=True`` a refused open instead waits, like an
        unresponsive host, until its timeout (then TransportError) or until
        :meth:`accept` lets it through.
        """
        self._gate.refuse(n, hang=hang)

    def accept(self) -> None:
        """Stop refusing; hung opens go through."""
        self._gate.accept()

    def silence(self) -> None:
        """Stop answering, like a hung server, until :meth:`resume`.

        Incoming messages are still recorded in :attr:`received` but never
        handled, and automatic answers are not sent. Explicit pushes still go
        out, and connections still open.
        """
        self._shared.silenced = True

    def resume(self) -> None:
        """Undo :meth:`silence` from now on (silenced messages stay unanswered)."""
        self._shared.silenced = False

    def close(self) -> None:
        """End every connection (clients see it lost), stop serving, join all threads.

        Idempotent. A handler still blocked after a few seconds is logged, not awaited.
        """
        with self._shared.changed:
            self._shared.closing.set()
            self._shared.changed.notify_all()  # wakes hung opens
            connections = self._registry.all()
            listening = self._websocket.detach()
        for conn in connections:
            conn._end("server", "FakeServer closed", graceful=True)
        if listening is not None:
            listening.stop(JOIN_TIMEOUT)
        join_connections(connections)
