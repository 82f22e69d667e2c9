"""Shared fixtures: real SDK peers (tests/peers) and a leak check run after every test.

Peers (see tests/peers/FRAMES.md for what they put on the wire):

- ``sdk_stdio_argv`` -> ``list[str]``: argv a client spawns (any cwd works; ``STDIO_CWD`` is the repo root).
  Variants: ``sdk_stdio_argv_legacy``, ``sdk_stdio_argv_silent`` (legacy, never answers server/discover).
- ``sdk_ws_peer`` / ``sdk_http_peer`` -> ``Peer``: a running ws/http peer of the test's own, stopped
  after it: for tests that stop, kill, restart or configure it, or count on server-wide counters.
  ``.url``, ``.stop()``, ``.kill()``, ``.restart()``. Variants: ``sdk_ws_peer_legacy``, ``sdk_http_peer_legacy``.
- ``shared_ws_peer`` / ``shared_http_peer`` (and ``_legacy``): the same, but long-lived, shared by
  every test of the session (of the xdist worker) that leaves it alone; ``peer_pool`` holds them.
  A cold SDK peer costs seconds, so this is the default for a test that only talks to one.

``client_pool`` (a ``ClientPool``) connects clients and disconnects them after the test.

Every peer fixture is parametrizable indirectly by era, or by a dict::

    @pytest.mark.parametrize("sdk_ws_peer", ["both", "legacy"], indirect=True)
    @pytest.mark.parametrize("sdk_http_peer", [{"era": "legacy", "extra_args": ["--event-store"]}], indirect=True)

and extra server flags can also come from a marker:
``@pytest.mark.peer_args("--refuse-subscribe", "file:///b.txt")``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    # `pytest` (unlike `python -m pytest`) does not put the repo root on sys.path,
    # and tests/ has no __init__.py: make `tests.peers` importable either way.
    sys.path.insert(0, str(ROOT))

import exmcp_actors as mcp  # noqa: E402

#: The GUI fixtures (an Xvfb display, a Tk root on it, a Qt application), for every test module.
pytest_plugins = ["tests.gui_helpers"]
from exmcp_actors._util._scheduler import scheduler  # noqa: E402
from exmcp_actors.testing import FakeServer  # noqa: E402
from tests.peers.launch import Peer, peer_argv  # noqa: E402  (needs the sys.path line above)
from tests.sdk_helpers import ClientPool  # noqa: E402

STDIO_CWD = str(ROOT)
THREAD_GRACE = 2.0  # seconds a test's threads get to finish after it
ACTOR_STOP_TIMEOUT = 5.0
# The library's threads are daemons (a forgotten client must not block exit), so they are
# checked by name: everything a client starts must end once its actors are stopped.
LIBRARY_THREAD_PREFIXES = ("exmcp-", "ClientActor-", "SubscriberProxy-", "RefcountWorker-")
#: The one process-wide timer thread: checked by its armed timers, not by waiting for it to end.
SCHEDULER_THREAD = "exmcp-scheduler"


#: pytest keeps its temporary folders under one root per user and deletes all but the last
#: three sessions' at each start: beside other runs of the suite (a second copy, another
#: checkout) a run's folders could vanish under it. Each run gets a root of its own instead
#: (xdist's workers take theirs inside the controller's).
_OWN_TEMP_ROOT: str | None = None
if "PYTEST_XDIST_WORKER" not in os.environ and "PYTEST_DEBUG_TEMPROOT" not in os.environ:
    _OWN_TEMP_ROOT = tempfile.mkdtemp(prefix="exmcp-tests-")
    os.environ["PYTEST_DEBUG_TEMPROOT"] = _OWN_TEMP_ROOT


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "peer_args(*args): extra command-line flags for the SDK test peer")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _OWN_TEMP_ROOT is not None:
        shutil.rmtree(_OWN_TEMP_ROOT, ignore_errors=True)


def _peer_options(request: pytest.FixtureRequest, default_era: str) -> tuple[str, list[str]]:
    """Era and extra args from indirect parametrization (str era or dict) and the peer_args marker."""
    era, extra = default_era, []
    param: Any = getattr(request, "param", None)
    if isinstance(param, str):
        era = param
    elif isinstance(param, dict):
        era = param.get("era", default_era)
        extra = list(param.get("extra_args", ()))
    marker = request.node.get_closest_marker("peer_args")
    if marker is not None:
        extra += [str(a) for a in marker.args]
    return era, extra


@pytest.fixture
def sdk_stdio_argv(request: pytest.FixtureRequest) -> list[str]:
    era, extra = _peer_options(request, "both")
    return peer_argv("stdio", era, extra_args=extra)


@pytest.fixture
def sdk_stdio_argv_legacy(request: pytest.FixtureRequest) -> list[str]:
    _, extra = _peer_options(request, "legacy")
    return peer_argv("stdio", "legacy", extra_args=extra)


@pytest.fixture
def sdk_stdio_argv_silent(request: pytest.FixtureRequest) -> list[str]:
    _, extra = _peer_options(request, "legacy")
    return peer_argv("stdio", "legacy", extra_args=["--silent-probe", *extra])


class PeerPool:
    """ws/http peers shared by the tests of this session (one per xdist worker), each started on
    first use and stopped when the session ends. One found stopped (a test that should have had a
    peer of its own stopped it) is started again, so the tests after it are not its victims."""

    def __init__(self) -> None:
        self._peers: dict[tuple[str, str, tuple[str, ...]], Peer] = {}

    def peer(self, transport: str, era: str = "both", extra_args: tuple[str, ...] = ()) -> Peer:
        key = (transport, era, tuple(extra_args))
        peer = self._peers.get(key)
        if peer is None or not peer.running:
            if peer is not None:
                peer.stop()  # reaps what is left of it
            peer = self._peers[key] = Peer(transport, era, tuple(extra_args)).start()
        return peer

    def stop_all(self) -> None:
        for peer in self._peers.values():
            peer.stop()
        self._peers.clear()


@pytest.fixture(scope="session")
def peer_pool() -> Iterator[PeerPool]:
    pool = PeerPool()
    try:
        yield pool
    finally:
        pool.stop_all()


def _shared_peer(name: str, transport: str, default_era: str) -> Any:
    """The fixture ``name``: the pool's long-lived ``transport`` peer of ``default_era`` (or of
    what the test parametrizes)."""

    def shared(request: pytest.FixtureRequest) -> Peer:
        era, extra = _peer_options(request, default_era)
        pool: PeerPool = request.getfixturevalue("peer_pool")
        return pool.peer(transport, era, tuple(extra))

    return pytest.fixture(name=name)(shared)


def _own_peer(name: str, transport: str, default_era: str) -> Any:
    """The fixture ``name``: a ``transport`` peer of the test's own, of ``default_era`` (or of
    what the test parametrizes), stopped after it."""

    def own(request: pytest.FixtureRequest) -> Iterator[Peer]:
        era, extra = _peer_options(request, default_era)
        with Peer(transport, era, tuple(extra)).start() as peer:
            yield peer

    return pytest.fixture(name=name)(own)


shared_ws_peer = _shared_peer("shared_ws_peer", "ws", "both")
shared_ws_peer_legacy = _shared_peer("shared_ws_peer_legacy", "ws", "legacy")
shared_http_peer = _shared_peer("shared_http_peer", "http", "both")
shared_http_peer_legacy = _shared_peer("shared_http_peer_legacy", "http", "legacy")
sdk_ws_peer = _own_peer("sdk_ws_peer", "ws", "both")
sdk_ws_peer_legacy = _own_peer("sdk_ws_peer_legacy", "ws", "legacy")
sdk_http_peer = _own_peer("sdk_http_peer", "http", "both")
sdk_http_peer_legacy = _own_peer("sdk_http_peer_legacy", "http", "legacy")


@pytest.fixture
def legacy_server() -> Iterator[FakeServer]:
    """A legacy-era FakeServer (2025-11-25), for the tests of a client's own machinery."""
    with FakeServer(era="legacy") as server:
        yield server


@pytest.fixture
def client_pool() -> Iterator[ClientPool]:
    """Connects clients (``client_pool.connect(transport, **options)``), all disconnected after the test."""
    pool = ClientPool()
    yield pool
    pool.close_all()


@pytest.fixture
def pool(client_pool: ClientPool) -> ClientPool:
    """:func:`client_pool`, under the shorter name the peer tests use."""
    return client_pool


@pytest.fixture
def legacy_client(legacy_server: FakeServer) -> Iterator[mcp.Client]:
    """A legacy client of ``legacy_server``, each request bounded by 5 s."""
    client = mcp.connect(legacy_server.transport(), protocol="legacy", request_timeout=5.0)
    yield client
    client.disconnect()


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """After each test: stop every pykka actor, then fail if a non-daemon thread, or a
    thread of the library, that the test started is still alive THREAD_GRACE seconds later."""
    before = set(threading.enumerate())
    yield
    problems: list[str] = []
    try:
        import pykka
    except ImportError:  # the library's dependency; absent only in odd environments
        pykka = None  # type: ignore[assignment]
    if pykka is not None:
        try:
            pykka.ActorRegistry.stop_all(block=True, timeout=ACTOR_STOP_TIMEOUT)
        except pykka.Timeout:
            problems.append(f"pykka actors did not stop within {ACTOR_STOP_TIMEOUT}s")
    deadline = time.monotonic() + THREAD_GRACE
    # The shared scheduler thread outlives its last timer by design (IDLE_LINGER): waiting for it
    # cost every test half a second. What must not outlive a test is an armed timer.
    timers = scheduler()
    while timers.pending() and time.monotonic() < deadline:
        time.sleep(0.01)  # a bounded poll: timers that fire within the grace end by themselves
    if timers.pending():
        problems.append(f"{timers.pending()} timers still armed on the shared scheduler after the test")
    leaked = []
    for thread in threading.enumerate():
        ours = thread.name.startswith(LIBRARY_THREAD_PREFIXES)
        if (
            thread in before
            or (thread.daemon and not ours)
            or thread is threading.current_thread()
            or thread.name.startswith("pytest_timeout")
            or thread.name == SCHEDULER_THREAD
        ):
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            leaked.append(thread)
    if leaked:
        problems.append("threads still alive after the test: " + ", ".join(repr(t) for t in leaked))
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)


@pytest.fixture
def connected_clients() -> Iterator[list[mcp.Client]]:
    """Clients a test connects itself (append each); every one is disconnected after it."""
    made: list[mcp.Client] = []
    yield made
    for client in made:
        client.disconnect()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers per core (at most 8). Most tests wait on servers and timers rather
    than compute, so two per core keep both busy: the suite takes some 4 minutes on 2 cores
    instead of 6."""
    return max(2, min(8, 2 * (os.cpu_count() or 1)))
