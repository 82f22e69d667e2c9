"""exmcp_actors.bridges: messages of a real SDK peer reaching an asyncio reader, a Tk callback on
the Tk thread (under Xvfb) and a Qt slot on the GUI thread (PySide6, offscreen); bounds, closed
loops, destroyed windows and raising callbacks on hand-made messages."""

from __future__ import annotations

import asyncio
import logging
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors._protocol._ratelog import RateLimitedLog
from exmcp_actors.bridges import AsyncioSubscriber, QtSubscriber, TkSubscriber, _asyncio, _common, _qt, _tk
from exmcp_actors.testing import FakeServer
from tests.child_python import run_python
from tests.gui_helpers import run_tk
from tests.sdk_helpers import RESOURCE_UPDATED, TOOLS_CHANGED, URI_C, WAIT, ClientPool, notify, shared_target

WATCHED = {"toolsListChanged": True, "resourceSubscriptions": [URI_C]}


def _event(n: int) -> mcp.Notification:
    return mcp.Notification("ex_mcp_notification", None, RESOURCE_UPDATED, {"uri": f"file:///{n}"})


def _closed() -> mcp.Closed:
    return mcp.Closed("ex_mcp_notification_closed", None, "disconnected")


@pytest.fixture
def records(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Callable[[float], Any]:
    """Gives every bridge a rate-limited log of its own (the shared one remembers other tests'
    records); returns a function that installs one of a given interval and the caught records."""

    def install(interval: float = 10.0) -> Any:
        log = RateLimitedLog(logging.getLogger("exmcp_actors.bridges"), interval=interval)
        for module in (_asyncio, _common, _tk, _qt):
            monkeypatch.setattr(module, "ratelog", log)
        caplog.set_level(logging.WARNING, logger="exmcp_actors.bridges")
        return caplog

    return install


# --------------------------------------------------------------------------- asyncio


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_asyncio_reader_gets_a_real_servers_update_list_change_and_closing(
    era: str, peer_pool: Any, client_pool: ClientPool
) -> None:
    target = shared_target(peer_pool, "ws", era)

    async def main() -> list[Any]:
        got: list[Any] = []
        async with AsyncioSubscriber(asyncio.get_running_loop()) as sub:
            client = await asyncio.to_thread(client_pool.connect, target.make_transport())
            await asyncio.to_thread(client.watch, WATCHED, sub)
            await asyncio.to_thread(notify, client, "resource_updated", URI_C)
            await asyncio.to_thread(notify, client, "tools")
            async for msg in sub:
                got.append(msg)
                if len(got) == 2:
                    await asyncio.to_thread(client.disconnect)
                if isinstance(msg, mcp.Closed):
                    break
            assert sub.pending == 0 and sub.dropped == 0
        return got

    got = asyncio.run(asyncio.wait_for(main(), WAIT))
    assert [(m.method, m.params.get("uri")) for m in got[:2]] == [(RESOURCE_UPDATED, URI_C), (TOOLS_CHANGED, None)]
    assert isinstance(got[2], mcp.Closed) and got[2].reason == "disconnected"


def test_asyncio_put_never_waits_for_the_loop_and_drops_past_the_bound_once_logged_per_burst(
    records: Callable[[float], Any],
) -> None:
    caught = records(0.0)  # no rate limit: each record is the burst logic's own
    loop = asyncio.new_event_loop()
    try:
        sub = AsyncioSubscriber(loop, max_pending=4)
        # The loop does not even run: put() from a library-like thread must still return.
        putter = threading.Thread(target=lambda: [sub.put(_event(n)) for n in range(7)])
        putter.start()
        putter.join(WAIT)
        assert not putter.is_alive()
        sub.put(_closed())  # a closing message passes the bound
        assert (sub.pending, sub.dropped) == (5, 3)
        assert len(caught.records) == 1 and "max_pending" in caught.records[0].getMessage()

        async def read(count: int) -> list[Any]:
            return [await anext(sub) for _ in range(count)]

        got = loop.run_until_complete(asyncio.wait_for(read(5), WAIT))
        assert [m.params["uri"] for m in got[:4]] == [f"file:///{n}" for n in range(4)]
        assert isinstance(got[4], mcp.Closed) and sub.pending == 0
        for n in range(6):  # drained below half the bound: a new burst, logged again
            sub.put(_event(n))
        assert sub.dropped == 5 and len(caught.records) == 2
    finally:
        loop.close()


def test_asyncio_closed_loop_drops_with_a_rate_limited_log_and_no_exception(records: Callable[[float], Any]) -> None:
    caught = records(10.0)
    loop = asyncio.new_event_loop()
    sub = AsyncioSubscriber(loop)
    loop.close()
    for n in range(3):
        sub.put(_event(n))
    assert sub.dropped == 3 and sub.pending == 0
    assert [r.getMessage() for r in caught.records] == [
        "AsyncioSubscriber: its event loop is closed; a message was dropped"
    ]


def test_asyncio_close_from_another_thread_ends_a_waiting_iteration() -> None:
    async def main() -> tuple[list[Any], AsyncioSubscriber]:
        sub = AsyncioSubscriber(asyncio.get_running_loop())
        waiting = asyncio.Event()

        async def reader() -> list[Any]:
            got = []
            waiting.set()
            async for msg in sub:
                got.append(msg)
            return got

        task = asyncio.create_task(reader())
        await waiting.wait()
        await asyncio.to_thread(sub.put, _event(1))
        await asyncio.to_thread(sub.close)
        got = await asyncio.wait_for(task, WAIT)
        sub.put(_event(2))  # after close: dropped
        return got, sub

    got, sub = asyncio.run(main())
    assert len(got) <= 1 and sub.closed and sub.dropped == 2 - len(got) and sub.pending == 0


def test_asyncio_bad_arguments_raise_type_or_value_errors_naming_them() -> None:
    with pytest.raises(TypeError, match="loop must be an asyncio event loop"):
        AsyncioSubscriber(object())  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(TypeError, match="max_pending"):
            AsyncioSubscriber(loop, max_pending="10")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="max_pending"):
            AsyncioSubscriber(loop, max_pending=0)
    finally:
        loop.close()


# --------------------------------------------------------------------------- Tk


def test_tk_callback_runs_on_the_tk_thread_for_a_real_servers_update(
    tk_root: Any, peer_pool: Any, client_pool: ClientPool
) -> None:
    got: list[tuple[Any, int]] = []
    sub = TkSubscriber(tk_root, lambda msg: got.append((msg, threading.get_ident())))
    client = client_pool.connect(shared_target(peer_pool, "ws", "legacy").make_transport())
    client.watch(WATCHED, subscriber=sub)
    trigger = threading.Thread(target=notify, args=(client, "resource_updated", URI_C))
    run_tk(tk_root, lambda: bool(got), trigger.start)
    trigger.join(WAIT)
    assert got, "no message reached the Tk callback"
    msg, thread = got[0]
    assert (msg.method, msg.params["uri"]) == (RESOURCE_UPDATED, URI_C)
    assert thread == threading.get_ident()  # the thread that runs mainloop()
    tk_root.destroy()  # before the client's closing message: dropped, not waited for


def test_a_raising_tk_callback_is_logged_once_and_hurts_no_other_subscriber(
    tk_root: Any, peer_pool: Any, client_pool: ClientPool, records: Callable[[float], Any]
) -> None:
    caught = records(10.0)
    calls: list[Any] = []

    def callback(msg: Any) -> None:
        calls.append(msg)
        raise RuntimeError("host bug")

    client = client_pool.connect(shared_target(peer_pool, "ws", "legacy").make_transport())
    client.watch(WATCHED, subscriber=TkSubscriber(tk_root, callback))
    box: queue.Queue[Any] = queue.Queue()
    client.watch(WATCHED, subscriber=box)
    trigger = threading.Thread(target=notify, args=(client, "resource_updated", URI_C), kwargs={"count": 2})
    run_tk(tk_root, lambda: len(calls) == 2, trigger.start)
    trigger.join(WAIT)
    assert len(calls) == 2  # called again after raising
    assert [box.get(timeout=WAIT).method for _ in range(2)] == [RESOURCE_UPDATED] * 2
    errors = [r for r in caught.records if "raised" in r.getMessage()]
    assert len(errors) == 1 and errors[0].exc_info is not None
    tk_root.destroy()


def test_tk_destroyed_root_drops_at_once_without_calling_tk(tk_root: Any, records: Callable[[float], Any]) -> None:
    caught = records(10.0)
    sub = TkSubscriber(tk_root, lambda msg: None)
    tk_root.destroy()
    took: list[float] = []

    def put_twice() -> None:
        start = time.monotonic()
        sub.put(_event(1))
        sub.put(_event(2))
        took.append(time.monotonic() - start)

    putter = threading.Thread(target=put_twice)
    putter.start()
    putter.join(WAIT)
    assert sub.dropped == 2 and len(caught.records) == 1
    assert took[0] < 0.5  # tkinter from another thread with no main loop waits 1 s per call


def test_disconnect_on_the_tk_thread_waits_for_no_delivery_to_a_tk_subscriber(tk_root: Any) -> None:
    got: list[Any] = []
    alive: list[list[str]] = []
    with FakeServer() as server:
        client = mcp.connect(server.transport())
        client.watch({"toolsListChanged": True}, subscriber=TkSubscriber(tk_root, got.append))

        def disconnect_here() -> None:
            # Its Closed goes to the TkSubscriber while this (the Tk) thread is in disconnect():
            # a put() waiting for this thread to take an after() would hold it to the timeout.
            client.disconnect(timeout=2.0)
            alive.append([t.name for t in client._shared.children if t.is_alive()])

        run_tk(tk_root, lambda: bool(got), disconnect_here)
    assert alive == [[]]  # the subscriber's proxy had ended when disconnect() returned
    assert [type(msg).__name__ for msg in got] == ["Closed"]  # delivered on the Tk thread afterwards


def test_a_tk_put_with_no_main_loop_running_waits_for_none_and_is_delivered_once_it_runs(tk_root: Any) -> None:
    got: list[Any] = []
    sub = TkSubscriber(tk_root, got.append)
    putter = threading.Thread(target=sub.put, args=(_event(1),))
    putter.start()
    putter.join(WAIT)
    assert not putter.is_alive() and sub.dropped == 0
    run_tk(tk_root, lambda: bool(got), lambda: None)
    assert [msg.params["uri"] for msg in got] == ["file:///1"]


def test_a_tk_subscriber_keeps_at_most_max_pending_and_never_drops_a_closing(
    tk_root: Any, records: Callable[[float], Any]
) -> None:
    caught = records(10.0)
    got: list[Any] = []
    sub = TkSubscriber(tk_root, got.append, max_pending=2)
    for n in range(4):
        sub.put(_event(n))
    sub.put(_closed())
    assert sub.dropped == 2 and len(caught.records) == 1
    run_tk(tk_root, lambda: len(got) == 3, lambda: None)
    assert [msg[0] for msg in got] == ["ex_mcp_notification", "ex_mcp_notification", "ex_mcp_notification_closed"]
    with pytest.raises(ValueError, match="max_pending"):
        TkSubscriber(tk_root, got.append, max_pending=0)


def test_tk_bad_arguments_raise_type_errors_naming_them() -> None:
    tkinter = pytest.importorskip("tkinter", reason="this Python has no tkinter")
    with pytest.raises(TypeError, match="root must be a tkinter widget"):
        TkSubscriber(object(), print)
    interp = tkinter.Tcl()  # no display needed for the callback check
    with pytest.raises(TypeError, match="callback must be callable"):
        TkSubscriber(interp, 3)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- Qt


def test_qt_slot_runs_on_the_gui_thread_for_a_real_servers_update(
    qt_app: Any, peer_pool: Any, client_pool: ClientPool
) -> None:
    from PySide6.QtCore import QTimer

    sub = QtSubscriber()
    assert isinstance(sub, QtSubscriber)
    got: list[tuple[Any, int]] = []

    def slot(msg: Any) -> None:
        got.append((msg, threading.get_ident()))
        qt_app.quit()

    sub.message.connect(slot)
    client = client_pool.connect(shared_target(peer_pool, "ws", "modern").make_transport())
    client.watch(WATCHED, subscriber=sub)
    trigger = threading.Thread(target=notify, args=(client, "resource_updated", URI_C))
    guard = QTimer()
    guard.setSingleShot(True)
    guard.timeout.connect(qt_app.quit)
    guard.start(int(WAIT * 1000))
    QTimer.singleShot(0, trigger.start)
    qt_app.exec()
    guard.stop()
    trigger.join(WAIT)
    assert got, "no message reached the Qt slot"
    msg, thread = got[0]
    assert (msg.method, msg.params["uri"]) == (RESOURCE_UPDATED, URI_C)
    assert thread == threading.get_ident()  # the thread that owns the object and runs exec()
    client.disconnect()
    sub.message.disconnect(slot)


def test_qt_deleted_object_drops_with_a_log(qt_app: Any, records: Callable[[float], Any]) -> None:
    import shiboken6

    caught = records(10.0)
    sub = QtSubscriber()
    shiboken6.delete(sub)
    sub.put(_event(1))
    sub.put(_event(2))
    assert sub.dropped == 2 and len(caught.records) == 1


_DELETED_WHILE_PUT = """
import os, threading, time
os.environ["QT_QPA_PLATFORM"] = "offscreen"
from PySide6.QtCore import QCoreApplication
import shiboken6
from exmcp_actors.bridges import QtSubscriber, _common
_common.logger.disabled = True
app = QCoreApplication([])
got = [0]
def slot(message):
    got[0] += 1
for attempt in range(200):
    sub = QtSubscriber()
    sub.message.connect(slot)
    got[0] = 0
    stop = threading.Event()
    busy = threading.Event()
    put = [0]
    def library_thread(sub=sub):
        while not stop.is_set():
            sub.put(("x", put[0]))
            put[0] += 1
            if put[0] == 20:
                busy.set()
    putter = threading.Thread(target=library_thread)
    putter.start()
    busy.wait(5)
    app.processEvents()
    shiboken6.delete(sub)  # while the library thread puts
    stop.set()
    putter.join(5)
    app.processEvents()
    assert sub.pending == 0 and got[0] + sub.dropped == put[0], (attempt, sub.pending, got[0], sub.dropped, put[0])
print("rounds", 200)
"""


def test_qt_deleting_the_object_while_a_library_thread_puts_drops_every_message_not_delivered() -> None:
    """shiboken6.delete() on the object's thread while put() runs on another: each message is
    either emitted there or counted dropped (those still queued at the deletion too), and the
    process lives on (it crashed in emit() on the half-deleted object)."""
    pytest.importorskip("PySide6.QtCore", reason="PySide6 is not installed (pip install PySide6-Essentials)")
    done = run_python("-c", _DELETED_WHILE_PUT, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])


def test_qt_put_costs_no_reference_to_true_however_many_messages(qt_app: Any) -> None:
    # PySide6 6.12's SignalInstance.emit() returns True without owning a reference to it: on a
    # CPython without immortal bools (3.11) every emit took one away, and a few hundred messages
    # later the interpreter aborted (bool_dealloc). put() must leave True's count as it was.
    sub = QtSubscriber()
    got: list[Any] = []
    sub.message.connect(got.append)  # a direct connection: the slot runs inside emit()
    messages = 200
    before = sys.getrefcount(True)
    for n in range(messages):
        sub.put(_event(n))
    lost = before - sys.getrefcount(True)
    sub.message.disconnect(got.append)
    assert len(got) == messages
    assert lost < messages // 4, f"{lost} references to True lost in {messages} put() calls"


def test_qt_keeps_at_most_max_pending_for_its_thread_and_never_drops_a_closing(
    qt_app: Any, records: Callable[[float], Any]
) -> None:
    """Messages put from the library's thread wait for the object's thread (here, the test's,
    which processes no events meanwhile): at most max_pending of them, the closing one always;
    they are emitted there, in order, once it does."""
    caught = records(10.0)
    sub = QtSubscriber(max_pending=3)
    got: list[tuple[Any, int]] = []

    def slot(message: Any) -> None:
        got.append((message, threading.get_ident()))

    sub.message.connect(slot)

    def library_thread() -> None:
        for n in range(8):
            sub.put(_event(n))
        sub.put(_closed())

    putter = threading.Thread(target=library_thread)
    putter.start()
    putter.join(WAIT)
    assert not putter.is_alive(), "put() waited for the object's thread"
    assert (sub.pending, sub.dropped, got) == (4, 5, [])
    assert len(caught.records) == 1 and "max_pending" in caught.records[0].getMessage()
    deadline = time.monotonic() + WAIT
    while len(got) < 4 and time.monotonic() < deadline:
        qt_app.processEvents()
    assert [m.params["uri"] for m, _ in got[:3]] == ["file:///0", "file:///1", "file:///2"]
    assert isinstance(got[3][0], mcp.Closed)
    assert {thread for _, thread in got} == {threading.get_ident()}
    assert sub.pending == 0
    sub.message.disconnect(slot)
    with pytest.raises(ValueError, match="max_pending"):
        QtSubscriber(max_pending=0)


_WITHOUT_PYSIDE6 = """
import sys
sys.modules["PySide6"] = sys.modules["PySide6.QtCore"] = sys.modules["shiboken6"] = None  # not installed
from exmcp_actors.bridges import QtSubscriber
try:
    QtSubscriber()
except ImportError as exc:
    print("ImportError:", exc)
print(isinstance(object(), QtSubscriber))
"""


def test_qt_without_pyside6_is_an_import_error_naming_it() -> None:
    # In a child: hiding PySide6 from a process whose Qt objects are alive breaks PySide6 itself
    # (an object freed meanwhile looks its module up), which is no host's situation.
    done = run_python("-c", _WITHOUT_PYSIDE6, timeout=WAIT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ImportError: QtSubscriber needs PySide6 (pip install PySide6-Essentials)" in done.stdout
    assert done.stdout.strip().endswith("False")


def test_importing_the_bridges_imports_no_gui_toolkit() -> None:
    code = "import sys, exmcp_actors.bridges; print(sorted({'tkinter', 'PySide6'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT, check=True)
    assert done.stdout.strip() == "[]"
