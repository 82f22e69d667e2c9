"""Where the client's CPU goes at a steady 1,000 msg/s over stdio.

Not a benchmark row: it explains one. The same paced stream is read by the raw
reader (``readline`` + ``json.loads`` on the host's thread) and by
exmcp_actors (the reader thread delivers, the host thread ``get()``s). For the
library it prints each thread's CPU per message, and the reader thread's CPU
split into its steps: waking from ``poll`` and reading the pipe, splitting and
decoding the line, delivering it (lane, inbox, waking the host).

Run: ``python -m benchmarks.profile_low_rate [--rounds N]``.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil

from .common import URI, WAIT, RawStdio, flood_argv, run_in_thread

COUNT = 3_000
RATE = 1_000.0


def thread_cpu() -> dict[int, float]:
    return {t.id: t.user_time + t.system_time for t in psutil.Process().threads()}


def raw_round() -> float:
    """Raw reader: process CPU per message."""
    client = RawStdio(flood_argv("stdio"))
    try:
        client.handshake()
        client.request("resources/subscribe", {"uri": URI})
        request_id = client.call_flood_nowait(URI, COUNT, rate=RATE, stamp=True)
        started, seen = time.process_time(), 0
        while seen < COUNT:
            if client.recv().get("method") == "notifications/resources/updated":
                seen += 1
        cpu = time.process_time() - started
        while client.recv().get("id") != request_id:
            pass
        return cpu / COUNT * 1e6
    finally:
        client.close()


class StepClock:
    """CPU time of the reader thread inside each wrapped step (``time.thread_time``)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def wrap(self, owner: Any, attribute: str, step: str) -> Callable[[], None]:
        original = getattr(owner, attribute)
        spent = self.spent

        def timed(*args: Any) -> Any:
            started = time.thread_time()
            try:
                return original(*args)
            finally:
                spent[step] = spent.get(step, 0.0) + time.thread_time() - started

        setattr(owner, attribute, timed)
        return lambda: setattr(owner, attribute, original)


def lib_round() -> tuple[float, dict[str, float], dict[str, float]]:
    """exmcp_actors: process CPU, CPU per thread and per reader step, each per message."""
    import exmcp_actors
    from exmcp_actors._transport import _framing
    from exmcp_actors._transport.stdio import _pipes

    clock = StepClock()
    undo = [
        clock.wrap(_pipes.PipeReader, "read", "wake from poll + os.read"),
        clock.wrap(_framing.LineSplitter, "feed", "split + decode"),
        clock.wrap(_framing.LossLatch, "deliver", "deliver (lane, inbox, wake the host)"),
    ]
    try:
        client = exmcp_actors.connect(flood_argv("stdio"), protocol="legacy", reconnect=False, request_timeout=WAIT)
        try:
            listener = client.subscribe_notifications({"resourceSubscriptions": [URI]})
            args = {"uri": URI, "count": COUNT, "rate": RATE, "stamp": True}
            trigger, _ = run_in_thread(lambda: client.call_tool("flood", args, timeout=WAIT * 3), "profile-trigger")
            names = {t.native_id: t.name for t in threading.enumerate()}
            listener.get(timeout=WAIT)  # the first one: the stream is flowing
            clock.spent.clear()
            before, started = thread_cpu(), time.process_time()
            for _ in range(COUNT - 1):
                listener.get(timeout=WAIT)
            cpu, after = time.process_time() - started, thread_cpu()
            trigger.join(WAIT)
        finally:
            client.disconnect()
    finally:
        for restore in undo:
            restore()
    n = COUNT - 1
    per_thread = {
        names.get(tid, str(tid)): (spent - before.get(tid, 0.0)) / n * 1e6
        for tid, spent in after.items()
        if spent - before.get(tid, 0.0) > 0.005
    }
    return cpu / n * 1e6, per_thread, {step: spent / n * 1e6 for step, spent in clock.spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for i in range(args.rounds):
        raw = raw_round()
        lib, threads, steps = lib_round()
        print(f"round {i + 1}: raw {raw:.0f} us CPU/msg; exmcp_actors {lib:.0f} us CPU/msg ({lib / raw:.2f}x)")
        print("  per thread: " + ", ".join(f"{name} {us:.0f} us" for name, us in sorted(threads.items())))
        print("  reader steps: " + ", ".join(f"{step} {us:.1f} us" for step, us in steps.items()))


if __name__ == "__main__":
    main()
