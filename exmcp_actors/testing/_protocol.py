"""What the fake speaks: MCP revisions, ``_meta`` keys, error codes, and what a handler answers besides a result."""

from __future__ import annotations

from typing import Any, Final, Literal

#: The revisions answered by ``initialize`` (the legacy era), oldest first.
LEGACY_VERSIONS: Final[tuple[str, ...]] = (
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
)
#: The modern revision: no handshake, ``server/discover``, ``subscriptions/listen``.
MODERN_VERSION: Final = "2026-07-28"
#: The ``_meta`` key that stamps acknowledgments, events and listen results.
SUBSCRIPTION_ID_KEY: Final = "io.modelcontextprotocol/subscriptionId"
PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
#: Methods that exist only in the legacy era: on a modern connection they are -32601, not a _meta error.
LEGACY_ONLY_METHODS: Final = frozenset(
    {"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"}
)

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
UNSUPPORTED_VERSION: Final = -32022

Era = Literal["legacy", "modern", "both"]
Probe = Literal["error", "silent", "discover"]
ListKind = Literal["tools", "resources", "prompts"]
ERAS: Final = ("legacy", "modern", "both")
PROBES: Final = ("error", "silent", "discover")
KINDS: Final = ("tools", "resources", "prompts")


class _NoReply:
    """Type of :data:`NO_REPLY`."""

    def __repr__(self) -> str:
        return "NO_REPLY"


#: Returned by a handler: never answer this request (the test may answer later
#: with :meth:`FakeConnection.respond`, or never).
NO_REPLY: Final = _NoReply()


class FakeError(Exception):
    """Raised by a handler to answer with a JSON-RPC error.

    Args:
        code: the JSON-RPC error code, e.g. ``-32602``.
        message: the error message.
        data: optional ``data`` member.
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data

    def as_error(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` object."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """Raise ValueError unless ``value`` is one of ``choices`` (an era, probe or list kind)."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, not {value!r}")


def uri_param(params: dict[str, Any]) -> str:
    """``params.uri``, or a -32602 :class:`FakeError` when it is not a non-empty string."""
    uri = params.get("uri")
    if not isinstance(uri, str) or not uri:
        raise FakeError(INVALID_PARAMS, "params.uri must be a non-empty string")
    return uri


def modern_meta_problem(method: str, params: dict[str, Any]) -> str | None:
    """What a modern request's ``_meta`` envelope lacks, or None when it is complete."""
    if method == "server/discover" or method in LEGACY_ONLY_METHODS:
        return None  # the probe may come bare; legacy-only methods are -32601 anyway
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        return "params._meta is required on every 2026-07-28 request"
    if meta.get(PROTOCOL_VERSION_KEY) != MODERN_VERSION:
        return f"params._meta[{PROTOCOL_VERSION_KEY!r}] must be {MODERN_VERSION!r}"
    if not isinstance(meta.get(CLIENT_CAPABILITIES_KEY), dict):
        return f"params._meta[{CLIENT_CAPABILITIES_KEY!r}] must be an object"
    return None
