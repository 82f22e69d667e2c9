"""Calls as futures: ``submit_tool`` / ``submit`` return a :class:`mcp.Call`.

Against the Python SDK 2.3.0 server (stdio, its ``--extra-tools``: ``hang`` records whether
it was cancelled, ``progress_steps`` reports progress): the future works with
``concurrent.futures`` and asyncio, ``cancel()`` cancels on the wire and the server aborts
the tool, progress restarts the timeout when asked, ``meta`` rides along. A host process
that gets SIGINT while blocked in ``call_tool`` cancels the call on the wire first
(``tests/hosts/interrupt_call.py``, against the SDK's HTTP server). FakeServer covers the
races: an expiry against the answer, an expiry against progress, a blocking done-callback.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import CancelledError, as_completed, wait
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors.testing import NO_REPLY, FakeServer, FakeTasks
from tests.peers.launch import Peer
from tests.peers.ts_peer import missing_tools, ts_argv, ts_http_peer
from tests.sdk_helpers import WAIT, TapTransport

EXTRA = ("--extra-tools",)
HOST = os.path.join(os.path.dirname(__file__), "hosts", "interrupt_call.py")


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    running = Peer("http", "both", EXTRA).start()
    yield running
    running.stop()


@pytest.fixture
def sdk(peer: Peer) -> Iterator[tuple[mcp.Client, TapTransport]]:
    tap = TapTransport(mcp.HttpTransport(peer.url))
    client = mcp.connect(tap, protocol="legacy")
    yield client, tap
    client.disconnect()


def hang_state(client: mcp.Client, key: str) -> Any:
    result = client.call_tool("was_aborted", {"key": key}, timeout=WAIT)
    return json.loads(result["content"][0]["text"])["state"]


def wait_state(client: mcp.Client, key: str, state: str) -> None:
    deadline = time.monotonic() + WAIT
    while hang_state(client, key) != state:  # each look is a round trip, not a sleep
        assert time.monotonic() < deadline, f"hang {key} never became {state}"


def test_submit_tool_is_a_future_that_waits_and_wraps(sdk: tuple[mcp.Client, TapTransport]) -> None:
    client, _ = sdk
    calls = [client.submit_tool("echo", {"text": str(n)}) for n in range(8)]
    assert all(isinstance(call, mcp.Call) for call in calls)
    assert len({call.request_id for call in calls}) == 8
    done, _ = wait(calls, timeout=WAIT)
    assert len(done) == 8
    texts = sorted(call.result()["content"][0]["text"] for call in as_completed(calls))
    assert texts == [str(n) for n in range(8)]
    assert calls[3].result() == client.call_tool("echo", {"text": "3"})

    async def awaited() -> Any:
        return await asyncio.wrap_future(client.submit_tool("echo", {"text": "async"}))

    assert asyncio.run(awaited())["content"][0]["text"] == "async"
    raw = client.submit("tools/list").result(WAIT)
    assert isinstance(raw["tools"], list) and raw["tools"]


def test_cancel_sends_cancelled_and_the_server_aborts(sdk: tuple[mcp.Client, TapTransport]) -> None:
    client, tap = sdk
    call = client.submit_tool("hang", {"key": "c1", "seconds": 30})
    wait_state(client, "c1", "running")
    assert call.cancel() is True
    assert call.cancelled() and call.done()
    with pytest.raises(CancelledError):
        call.result(0)
    wait_state(client, "c1", "aborted")
    sent = tap.sent_messages("notifications/cancelled")
    assert [m["params"]["requestId"] for m in sent] == [call.request_id]
    assert sent[0]["params"]["reason"] == "cancelled"
    assert call.cancel() is False  # settled: nothing more goes out
    done = client.submit_tool("echo", {"text": "x"})
    done.result(WAIT)
    assert done.cancel() is False
    assert len(tap.sent_messages("notifications/cancelled")) == 1


def test_progress_restarts_the_timeout_only_when_asked(sdk: tuple[mcp.Client, TapTransport]) -> None:
    client, tap = sdk
    seen: list[dict[str, Any]] = []
    args = {"steps": 6, "interval": 0.15}  # 0.9 s in all, a step every 0.15 s
    result = client.call_tool("progress_steps", args, progress=seen.append, timeout=0.6, reset_timeout_on_progress=True)
    assert result["content"][0]["text"] == "done after 6"
    assert [p["progress"] for p in seen] == [1, 2, 3, 4, 5, 6]
    with pytest.raises(mcp.RequestTimeout, match=r"within 0\.4s"):
        client.call_tool("progress_steps", args, progress=seen.append, timeout=0.4)
    with pytest.raises(mcp.RequestTimeout, match="max_total_timeout"):
        client.submit_tool(
            "progress_steps", args, timeout=0.6, reset_timeout_on_progress=True, max_total_timeout=0.45
        ).result(WAIT)
    assert len(tap.sent_messages("notifications/cancelled")) == 2  # each expiry cancelled on the wire
    assert client.status == "ready"


def test_meta_rides_along(sdk: tuple[mcp.Client, TapTransport]) -> None:
    client, tap = sdk
    client.submit_tool("echo", {"text": "m"}, meta={"trace": "t-1"}).result(WAIT)
    client.submit("tools/list", meta={"trace": "t-2"}).result(WAIT)
    metas = [m["params"].get("_meta") for m in tap.sent_messages() if m.get("method") in ("tools/call", "tools/list")]
    assert {"trace": "t-1"} in metas and {"trace": "t-2"} in metas


def test_host_bad_input_names_the_argument(legacy_client: mcp.Client) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": 3}, "name"),
        ({"name": "t", "arguments": [1]}, "arguments"),
        ({"name": "t", "progress": 5}, "progress"),
        ({"name": "t", "timeout": "1"}, "timeout"),
        ({"name": "t", "reset_timeout_on_progress": 1}, "reset_timeout_on_progress"),
        ({"name": "t", "max_total_timeout": "x"}, "max_total_timeout"),
        ({"name": "t", "meta": 7}, "meta"),
    ]
    for kwargs, argument in cases:
        with pytest.raises((TypeError, ValueError), match=argument):
            legacy_client.submit_tool(**kwargs)
    with pytest.raises(TypeError, match="method"):
        legacy_client.submit(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="params"):
        legacy_client.submit("x", [1])  # type: ignore[arg-type]


def test_an_expiry_racing_the_answer_settles_once(legacy_server: FakeServer, legacy_client: mcp.Client) -> None:
    answers: list[Any] = []

    @legacy_server.on("tools/call", concurrent=True)
    def late(params: dict[str, Any], ctx: Any) -> Any:
        time.sleep(float(params["arguments"]["delay"]))  # the server's own pace, not a test wait
        return {"content": [], "isError": False}

    for round_ in range(20):
        settled = threading.Event()
        outcomes: list[str] = []
        call = legacy_client.submit_tool("t", {"delay": 0.05}, timeout=0.05)

        def noted(future: mcp.Call, outcomes: list[str] = outcomes, settled: threading.Event = settled) -> None:
            outcomes.append("error" if future.exception() else "result")
            settled.set()

        call.add_done_callback(noted)
        assert settled.wait(WAIT)
        answers.append(outcomes)
        assert len(outcomes) == 1, (round_, outcomes)
        assert call.cancel() is False
    legacy_client.ping()  # a round trip: any duplicate callback would have run by now
    assert all(len(outcomes) == 1 for outcomes in answers)


def test_progress_racing_the_expiry_settles_once(legacy_server: FakeServer, legacy_client: mcp.Client) -> None:
    @legacy_server.on("tools/call", concurrent=True)
    def chatty(params: dict[str, Any], ctx: Any) -> Any:
        token = params["_meta"]["progressToken"]
        for step in range(5):
            ctx.notify("notifications/progress", {"progressToken": token, "progress": step})
            time.sleep(0.03)
        return NO_REPLY

    outcomes: list[BaseException | None] = []
    settled = threading.Event()

    def noted(future: mcp.Call) -> None:
        outcomes.append(future.exception())
        settled.set()

    call = legacy_client.submit_tool("t", timeout=0.05, reset_timeout_on_progress=True, max_total_timeout=0.5)
    call.add_done_callback(noted)
    with pytest.raises(mcp.RequestTimeout):
        call.result(WAIT)
    assert settled.wait(WAIT)
    legacy_server.wait_for("notifications/cancelled", requestId=call.request_id)
    legacy_client.ping()
    assert len(outcomes) == 1 and isinstance(outcomes[0], mcp.RequestTimeout)
    assert legacy_server.count("notifications/cancelled") == 1


def test_a_blocking_callback_does_not_hold_back_an_expiry(legacy_server: FakeServer, legacy_client: mcp.Client) -> None:
    legacy_server.on("tools/call", lambda params, ctx: {"content": []} if params["name"] == "fast" else NO_REPLY)
    release = threading.Event()
    entered = threading.Event()
    threads: list[str] = []

    def blocking(future: mcp.Call) -> None:
        threads.append(threading.current_thread().name)
        entered.set()
        release.wait(WAIT)

    try:
        fast = legacy_client.submit_tool("fast")
        fast.add_done_callback(blocking)
        assert entered.wait(WAIT)
        slow = legacy_client.submit_tool("slow", timeout=0.1)
        with pytest.raises(mcp.RequestTimeout):
            slow.result(WAIT)
        legacy_server.wait_for("notifications/cancelled", requestId=slow.request_id)
    finally:
        release.set()
    assert threads[0].startswith("exmcp-calls-")


def test_sigint_in_call_tool_cancels_on_the_wire(peer: Peer) -> None:
    watcher = mcp.connect(mcp.HttpTransport(peer.url), protocol="legacy")
    child = subprocess.Popen(
        [sys.executable, HOST, peer.url, "sig1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "calling"
        wait_state(watcher, "sig1", "running")
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=WAIT)
        assert "interrupted" in out, err
        wait_state(watcher, "sig1", "aborted")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        watcher.disconnect()


@pytest.fixture(scope="module")
def ts_peer() -> Iterator[Peer]:
    why = missing_tools()
    if why is not None:
        pytest.skip(why)
    with ts_http_peer() as started:
        yield started


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("kind", ["stdio", "http"])
def test_cancel_aborts_the_ts_servers_tool(kind: str, era: str, ts_peer: Peer) -> None:
    """Legacy: ``notifications/cancelled``; 2026-07-28 over HTTP: the close of the request's stream."""
    inner = mcp.StdioTransport(ts_argv()) if kind == "stdio" else mcp.HttpTransport(ts_peer.url)
    tap = TapTransport(inner)
    client = mcp.connect(tap, protocol=era)
    try:
        key = f"ts-{kind}-{era}"
        call = client.submit_tool("hang", {"key": key, "seconds": 30})
        wait_state(client, key, "running")
        assert call.cancel() is True and call.cancelled()
        wait_state(client, key, "aborted")
        assert call.cancel() is False
        cancels = tap.sent_messages("notifications/cancelled")
        if kind == "http" and era == "modern":
            assert call.request_id in dict(tap.stream_cancels), tap.stream_cancels
            assert cancels == []
        else:
            assert [m["params"]["requestId"] for m in cancels] == [call.request_id]
    finally:
        client.disconnect()


def test_ctrl_c_during_the_send_leaves_no_pending_entry(
    legacy_server: FakeServer, legacy_client: mcp.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    legacy_server.on("tools/call", lambda params, ctx: NO_REPLY)
    run = legacy_client._run

    def interrupted(message: Any, timeout: float | None = None) -> Any:
        outcome = run(message, timeout)
        if type(message).__name__ == "SendRequest":
            raise KeyboardInterrupt  # as if Ctrl-C came just after the request went out
        return outcome

    monkeypatch.setattr(legacy_client, "_run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        legacy_client.call_tool("t", timeout=WAIT)
    monkeypatch.undo()
    _, sent = legacy_server.wait_for("tools/call")
    _, cancelled = legacy_server.wait_for("notifications/cancelled", requestId=sent["id"])
    assert cancelled["params"]["reason"] == "interrupted"
    legacy_client.ping()  # still serving; and the ended call's entry is gone
    assert legacy_client._inspect()["pending"] == 0


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_submit_tool_with_task_settles_with_the_task_handle(era: str) -> None:
    with FakeServer(era=era) as server:
        tasks = FakeTasks(server)
        client = mcp.connect(server.transport(), reconnect=False, request_timeout=WAIT)
        try:
            call = client.submit_tool("echo", {}, task=True)
            task = call.result(WAIT)
            assert isinstance(task, mcp.Task) and task.task_id == tasks.wait_created()
            tasks.complete(task.task_id, {"content": [{"type": "text", "text": "done"}]})
            assert task.result(timeout=WAIT)["content"][0]["text"] == "done"
        finally:
            client.disconnect()
