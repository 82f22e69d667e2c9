"""URL-mode elicitation (MCP 2025-11-25), sans-IO: the modes a host's handler takes, the check
of a URL request, and the ids of the elicitations the client has seen, which alone may be
reported complete (``notifications/elicitation/complete``; the spec says to ignore others).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Final

from ._elicit_url import check_elicit_url

#: The JSON-RPC error a server answers with when a URL-mode elicitation must come first.
URL_ELICITATION_REQUIRED: Final = -32042
ELICITATION_MODES: Final = ("form", "url")
#: Actions an elicitation answer may carry, in either mode.
ELICIT_ACTIONS: Final = frozenset(("accept", "decline", "cancel"))
#: Elicitation ids remembered for their completion: the newest this many.
MAX_SEEN_ELICITATIONS: Final = 256


def check_elicitation_modes(modes: Any) -> tuple[str, ...]:
    """The host's ``elicitation_modes`` as a tuple; TypeError or ValueError naming it."""
    if isinstance(modes, str) or not isinstance(modes, (tuple, list)):
        raise TypeError(f"elicitation_modes must be a tuple of 'form' and/or 'url', got {type(modes).__name__}")
    if not modes or any(mode not in ELICITATION_MODES for mode in modes) or len(set(modes)) != len(modes):
        raise ValueError(f"elicitation_modes must name 'form' and/or 'url', each once and at least one, got {modes!r}")
    return tuple(modes)


def check_url_request(params: dict[str, Any], needs_id: bool) -> str | None:
    """Why a URL-mode elicitation is unusable (a sentence), or None. ``needs_id``: 2025-11-25
    requires ``elicitationId`` (2026-07-28 has none: the retried request carries the state)."""
    elicitation_id = params.get("elicitationId")
    if (needs_id or elicitation_id is not None) and not (isinstance(elicitation_id, str) and elicitation_id):
        return "elicitation in url mode needs 'elicitationId', a non-empty string"
    why = check_elicit_url(params.get("url"))
    return None if why is None else f"refused the elicitation's url: {why}"


class SeenElicitations:
    """The URL elicitations handed to the host, by id, the newest :data:`MAX_SEEN_ELICITATIONS`.

    Noted by the session (server requests) and by host threads (a -32042 error's elicitations),
    taken by the session when one is reported complete; its lock is a leaf.
    """

    def __init__(self, limit: int = MAX_SEEN_ELICITATIONS) -> None:
        self._limit = limit
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def note(self, elicitation_id: Any) -> None:
        if not isinstance(elicitation_id, str):
            return
        with self._lock:
            self._ids[elicitation_id] = None
            self._ids.move_to_end(elicitation_id)
            while len(self._ids) > self._limit:
                self._ids.popitem(last=False)

    def take(self, elicitation_id: Any) -> bool:
        """Whether ``elicitation_id`` was seen and not yet completed; it is forgotten either way."""
        if not isinstance(elicitation_id, str):
            return False
        with self._lock:
            return self._ids.pop(elicitation_id, False) is None
