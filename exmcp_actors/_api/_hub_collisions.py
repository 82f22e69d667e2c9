"""Names that more than one server of a hub catalog has, kept current on every refresh.

A hub catalog's per-server catalogs deliver to a :class:`CollisionFeed`, which recomputes
the collisions of the refreshed kind, then hands the host a :class:`HubCollision` for each
name whose set of servers changed, followed by the :class:`CatalogChanged` itself.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, NamedTuple

from .._delivery._targets import deliver
from .._protocol._catalog_diff import KEYS
from .._protocol._ratelog import RateLimitedLog
from ._catalog import KINDS

logger = logging.getLogger("exmcp_actors.hub")

#: Colliding names tracked per kind; past it only the first (sorted) are, and it is logged:
#: servers size their lists, and each tracked name costs memory and may cost a message.
MAX_TRACKED: Final = 10_000
HUB_COLLISION: Final = "ex_mcp_hub_collision"

#: kind -> every server's current list of it (server name -> items), in config order.
Lists = Callable[[str], Mapping[str, list[dict[str, Any]]]]


class HubCollision(NamedTuple):
    """A name's set of servers changed: ``("ex_mcp_hub_collision", catalog, kind, name, servers)``."""

    tag: Literal["ex_mcp_hub_collision"]
    #: The :class:`HubCatalog`.
    catalog: Any
    #: ``"tools"``, ``"prompts"`` or ``"resources"``.
    kind: str
    #: The tool or prompt name, or the resource URI.
    name: str
    #: The servers that have it now, sorted; fewer than two: the collision is gone.
    servers: list[str]


def _owners(lists: Mapping[str, list[dict[str, Any]]], key: str) -> dict[str, list[str]]:
    owners: dict[str, list[str]] = {}
    for server, items in lists.items():
        for item in items:
            name = item.get(key) if isinstance(item, dict) else None
            if isinstance(name, str):
                found = owners.setdefault(name, [])
                if not found or found[-1] != server:  # a server listing a name twice is one owner
                    found.append(server)
    return owners


class CollisionFeed:
    """The ``put()`` subscriber of a hub catalog's catalogs (see the module docstring).

    Messages go out in the order they were made, one delivering thread at a time, with no
    lock held while the host's subscriber runs.
    """

    def __init__(self, owner: Any, lists: Lists, target: Any) -> None:
        self._owner = owner
        self._lists = lists
        self._target = target
        self._lock = threading.Lock()
        self._outbox: deque[Any] = deque()
        self._draining = False
        self._ready = False
        self._log = RateLimitedLog(logger)
        #: kind -> name -> sorted servers (two or more); each inner dict replaced whole, and
        #: tuples, so nothing handed to the host shares a list with it.
        self.current: dict[str, dict[str, tuple[str, ...]]] = {kind: {} for kind in KINDS}

    def start(self) -> None:
        """Every catalog is made: take the collisions as they are now (no messages for these)."""
        with self._lock:
            for kind in KINDS:
                self._recompute(kind)
            self._ready = True

    def put(self, message: Any) -> None:
        with self._lock:
            if self._ready and message[0] == "ex_mcp_catalog_changed":
                self._outbox.extend(self._recompute(message.kind))
            self._outbox.append(message)
            if self._draining:
                return  # the thread delivering now takes these too, in order
            self._draining = True
        self._drain()

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._outbox:
                    self._draining = False
                    return
                batch = list(self._outbox)
                self._outbox.clear()
            deliver(self._target, batch)

    def _recompute(self, kind: str) -> list[HubCollision]:
        """Replace ``current[kind]``; a message for each name whose servers changed."""
        owners = _owners(self._lists(kind), KEYS[kind])
        colliding = sorted(name for name, servers in owners.items() if len(servers) > 1)
        if len(colliding) > MAX_TRACKED:
            self._log.warning(
                f"collisions-{kind}",
                "hub catalog: %d %s names are on more than one server; only the first %d (sorted) are tracked",
                len(colliding),
                kind,
                MAX_TRACKED,
            )
            colliding = colliding[:MAX_TRACKED]
        old = self.current[kind]
        new = {name: tuple(sorted(owners[name])) for name in colliding}
        self.current[kind] = new
        changed = [
            HubCollision(HUB_COLLISION, self._owner, kind, name, list(new[name]))
            for name in colliding
            if old.get(name) != new[name]
        ]
        for name in old:
            servers = sorted(owners.get(name, ()))
            if name not in new and len(servers) < 2:  # gone (not merely past the bound)
                changed.append(HubCollision(HUB_COLLISION, self._owner, kind, name, servers))
        return changed
