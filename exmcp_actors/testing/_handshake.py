"""Built-in answers that shape a session: the handshakes of both eras, legacy subscriptions, listens."""

from __future__ import annotations

from typing import Any, Protocol

from exmcp_actors.testing._connection import FakeConnection, Handler
from exmcp_actors.testing._protocol import (
    LEGACY_VERSIONS,
    METHOD_NOT_FOUND,
    MODERN_VERSION,
    NO_REPLY,
    PROTOCOL_VERSION_KEY,
    UNSUPPORTED_VERSION,
    Era,
    FakeError,
    Probe,
    uri_param,
)


class Settings(Protocol):
    """The server's plain attributes that shape its handshakes (a :class:`FakeServer` has them)."""

    @property
    def era(self) -> Era: ...

    @property
    def protocol_version(self) -> str: ...

    @property
    def capabilities(self) -> dict[str, Any]: ...

    @property
    def server_info(self) -> dict[str, Any]: ...

    @property
    def probe(self) -> Probe: ...

    @property
    def instructions(self) -> str | None: ...


class Handshake:
    """The built-in handlers that shape a session: handshakes, legacy subscriptions, listens.

    That is ``initialize``, ``ping``, ``logging/setLevel``, ``server/discover``,
    ``resources/subscribe`` / ``unsubscribe`` and ``subscriptions/listen``.
    They read the server's :class:`Settings` when called, so a change applies
    to messages handled afterwards.
    """

    def __init__(self, server: Settings) -> None:
        self._server = server

    def handlers(self) -> dict[str, Handler]:
        """Method name to built-in handler."""
        return {
            "initialize": self._initialize,
            "ping": self._ping,
            "logging/setLevel": self._ping,
            "server/discover": self._discover,
            "resources/subscribe": self._subscribe,
            "resources/unsubscribe": self._unsubscribe,
            "subscriptions/listen": self._listen,
        }

    def _card(self, **first: Any) -> dict[str, Any]:
        """A handshake result: ``first``, then capabilities, serverInfo and any instructions."""
        server = self._server
        result: dict[str, Any] = {**first, "capabilities": server.capabilities, "serverInfo": server.server_info}
        if server.instructions is not None:
            result["instructions"] = server.instructions
        return result

    def _initialize(self, params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        if self._server.era == "modern":
            raise FakeError(
                METHOD_NOT_FOUND,
                f"Method not found: initialize (this server speaks only {MODERN_VERSION})",
            )
        offered = params.get("protocolVersion")
        version = offered if offered in LEGACY_VERSIONS else self._server.protocol_version
        ctx.era = "legacy"
        return self._card(protocolVersion=version)

    def _require_legacy(self, ctx: FakeConnection) -> None:
        if self._server.era == "modern":
            raise FakeError(METHOD_NOT_FOUND, f"Method not found: {ctx.method}")

    def _ping(self, params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        self._require_legacy(ctx)
        return {}

    def _discover(self, params: dict[str, Any], ctx: FakeConnection) -> Any:
        if self._server.era == "legacy":
            if self._server.probe == "silent":
                return NO_REPLY  # a stdio server that ignores unknown requests
            if self._server.probe == "error":
                raise FakeError(METHOD_NOT_FOUND, "Method not found: server/discover")
            supported = list(reversed(LEGACY_VERSIONS))
        elif self._server.era == "modern":
            supported = [MODERN_VERSION]
        else:
            supported = [MODERN_VERSION, *reversed(LEGACY_VERSIONS)]
        meta = params.get("_meta")
        requested = meta.get(PROTOCOL_VERSION_KEY) if isinstance(meta, dict) else None
        if requested is not None and requested not in supported:
            raise FakeError(
                UNSUPPORTED_VERSION,
                "Unsupported protocol version",
                {"supported": supported, "requested": requested},
            )
        if self._server.era != "legacy":
            ctx.era = "modern"
        return self._card(supportedVersions=supported)

    def _subscribe(self, params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        self._require_legacy(ctx)
        ctx._subscribe(uri_param(params))
        return {}

    def _unsubscribe(self, params: dict[str, Any], ctx: FakeConnection) -> dict[str, Any]:
        self._require_legacy(ctx)
        ctx._unsubscribe(uri_param(params))
        return {}

    def _listen(self, params: dict[str, Any], ctx: FakeConnection) -> Any:
        if self._server.era == "legacy":
            raise FakeError(METHOD_NOT_FOUND, "Method not found: subscriptions/listen")
        requested = params.get("notifications")
        # Honour exactly what was asked; override for a narrower or wider ack.
        ctx.acknowledge(requested if isinstance(requested, dict) else {})
        return NO_REPLY
