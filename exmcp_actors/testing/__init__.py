"""A scriptable in-process MCP server for tests: faults and wire-level edge cases.

:class:`FakeServer` speaks enough of both MCP eras (the legacy ``initialize``
handshake and the 2026-07-28 ``server/discover`` / ``subscriptions/listen``)
to drive a client through its whole life, and lets a test script every answer,
push anything (including malformed frames), and break the connection on cue.
It is reached through an in-memory :class:`MemoryTransport` (no sockets),
with :meth:`FakeServer.serve_websocket` over a real WebSocket, or with
:func:`serve_stdio` as a stdio server (a process's stdin and stdout).

Example:
    A legacy peer, a listener, an update, then a dropped connection::

        import exmcp_actors as mcp
        from exmcp_actors.testing import FakeError, FakeServer, NO_REPLY

        with FakeServer() as server:
            client = mcp.connect(server.transport())
            listener = client.subscribe_notifications(
                {"resourceSubscriptions": ["file:///a.txt"]})
            server.wait_for("resources/subscribe", uri="file:///a.txt")
            server.updated("file:///a.txt")
            assert listener.get(timeout=5).method == "notifications/resources/updated"

            server.drop()                 # the client's transport is lost...
            server.wait_connections(2)    # ...and it reconnects

    Scripting answers::

        def failing_call(params, ctx):
            raise FakeError(-32000, "tool exploded")

        server.on("tools/call", failing_call)
        server.on("ping", lambda params, ctx: NO_REPLY)      # never answered

        gate = threading.Event()

        @server.on("resources/subscribe", concurrent=True)  # holds only this request
        def slow_subscribe(params, ctx):
            ctx.wait(gate)                # returns early if the connection ends
            return {}

    A modern peer (``era="modern"``) answers ``server/discover`` and
    acknowledges ``subscriptions/listen``; push events with
    :meth:`FakeServer.event` and end a subscription with
    :meth:`FakeServer.close_subscription`.

Threads: each connection has a handler thread (runs handlers in arrival
order) and a delivery thread (calls the client's sink, or writes the
WebSocket). ``send()`` on the client side only queues, so it never waits for a
handler. All threads are named ``exmcp-fake-...`` and :meth:`FakeServer.close`
joins them.

Layout (private modules, one job each, each importing only those below it):
``_server`` (:class:`FakeServer`), ``_connection`` (:class:`FakeConnection`,
:data:`Handler`), ``_inbound`` and ``_delivery`` (a connection's handler and
delivery threads), ``_shared`` (what a server shares with its connections:
its lock, the journal, closing and silence), ``_transport``
(:class:`MemoryTransport`), ``_websocket`` (serving over a WebSocket),
``_stdio`` (:func:`serve_stdio`), ``_endpoints`` (the client side of a
connection), ``_codec`` (the wire), ``_protocol`` (versions, keys, codes,
:class:`FakeError`, :data:`NO_REPLY`), ``_script`` (which handler answers a
method, and answering with it), ``_handshake`` and ``_catalog`` (the built-in
answers), ``_journal`` (what crossed the wire, and waits on it), ``_gate``
(refusing opens), ``_ids`` (sets of request ids), and ``_process`` (server
child processes for the test suite and the benchmarks: the port they print,
stopping them), ``_tasks`` (:class:`FakeTasks`: tool calls run as tasks the
test completes or fails).
"""

from exmcp_actors.testing._connection import FakeConnection, Handler
from exmcp_actors.testing._protocol import (
    LEGACY_VERSIONS,
    MODERN_VERSION,
    NO_REPLY,
    SUBSCRIPTION_ID_KEY,
    FakeError,
)
from exmcp_actors.testing._protocol import Era as Era
from exmcp_actors.testing._protocol import ListKind as ListKind
from exmcp_actors.testing._protocol import Probe as Probe
from exmcp_actors.testing._server import FakeServer
from exmcp_actors.testing._stdio import serve_stdio
from exmcp_actors.testing._tasks import FakeTasks
from exmcp_actors.testing._transport import MemoryTransport

__all__ = [
    "LEGACY_VERSIONS",
    "MODERN_VERSION",
    "NO_REPLY",
    "SUBSCRIPTION_ID_KEY",
    "FakeConnection",
    "FakeError",
    "FakeServer",
    "FakeTasks",
    "Handler",
    "MemoryTransport",
    "serve_stdio",
]
