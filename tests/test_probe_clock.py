"""The ``server/discover`` probe's clock starts when the peer has read the probe, not when it
was sent: a server still starting up (a stdio child importing its SDK on a loaded machine) has
not heard the probe yet, so its silence says nothing about its era."""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from helpers_transport import WAIT, RecordingSink, py

import exmcp_actors as mcp
from exmcp_actors._protocol._backoff import Backoff
from exmcp_actors._protocol._config import SessionConfig
from exmcp_actors._protocol._events import ArmTimer, Effect, Opened, PeerReading, ProbeTimeout, Send
from exmcp_actors._protocol._jsonrpc import RequestBuilder
from exmcp_actors._protocol._session import Session
from exmcp_actors._transport._base import FrameSink, Transport
from exmcp_actors._transport.stdio._pipes import FirstRead, unread_bytes, unread_bytes_known
from exmcp_actors._transport.stdio._process import StdioTransport
from exmcp_actors.testing import FakeServer

PROBE = 0.2

needs_unread_count = pytest.mark.skipif(not unread_bytes_known(), reason="the pipe does not tell what is unread")


# -- the session: when it arms the probe timer -------------------------------------------------


def probing(reading_reported: bool) -> tuple[Session, Any, list[Effect]]:
    """A session in auto mode that opened its connection: the probe's id and the effects."""
    config = SessionConfig(
        mode="auto",
        reconnect=False,
        max_reconnect_attempts=1,
        backoff=Backoff(),
        probe_timeout=PROBE,
        client_info={"name": "test", "version": "0"},
    )
    session = Session(config, RequestBuilder())
    session.start()
    session.effects.take()
    session.handle(Opened(session.generation, reading_reported))
    effects, _ = session.effects.take()
    [probe] = [e.message for e in effects if isinstance(e, Send) and e.message.get("method") == "server/discover"]
    return session, probe["id"], effects


def probe_timers(effects: list[Effect]) -> list[ArmTimer]:
    return [e for e in effects if isinstance(e, ArmTimer) and isinstance(e.event, ProbeTimeout)]


def test_the_probe_timer_is_armed_with_the_probe_when_the_transport_does_not_report_reading() -> None:
    session, probe_id, effects = probing(reading_reported=False)
    assert probe_timers(effects) == [ArmTimer(PROBE, ProbeTimeout(session.generation, probe_id))]


def test_the_probe_timer_waits_for_a_peer_that_reports_reading_and_is_armed_once_it_reads() -> None:
    session, probe_id, effects = probing(reading_reported=True)
    assert probe_timers(effects) == []
    session.handle(PeerReading(session.generation - 1))  # an earlier connection's reader: no one's
    assert probe_timers(session.effects.take()[0]) == []
    session.handle(PeerReading(session.generation))
    assert probe_timers(session.effects.take()[0]) == [ArmTimer(PROBE, ProbeTimeout(session.generation, probe_id))]
    session.handle(PeerReading(session.generation))  # told once; twice changes nothing
    assert probe_timers(session.effects.take()[0]) == []


# -- a FakeServer whose peer starts up ---------------------------------------------------------


class StartingUp(Transport):
    """A FakeServer's memory transport whose peer tells when it reads as the test says: like a
    stdio child, a peer that has not read the probe is still starting up."""

    reports_reading = True

    def __init__(self, server: FakeServer, *, reads_at_once: bool) -> None:
        self.inner = server.transport()
        self.reads_at_once = reads_at_once
        self._sink: FrameSink | None = None

    def open(self, sink: FrameSink, *, timeout: float) -> None:
        self._sink = sink
        self.inner.open(sink, timeout=timeout)

    def send(self, message: dict[str, Any]) -> None:
        self.inner.send(message)
        if self.reads_at_once and self._sink is not None:
            self._sink.peer_reading()

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def connecting() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    """Runs a blocking ``connect()`` beside the test."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        yield pool


def test_a_discover_answer_later_than_the_probe_timeout_decides_the_era_while_the_peer_starts_up(
    connecting: concurrent.futures.ThreadPoolExecutor,
) -> None:
    with FakeServer(era="both") as server:
        answer = threading.Event()
        discover = server.default_handler("server/discover")
        assert discover is not None

        @server.on("server/discover", concurrent=True)
        def slow_discover(params: dict[str, Any], ctx: Any) -> Any:
            answer.wait(WAIT)
            return discover(params, ctx)

        transport = StartingUp(server, reads_at_once=False)
        pending = connecting.submit(mcp.connect, transport, probe_timeout=PROBE, reconnect=False)
        server.wait_for("server/discover", WAIT)
        # No marker can travel behind the probe (the client sends nothing else while it waits):
        # a bounded wait of five probe timeouts, in which a clock started at the send fell back.
        with pytest.raises(AssertionError):
            server.wait_for("initialize", 5 * PROBE)
        answer.set()
        client = pending.result(WAIT)
        try:
            assert (client.status, client.protocol_version) == ("ready", "2026-07-28")
            assert server.count("initialize") == 0
        finally:
            client.disconnect()


def test_a_peer_that_read_the_probe_and_stays_silent_past_the_probe_timeout_is_legacy() -> None:
    with FakeServer(era="legacy", probe="silent") as server:
        transport = StartingUp(server, reads_at_once=True)
        client = mcp.connect(transport, probe_timeout=PROBE, reconnect=False)
        try:
            assert (client.status, client.protocol_version) == ("ready", "2025-11-25")
            assert server.count("server/discover") == server.count("initialize") == 1
        finally:
            client.disconnect()


# -- the stdio transport: when its child reads -------------------------------------------------


@needs_unread_count
def test_first_read_tells_once_the_reader_has_taken_every_byte_out_of_the_pipe() -> None:
    read_end, write_end = os.pipe()
    told = threading.Event()
    watch = FirstRead(write_end, told.set)
    try:
        os.write(write_end, b"probe\n")
        watch.written()
        assert unread_bytes(write_end) == 6
        assert not told.is_set(), "nothing was read yet"
        assert os.read(read_end, 64) == b"probe\n"
        assert told.wait(WAIT)
    finally:
        watch.stop()
        os.close(read_end)
        os.close(write_end)


@needs_unread_count
def test_a_stdio_child_is_said_to_read_only_once_it_has_read_its_stdin() -> None:
    # The child starts up slowly, says when it begins to read, echoes one line, then stays until
    # its stdin closes: a child that exited after its echo would end the connection, and a
    # connection that ended tells no one that its peer read (the look may come after the end).
    child = py(
        """
        import sys, time, json
        time.sleep(0.3)  # the child's slow start-up (its imports), not a wait of the test
        sys.stdout.write(json.dumps({"reads_at": time.monotonic()}) + "\\n")
        sys.stdout.flush()
        sys.stdout.write(sys.stdin.readline())
        sys.stdout.flush()
        sys.stdin.read()
        """
    )
    transport = StdioTransport(child)
    assert transport.reports_reading
    sink = RecordingSink()
    transport.open(sink, timeout=WAIT)
    try:
        transport.send({"jsonrpc": "2.0", "id": 1, "method": "server/discover"})
        sink.wait_frame(lambda frame: frame.get("id") == 1)
        assert sink.wait_until(lambda: sink.reading_at is not None)
        [started] = [frame["reads_at"] for frame in sink.frames if "reads_at" in frame]
        assert sink.reading_at is not None and sink.reading_at >= started
    finally:
        transport.close()
