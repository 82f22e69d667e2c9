"""Exceptions raised to the host, each with a ``.reason`` mirroring the Elixir error term, and
the one kind that is never the host's to handle: a bug of ours.

Whose fault a failure is decides its type, and none is disguised as another:

* the peer's: :class:`ProtocolError` (it sent what the protocol forbids: a bad frame is
  logged and skipped, a wider acknowledgment fails the host's call) or :class:`RequestError`
  (it answered a request with a JSON-RPC error);
* the transport's: :class:`TransportError` (it could not be opened, it is closed) and
  :class:`ExchangeFailed` (one request's exchange failed, so no answer will come);
* ours: :class:`InternalError` (:class:`TransitionError` and the like); never reported as
  the peer's fault, and a client hit by one closes with ``("crashed", error)``.
"""

from __future__ import annotations

from typing import Any

from ._peer_text import escape_unsafe, peer_text


class Error(Exception):
    """Base class of every exception this library raises on purpose.

    Its text never carries a raw control character: many quote what a server said (bounded
    at the raise site), and a host prints them, logs them or shows them on a terminal.
    """

    reason: Any = "error"
    #: What ``str()`` says when the raise site gives no message: a sentence, never a bare code.
    default_message = "the MCP client failed"

    def __init__(self, message: str | None = None, *, reason: Any = None) -> None:
        if reason is not None:
            self.reason = reason
        if message is None:
            message = self.default_message
        super().__init__(escape_unsafe(message) if isinstance(message, str) else message)


class ConnectError(Error):
    """The connection or its handshake could not be established."""

    reason = "connect_failed"
    default_message = "the connection or its handshake could not be established"


class TransportError(Error):
    """The transport failed: it could not be opened, it is closed, or (:class:`ExchangeFailed`)
    one request's exchange failed."""

    reason = "transport_error"
    default_message = "the transport failed or is closed"
    #: The HTTP status of the failed exchange; None when there was no HTTP answer.
    status: int | None = None


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
        # .message keeps the server's words as sent; the text shows them safe to print.
        text = peer_text(message, 1000)
        super().__init__(
            f"the server answered with JSON-RPC error {code}: {text}", reason=("request_error", code, message)
        )

    def as_term(self) -> dict[str, Any]:
        """The error as the JSON-RPC error object it came from."""
        term: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            term["data"] = self.data
        return term


class UrlElicitationRequired(RequestError):
    """A request the server answered with -32042 (URL elicitation required) that the client did
    not get past: an elicitation was declined, cancelled or refused, or the one retry met -32042
    again. ``elicitations`` are the server's, as sent; ``why`` says what stopped it."""

    def __init__(self, error: RequestError, elicitations: list[Any], why: str) -> None:
        super().__init__(error.code, error.message, error.data)
        self.elicitations = elicitations
        self.why = why
        self.reason = ("url_elicitation_required", why)
        Exception.__init__(self, escape_unsafe(f"{self.args[0]} ({why})"))


class RequestTimeout(Error):
    """No answer arrived within the timeout; the request was cancelled."""

    reason = "timeout"
    default_message = "no answer arrived in time; the request was cancelled"


class ConnectionLost(NotConnected):
    """The transport was lost while the request was in flight."""

    reason = "connection_lost"
    default_message = "the connection was lost while the request was in flight"


class ExchangeFailed(ConnectionLost, TransportError):
    """The transport failed one request's exchange, so the server's answer will never come:
    the connection was refused or reset, the response stream dropped before the answer, or
    an HTTP error arrived that is no JSON-RPC answer (``.status``; ``.body`` quotes it).

    A :class:`ConnectionLost` as well: like a drop on any other transport, the request
    failed with its connection, not by the server's answer.
    """

    def __init__(self, what: str, *, status: int | None = None, body: str | None = None) -> None:
        #: What happened, in a few words ("stream dropped before the answer", "HTTP 503 ...").
        self.what = what
        self.status = status
        self.body = body
        super().__init__(f"the transport failed the request: {what}", reason=("transport_error", status, what))


class OutcomeUnknown(ExchangeFailed):
    """The answer was lost after the request reached the server (its response stream
    dropped, or the connection broke while the answer was awaited): the request may or may
    not have run there.

    The client re-issues on its own what is safe to send twice (see ``request``); this is
    what reaches the host otherwise, or once the re-issues are spent. ``.request`` names
    the call (``tools/call 'deploy'``), ``.reissued`` how many times it was sent again.
    """

    def __init__(
        self,
        what: str,
        *,
        status: int | None = None,
        body: str | None = None,
        request: str | None = None,
        reissued: int = 0,
        why_not: str | None = None,
    ) -> None:
        super().__init__(what, status=status, body=body)
        self.request = request
        self.reissued = reissued
        text = f"{request or 'the request'} may or may not have run on the server: {what}"
        if reissued:
            text += f" (it was sent {reissued + 1} times, each answer lost)"
        if why_not:
            text += f"; not sent again: {why_not}"
        self.args = (text,)


class ProtocolError(Error):
    """The peer sent something the protocol forbids: a malformed frame (logged and skipped,
    never raised to the host), a widened acknowledgment, a reply that is no answer."""

    reason = "protocol_error"
    default_message = "the server broke the MCP protocol"


class InvalidToolResult(Error):
    """A tool's result breaks the ``outputSchema`` its listing declared (or cannot be checked
    against it: see ``_result_schema``). ``.result`` is the result as it came, for a host that
    takes it anyway; ``.violation`` the first violation (``at $path: message``), if one was found."""

    reason: Any = "invalid_tool_result"
    default_message = "a tool's result does not conform to its outputSchema"

    def __init__(
        self, message: str | None = None, *, tool: str | None = None, result: Any = None, violation: str | None = None
    ) -> None:
        super().__init__(message, reason=("invalid_tool_result", tool) if tool is not None else None)
        self.tool = tool
        self.result = result
        self.violation = violation


class InternalError(RuntimeError):
    """A bug in this library, never the peer's fault nor the host's.

    Not an :class:`Error`: a host's ``except mcp.Error`` is for what may go wrong with a
    server, and must not swallow a bug. A client whose session hits one closes every
    handle with ``("crashed", error)`` rather than carry on in a state it cannot trust.
    """


class TransitionError(InternalError):
    """A move the state table does not allow (see ``_state``): a bug in this library, not the peer's fault."""


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
    ExchangeFailed,
    OutcomeUnknown,
    ProtocolError,
    InvalidToolResult,
    UrlElicitationRequired,
):
    _public.__module__ = "exmcp_actors"


def error_term(error: BaseException) -> Any:
    """An exception as the reason term hosts see in ``failed`` lists and SubscribeFailed."""
    if isinstance(error, RequestError):
        return error.as_term()
    if isinstance(error, Error):
        return error.reason
    return repr(error)
