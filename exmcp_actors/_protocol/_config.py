"""What a session is configured with (sans-IO): data only, read by every part of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._backoff import Backoff
from ._elicit import SeenElicitations
from ._handshake import ProtocolMode
from ._host_checks import HostAbilities


@dataclass(frozen=True, slots=True)
class SessionConfig:
    mode: ProtocolMode
    reconnect: bool
    max_reconnect_attempts: int
    backoff: Backoff
    probe_timeout: float
    client_info: dict[str, Any]
    #: Seconds each stage of a connect or reconnect may take (see ``_stages``).
    stage_timeout: float = 10.0
    #: Which server requests the host answers; ``capabilities`` is what that advertises.
    host: HostAbilities = field(default_factory=HostAbilities)
    roots: list[dict[str, Any]] = field(default_factory=list)
    #: The URL elicitations the host was handed (the host runtime's, shared with its threads).
    elicitations: SeenElicitations = field(default_factory=SeenElicitations)
    #: A ``server/discover`` result the host kept: the first connection adopts it unprobed.
    discover_result: dict[str, Any] | None = None
    #: Seconds a ready connection may receive nothing before it is probed (None: never).
    keepalive: float | None = None

    @property
    def capabilities(self) -> dict[str, Any]:
        return self.host.capabilities()
