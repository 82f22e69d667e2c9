"""Exceptions raised to the host, each with a ``.reason`` mirroring the Elixir error term."""

from __future__ import annotations

from typing import Any


class Error(Exception):
    """Base class of every exception this library raises on purpose."""

    reason: Any = "error"

    def __init__(self, message: str | None = None, *, reason: Any = None) -> None:
        if reason is not None:
            self.reason = reason
        super().__init__(message if message is not None else str(self.reason))


class ConnectError(Error):
    """The connection or its handshake could not be established."""

    reason = "connect_failed"


class TransportError(Error):
    """The transport failed: it could not be opened, or it is closed."""

    reason = "transport_error"


class FilterError(Error, ValueError):
    """The notification filter is malformed; ``.reason`` says how."""

    reason = "invalid_subscription_filter"


class UseListen(Error):
    """Legacy listeners are not available: the peer speaks MCP 2026-07-28."""

    reason = "use_listen"


class ListenRequiresModern(Error):
    """``listen`` needs a peer that speaks MCP 2026-07-28."""

    reason = "subscriptions_require_mcp_2026_07_28"


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


class SubscriberNotAlive(Error):
    """The subscriber (thread or actor) is not alive."""

    reason = "subscriber_not_alive"


class ListenerNotFound(Error):
    """The listener or subscription is unknown to the client (already removed or closed)."""

    reason = "not_found"


class RequestError(Error):
    """The peer answered a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        self.code = code
        self.message = message
        self.data = data
        super().__init__(f"JSON-RPC error {code}: {message}", reason=("request_error", code, message))

    def as_term(self) -> dict[str, Any]:
        """The error as the JSON-RPC error object it came from."""
        term: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            term["data"] = self.data
        return term


class RequestTimeout(Error):
    """No answer arrived within the timeout; the request was cancelled."""

    reason = "timeout"


class ConnectionLost(NotConnected):
    """The transport was lost while the request was in flight."""

    reason = "connection_lost"


class ProtocolError(Error):
    """The peer broke the protocol (for example a widened acknowledgment)."""

    reason = "protocol_error"


def error_term(error: BaseException) -> Any:
    """An exception as the reason term hosts see in ``failed`` lists and SubscribeFailed."""
    if isinstance(error, RequestError):
        return error.as_term()
    if isinstance(error, Error):
        return error.reason
    return repr(error)
