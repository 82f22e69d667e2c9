"""Benchmark 5: what listeners cost: memory, threads, registration speed, a registration storm.

- Memory and threads: 1,000 idle host threads are started first (their own
  cost is the comparison); then each gets one listener on its own URI
  (``subscriber=thread``). Added RSS (psutil, after ``gc.collect()``) and
  threads are what the library added. Goal: < 60 MB added RSS.
- Registrations per second, sequential, from one thread: on new URIs (one
  ``resources/subscribe`` round trip each) and on one shared URI (refcount
  only), beside raw ``resources/subscribe`` round trips (``readline`` +
  ``json.loads``) and the SDK client's ``subscribe_resource`` on the same server.
  Goals: new URIs >= 1.5x the SDK and >= 0.6x raw; a shared URI
  >= 30,000/s, shown beside one bare pykka ``ask`` round trip, the least a
  registration that the client actor answers can cost.
- Storm: 8 threads register 1,000 listeners on 100 URIs at once; the flood
  server counts the ``resources/subscribe`` it receives (goal: exactly 100),
  then every listener is removed (goal: exactly 100 ``resources/unsubscribe``).

Run alone: ``python -m benchmarks.bench_cost [--quick]``.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

from .common import WAIT, RawStdio, Row, flood_argv, say, tool_json

NAME = "cost"
MB = 1024 * 1024


def usage() -> tuple[float, int]:
    """(RSS in MB, thread count) of this process, after a full collection."""
    import psutil

    gc.collect()
    process = psutil.Process()
    return process.memory_info().rss / MB, process.num_threads()


def wait_until(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


def memory_and_threads(k: int) -> list[Row]:
    import exmcp_actors

    client = exmcp_actors.connect(flood_argv("stdio"), protocol="legacy", reconnect=False, request_timeout=WAIT)
    release = threading.Event()
    threads = [
        threading.Thread(target=release.wait, args=(WAIT * 2,), name=f"bench-idle-{i}", daemon=True) for i in range(k)
    ]
    try:
        rss0, n0 = usage()
        for thread in threads:
            thread.start()
        rss1, n1 = usage()
        started = time.perf_counter()
        listeners = [
            client.subscribe_notifications({"resourceSubscriptions": [f"file:///bench/cost/{i}"]}, subscriber=thread)
            for i, thread in enumerate(threads)
        ]
        seconds = time.perf_counter() - started
        rss2, n2 = usage()
        say(
            f"{NAME}: {k:,} idle threads: +{rss1 - rss0:.1f} MB, +{n1 - n0} threads; "
            f"{k:,} listeners: +{rss2 - rss1:.1f} MB, +{n2 - n1} threads ({seconds:.2f} s)"
        )
        for listener in listeners:
            listener.unsubscribe()
        wait_until(lambda: usage()[1] <= n1 + 2, 10.0)
        rss3, n3 = usage()
        say(f"{NAME}: after unsubscribing: {rss3 - rss1:+.1f} MB, {n3 - n1:+d} threads vs before the listeners")
    finally:
        release.set()
        client.disconnect(timeout=30)
        for thread in threads:
            thread.join(5.0)
    case = f"{k:,} subscriber threads x 1 listener (own URI)"
    return [
        Row(
            NAME,
            f"{case}: added RSS",
            rss2 - rss1,
            "MB",
            f"the {k:,} host threads themselves",
            rss1 - rss0,
            "< 60 MB",
            rss2 - rss1 < 60,
        ),
        Row(NAME, f"{case}: added threads", n2 - n1, "threads", f"the {k:,} host threads", n1 - n0),
        Row(
            NAME,
            f"{case}: threads left after unsubscribing all",
            n3 - n1,
            "threads",
            "threads added",
            n2 - n1,
            note="the shared scheduler may linger 0.5 s",
        ),
        Row(NAME, f"{case}: RSS kept after unsubscribing all", rss3 - rss1, "MB", "RSS added", rss2 - rss1),
    ]


def raw_subscribe_rate(n: int) -> float:
    raw = RawStdio(flood_argv("stdio"))
    try:
        raw.handshake()
        started = time.perf_counter()
        for i in range(n):
            raw.request("resources/subscribe", {"uri": f"file:///bench/raw/{i}"})
        return n / (time.perf_counter() - started)
    finally:
        raw.close()


def sdk_subscribe_rate(n: int) -> float:
    import anyio

    from .bench_throughput import quiet_sdk
    from .sdk_client import Counter, sdk_session

    quiet_sdk()

    async def main() -> float:
        async with sdk_session("stdio", flood_argv("stdio"), Counter()) as session:
            started = time.perf_counter()
            for i in range(n):
                await session.subscribe_resource(f"file:///bench/sdk/{i}")
            return n / (time.perf_counter() - started)

    return float(anyio.run(main))


def registration_rates(n: int) -> list[Row]:
    import exmcp_actors

    client = exmcp_actors.connect(flood_argv("stdio"), protocol="legacy", reconnect=False, request_timeout=WAIT)
    try:
        started = time.perf_counter()
        for i in range(n):
            client.subscribe_notifications({"resourceSubscriptions": [f"file:///bench/reg/{i}"]})
        new_uri = n / (time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(n):
            client.subscribe_notifications({"resourceSubscriptions": ["file:///bench/reg/0"]})
        shared_uri = n / (time.perf_counter() - started)
    finally:
        client.disconnect(timeout=30)
    raw = raw_subscribe_rate(n)
    sdk = sdk_subscribe_rate(n)
    ask = ask_rate(n)
    say(
        f"{NAME}: registrations/s: new URI {new_uri:,.0f}, shared URI {shared_uri:,.0f}; "
        f"raw subscribe round trips {raw:,.0f}/s, SDK subscribe_resource {sdk:,.0f}/s, bare pykka asks {ask:,.0f}/s"
    )
    case = f"sequential registrations, {n:,}"
    wire, held = (
        f"{case}: exmcp_actors, new URI each (wire subscribe)",
        f"{case}: exmcp_actors, one shared URI (no wire)",
    )
    return [
        Row(NAME, f"{case}: raw resources/subscribe round trips", raw, "/s"),
        Row(NAME, f"{case}: SDK client subscribe_resource", sdk, "/s", "raw round trips", raw),
        Row(NAME, wire, new_uri, "/s", "raw round trips", raw, ">= 0.6x raw", new_uri >= 0.6 * raw),
        Row(NAME, wire, new_uri, "/s", "SDK subscribe_resource", sdk, ">= 1.5x SDK", new_uri >= 1.5 * sdk),
        Row(NAME, held, shared_uri, "/s", "raw round trips", raw),
        Row(NAME, held, shared_uri, "/s", "one bare pykka ask (the floor)", ask, ">= 30,000/s", shared_uri >= 30_000),
    ]


def ask_rate(n: int) -> float:
    """Round trips per second of one ``ask`` to an idle pykka actor: what one hand-off there and back costs."""
    import pykka

    class Echo(pykka.ThreadingActor):
        def on_receive(self, message: Any) -> Any:
            return message

    ref = Echo.start()
    try:
        started = time.perf_counter()
        for i in range(n):
            ref.ask(i, timeout=WAIT)
        return n / (time.perf_counter() - started)
    finally:
        ref.stop()


def sequential_storm(listeners: int, uris: int) -> float:
    """The storm's registrations from one thread, one after the other: registrations per second."""
    import exmcp_actors

    client = exmcp_actors.connect(flood_argv("stdio"), protocol="legacy", reconnect=False, request_timeout=WAIT)
    try:
        started = time.perf_counter()
        for j in range(listeners):
            client.subscribe_notifications({"resourceSubscriptions": [f"file:///bench/storm/{j % uris}"]})
        return listeners / (time.perf_counter() - started)
    finally:
        client.disconnect(timeout=30)


def storm(listeners: int, uris: int, n_threads: int) -> list[Row]:
    import exmcp_actors

    client = exmcp_actors.connect(flood_argv("stdio"), protocol="legacy", reconnect=False, request_timeout=WAIT)
    per_thread = listeners // n_threads
    start = threading.Barrier(n_threads + 1, timeout=WAIT)
    registered = threading.Barrier(n_threads + 1, timeout=WAIT)
    release = threading.Event()
    errors: list[BaseException] = []

    def body(t: int) -> None:
        try:
            start.wait()
            mine = [
                client.subscribe_notifications(
                    {"resourceSubscriptions": [f"file:///bench/storm/{(t * per_thread + j) % uris}"]}, timeout=WAIT
                )
                for j in range(per_thread)
            ]
            registered.wait()
            release.wait(WAIT)
            for listener in mine:
                listener.unsubscribe(timeout=WAIT)
        except BaseException as exc:  # reported below
            errors.append(exc)
            start.abort()
            registered.abort()

    threads = [threading.Thread(target=body, args=(t,), name=f"bench-storm-{t}", daemon=True) for t in range(n_threads)]
    try:
        for thread in threads:
            thread.start()
        start.wait()
        started = time.perf_counter()
        registered.wait()
        seconds = time.perf_counter() - started
        stats = tool_json(client.call_tool("stats"))
        release.set()
        for thread in threads:
            thread.join(WAIT)
        if errors:
            raise errors[0]

        def unsubscribed() -> bool:
            return int(tool_json(client.call_tool("stats"))["unsubscribe_calls"]) >= uris

        wait_until(unsubscribed, 10.0)
        time.sleep(0.2)  # anything extra would show up now
        after = tool_json(client.call_tool("stats"))
    finally:
        release.set()
        client.disconnect(timeout=30)
    subs, unsubs = stats["subscribe_calls"], after["unsubscribe_calls"]
    say(
        f"{NAME}: storm {listeners:,} listeners / {uris} URIs / {n_threads} threads in {seconds:.2f} s: "
        f"{subs} subscribe, {unsubs} unsubscribe on the wire"
    )
    sequential = sequential_storm(listeners, uris)
    case = f"storm: {listeners:,} listeners on {uris} URIs from {n_threads} threads"
    return [
        Row(NAME, f"{case}: registrations/s", listeners / seconds, "/s", "same from 1 thread", sequential),
        Row(NAME, f"{case}: wire resources/subscribe", subs, "", "expected", uris, f"exactly {uris}", subs == uris),
        Row(
            NAME,
            f"{case}: wire resources/unsubscribe after removing all",
            unsubs,
            "",
            "expected",
            uris,
            f"exactly {uris}",
            unsubs == uris,
        ),
    ]


def run(quick: bool = False) -> list[Row]:
    rows = memory_and_threads(1_000)
    rows += registration_rates(500 if quick else 2_000)
    rows += storm(1_000, 100, 8)
    return rows


def main() -> None:
    from .run import standalone

    standalone(run)


if __name__ == "__main__":
    main()
