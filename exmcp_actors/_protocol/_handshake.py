"""The connect-time handshake and era negotiation (sans-IO).

The handshake never sends anything itself: each input returns the actions the
session must carry out (send a frame, arm the probe timer, finish or fail).
It moves the connection into the PROBING and INITIALIZING phases of the state
table in ``_state.py``; the session makes it READY on ``Negotiated``::

    start(auto|modern) -> PROBING --discover result--> READY (modern)
                            | -32020, -32021: a modern server refused the probe --> Failed
                            | its answer lost (OutcomeUnknown) --> the probe again, new id (twice)
                            | any other error, a failed exchange, a timeout (auto) --> INITIALIZING
    start(legacy) -------> INITIALIZING --result--> READY (legacy) (+ notifications/initialized)
    start(auto|modern, with a known discover result) -> PROBING -> READY (modern), nothing sent
                            | -32022 (a late probe locked the peer modern) --> PROBING (once)
    a bad answer: Failed (the session decides whether to retry or close)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ._errors import ConnectError, OutcomeUnknown, error_term
from ._jsonrpc import (
    MODERN_ONLY_ERRORS,
    UNSUPPORTED_VERSION,
    Answer,
    ErrorResponse,
    RequestBuilder,
    RequestFailed,
    notification,
)
from ._peer_text import peer_text
from ._reissue import MAX_REISSUES
from ._state import ConnectionState, Move, Phase
from ._versions import LATEST_LEGACY, LEGACY_VERSIONS, MODERN_VERSION, MODERN_VERSIONS, Era, era_of

ProtocolMode = Literal["auto", "legacy", "modern"]
PROTOCOL_MODES: tuple[str, ...] = ("auto", "legacy", "modern")

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"


@dataclass(frozen=True, slots=True)
class SendFrame:
    """Send this message; if ``request_id`` is set, route its answer back to the machine."""

    message: dict[str, Any]
    request_id: Any = None


@dataclass(frozen=True, slots=True)
class ArmProbeTimer:
    """Call ``probe_timed_out(request_id)`` after the probe timeout unless answered first."""

    request_id: Any


@dataclass(frozen=True, slots=True)
class Negotiated:
    """The handshake is done."""

    era: Era
    protocol_version: str
    server_info: dict[str, Any]
    capabilities: dict[str, Any]
    instructions: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Failed:
    """The handshake failed; the connection must be closed."""

    error: ConnectError


Action = SendFrame | ArmProbeTimer | Negotiated | Failed


def modern_meta(client_info: dict[str, Any], capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``_meta`` envelope every modern request carries."""
    return {
        META_PROTOCOL_VERSION: MODERN_VERSION,
        META_CLIENT_CAPABILITIES: capabilities or {},
        META_CLIENT_INFO: client_info,
    }


def with_modern_meta(
    params: dict[str, Any] | None, client_info: dict[str, Any], capabilities: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``params`` with the modern ``_meta`` envelope merged in (the caller's own _meta keys kept)."""
    merged = dict(params or {})
    meta = dict(merged.get("_meta") or {})
    for key, value in modern_meta(client_info, capabilities).items():
        meta.setdefault(key, value)
    merged["_meta"] = meta
    return merged


def check_discover_result(result: Any) -> dict[str, Any]:
    """A ``server/discover`` result the host hands back (``connect(discover_result=...)``), checked.

    Raises:
        TypeError: not a dict.
        ValueError: it lists no version this client speaks in the 2026-07-28 era.
    """
    if not isinstance(result, dict):
        raise TypeError(f"discover_result must be a server/discover result dict, got {type(result).__name__}")
    versions = result.get("supportedVersions")
    if not isinstance(versions, list) or not any(v in MODERN_VERSIONS for v in versions):
        raise ValueError(
            f"discover_result lists no version this client speaks ({MODERN_VERSION}): "
            f"supportedVersions is {peer_text(versions)}"
        )
    return result


def _supported_versions(data: Any) -> list[str] | None:
    supported = data.get("supported") if isinstance(data, dict) else None
    if isinstance(supported, list) and all(isinstance(v, str) for v in supported):
        return supported
    return None


class Handshake:
    """Drives one connection's handshake. Create a new one per connection."""

    def __init__(
        self,
        mode: ProtocolMode,
        client_info: dict[str, Any],
        ids: RequestBuilder,
        connection: ConnectionState | None = None,
        capabilities: dict[str, Any] | None = None,
        known: dict[str, Any] | None = None,
    ) -> None:
        if mode not in PROTOCOL_MODES:
            raise ValueError(f"protocol must be one of {PROTOCOL_MODES}, got {mode!r}")
        self.mode = mode
        self.client_info = client_info
        #: What the client advertises (the host's handlers and roots).
        self.capabilities = capabilities or {}
        self._ids = ids
        self._connection = connection if connection is not None else ConnectionState()
        self._started = False
        self._outstanding: Any = None
        self._reprobed = False
        #: How many times a probe whose answer was lost was sent again.
        self._reissued = 0
        #: A discover result the host kept (checked by :func:`check_discover_result`): adopted, not asked.
        self._known = known

    @property
    def state(self) -> Phase:
        """The connection's phase (PROBING, INITIALIZING, READY while this handshake runs)."""
        return self._connection.phase

    def start(self) -> list[Action]:
        """Begin: probe with ``server/discover`` (auto, modern) or send ``initialize`` (legacy)."""
        if self._started:
            raise RuntimeError("handshake already started")
        self._started = True
        if self.mode == "legacy":
            return self._initialize()
        if self._known is not None:
            self._connection.move(Move.PROBE)
            return self._discovered(self._known)
        return self._probe()

    def owns(self, request_id: Any) -> bool:
        """Whether an answer with this id belongs to the handshake."""
        return self._outstanding is not None and request_id == self._outstanding

    def on_answer(self, answer: Answer) -> list[Action]:
        """Feed the answer (or the transport's failure) to the outstanding handshake request."""
        if not self.owns(answer.id):
            return []
        self._outstanding = None
        if self.state is Phase.PROBING:
            return self._probe_answered(answer)
        if self.state is Phase.INITIALIZING:
            return self._initialize_answered(answer)
        return []

    def probe_timed_out(self, request_id: Any) -> list[Action]:
        """The probe got no answer in time: a silent legacy server, in auto mode."""
        if self.state is not Phase.PROBING or not self.owns(request_id):
            return []
        self._outstanding = None
        if self.mode == "modern":
            return self._fail("the server did not answer server/discover in time")
        return self._initialize()

    # -- transitions ---------------------------------------------------------------------

    def _probe(self) -> list[Action]:
        self._connection.move(Move.PROBE)
        return self._send_probe()

    def _send_probe(self) -> list[Action]:
        request_id = self._ids.next_id()
        self._outstanding = request_id
        params = {"_meta": modern_meta(self.client_info, self.capabilities)}
        message = RequestBuilder.request("server/discover", params, request_id)
        return [SendFrame(message, request_id), ArmProbeTimer(request_id)]

    def _initialize(self) -> list[Action]:
        self._connection.move(Move.INITIALIZE)
        request_id = self._ids.next_id()
        self._outstanding = request_id
        params = {"protocolVersion": LATEST_LEGACY, "capabilities": self.capabilities, "clientInfo": self.client_info}
        return [SendFrame(RequestBuilder.request("initialize", params, request_id), request_id)]

    def _fail(self, why: str, reason: Any = "handshake_failed") -> list[Action]:
        return [Failed(ConnectError(why, reason=reason))]

    def _probe_answered(self, answer: Answer) -> list[Action]:
        if isinstance(answer, RequestFailed):
            if isinstance(answer.error, OutcomeUnknown) and self._reissued < MAX_REISSUES:
                # The server took the probe and its answer was lost (a dropped response
                # stream): that says nothing of its era. 2026-07-28 has it re-issued.
                self._reissued += 1
                return self._send_probe()
            if self.mode == "modern":
                return self._fail(f"server/discover failed: {peer_text(str(answer.error), 1000)}")
            # A legacy HTTP server refuses the unknown method at the HTTP level (400, 404, 405).
            return self._initialize()
        if isinstance(answer, ErrorResponse):
            supported = _supported_versions(answer.data) if answer.code == UNSUPPORTED_VERSION else None
            if answer.code == UNSUPPORTED_VERSION:
                legacy_possible = supported is None or any(v in LEGACY_VERSIONS for v in supported)
                if self.mode == "modern" or not legacy_possible:
                    return self._fail(
                        f"the server does not support MCP {MODERN_VERSION}; it supports {peer_text(supported)}",
                        reason=("unsupported_protocol_version", supported),
                    )
                return self._initialize()
            if self.mode == "modern" or answer.code in MODERN_ONLY_ERRORS:
                # Only a 2026-07-28 server answers -32020 or -32021: initialize would only
                # hide why it refused.
                return self._fail(
                    f"server/discover failed: {answer.code} {peer_text(answer.message)}"
                    f"{'' if answer.data is None else ' ' + peer_text(answer.data)}",
                    reason=("discover_failed", answer.code),
                )
            return self._initialize()  # any other error is evidence of a legacy server
        return self._discovered(answer.result)

    def _discovered(self, result: Any) -> list[Action]:
        """A discover result (answered now, or known from before): modern, or a fallback."""
        versions = result.get("supportedVersions") if isinstance(result, dict) else None
        if not isinstance(versions, list) or not any(v in MODERN_VERSIONS for v in versions):
            if self.mode == "modern":
                return self._fail(
                    f"the server does not support MCP {MODERN_VERSION}; it supports {peer_text(versions)}",
                    reason=("unsupported_protocol_version", versions),
                )
            return self._initialize()  # discover answered, but only legacy versions advertised
        assert isinstance(result, dict)
        return [
            Negotiated(
                era="modern",
                protocol_version=MODERN_VERSION,
                server_info=_dict(result.get("serverInfo")) or _dict(_dict(result.get("_meta")).get(META_SERVER_INFO)),
                capabilities=_dict(result.get("capabilities")),
                instructions=result.get("instructions") if isinstance(result.get("instructions"), str) else None,
                raw=result,
            )
        ]

    def _initialize_answered(self, answer: Answer) -> list[Action]:
        if isinstance(answer, RequestFailed):
            why = f"initialize failed: {peer_text(str(answer.error), 1000)}"  # a transport's words, maybe the server's
            return self._fail(why, reason=("initialize_failed", error_term(answer.error)))
        if isinstance(answer, ErrorResponse):
            supported = _supported_versions(answer.data)
            if (
                answer.code == UNSUPPORTED_VERSION
                and self.mode == "auto"
                and not self._reprobed
                and supported is not None
                and MODERN_VERSION in supported
            ):
                # A probe that timed out here but reached a slow-starting server locked it modern.
                self._reprobed = True
                return self._probe()
            return self._fail(
                f"initialize failed: {answer.code} {peer_text(answer.message)}",
                reason=("initialize_failed", answer.code),
            )
        result = answer.result
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        if era_of(version) != "legacy":
            return self._fail(
                f"the server answered initialize with protocol version {peer_text(version, quote=True)}, "
                f"which this client does not speak (it speaks {', '.join(LEGACY_VERSIONS)})",
                reason=("unsupported_protocol_version", version),
            )
        assert isinstance(result, dict) and isinstance(version, str)
        return [
            SendFrame(notification("notifications/initialized")),
            Negotiated(
                era="legacy",
                protocol_version=version,
                server_info=_dict(result.get("serverInfo")),
                capabilities=_dict(result.get("capabilities")),
                instructions=result.get("instructions") if isinstance(result.get("instructions"), str) else None,
                raw=result,
            ),
        ]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
