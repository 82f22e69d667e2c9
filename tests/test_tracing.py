"""Trace context: the host's current OpenTelemetry span rides in each request's
``params._meta`` as W3C ``traceparent``/``tracestate`` (SEP-414; ``exmcp_actors._util._tracing``).

Against the official Python SDK 2.3.0 server in both eras (tests/peers/sdk_server.py, whose
``stats`` show each request's ``_meta`` as it arrived); a child interpreter for a host that
never imports OpenTelemetry, or has none.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceState, set_span_in_context

import exmcp_actors as mcp
from tests.child_python import run_python
from tests.sdk_helpers import URI_A, ClientPool, shared_target, tool_text

MARK = "com.example/mark"


def peer_metas(client: mcp.Client, mark: str) -> list[dict[str, Any]]:
    stats = json.loads(tool_text(client.call_tool("stats", timeout=10.0)))
    return [seen for seen in stats["metas"] if seen["meta"].get(MARK) == mark]


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_current_span_reaches_the_sdk_server_in_meta(era: str, peer_pool: Any, client_pool: ClientPool) -> None:
    client = client_pool.connect(shared_target(peer_pool, "http", era).make_transport())
    assert client.era == era
    mark = uuid.uuid4().hex
    tracer = TracerProvider().get_tracer("test_tracing")  # its own provider: no global set
    with tracer.start_as_current_span("host-call") as span:
        client.call_tool("echo", {"text": "hi"}, meta={MARK: mark})
        client.read_resource(URI_A, meta={MARK: mark})
        client.call_tool("echo", {"text": "mine"}, meta={MARK: mark, "traceparent": "host-given"})
        context = span.get_span_context()
    client.call_tool("echo", {"text": "outside"}, meta={MARK: mark})  # no span: nothing added
    expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    seen = [
        (entry["method"], entry["meta"].get("traceparent"), "tracestate" in entry["meta"])
        for entry in peer_metas(client, mark)
    ]
    assert seen == [
        ("tools/call", expected, False),
        ("resources/read", expected, False),
        ("tools/call", "host-given", False),  # the host's key wins
        ("tools/call", None, False),
    ]


def test_a_remote_parent_s_tracestate_rides_along(peer_pool: Any, client_pool: ClientPool) -> None:
    client = client_pool.connect(shared_target(peer_pool, "http", "modern").make_transport())
    mark = uuid.uuid4().hex
    parent = SpanContext(0xABC, 0xDEF, is_remote=True, trace_state=TraceState([("vendor", "v1"), ("other", "o")]))
    token = otel_context.attach(set_span_in_context(NonRecordingSpan(parent)))
    try:
        client.call_tool("echo", {"text": "hi"}, meta={MARK: mark})
    finally:
        otel_context.detach(token)
    [entry] = peer_metas(client, mark)
    assert entry["meta"]["traceparent"] == f"00-{0xABC:032x}-{0xDEF:016x}-00"
    assert entry["meta"]["tracestate"] == "vendor=v1,other=o"


CHILD = """
import sys
{hide}
import exmcp_actors as mcp
from exmcp_actors.testing import FakeServer
with FakeServer(era="legacy") as server, mcp.connect(server.transport()) as client:
    client.call_tool("echo", {{"text": "hi"}})
    [call] = server.messages("tools/call")
print(sorted(call["params"].get("_meta") or {{}}))
print(sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry"))
"""

HIDE = """
from importlib.abc import MetaPathFinder
class Hide(MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(fullname, name=fullname)
        return None
sys.meta_path.insert(0, Hide())
"""


@pytest.mark.parametrize("hidden", [True, False], ids=["otel-missing", "otel-not-imported"])
def test_a_host_without_opentelemetry_imports_none_of_it(hidden: bool) -> None:
    child = run_python("-c", CHILD.format(hide=HIDE if hidden else ""), timeout=60)
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == ["[]", "[]"]
