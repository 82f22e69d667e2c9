"""URI reference counting for legacy resource subscriptions (sans-IO).

The worker actor drives this book one operation at a time and does the wire
I/O the book asks for. The book itself never talks to anyone, so every
bookkeeping rule is testable without threads.

Rules (from the ExMCP seed):
- one ``resources/subscribe`` per URI, shared by every listener naming it;
- ``resources/unsubscribe`` when the last holder goes away;
- each listener releases exactly the URIs it acquired;
- a URI refused on resubscribe is *lost*: its holders keep their count, the
  next listener naming it tries the wire again, and releasing its last
  holder sends nothing (the server holds no subscription to end).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable


class RefcountBook:
    """Counts per URI, the URIs each listener holds, and the URIs lost on resubscribe."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._held: dict[Hashable, tuple[str, ...]] = {}
        self._lost: set[str] = set()

    # -- queries -------------------------------------------------------------------------

    def count(self, uri: str) -> int:
        """How many listeners hold ``uri``."""
        return self._counts.get(uri, 0)

    def held_by(self, listener_id: Hashable) -> tuple[str, ...]:
        """The URIs a listener acquired, in acquisition order."""
        return self._held.get(listener_id, ())

    def held_uris(self) -> list[str]:
        """Every URI with at least one holder, in first-acquired order."""
        return list(self._counts)

    def lost_uris(self) -> frozenset[str]:
        """URIs whose resubscribe was refused and not yet re-acquired on the wire."""
        return frozenset(self._lost)

    def is_empty(self) -> bool:
        """True when nothing is held: no counts, no listeners, nothing lost."""
        return not self._counts and not self._held and not self._lost

    def needs_subscribe(self, uri: str) -> bool:
        """Whether taking ``uri`` must go to the wire first (no holder, or lost)."""
        return self._counts.get(uri, 0) == 0 or uri in self._lost

    # -- transitions ---------------------------------------------------------------------

    def take(self, uri: str) -> None:
        """Count one more holder of ``uri``; the caller has subscribed on the wire if needed."""
        self._counts[uri] = self._counts.get(uri, 0) + 1
        self._lost.discard(uri)

    def drop(self, uri: str) -> bool:
        """Count one holder less; True when the wire needs an unsubscribe now."""
        remaining = self._counts.get(uri, 0) - 1
        if remaining > 0:
            self._counts[uri] = remaining
            return False
        self._counts.pop(uri, None)
        was_lost = uri in self._lost
        self._lost.discard(uri)
        return not was_lost

    def record(self, listener_id: Hashable, uris: Iterable[str]) -> None:
        """Remember which URIs a listener acquired, so it releases exactly those."""
        acquired = tuple(uris)
        if listener_id in self._held:
            raise ValueError(f"listener {listener_id!r} already holds URIs")
        if acquired:
            self._held[listener_id] = acquired

    def forget(self, listener_id: Hashable) -> tuple[str, ...]:
        """Remove a listener's record and return the URIs it must release."""
        return self._held.pop(listener_id, ())

    def mark_lost(self, uri: str) -> None:
        """A resubscribe for a held URI was refused."""
        if uri in self._counts:
            self._lost.add(uri)

    def mark_found(self, uri: str) -> None:
        """A resubscribe for a held URI succeeded."""
        self._lost.discard(uri)
