"""Frames per second of StdioTransport against a raw readline + json.loads loop.

Run by hand (not a test)::

    python benchmarks/transport_raw.py [--frames 100000] [--rounds 5]

Both sides read the same child: a Python process that floods its stdout with
``--frames`` copies of one small ``notifications/resources/updated`` line.
Each round times from the first frame decoded to the last one, so the child's
start-up cost is left out of both figures; the median round is reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exmcp_actors._transport._base import Frame
from exmcp_actors._transport.stdio._process import StdioTransport

LINE = '{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///a"}}'

FLOOD = f"""
import sys
line = {(LINE + chr(10)).encode()!r}
block = line * 1000
out = sys.stdout.buffer
for _ in range({{n}} // 1000):
    out.write(block)
out.write(line * ({{n}} % 1000))
out.flush()
sys.stdin.read()  # stay alive until the reader closes stdin
"""


def flood_argv(frames: int) -> list[str]:
    """Command line of the child that writes ``frames`` lines."""
    return [sys.executable, "-c", FLOOD.replace("{n}", str(frames))]


def raw_round(frames: int) -> float:
    """A plain readline + json.loads loop; returns frames per second."""
    proc = subprocess.Popen(flood_argv(frames), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdin is not None
    readline = proc.stdout.readline
    loads = json.loads
    loads(readline())
    start = time.perf_counter()
    for _ in range(frames - 1):
        loads(readline())
    elapsed = time.perf_counter() - start
    proc.stdin.close()
    proc.wait()
    proc.stdout.close()
    return (frames - 1) / elapsed


class CountingSink:
    """Counts frames and batches; sets ``done`` at ``expected`` frames."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.count = 0
        self.batches = 0
        self.first_at = 0.0
        self.last_at = 0.0
        self.first_batch = 0
        self.done = threading.Event()

    def frames_received(self, frames: list[Frame]) -> None:
        """Count a batch."""
        if not self.count:
            self.first_at = time.perf_counter()
            self.first_batch = len(frames)
        self.count += len(frames)
        self.batches += 1
        if self.count >= self.expected:
            self.last_at = time.perf_counter()
            self.done.set()

    def transport_lost(self, reason: str) -> None:
        """Unexpected here."""
        print("lost:", reason, file=sys.stderr)
        self.done.set()


def transport_round(frames: int) -> tuple[float, int]:
    """StdioTransport with a counting sink; returns (frames per second, batches)."""
    sink = CountingSink(frames)
    transport = StdioTransport(flood_argv(frames), startup_grace=0)
    transport.open(sink, timeout=10)
    try:
        if not sink.done.wait(60):
            raise RuntimeError(f"only {sink.count} of {frames} frames arrived")
    finally:
        transport.close()
    elapsed = sink.last_at - sink.first_at
    return (sink.count - sink.first_batch) / elapsed, sink.batches


def main() -> None:
    """Alternate rounds of both readers and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    raw: list[float] = []
    ours: list[float] = []
    batches: list[int] = []
    for _ in range(args.rounds):
        raw.append(raw_round(args.frames))
        rate, count = transport_round(args.frames)
        ours.append(rate)
        batches.append(count)
    raw_median = statistics.median(raw)
    ours_median = statistics.median(ours)
    print(f"frames per round: {args.frames}, rounds: {args.rounds}")
    print(f"raw readline + json.loads: {raw_median:>12,.0f} frames/s")
    print(
        f"StdioTransport:            {ours_median:>12,.0f} frames/s"
        f"  ({statistics.median(batches):.0f} batches per round)"
    )
    print(f"ratio: {ours_median / raw_median:.2f}x")


if __name__ == "__main__":
    main()
