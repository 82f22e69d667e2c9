"""``connect()``: from what the host passed to a ready :class:`~exmcp_actors.Client`.

It builds the transport and the configuration, starts the client actor and its
refcount worker, and waits (bounded) for the first handshake.
"""

from __future__ import annotations

import itertools
import shlex
import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from .._auth import OAuth
from .._protocol._backoff import Backoff
from .._protocol._config import SessionConfig
from .._protocol._elicit import check_elicitation_modes
from .._protocol._errors import ConnectError
from .._protocol._extensions import check_extensions
from .._protocol._handshake import PROTOCOL_MODES, ProtocolMode, check_discover_result
from .._protocol._host_checks import check_roots
from .._protocol._jsonrpc import RequestBuilder
from .._runtime._client_actor import ClientActor, Start
from .._runtime._effects import Config
from .._runtime._host_pool import HostRuntime
from .._runtime._lazy_worker import LazyWorker
from .._runtime._refcount_worker import RefcountWorker, SharedBook, Wire, done_in_place
from .._runtime._shared import SharedState
from .._transport._base import Transport
from .._util._checks import check_timeout
from .._util._redact import redact_url
from .._version import installed_version
from ._client import Client
from ._config import ServerSpec
from ._shutdown import track
from ._wire_turn import WireTurn

#: What ``clientInfo`` says when the host gives none: the package and its installed version.
DEFAULT_CLIENT_INFO = {"name": "exmcp_actors", "version": installed_version()}
_client_numbers = itertools.count(1)
#: How long past connect_timeout connect() waits for the outcome, then for what a failed connect
#: opened to be released. A teardown that needs longer (a server that ignores SIGTERM, a closing
#: handshake never answered) goes on in the background, within the transport's own bounds.
_GRACE = 0.5
_URL_SCHEMES = ("ws", "wss", "http", "https")


def url_transport(url: str, headers: Mapping[str, str] | None = None, auth: OAuth | None = None) -> Transport:
    """A WebSocket or Streamable HTTP transport for ``url``; a legacy ``.../sse`` URL is refused."""
    scheme = url.split(":", 1)[0].lower()
    if scheme in ("ws", "wss"):
        from .._transport.websocket._connection import WebSocketTransport

        return WebSocketTransport(url, dict(headers) if headers else None, auth=auth)
    if urlsplit(url).path.rstrip("/").endswith("/sse"):
        raise ConnectError(
            f"{redact_url(url, query_names=True)} looks like the old HTTP+SSE transport (MCP 2024-11-05), which "
            "exmcp_actors does not support: point it at the server's Streamable HTTP endpoint (often .../mcp) "
            "or use ws:// or stdio",
            reason="sse_transport_unsupported",
        )
    from .._transport.http import HttpTransport

    return HttpTransport(url, dict(headers) if headers else None, auth=auth)


def spec_transport(spec: ServerSpec) -> Transport:
    """A fresh transport for one server of an ``mcpServers`` config."""
    if spec.url is not None:
        return url_transport(spec.url, spec.headers)
    return make_transport(list(spec.command), env=spec.env, cwd=spec.cwd, name=spec.name)


def make_transport(
    transport: Any,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    inherit_env: bool = False,
    name: str | None = None,
    auth: OAuth | None = None,
) -> Transport:
    """A Transport from what the host passed: a Transport, a URL string, or an argv list.

    ``env``, ``cwd`` and ``inherit_env`` go to the child process of an argv list (and are refused otherwise).
    """
    if (env is not None or cwd is not None or inherit_env) and (isinstance(transport, (str, Transport))):
        raise ValueError(
            "env=, cwd= and inherit_env= apply to a server command (an argv list), not to a URL or a Transport"
        )
    if auth is not None and not isinstance(auth, OAuth):
        raise TypeError(f"auth must be an exmcp_actors.OAuth, got {type(auth).__name__}")
    if auth is not None and not (isinstance(transport, str) and "://" in transport):
        raise ValueError("auth needs an http(s):// or ws(s):// URL; pass it to the transport you built instead")
    if isinstance(transport, Transport):
        return transport
    if isinstance(transport, str):
        scheme = transport.split(":", 1)[0].lower()
        if scheme in _URL_SCHEMES and "://" in transport:
            return url_transport(transport, auth=auth)
        if "://" not in transport:
            raise ValueError(
                f"connect() got the string {transport!r}, which is not a URL: to run a server command, "
                f"pass its argv as a list, e.g. connect({shlex.split(transport)!r})"
            )
        raise ValueError(
            f"unsupported URL scheme {scheme!r} in {redact_url(transport, query_names=True)!r}: "
            "use ws://, wss://, http:// or https://"
        )
    if isinstance(transport, Sequence) and transport and all(isinstance(a, str) for a in transport):
        from .._transport.stdio._process import StdioTransport

        return StdioTransport(list(transport), env=env, cwd=cwd, inherit_env=bool(inherit_env), name=name)
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
    connect_timeout: float = 30.0,
    probe_timeout: float = 3.0,
    roots: list[dict[str, Any]] | None = None,
    sampling: Any = None,
    sampling_tools: bool = False,
    elicitation: Any = None,
    elicitation_modes: tuple[str, ...] = ("form",),
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    inherit_env: bool = False,
    name: str | None = None,
    auth: OAuth | None = None,
    discover_result: dict[str, Any] | None = None,
    extensions: dict[str, dict[str, Any]] | None = None,
    on_request: Any = None,
    keepalive: float | None = None,
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
        connect_timeout: seconds the whole ``connect()`` may take (opening the transport, the probe and
            the handshake); after a loss, each stage of a reconnect (opening, the handshake,
            resubscribing, re-listening) gets as long again, else the attempt counts as failed.
        probe_timeout: seconds the ``server/discover`` probe may go unanswered before ``auto`` falls
            back, counted from when the server read it where the transport tells (a stdio child on
            Linux: once it took the probe from its stdin), else from when it was sent.
        roots: ``[{"uri": ..., "name": ...}]``: advertise ``roots`` and answer ``roots/list``.
        sampling: ``fn(params) -> CreateMessageResult dict``: answer ``sampling/createMessage``.
            Each result is checked against its request before it is sent (a bad one is logged
            and answered -32603).
        sampling_tools: advertise ``sampling.tools``: the handler gets the ``tools`` and
            ``toolChoice`` a server offers and may answer ``tool_use`` blocks (needs ``sampling``).
        elicitation: ``fn(params) -> ElicitResult dict``: answer ``elicitation/create`` (and, with
            ``url`` among its modes, a -32042 error's elicitations); an ``on_complete(params)``
            attribute, if it has one, hears ``notifications/elicitation/complete``.
        elicitation_modes: the modes ``elicitation`` takes and the client advertises:
            ``("form",)``, ``("form", "url")`` or ``("url",)``.
        env: for an argv list: environment variables for the server process (see :class:`StdioTransport`).
        cwd: for an argv list: the server process's working directory.
        inherit_env: for an argv list: pass the host's whole environment (default: an allow-list plus ``env``).
        name: the client's :attr:`Client.name` (default ``c1``, ``c2``, ...); a :class:`Hub` uses the config's name.
        auth: an :class:`~exmcp_actors.OAuth` for a server that requires authorization (HTTP
            and WebSocket URLs). An interactive authorization happens inside the connection's
            first request: give ``connect_timeout`` room for the user.
        discover_result: a ``server/discover`` result kept from an earlier connection
            (:attr:`Client.discover_result`): the first connection adopts it with no round trip
            (``auto`` or ``modern``); a reconnect probes afresh.
        extensions: ``{"com.example/name": settings_dict}``: the extensions (SEP-2133) the client
            declares, in ``initialize`` (legacy) or every request's client capabilities (2026-07-28).
        on_request: ``fn(method, params) -> result dict``: answer the server requests the library
            does not know (without it they get -32601). It runs on the host pool; if it raises,
            the server gets a generic -32603 and the exception is logged.
        keepalive: seconds a ready connection may receive nothing before it is probed (a legacy
            peer with ``ping``, a 2026-07-28 one with ``server/discover``); a probe unanswered
            for ``min(keepalive, 10)`` seconds is a lost connection: the client reconnects, or
            (``reconnect=False``) closes with ``("keepalive_timeout", keepalive)``. None (the
            default): no probes, and nothing is armed.

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
    if name is not None and not (isinstance(name, str) and name):
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    connect_wait = check_timeout("connect_timeout", connect_timeout)
    idle_wait = None if keepalive is None else check_timeout("keepalive", keepalive)
    # One deadline for the whole call, whatever stage hangs: every wait below ends by it.
    deadline = time.monotonic() + connect_wait
    if discover_result is not None:
        if protocol == "legacy":
            raise ValueError("discover_result is a 2026-07-28 result: it needs protocol='auto' or 'modern'")
        discover_result = dict(check_discover_result(discover_result))
    for what, handler in (("sampling", sampling), ("elicitation", elicitation)):
        if handler is not None and not callable(handler):
            raise TypeError(f"{what} must be a callable fn(params) -> dict, got {type(handler).__name__}")
    if on_request is not None and not callable(on_request):
        raise TypeError(f"on_request must be a callable fn(method, params) -> dict, got {type(on_request).__name__}")
    if not isinstance(sampling_tools, bool):
        raise TypeError(f"sampling_tools must be a bool, got {type(sampling_tools).__name__}")
    if sampling_tools and sampling is None:
        raise ValueError("sampling_tools=True needs a sampling handler: pass sampling=fn as well")
    modes = check_elicitation_modes(elicitation_modes)
    if elicitation is None and modes != ("form",):
        raise ValueError("elicitation_modes needs an elicitation handler: pass elicitation=fn as well")
    checked_extensions = check_extensions(extensions) if extensions is not None else {}
    checked_roots = check_roots(roots) if roots is not None else []
    built = make_transport(transport, env=env, cwd=cwd, inherit_env=inherit_env, name=name, auth=auth)
    name = name or f"c{next(_client_numbers)}"
    host = HostRuntime(
        name,
        sampling,
        elicitation,
        roots is not None,
        on_request=on_request,
        extensions=checked_extensions,
        sampling_tools=sampling_tools,
        elicitation_modes=modes,
    )
    host.roots = checked_roots
    session = SessionConfig(
        mode=protocol,
        reconnect=bool(reconnect),
        max_reconnect_attempts=max_reconnect_attempts,
        backoff=backoff or Backoff(),
        probe_timeout=check_timeout("probe_timeout", probe_timeout),
        client_info=dict(client_info or DEFAULT_CLIENT_INFO),
        stage_timeout=connect_wait,
        host=host.abilities,
        roots=host.roots,
        elicitations=host.elicitations,
        discover_result=discover_result,
        keepalive=idle_wait,
    )
    config = Config(built, connect_wait, session, host, connect_deadline=deadline)
    request_wait = check_timeout("request_timeout", request_timeout)
    shared = SharedState()
    ids = RequestBuilder()
    ref = ClientActor.start(config, shared, ids, name)
    client = Client(ref, shared, ids, request_wait, name, host)
    track(client)  # closed at interpreter exit, before the host's threads are joined
    # The worker's wire calls go out through the client like any other request.
    book = SharedBook()
    wire = Wire(client.request, client._send_request, client._await_request, request_wait)
    worker = LazyWorker(
        lambda: RefcountWorker.start(wire, ref, shared.adopt_current_thread, book), partial(done_in_place, book)
    )
    client._worker, client._book = worker, book
    client._turn = WireTurn(book, worker, client._send_request)
    ref.tell(Start(worker, client._snapshot))
    # The session's own deadline ends the connect at connect_timeout, naming the stage that ran
    # out; this wait only guards against a shell too busy to report it.
    if not shared.ready.wait(max(0.0, deadline + _GRACE - time.monotonic())):
        client._begin_disconnect()
        raise ConnectError(
            f"no connection to {config.transport.describe()} within {connect_wait:.1f}s; "
            "check the server is running and speaks MCP, or raise connect_timeout",
            reason="timeout",
        )
    if shared.connect_error is not None:
        client._wait_stopped(max(0.0, deadline + _GRACE - time.monotonic()))
        error = shared.connect_error
        raise error if isinstance(error, ConnectError) else ConnectError(str(error))
    return client
