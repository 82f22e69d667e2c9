"""``connect()``: from what the host passed to a ready :class:`~exmcp_actors.Client`.

It builds the transport and the configuration, starts the client actor and its
refcount worker, and waits (bounded) for the first handshake.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from ._auth import OAuth
from ._calls import check_timeout
from ._client import Client
from ._client_actor import ClientActor, Config, SharedState, Start
from ._protocol._backoff import Backoff
from ._protocol._errors import ConnectError
from ._protocol._handshake import PROTOCOL_MODES, ProtocolMode
from ._protocol._jsonrpc import RequestBuilder
from ._protocol._session import SessionConfig
from ._refcount_worker import RefcountWorker, SharedBook
from ._transport._base import Transport

DEFAULT_CLIENT_INFO = {"name": "exmcp_actors", "version": "0.1.0"}
_client_numbers = itertools.count(1)


def make_transport(transport: Any, auth: OAuth | None = None) -> Transport:
    """A Transport from what the host passed: a Transport, a URL string, or an argv list."""
    if auth is not None and not isinstance(auth, OAuth):
        raise TypeError(f"auth must be an exmcp_actors.OAuth, got {type(auth).__name__}")
    if auth is not None and not (isinstance(transport, str) and "://" in transport):
        raise ValueError("auth needs an http(s):// or ws(s):// URL; pass it to the transport you built instead")
    if isinstance(transport, Transport):
        return transport
    if isinstance(transport, str):
        scheme = transport.split(":", 1)[0].lower()
        if scheme in ("ws", "wss"):
            from ._transport._websocket import WebSocketTransport

            return WebSocketTransport(transport, auth=auth)
        if scheme in ("http", "https"):
            from ._transport.http import HttpTransport

            return HttpTransport(transport, auth=auth)
        raise ValueError(f"unsupported URL scheme {scheme!r} in {transport!r}: use ws://, wss://, http:// or https://")
    if isinstance(transport, Sequence) and transport and all(isinstance(a, str) for a in transport):
        from ._transport._stdio import StdioTransport

        return StdioTransport(list(transport))
    raise TypeError(
        "transport must be a Transport, a ws:// / http:// URL string, or a non-empty argv list of strings, "
        f"got {transport!r}"
    )


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
    auth: OAuth | None = None,
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
        auth: an :class:`~exmcp_actors.OAuth` for a server that requires authorization (HTTP
            and WebSocket URLs). An interactive authorization happens inside the connection's
            first request: give ``connect_timeout`` room for the user.

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
    session = SessionConfig(
        mode=protocol,
        reconnect=bool(reconnect),
        max_reconnect_attempts=max_reconnect_attempts,
        backoff=backoff or Backoff(),
        probe_timeout=check_timeout("probe_timeout", probe_timeout),
        client_info=dict(client_info or DEFAULT_CLIENT_INFO),
    )
    config = Config(make_transport(transport, auth), check_timeout("connect_timeout", connect_timeout), session)
    request_wait = check_timeout("request_timeout", request_timeout)
    name = f"c{next(_client_numbers)}"
    shared = SharedState()
    ids = RequestBuilder()
    ref = ClientActor.start(config, shared, ids, name)
    client = Client(ref, shared, ids, request_wait, name)
    # The worker's wire calls go out through the client like any other request.
    book = SharedBook()
    worker = RefcountWorker.start(client.request, ref, shared.adopt_current_thread, book)
    client._worker, client._book = worker, book
    ref.tell(Start(worker, client._snapshot))
    # Opening, the probe and the handshake each have their own timeout; this bounds the sum.
    deadline = config.connect_timeout * 2 + session.probe_timeout + 1.0
    if not shared.ready.wait(deadline):
        client.disconnect()
        raise ConnectError(f"no connection to {config.transport.describe()} within {deadline:.1f}s", reason="timeout")
    if shared.connect_error is not None:
        client._wait_stopped(config.connect_timeout + 1.0)
        error = shared.connect_error
        raise error if isinstance(error, ConnectError) else ConnectError(str(error))
    return client
