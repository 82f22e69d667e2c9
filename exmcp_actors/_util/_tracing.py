"""The host's current OpenTelemetry span, carried in a request's ``params._meta`` as W3C
trace context (SEP-414: the keys ``traceparent`` and ``tracestate``, unprefixed).

OpenTelemetry is optional and never imported by the library on its own: a host that has
not imported ``opentelemetry.trace`` has no span to carry, so until it has, a request costs
one ``sys.modules`` lookup. From then on the propagator is imported once and kept; a request
made outside any span (or in an invalid one) costs reading the current context. Runs on the
host's thread, where its span is current (the session actor's thread has none).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Final

__all__ = ["TRACE_KEYS", "with_trace"]

#: The ``_meta`` keys SEP-414 names for W3C trace context.
TRACE_KEYS: Final = ("traceparent", "tracestate")

#: ``current() -> {key: value}`` once OpenTelemetry was found; None before.
_current: Callable[[], dict[str, str]] | None = None


def _load() -> Callable[[], dict[str, str]]:
    from opentelemetry import trace

    get_current_span = trace.get_current_span

    def current() -> dict[str, str]:
        context = get_current_span().get_span_context()
        if not context.is_valid:
            return {}
        # As opentelemetry's TraceContextTextMapPropagator writes them, without its carrier.
        found = {"traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"}
        state = context.trace_state.to_header() if context.trace_state else ""
        if state:
            found["tracestate"] = state
        return found

    return current


def with_trace(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """``params`` with the current span's trace context added to its ``_meta`` (a copy; the
    host's own ``traceparent``/``tracestate`` win), or ``params`` itself when there is none
    (or its ``_meta`` is no dict, which ``request()`` sends as given)."""
    global _current
    current = _current
    if current is None:
        if "opentelemetry.trace" not in sys.modules:
            return params
        current = _current = _load()
    trace = current()
    if not trace:
        return params
    meta = params.get("_meta") if params is not None else None
    if meta is None:
        meta = {}
    elif not isinstance(meta, dict):
        return params
    return {**(params or {}), "_meta": {**trace, **meta}}
