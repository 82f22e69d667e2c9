"""What the client asks of the server: raw requests and the MCP request helpers.

:class:`ServerCalls` is a mixin of :class:`~exmcp_actors.Client`; it needs the
client's actor reference, request ids, default timeout and era.
"""

from __future__ import annotations

import math
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, NamedTuple

import pykka

from ._protocol._errors import Error, NotConnected, ProtocolError, RequestTimeout, UseListen
from ._protocol._events import CancelRequest, SendRequest
from ._protocol._jsonrpc import RequestBuilder

#: Most pages a list_* call follows before deciding the server loops.
MAX_PAGES = 10_000


def check_timeout(name: str, value: Any) -> float:
    """``value`` as seconds: a TypeError naming ``name`` unless a number, a ValueError
    unless positive and finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__} {value!r}")
    # NaN and infinity are refused too: every wait here must end.
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


class PendingRequest(NamedTuple):
    """A request sent and not yet awaited."""

    request_id: Any
    method: str
    future: Future[Any]


class ServerCalls:
    """Requests to the server; every call blocks for at most its ``timeout`` (or the client's default)."""

    _ref: pykka.ActorRef[Any]
    _ids: RequestBuilder
    _request_timeout: float

    @property
    def era(self) -> str | None:
        raise NotImplementedError

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
        wait = self._request_timeout if timeout is None else check_timeout("timeout", timeout)
        return self._await_request(self._send_request(method, params), wait)

    def _send_request(self, method: str, params: dict[str, Any] | None) -> PendingRequest:
        """Send a request without waiting: many can be in flight at once (see :meth:`_await_request`)."""
        request_id = self._ids.next_id()
        future: Future[Any] = Future()
        try:
            self._ref.tell(SendRequest(request_id, method, params, future))
        except pykka.ActorDeadError:
            raise NotConnected("the client is disconnected") from None
        return PendingRequest(request_id, method, future)

    def _await_request(self, pending: PendingRequest, wait: float) -> Any:
        """The result of a sent request; on timeout it is cancelled on the wire and RequestTimeout raised."""
        try:
            return pending.future.result(max(0.0, wait))
        except FutureTimeout:
            try:
                self._ref.tell(CancelRequest(pending.request_id, "timeout"))
            except pykka.ActorDeadError:
                pass
            raise RequestTimeout(f"{pending.method} got no answer within {wait:g}s") from None

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
