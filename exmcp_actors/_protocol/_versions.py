"""The MCP revision registry: which version strings exist and which era each belongs to.

Version strings are an enumerated set, not an ordering: an unknown string is
never "newer", it is simply not spoken here.
"""

from __future__ import annotations

from typing import Literal

Era = Literal["legacy", "modern"]

LEGACY_VERSIONS: tuple[str, ...] = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS: tuple[str, ...] = ("2026-07-28",)

#: What a legacy client offers in ``initialize``.
LATEST_LEGACY = LEGACY_VERSIONS[-1]
#: The one modern revision this client speaks.
MODERN_VERSION = MODERN_VERSIONS[0]


def era_of(version: object) -> Era | None:
    """The era of a revision string, or None for anything this client does not speak."""
    if version in LEGACY_VERSIONS:
        return "legacy"
    if version in MODERN_VERSIONS:
        return "modern"
    return None
