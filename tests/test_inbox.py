"""The inbox behind ``handle.get()``: order, timeouts, the end after a closing message."""

from __future__ import annotations

import math
import queue
import threading

import pytest

from exmcp_actors._delivery._inbox import Inbox, land
from exmcp_actors._protocol._messages import CLOSED

TIMEOUT = 5.0


def test_messages_come_out_in_the_order_they_were_put_singly_or_in_batches() -> None:
    inbox = Inbox()
    inbox.put(1)
    inbox.put_many([2, 3])
    inbox.put(4)
    assert len(inbox) == 4
    assert [inbox.get(0) for _ in range(4)] == [1, 2, 3, 4]
    assert len(inbox) == 0


@pytest.mark.parametrize("timeout", [0, 0.01])
def test_an_empty_inbox_raises_empty_when_the_timeout_passes(timeout: float) -> None:
    with pytest.raises(queue.Empty):
        Inbox().get(timeout)


@pytest.mark.parametrize("timeout", [-1, -0.001, math.nan])
def test_a_negative_or_nan_timeout_is_a_value_error_naming_it(timeout: float) -> None:
    with pytest.raises(ValueError, match="timeout must be a non-negative number"):
        Inbox().get(timeout)


def test_an_infinite_timeout_waits_like_none() -> None:
    inbox = Inbox()
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(inbox.get(math.inf)))
    reader.start()
    inbox.put("late")
    reader.join(TIMEOUT)
    assert got == ["late"]


def test_a_finished_inbox_gives_what_it_holds_then_ends_every_later_get_at_once() -> None:
    inbox = Inbox()
    land(inbox, [("n", 1), (CLOSED, None, "bye")])
    assert inbox.finished
    assert len(inbox) == 2  # the end marker is not counted
    assert inbox.get(0) == ("n", 1)
    assert inbox.get(None)[0] == CLOSED
    for _ in range(3):  # never blocks, even without a timeout
        with pytest.raises(queue.Empty):
            inbox.get(None)
    assert len(inbox) == 0


def test_finishing_wakes_every_thread_waiting_on_an_empty_inbox() -> None:
    inbox = Inbox()
    ended = threading.Barrier(4, timeout=TIMEOUT)

    def wait() -> None:
        with pytest.raises(queue.Empty):
            inbox.get(None)
        ended.wait()

    waiters = [threading.Thread(target=wait) for _ in range(3)]
    for thread in waiters:
        thread.start()
    inbox.finish()
    inbox.finish()  # twice is once
    ended.wait()  # all three ended (a BrokenBarrierError here means one stayed blocked)
    for thread in waiters:
        thread.join(TIMEOUT)
    assert len(inbox) == 0


def test_a_waiting_reader_gets_a_batch_landed_from_another_thread_in_order() -> None:
    inbox = Inbox()
    got: list[int] = []
    reader = threading.Thread(target=lambda: got.extend(inbox.get(TIMEOUT) for _ in range(100)))
    reader.start()
    inbox.put_many(range(100))
    reader.join(TIMEOUT)
    assert got == list(range(100))
