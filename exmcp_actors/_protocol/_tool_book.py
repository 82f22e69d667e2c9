"""What the client learned of each tool from ``tools/list`` (sans-IO): the arguments it
mirrors into ``Mcp-Param-*`` headers, whether calling it again is harmless, whether a
2025-11-25 server lets it run as a task, and the ``outputSchema`` its results are checked
against (``_result_schema``).

The book is changed only by :meth:`ToolBook.learn`, which its owner (the session, under
its monitor) runs for every page a ``list_tools`` fetched or took from the cache. Its
:attr:`~ToolBook.facts` mapping is replaced whole, never changed in place, so the
transport's workers (building a POST's headers) and host threads (deciding whether a
dropped ``tools/call`` may be re-issued) read it without a lock (``exmcp_actors._runtime``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from ._param_headers import HeaderMap, header_map, invalid_x_mcp_header, param_headers
from ._peer_text import peer_text
from ._ratelog import RateLimitedLog
from ._result_schema import OutputSchema

logger = logging.getLogger("exmcp_actors")

__all__ = ["ToolBook", "ToolFacts"]

#: Tools whose rejection was logged already, remembered so a re-list logs each once; past
#: this many (a server inventing names) the oldest are forgotten.
MAX_WARNED: Final = 256
#: Tools called but named by no listing fetched for them, remembered so each costs one
#: listing until the next; past this many the oldest are forgotten (and may cost another).
MAX_UNLISTED: Final = 256


class ToolFacts(NamedTuple):
    """One tool, as its last listing described it."""

    #: Its valid ``x-mcp-header`` annotations.
    headers: HeaderMap
    #: ``annotations.idempotentHint`` is true: a call may be sent again after a dropped answer.
    idempotent: bool
    #: 2025-11-25 ``execution.taskSupport`` is "optional" or "required": a call may ask for a task
    #: (absent means "forbidden", and a client MUST NOT ask then).
    runs_as_task: bool = False
    #: Its ``outputSchema`` (compiled on first use), or None when it declares none.
    output: OutputSchema | None = None


_EMPTY: Final[Mapping[str, ToolFacts]] = MappingProxyType({})


def _facts_of(tool: dict[str, Any]) -> ToolFacts:
    annotations = tool.get("annotations")
    idempotent = isinstance(annotations, dict) and annotations.get("idempotentHint") is True
    execution = tool.get("execution")
    runs_as_task = isinstance(execution, dict) and execution.get("taskSupport") in ("optional", "required")
    output = tool.get("outputSchema")
    schema = OutputSchema(output) if isinstance(output, dict) else None
    return ToolFacts(header_map(tool.get("inputSchema")), idempotent, runs_as_task, schema)


class ToolBook:
    """See the module docstring. ``mirrored`` (set once, before the first request): the
    transport sends ``Mcp-Param-*`` headers (Streamable HTTP), so a tool with invalid
    annotations is left out of the listing there; other transports may ignore them."""

    def __init__(self, name: str = "client") -> None:
        self.name = name
        self.mirrored = False
        #: Tool name -> what its listing said; replaced whole (see the module docstring).
        self.facts: Mapping[str, ToolFacts] = _EMPTY
        #: A listing was learned (facts may then be empty because the server has no tools).
        self.has_listing = False
        self._warned: dict[tuple[str, str], None] = {}
        #: Names a listing was fetched for and did not name; replaced whole by each listing.
        self._unlisted: dict[str, None] = {}
        #: Held by the host thread looking up an unlisted tool (:meth:`look_up`), so threads
        #: calling it at once cost one listing.
        self.lookup = threading.Lock()
        self._log = RateLimitedLog(logger)

    def learn(self, tools: list[Any], *, modern: bool, complete: bool) -> list[Any]:
        """Take tools of a listing; returns those the caller may see.

        On a modern connection over a mirroring transport a tool with invalid
        ``x-mcp-header`` annotations is left out (and logged once, at a bounded rate).
        ``complete``: ``tools`` is a whole listing (every page from the first), so tools it
        does not name are forgotten; else they are one page, added to what is known.
        """
        drop = modern and self.mirrored
        kept: list[Any] = []
        facts = {} if complete else dict(self.facts)
        for tool in tools:
            name = tool.get("name") if isinstance(tool, dict) else None
            if not isinstance(name, str):
                kept.append(tool)  # not ours to judge: the host sees what the server sent
                continue
            assert isinstance(tool, dict)
            why = invalid_x_mcp_header(tool.get("inputSchema")) if drop else None
            if why is not None:
                facts.pop(name, None)
                self._rejected(name, why)
                continue
            facts[name] = _facts_of(tool)
            kept.append(tool)
        self.facts = MappingProxyType(facts)
        self.has_listing = True
        self._unlisted = {}
        return kept

    def _rejected(self, name: str, why: str) -> None:
        # Remembered as the log line shows them, bounded: the server sized the originals.
        key = (peer_text(name, quote=True), peer_text(why))
        if key in self._warned:
            return
        self._warned[key] = None
        if len(self._warned) > MAX_WARNED:
            del self._warned[next(iter(self._warned))]
        self._log.warning(
            "x-mcp-header", "%s: tool %s left out of tools/list: invalid x-mcp-header (%s)", self.name, *key
        )

    # -- read without a lock -----------------------------------------------------------

    def param_headers(self, name: str, arguments: Any) -> dict[str, str]:
        """The ``Mcp-Param-*`` headers of a ``tools/call`` of ``name`` (none for a tool not listed)."""
        facts = self.facts.get(name)
        return param_headers(facts.headers, arguments) if facts is not None and facts.headers else {}

    def idempotent(self, name: str) -> bool:
        facts = self.facts.get(name)
        return facts is not None and facts.idempotent

    def listed(self, name: str) -> bool:
        return name in self.facts

    def output_schema(self, name: str) -> OutputSchema | None:
        """The listed tool's ``outputSchema``; None for a tool without one, or not listed."""
        facts = self.facts.get(name)
        return facts.output if facts is not None else None

    def look_up(self, name: str, wait: float, fetch: Callable[[], None]) -> None:
        """A host thread's lookup of the unlisted tool ``name``: ``fetch()`` lists the tools
        (and swallows its failure), once until the next listing; threads asking at once wait
        (at most ``wait`` seconds) for the one fetch. A name the listing did not name is noted,
        at most :data:`MAX_UNLISTED`, the oldest forgotten."""
        if not self.lookup.acquire(timeout=wait):
            return
        try:
            if name in self.facts or name in self._unlisted:
                return
            fetch()
            unlisted = self._unlisted  # replaced whole if the fetch brought a listing
            if name not in self.facts:
                unlisted[name] = None
                if len(unlisted) > MAX_UNLISTED:
                    unlisted.pop(next(iter(unlisted)), None)
        finally:
            self.lookup.release()

    def runs_as_task(self, name: str) -> bool | None:
        """Whether the listed tool may be asked to run as a task (2025-11-25), or None for a
        tool no listing named."""
        facts = self.facts.get(name)
        return facts.runs_as_task if facts is not None else None
