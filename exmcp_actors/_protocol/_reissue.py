"""Which requests are sent again when their answer was lost (sans-IO).

MCP 2026-07-28 dropped the resumption of response streams: "A broken response stream
loses the in-flight request; clients MUST re-issue it as a new request with a new
request ID" (changelog, SEP-2575). A request whose answer was lost may have run on the
server, so the client re-issues on its own only what is harmless to run twice: the
listings (``*/list``), ``server/discover``, ``resources/read``, ``prompts/get``, a task's
``tasks/get`` (the tasks extension makes it a pure, idempotent read), and a ``tools/call``
of a tool its listing marks ``annotations.idempotentHint: true``. Anything
else reaches the host as :class:`~._errors.OutcomeUnknown`, which says it may or may not
have run, and the host decides.

At most :data:`MAX_REISSUES` times per call: one drop is routine (a proxy's idle cut, an
instance leaving a pool), a second in a row still happens while a pool restarts one
instance after another, and a third means the drop follows the request itself (a
response a proxy will not carry, a handler that kills its worker), where sending it
again only repeats the load. Every send shares the caller's one ``timeout``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

__all__ = ["MAX_REISSUES", "describe_call", "why_not_reissued"]

MAX_REISSUES: Final = 2
_READS: Final = frozenset({"server/discover", "resources/read", "prompts/get", "tasks/get"})


def why_not_reissued(method: str, params: Any, idempotent: Callable[[str], bool]) -> str | None:
    """None when ``method`` with ``params`` is safe to send again, else why it is not."""
    if method in _READS or method.endswith("/list"):
        return None
    if method != "tools/call":
        return f"{method} is not known to be safe to run twice"
    name = params.get("name") if isinstance(params, dict) else None
    if isinstance(name, str) and idempotent(name):
        return None
    return "the tool is not known to be idempotent (annotations.idempotentHint in its tools/list entry)"


def describe_call(method: str, params: Any) -> str:
    """``tools/call 'deploy'``: the method and what it names, for an error's text."""
    if isinstance(params, dict):
        for key in ("name", "uri"):
            value = params.get(key)
            if isinstance(value, str) and method in ("tools/call", "prompts/get", "resources/read"):
                return f"{method} {value[:200]!r}"
    return method
