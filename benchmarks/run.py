"""Run the exmcp_actors benchmarks and print one table (not part of the test suite).

Usage::

    python -m benchmarks.run [--quick] [--only NAME ...] [--no-write] [--output PATH]

``--quick`` shrinks every benchmark to run in under a minute (indicative
figures only). Without ``--only`` the table is also written into
``BENCHMARKS.md`` (between its results markers; the rest of the file is kept)
with the command, the machine and the per-goal verdicts.

Each benchmark also runs alone: ``python -m benchmarks.bench_<name> [--quick]``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .common import ROOT, Row, fmt, load, machine, say, table

#: name -> module, in running order.
BENCHMARKS = {
    "throughput": "benchmarks.bench_throughput",
    "fanout": "benchmarks.bench_fanout",
    "dispatch": "benchmarks.bench_dispatch",
    "latency": "benchmarks.bench_latency",
    "cost": "benchmarks.bench_cost",
    "clients": "benchmarks.bench_clients",
    "idle": "benchmarks.bench_idle",
    "scale": "benchmarks.bench_scale",
}
START = "<!-- results:start (written by python -m benchmarks.run; edits inside are overwritten) -->"
END = "<!-- results:end -->"


def check_no_leftovers() -> list[str]:
    """Kill and name any child process still alive (there should be none), but the library's
    stdio watchdog: it lives as long as its host by design (``_transport/stdio/_watchdog``)."""
    import psutil

    names: list[str] = []
    for child in psutil.Process().children(recursive=True):
        if child.pid == _watchdog_pid():
            continue
        try:
            names.append(f"{child.pid} {' '.join(child.cmdline())[:120]}")
            child.kill()
        except psutil.Error:
            continue
    return names


def _watchdog_pid() -> int | None:
    """The pid of the library's stdio watchdog, if this process started one."""
    module = sys.modules.get("exmcp_actors._transport.stdio._watchdog")
    proc = getattr(getattr(module, "WATCHDOG", None), "_proc", None)
    return getattr(proc, "pid", None)


def library_state() -> str:
    """Which exmcp_actors was measured: the commit, and whether exmcp_actors/ had local changes."""
    import subprocess
    from importlib import metadata

    def git(*args: str) -> str:
        try:
            result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=False)
            return result.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    head = git("rev-parse", "--short", "HEAD") or "?"
    changed = len(git("status", "--porcelain", "--", "exmcp_actors").splitlines())
    tree = f"commit {head}" + (f" + {changed} uncommitted file(s) in exmcp_actors/" if changed else "")
    versions = []
    for name in ("mcp", "pykka", "websocket-client", "websockets"):
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} ?")
    return f"exmcp_actors at {tree}; " + ", ".join(versions)


def goals(rows: Sequence[Row]) -> str:
    """One line per goal: the verdict, the figure, and what it was compared with."""
    lines = []
    for r in rows:
        if r.passed is None:
            continue
        measured = fmt(r.value, r.unit)
        if r.ratio is not None:
            measured += f" vs {r.baseline_label} {fmt(r.baseline, r.unit)} = {r.ratio:.2f}x"
        lines.append(f"- **{r.status}** {r.bench} / {r.case}: goal {r.goal}; measured {measured}")
    return "\n".join(lines) if lines else "- (no goal in this run)"


def report(rows: Sequence[Row], command: str, seconds: float, quick: bool, load_before: str) -> str:
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    kind = "quick (indicative only)" if quick else "full"
    return "\n".join(
        [
            START,
            "",
            f"Command: `{command}` ({kind} run, {seconds:.0f} s, {when})",
            "",
            f"Machine: {machine()}; 1-minute load average {load_before} at the start, {load()} at the end",
            "",
            f"Measured: {library_state()}",
            "",
            table(rows),
            "",
            "Goals:",
            "",
            goals(rows),
            "",
            END,
        ]
    )


def write_report(path: Path, text: str) -> None:
    """Replace the results block of ``path`` (or create the file around it)."""
    if path.exists():
        old = path.read_text(encoding="utf-8")
        if START in old and END in old:
            head, rest = old.split(START, 1)
            tail = rest.split(END, 1)[1]
            path.write_text(head + text + tail, encoding="utf-8")
            return
        path.write_text(old.rstrip() + "\n\n" + text + "\n", encoding="utf-8")
        return
    path.write_text("# Benchmarks\n\n" + text + "\n", encoding="utf-8")


def run_all(names: Sequence[str], quick: bool) -> list[Row]:
    rows: list[Row] = []
    for name in names:
        module = importlib.import_module(BENCHMARKS[name])
        started = time.perf_counter()
        try:
            rows += module.run(quick=quick)
        except Exception as exc:  # one broken benchmark must not hide the others
            say(f"{name}: FAILED: {exc!r}")
            rows.append(Row(name, f"failed: {exc!r}"[:150], float("nan"), "", goal="runs", passed=False))
        say(f"{name}: {time.perf_counter() - started:.1f} s")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, under a minute")
    parser.add_argument(
        "--only",
        action="append",
        choices=list(BENCHMARKS),
        metavar="NAME",
        help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}",
    )
    parser.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    args = parser.parse_args(argv)
    names = args.only or list(BENCHMARKS)
    command = " ".join(["python -m benchmarks.run", *(sys.argv[1:] if argv is None else argv)])
    load_before = load()
    started = time.perf_counter()
    rows = run_all(names, args.quick)
    seconds = time.perf_counter() - started
    leftovers = check_no_leftovers()
    if leftovers:
        say(f"killed leftover child processes: {leftovers}")
    print(
        f"\n{command}  ({seconds:.0f} s)\n{machine()}; load average {load_before} at the start, {load()} at the end\n"
    )
    print(table(rows))
    print("\nGoals:\n" + goals(rows))
    if not args.only and not args.no_write:
        write_report(args.output, report(rows, command, seconds, args.quick, load_before))
        say(f"wrote {args.output}")
    return 0


def standalone(run: Callable[..., list[Row]]) -> None:
    """``main()`` of a single benchmark module: ``--quick``, print its table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = run(quick=args.quick)
    leftovers = check_no_leftovers()
    if leftovers:
        say(f"killed leftover child processes: {leftovers}")
    print(f"\n{machine()}; load average {load()}  ({time.perf_counter() - started:.0f} s)\n")
    print(table(rows))


if __name__ == "__main__":
    sys.exit(main())
