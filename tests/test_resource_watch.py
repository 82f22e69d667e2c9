"""client.watch_resource() against the FakeServer: coalescing, dedupe, errors, caps, fan-out, bounds."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors._api import _resource_feed
from exmcp_actors.testing import FakeError, FakeServer
from tests.waiting import WAIT, wait_until

URI = "file:///fake/readme.txt"


def _text(message: Any) -> str:
    assert message[0] == "ex_mcp_resource_changed", message
    text: str = message.contents[0]["text"]
    return text


def _next_text(watch: mcp.ResourceWatch) -> str:
    return _text(watch.get(timeout=WAIT))


def test_first_contents_then_each_change_and_unchanged_is_not_delivered_again() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        server.set_resource_text(URI, "one")
        reader = server.default_handler("resources/read")
        assert reader is not None
        answered = queue.SimpleQueue[str]()

        @server.on("resources/read")
        def noted_read(params: dict[str, Any], ctx: Any) -> Any:
            result = reader(params, ctx)
            answered.put(result["contents"][0]["text"])
            return result

        with client.watch_resource(URI) as watch:
            first = watch.get(timeout=WAIT)
            assert isinstance(first, mcp.ResourceChanged)
            assert first.handle is watch and first.uri == URI and _text(first) == "one"
            server.wait_for("resources/subscribe", uri=URI)
            server.updated(URI)  # read again, same contents: nothing delivered
            # The second read must have answered "one" before the text changes, or it
            # would itself deliver "two" and the count below would race the third read.
            assert [answered.get(timeout=WAIT), answered.get(timeout=WAIT)] == ["one", "one"]
            server.set_resource_text(URI, "two")
            server.updated(URI)
            assert _next_text(watch) == "two"  # the marker: nothing came before it
            assert watch.contents == [{"uri": URI, "mimeType": "text/plain", "text": "two"}]
            assert watch.reads == 3
        wait_until(lambda: server.subscriptions() == [], WAIT, "the URI unsubscribed after close()")


def test_changes_during_a_read_cost_exactly_one_more_read_never_two_at_once() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        reader = server.default_handler("resources/read")
        assert reader is not None
        gate, held = threading.Event(), threading.Event()
        lock = threading.Lock()
        in_flight, most, answered = [0], [0], [0]

        @server.on("resources/read", concurrent=True)
        def gated_read(params: dict[str, Any], ctx: Any) -> Any:
            with lock:
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
            try:
                if server.count("resources/read") == 2:
                    held.set()
                    ctx.wait(gate, timeout=WAIT)
                return reader(params, ctx)
            finally:
                with lock:
                    in_flight[0] -= 1
                    answered[0] += 1

        with client.watch_resource(URI) as watch:
            assert _next_text(watch) == f"contents of {URI}"
            server.updated(URI)
            assert held.wait(WAIT)
            server.set_resource_text(URI, "after the burst")
            for _ in range(50):
                server.updated(URI)
            feed = watch._feed
            assert feed is not None
            wait_until(lambda: feed.coalesced == 50, WAIT, "the 50 changes heard during the held read")
            gate.set()
            assert _next_text(watch) == "after the burst"
            # The read for the 50 changes answers before the text changes again, so the
            # marker's change cannot fold into it and the count below is exact.
            wait_until(lambda: answered[0] == 3, WAIT, "the read for the burst answered")
            server.set_resource_text(URI, "marker")
            server.updated(URI)
            assert _next_text(watch) == "marker"
            # The first read, the held one, one for the 50 changes, one for the marker.
            assert server.count("resources/read") == 4
            assert most[0] == 1


def test_many_handles_share_one_read_per_change() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        watches = [client.watch_resource(URI) for _ in range(8)]
        for watch in watches:
            assert _next_text(watch) == f"contents of {URI}"
        assert server.count("resources/subscribe") == 1  # one watch underneath, one subscribe
        before = server.count("resources/read")
        server.set_resource_text(URI, "v2")
        server.updated(URI)
        for watch in watches:
            assert _next_text(watch) == "v2"
        assert server.count("resources/read") == before + 1
        for watch in watches[1:]:
            watch.close()
        assert server.subscriptions() == [URI]  # still held by the first
        watches[0].close()
        wait_until(lambda: server.subscriptions() == [], WAIT, "the last close unsubscribes")
        assert not client.__dict__["_resource_feeds"]


def test_a_failed_read_is_a_message_and_the_next_good_read_is_delivered() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        reader = server.default_handler("resources/read")
        assert reader is not None
        fail = threading.Event()

        def sometimes(params: dict[str, Any], ctx: Any) -> Any:
            if fail.is_set():
                raise FakeError(-32002, "Resource not found\x1b[2J")
            return reader(params, ctx)

        server.on("resources/read", sometimes)
        with client.watch_resource(URI) as watch:
            assert _next_text(watch) == f"contents of {URI}"
            fail.set()
            server.updated(URI)
            failed = watch.get(timeout=WAIT)
            assert isinstance(failed, mcp.ResourceReadFailed)
            assert failed.uri == URI and isinstance(failed.error, mcp.RequestError)
            assert failed.error.code == -32002 and "\x1b" not in str(failed.error)
            fail.clear()
            server.updated(URI)
            assert _next_text(watch) == f"contents of {URI}"  # the same as before, news after a failure


def test_contents_above_the_cap_fail_with_a_reason_that_says_so() -> None:
    big = "x" * (_resource_feed.MAX_CONTENTS_CHARS + 1)
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        server.set_resource_text(URI, big)
        with client.watch_resource(URI) as watch:
            failed = watch.get(timeout=WAIT)
            assert isinstance(failed, mcp.ResourceReadFailed)
            assert failed.error.reason == ("contents_too_large", len(big), _resource_feed.MAX_CONTENTS_CHARS)
            assert "more than a resource watch delivers" in str(failed.error)
            server.set_resource_text(URI, "small again")
            server.updated(URI)
            assert _next_text(watch) == "small again"


def test_more_contents_than_the_cap_fail_with_a_reason_that_says_so() -> None:
    # The character cap let any number of empty contents through: a 16 MiB frame of "{}" is
    # 5.5 million dicts, some 350 MB a copy, held by the watch for as long as it lives.
    cap = 10_000  # the documented MAX_CONTENTS_ITEMS
    count = [cap + 1]
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        server.on("resources/read", lambda params, ctx: {"contents": [{"uri": URI, "text": ""}] * count[0]})
        with client.watch_resource(URI) as watch:
            failed = watch.get(timeout=WAIT)
            assert isinstance(failed, mcp.ResourceReadFailed)
            assert failed.error.reason == ("too_many_contents", cap + 1, cap)
            assert "more than a resource watch delivers" in str(failed.error)
            count[0] = cap
            server.updated(URI)
            changed = watch.get(timeout=WAIT)
            assert isinstance(changed, mcp.ResourceChanged) and len(changed.contents) == cap


def test_an_unchanged_read_keeps_one_copy_of_the_contents() -> None:
    # A handle keeps the contents it was last given, and the feed the last read's: when a read
    # brings the same contents again, the feed kept the new copy beside the handle's old one,
    # so a watched 8 MiB text cost two of them for as long as it did not change.
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        server.set_resource_text(URI, "same")
        with client.watch_resource(URI) as first:
            assert _next_text(first) == "same"
            server.updated(URI)
            wait_until(lambda: first.reads == 2, what="the second read")
            # Its first contents come from that second read (or what the feed kept after it).
            with client.watch_resource(URI) as second:
                assert _next_text(second) == "same"
                assert second.contents is first.contents


def test_a_result_without_contents_is_a_protocol_error_message() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        server.on("resources/read", lambda params, ctx: {"contents": "not a list"})
        with client.watch_resource(URI) as watch:
            failed = watch.get(timeout=WAIT)
            assert isinstance(failed, mcp.ResourceReadFailed) and isinstance(failed.error, mcp.ProtocolError)


def test_a_raising_and_a_stalled_put_subscriber_hurt_no_other() -> None:
    class Raising:
        def put(self, message: Any) -> None:
            raise RuntimeError("host bug")

    release = threading.Event()
    stalled_got: list[Any] = []

    class Stalled:
        def put(self, message: Any) -> None:
            stalled_got.append(message)
            release.wait(WAIT)

    with FakeServer() as server, mcp.connect(server.transport()) as client:
        raising = client.watch_resource(URI, subscriber=Raising())
        stalled = client.watch_resource(URI, subscriber=Stalled())
        box: queue.Queue[Any] = queue.Queue()
        boxed = client.watch_resource(URI, subscriber=box)
        watch = client.watch_resource(URI)
        assert _next_text(watch) == f"contents of {URI}"
        assert _text(box.get(timeout=WAIT)) == f"contents of {URI}"
        wait_until(lambda: raising._gone, WAIT, "the raising subscriber's watch removed")
        for n in range(20):
            server.set_resource_text(URI, f"v{n}")
            server.updated(URI)
            assert _next_text(watch) == f"v{n}"
            assert _text(box.get(timeout=WAIT)) == f"v{n}"
        assert len(stalled_got) == 1  # still in its first put(); only the newest waits for it
        release.set()
        wait_until(lambda: stalled.contents is not None and stalled_got[-1].contents[0]["text"] == "v19")
        assert len(stalled_got) == 2
        for handle in (stalled, boxed, watch):
            handle.close()


def test_a_slow_reader_costs_one_pending_message() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        with client.watch_resource(URI) as watch:
            server.wait_for("resources/subscribe")
            for n in range(30):
                server.set_resource_text(URI, f"v{n}")
                server.updated(URI)
            server.set_resource_text(URI, "last")
            server.updated(URI)
            wait_until(lambda: watch.contents is not None and watch.contents[0]["text"] == "last")
            assert watch.pending() == 1
            assert _next_text(watch) == "last"


def test_ttl_ms_keeps_contents_fresh_for_joiners_and_never_polls() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        reader = server.default_handler("resources/read")
        assert reader is not None
        server.on("resources/read", lambda params, ctx: {**reader(params, ctx), "ttlMs": 1000})
        with client.watch_resource(URI) as watch:
            assert _next_text(watch) == f"contents of {URI}"
            read_at = time.monotonic()
            joiner = client.watch_resource(URI)
            assert _next_text(joiner) == f"contents of {URI}"
            assert server.count("resources/read") == 1  # fresh: the joiner got the kept contents
            joiner.close()
            server.set_resource_text(URI, "changed unannounced")
            # The ttlMs passing alone reads nothing (no background polling) ...
            wait_until(lambda: time.monotonic() > read_at + 1.5)
            assert server.count("resources/read") == 1
            assert watch.pending() == 0
            # ... the next handle to join finds the contents stale and reads them once.
            with client.watch_resource(URI) as late:
                assert _next_text(late) == "changed unannounced"
                assert _next_text(watch) == "changed unannounced"
            assert server.count("resources/read") == 2


def test_reconnect_reads_again_and_disconnect_closes() -> None:
    with FakeServer() as server:
        client = mcp.connect(server.transport(), backoff=mcp.Backoff(initial=0.01, maximum=0.05))
        watch = client.watch_resource(URI)
        assert _next_text(watch) == f"contents of {URI}"
        server.set_resource_text(URI, "while away")
        server.drop()
        assert _next_text(watch) == "while away"
        server.wait_for("resources/subscribe", connection=2)
        client.disconnect()
        closed = watch.get(timeout=WAIT)
        assert isinstance(closed, mcp.Closed) and closed.listener is watch and closed.reason == "disconnected"
        assert list(watch) == []


def test_modern_event_reads_again() -> None:
    with FakeServer(era="modern", protocol_version="2026-07-28") as server, mcp.connect(server.transport()) as client:
        assert client.era == "modern"
        with client.watch_resource(URI) as watch:
            assert _next_text(watch) == f"contents of {URI}"
            listen = server.wait_for("subscriptions/listen")[1]
            server.set_resource_text(URI, "modern change")
            server.event(listen["id"], "notifications/resources/updated", {"uri": URI})
            assert _next_text(watch) == "modern change"


def test_server_without_subscribe_still_gives_contents() -> None:
    capabilities = {"resources": {}}
    with FakeServer(capabilities=capabilities) as server, mcp.connect(server.transport()) as client:
        with client.watch_resource(URI) as watch:
            assert _next_text(watch) == f"contents of {URI}"
            assert server.count("resources/subscribe") == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"uri": 3}, TypeError, "uri must be a string"),
        ({"uri": ""}, ValueError, "uri must be a non-empty string"),
        ({"uri": "x" * 9000}, ValueError, "at most 8192"),
        ({"uri": URI, "timeout": "5"}, TypeError, "timeout must be a number"),
        ({"uri": URI, "timeout": 0}, ValueError, "timeout must be a positive"),
        ({"uri": URI, "max_pending": 1.5}, TypeError, "max_pending must be an int"),
        ({"uri": URI, "max_pending": 0}, ValueError, "max_pending must be at least 1"),
        ({"uri": URI, "subscriber": 42}, TypeError, "subscriber must be"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], error: type[Exception], words: str) -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:
        with pytest.raises(error, match=words):
            client.watch_resource(**kwargs)
        assert server.count("resources/subscribe") == 0


def test_a_refused_subscribe_raises_and_keeps_nothing() -> None:
    with FakeServer() as server, mcp.connect(server.transport()) as client:

        def refuse(params: dict[str, Any], ctx: Any) -> Any:
            raise FakeError(-32602, "no")

        server.on("resources/subscribe", refuse)
        with pytest.raises(mcp.SubscribeFailed):
            client.watch_resource(URI)
        assert not client.__dict__["_resource_feeds"]
        server.off("resources/subscribe")
        with client.watch_resource(URI) as watch:
            assert _next_text(watch) == f"contents of {URI}"
