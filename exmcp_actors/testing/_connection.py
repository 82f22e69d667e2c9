"""One session between the fake and a client: its state, its threads, and what a handler can push on it."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from exmcp_actors.testing._codec import Wire, encode, encode_logged, notification, stamped
from exmcp_actors.testing._delivery import Delivery
from exmcp_actors.testing._endpoints import Endpoint
from exmcp_actors.testing._ids import IdSet
from exmcp_actors.testing._inbound import Inbound
from exmcp_actors.testing._protocol import PARSE_ERROR, SUBSCRIPTION_ID_KEY, FakeError
from exmcp_actors.testing._shared import Shared

_log = logging.getLogger("exmcp_actors.testing")

#: ``handler(params, ctx)``: return a result (``None`` means ``{}``), raise
#: :class:`FakeError`, or return :data:`NO_REPLY`.
Handler = Callable[[dict[str, Any], "FakeConnection"], Any]

#: How often ctx.wait() re-checks whether the connection ended.
_WAIT_SLICE: Final = 0.05
#: Bound on joining threads in close(); a handler stuck longer is logged, not awaited.
JOIN_TIMEOUT: Final = 5.0


class FakeConnection:
    """One session between the fake and a client; also the ``ctx`` passed to handlers.

    Push methods on a connection return ``False`` instead of raising when the
    connection has ended, so a handler racing a drop does not fail.

    Attributes:
        number: 1 for the first connection the server accepted, 2 for the next...
        era: ``"legacy"`` once ``initialize`` was answered, ``"modern"`` once
            ``server/discover`` was, else ``None``.
        negotiated: what the client told its transport after the handshake
            (``(protocol_version, era)``), memory transport only.
        headers: the HTTP headers of the WebSocket upgrade request, names
            lower-cased (empty in memory).
        closed_by: ``"client"``, ``"drop"`` or ``"server"`` once ended.
    """

    def __init__(
        self, number: int, headers: dict[str, str], shared: Shared, answer: Callable[[FakeConnection, Any], None]
    ) -> None:
        self.number = number
        self.headers = headers
        self.era: str | None = None
        self.negotiated: tuple[str, str] | None = None
        self.closed_by: str | None = None
        self._shared = shared
        # One lock for all: server-wide waits read connection state.
        self._lock = shared.lock
        self._ended = threading.Event()
        self._subscriptions: list[str] = []
        self._listens = IdSet()  # ids of open listens
        self._cancelled = IdSet()  # ids named by the client's notifications/cancelled
        self._handling_now = threading.local()  # the message each handler thread is on
        self._threads: list[threading.Thread] = []
        self._inbound = Inbound(number, self._ended, lambda message: answer(self, message))
        self._delivery = Delivery(number)

    def __repr__(self) -> str:
        state = f"closed by {self.closed_by}" if self.closed_by else "open"
        return f"<FakeConnection #{self.number} {state}>"

    # ---- lifecycle (private)

    def _start(self, endpoint: Endpoint) -> None:
        prefix = f"exmcp-fake-{self.number}"
        self._spawn(self._inbound.thread(f"{prefix}-handler"))
        self._spawn(self._delivery.thread(endpoint, f"{prefix}-delivery"))

    def _spawn(self, thread: threading.Thread) -> None:
        """Start ``thread`` as one of this connection's (joined by FakeServer.close)."""
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    def _end(self, by: str, reason: str = "", *, graceful: bool = False) -> bool:
        """End the connection once (later calls are no-ops); True if this call did."""
        with self._lock:
            if self._ended.is_set():
                return False
            self._ended.set()
            self.closed_by = by
            # Sentinels go in under the lock so no push can land behind them.
            if by == "client":
                self._delivery.stop()
            else:
                self._delivery.lose(reason, graceful=graceful)
            self._inbound.close()
            self._shared.changed.notify_all()
        return True

    def _join_delivery(self, timeout: float) -> None:
        self._delivery.join(timeout)

    def _live_threads(self) -> list[threading.Thread]:
        with self._lock:
            return [thread for thread in self._threads if thread.is_alive()]

    # ---- inbound (private)

    def _receive(self, text: str) -> None:
        """A frame from the client: record it, then queue it for the handler thread."""
        try:
            message = json.loads(text)
        except ValueError:
            _log.warning("fake connection %d: client sent invalid JSON: %.200r", self.number, text)
            parse_error = {"code": PARSE_ERROR, "message": "Parse error"}
            self.send_raw(encode({"jsonrpc": "2.0", "id": None, "error": parse_error}))
            return
        shared = self._shared
        with shared.changed:
            if self.closed:
                return
            if not shared.journal.record_received(self.number, message) and not shared.silenced:
                # Parsed again by the handler thread: handlers share nothing with `received`.
                self._inbound.put(text)
            shared.changed.notify_all()

    def _note(self, message: dict[str, Any], params: dict[str, Any]) -> None:
        """Track what a client message changes here, whoever handles it: cancelled ids, open listens."""
        with self._lock:
            if message["method"] == "notifications/cancelled":
                cancelled = params.get("requestId")
                self._cancelled.add(cancelled)
                self._listens.discard(cancelled)  # how stdio/WebSocket clients end a subscription
            elif message["method"] == "subscriptions/listen" and "id" in message:
                self._listens.add(message["id"])

    @contextmanager
    def _handling(self, message: dict[str, Any]) -> Iterator[None]:
        """While a handler runs on this thread: :attr:`message` is ``message``."""
        self._handling_now.message = message
        try:
            yield
        finally:
            self._handling_now.message = None

    def _subscribe(self, uri: str) -> None:
        """Hold a legacy subscription to ``uri`` (once)."""
        with self._shared.changed:
            if uri not in self._subscriptions:
                self._subscriptions.append(uri)
            self._shared.changed.notify_all()

    def _unsubscribe(self, uri: str) -> None:
        """Drop the legacy subscription to ``uri``, if held."""
        with self._shared.changed:
            if uri in self._subscriptions:
                self._subscriptions.remove(uri)
            self._shared.changed.notify_all()

    # ---- outbound (private)

    def _push(self, frames: list[Wire], logged: Sequence[Any] | None = None) -> bool:
        with self._lock:
            if self._ended.is_set():
                return False
            self._delivery.push(frames)
            self._shared.journal.record_sent(self.number, logged if logged is not None else frames)
        return True

    def _push_message(self, message: Any) -> bool:
        text, logged = encode_logged(message)
        return self._push([text], [logged])

    def _finish_request(self, request_id: Any) -> None:
        with self._lock:
            self._listens.discard(request_id)

    def _cancel_stream(self, request_id: Any) -> None:
        with self._lock:
            self._listens.discard(request_id)
            self._shared.journal.record_stream_cancel(self.number, request_id)

    # ---- the current request (thread-local, so concurrent handlers each see their own)

    @property
    def message(self) -> dict[str, Any] | None:
        """The request or notification being handled on this thread, else ``None``."""
        message: dict[str, Any] | None = getattr(self._handling_now, "message", None)
        return message

    @property
    def request_id(self) -> Any:
        """The id of the request handled on this thread (``None`` outside a handler)."""
        message = self.message
        return None if message is None else message.get("id")

    @property
    def method(self) -> str | None:
        """The method being handled on this thread (``None`` outside a handler)."""
        message = self.message
        return None if message is None else message.get("method")

    def is_cancelled(self, request_id: Any = None) -> bool:
        """Whether the client sent ``notifications/cancelled`` for ``request_id``.

        ``request_id`` defaults to the request being handled on this thread.
        """
        request_id = self.request_id if request_id is None else request_id
        with self._lock:
            return request_id in self._cancelled

    def wait(self, event: threading.Event, timeout: float = 5.0) -> bool:
        """Wait for ``event`` in a handler; give up when the connection or server ends.

        Returns:
            True if the event was set, False on timeout or when the connection ended.
        """
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if event.wait(min(remaining, _WAIT_SLICE)):
                return True
            if self._ended.is_set() or self._shared.closing.is_set():
                return False

    # ---- state

    @property
    def closed(self) -> bool:
        """Whether the connection has ended (either side)."""
        return self._ended.is_set()

    def wait_closed(self, timeout: float = 5.0) -> bool:
        """Wait until the connection ends; returns whether it did within ``timeout``."""
        return self._ended.wait(timeout)

    @property
    def subscriptions(self) -> list[str]:
        """Legacy ``resources/subscribe`` URIs currently held, in subscription order."""
        with self._lock:
            return list(self._subscriptions)

    @property
    def listens(self) -> list[Any]:
        """Ids of ``subscriptions/listen`` requests neither answered nor cancelled."""
        with self._lock:
            return list(self._listens)

    # ---- pushing

    def notify(self, method: str, params: dict[str, Any] | None = None) -> bool:
        """Send a notification; ``params=None`` omits the member."""
        return self._push_message(notification(method, params))

    def send(self, message: Any) -> bool:
        """Send any JSON value as one frame, as is (no ``jsonrpc`` member added)."""
        return self._push_message(message)

    def send_raw(self, data: str | bytes) -> bool:
        """Send one frame verbatim; the client decodes it as a real transport would."""
        return self._push([data])

    def send_batch(self, frames: Iterable[Any]) -> bool:
        """Send several frames in one delivery (one ``frames_received`` call in memory).

        Each item is a message (sent as JSON) or ``str``/``bytes`` (sent raw).
        """
        wire: list[Wire] = []
        logged: list[Any] = []
        for item in frames:
            frame, copy = (item, item) if isinstance(item, str | bytes) else encode_logged(item)
            wire.append(frame)
            logged.append(copy)
        return self._push(wire, logged)

    def respond(self, request_id: Any, result: Any) -> bool:
        """Answer a request with ``result``, e.g. one a handler left with NO_REPLY."""
        self._finish_request(request_id)
        return self._push_message({"jsonrpc": "2.0", "id": request_id, "result": result})

    def respond_error(self, request_id: Any, code: int, message: str, data: Any = None) -> bool:
        """Answer a request with a JSON-RPC error."""
        self._finish_request(request_id)
        error = FakeError(code, message, data).as_error()
        return self._push_message({"jsonrpc": "2.0", "id": request_id, "error": error})

    def acknowledge(self, notifications: dict[str, Any], *, subscription_id: Any = None) -> bool:
        """Send ``notifications/subscriptions/acknowledged`` for ``notifications``.

        ``subscription_id`` defaults to the id of the listen request being handled,
        so a listen handler can ack a narrower or wider filter than requested.
        """
        sub = self.request_id if subscription_id is None else subscription_id
        return self.notify(
            "notifications/subscriptions/acknowledged",
            {"_meta": {SUBSCRIPTION_ID_KEY: sub}, "notifications": notifications},
        )

    def event(self, method: str, params: dict[str, Any] | None = None, *, subscription_id: Any = None) -> bool:
        """Send a modern event: ``params._meta`` stamped with the subscription id.

        ``subscription_id`` defaults to the listen request being handled.
        """
        sub = self.request_id if subscription_id is None else subscription_id
        return self.notify(method, stamped(params, sub))

    def close_subscription(self, subscription_id: Any = None, result: dict[str, Any] | None = None) -> bool:
        """Gracefully end a listen by answering it.

        ``result`` defaults to
        ``{"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: id}}``;
        ``subscription_id`` to the listen request being handled.
        """
        sub = self.request_id if subscription_id is None else subscription_id
        if result is None:
            result = {"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: sub}}
        return self.respond(sub, result)

    # ---- faults

    def drop(self, reason: str = "connection dropped by FakeServer") -> bool:
        """Abruptly end this connection: queued frames go out, then the loss."""
        return self._end("drop", reason)


def join_connections(connections: Iterable[FakeConnection]) -> None:
    """Join every thread of ``connections`` within :data:`JOIN_TIMEOUT` in all; log those still running."""
    connections = list(connections)
    deadline = time.monotonic() + JOIN_TIMEOUT
    current = threading.current_thread()
    for conn in connections:
        for thread in conn._live_threads():
            if thread is not current:
                thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [thread.name for conn in connections for thread in conn._live_threads() if thread is not current]
    if stuck:
        _log.warning(
            "FakeServer.close: threads still running (blocked handlers?): %s",
            ", ".join(stuck),
        )
