"""Exceptions raised to the host, each with a ``.reason`` mirroring the Elixir error term."""

from __future__ import annotations

from typing import Any


class Error(Exception):
    """Base class of every exception this library raises on purpose."""

    reason: Any = "error"
    #: What ``str()`` says when the raise site gives no message: a sentence, never a bare code.
    default_message = "the MCP client failed"

    def __init__(self, message: str | None = None, *, reason: Any = None) -> None:
        if reason is not None:
            self.reason = reason
        super().__init__(message if message is not None else self.default_message)


class ConnectError(Error):
    """The connection or its handshake could not be established."""

    reason = "connect_failed"
    default_message = "the connection or its handshake could not be established"


class TransportError(Error):
    """The transport failed: it could not be opened, or it is closed."""

    reason = "transport_error"
    default_message = "the transport failed or is closed"


class FilterError(Error, ValueError):
    """The notification filter is malformed; ``.reason`` says how."""

    reason = "invalid_subscription_filter"
    default_message = "the notification filter is malformed"


class UseListen(Error):
    """Legacy listeners are not available: the peer speaks MCP 2026-07-28."""

    reason = "use_listen"
    default_message = (
        "legacy listeners do not exist in MCP 2026-07-28, which this server speaks; use listen() or watch()"
    )


class ListenRequiresModern(Error):
    """``listen`` needs a peer that speaks MCP 2026-07-28."""

    reason = "subscriptions_require_mcp_2026_07_28"
    default_message = "listen() needs a server that speaks MCP 2026-07-28; use subscribe_notifications() or watch()"


class SubscribeFailed(Error):
    """A ``resources/subscribe`` failed; the registration was rolled back."""

    def __init__(self, uri: str, cause: Any) -> None:
        self.uri = uri
        self.cause = cause
        super().__init__(
            f"resources/subscribe failed for {uri!r}: {cause!r}",
            reason=("subscribe_failed", uri, cause),
        )


class NotConnected(Error):
    """The client is not ready (connecting, reconnecting or disconnected)."""

    reason = "not_connected"
    default_message = "the client is not connected"


class SubscriberNotAlive(Error):
    """The subscriber (thread or actor) is not alive."""

    reason = "subscriber_not_alive"
    default_message = "the subscriber (thread or actor) has already ended"


class ListenerNotFound(Error):
    """The listener or subscription is unknown to the client (already removed or closed)."""

    reason = "not_found"
    default_message = "this client has no such listener: it was already removed or closed, or belongs to another client"


class RequestError(Error):
    """The peer answered a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        self.code = code
        self.message = message
        self.data = data
        super().__init__(
            f"the server answered with JSON-RPC error {code}: {message}", reason=("request_error", code, message)
        )

    def as_term(self) -> dict[str, Any]:
        """The error as the JSON-RPC error object it came from."""
        term: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            term["data"] = self.data
        return term


class RequestTimeout(Error):
    """No answer arrived within the timeout; the request was cancelled."""

    reason = "timeout"
    default_message = "no answer arrived in time; the request was cancelled"


class ConnectionLost(NotConnected):
    """The transport was lost while the request was in flight."""

    reason = "connection_lost"
    default_message = "the connection was lost while the request was in flight"


class ProtocolError(Error):
    """The peer broke the protocol (for example a widened acknowledgment)."""

    reason = "protocol_error"
    default_message = "the server broke the MCP protocol"


#: Shown as ``exmcp_actors.X`` in tracebacks and reprs, where hosts import them from.
for _public in (
    Error,
    ConnectError,
    TransportError,
    FilterError,
    UseListen,
    ListenRequiresModern,
    SubscribeFailed,
    NotConnected,
    SubscriberNotAlive,
    ListenerNotFound,
    RequestError,
    RequestTimeout,
    ConnectionLost,
    ProtocolError,
):
    _public.__module__ = "exmcp_actors"


def error_term(error: BaseException) -> Any:
    """An exception as the reason term hosts see in ``failed`` lists and SubscribeFailed."""
    if isinstance(error, RequestError):
        return error.as_term()
    if isinstance(error, Error):
        return error.reason
    return repr(error)
