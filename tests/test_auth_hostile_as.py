"""OAuth against a hostile authorization server, a hostile local process, and plain http:
cleartext refused, the loopback callback listener not held, every answer bounded in size
and time, one HTTP stack (httpx, with or without ``httpx2`` installed), token files
written where nobody planted a link.

Every peer is on 127.0.0.1 (tests/hostile_as.py, stdlib only, so this file also runs with
``httpx2`` hidden: see the last tests); a non-loopback *name* is resolved to 127.0.0.1
in-process (:func:`names_on_loopback`).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

import exmcp_actors as mcp
from exmcp_actors._auth import _browser, _storage
from exmcp_actors._auth._browser import LoopbackListener
from tests.helpers_transport import RecordingSink
from tests.hostile_as import Exchange, HostileAS, flood, trickle
from tests.sdk_helpers import every_log_record

ROOT = Path(__file__).resolve().parents[1]
WAIT = 10.0
#: The most an answer of the authorization server may hold.
CAP = 256 * 1024


@pytest.fixture
def names_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """``as.example`` and ``mcp.example`` resolve to 127.0.0.1, in this process only."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host in ("as.example", "mcp.example") else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture
def all_logs() -> Iterator[list[str]]:
    """Every log record of every logger, rendered as ``name LEVEL message``."""
    with every_log_record() as lines:
        yield lines


def run_flow(auth: mcp.OAuth, peer: HostileAS, within: float = WAIT) -> tuple[bool | None, float]:
    """What a transport does on the 401 of ``peer``'s MCP server, on a thread.

    Returns (the flow's answer, or None when it had not ended after ``within`` seconds; seconds taken).
    """
    outcome: list[Any] = []
    done = threading.Event()

    def flow() -> None:
        try:
            outcome.append(auth.challenge(peer.server_url, 401, peer.challenge, None))
        except BaseException as exc:  # shown by the test, not lost on the thread
            outcome.append(exc)
        finally:
            done.set()

    started = time.monotonic()
    threading.Thread(target=flow, name="test-flow", daemon=True).start()
    ended = done.wait(within)
    took = time.monotonic() - started
    if ended and isinstance(outcome[0], BaseException):
        raise outcome[0]
    return (outcome[0] if ended else None), took


def refuse(url: str) -> str:
    raise AssertionError("no authorization was expected")


# -- no OAuth over cleartext ------------------------------------------------------------------


def test_loopback_hosts_are_the_only_ones_allowed_plain_http() -> None:
    from exmcp_actors._auth._errors import CleartextRefused
    from exmcp_actors._auth._fetch import is_loopback, require_secure

    for host in ("127.0.0.1", "127.9.8.7", "::1", "[::1]", "localhost", "LocalHost.", "::ffff:127.0.0.1"):
        assert is_loopback(host), host
    for host in ("as.example", "localhost.example", "127.0.0.1.example", "0.0.0.0", "10.0.0.1", "::ffff:10.0.0.1", ""):
        assert not is_loopback(host), host
    require_secure("https://as.example/token", "x")
    require_secure("ws://localhost:1/mcp", "x")
    with pytest.raises(CleartextRefused, match=r"refused to send x to ws://as\.example: OAuth needs wss \(plain ws"):
        require_secure("ws://as.example/mcp?key=secret", "x")
    with pytest.raises(CleartextRefused) as caught:
        require_secure("ftp://user:pw@as.example:21/x?key=secret", "x")
    assert "secret" not in str(caught.value) and "pw" not in str(caught.value)


def test_an_authorization_server_on_plain_http_gets_no_request(names_on_loopback: None) -> None:
    with HostileAS() as resource, HostileAS("as.example") as remote:
        resource.issuer = remote.origin  # the resource names an AS on another host, over http
        auth = mcp.OAuth(on_authorize=remote.approve)
        assert run_flow(auth, resource)[0] is False
    assert remote.requests == []  # not even its metadata was asked for
    assert auth.last_error == (
        f"refused to send an OAuth request to {remote.origin}: OAuth needs https"
        " (plain http only to a loopback host: 127.0.0.0/8, [::1] or localhost)"
    )


@pytest.mark.parametrize("endpoint", ["registration_endpoint", "authorization_endpoint", "token_endpoint"])
def test_an_endpoint_on_plain_http_named_by_loopback_metadata_is_refused(
    names_on_loopback: None, endpoint: str
) -> None:
    authorized: list[str] = []
    with HostileAS() as peer, HostileAS("as.example") as remote:
        peer.metadata[endpoint] = f"{remote.origin}/{endpoint}"

        def authorize(url: str) -> str:
            authorized.append(url)
            return peer.approve(url)

        # Pre-registered unless registration is the endpoint under test.
        client_id = None if endpoint == "registration_endpoint" else "cid"
        auth = mcp.OAuth(client_id=client_id, on_authorize=authorize)
        assert run_flow(auth, peer)[0] is False
    assert remote.requests == []
    assert auth.last_error is not None and f"to {remote.origin}: OAuth needs https" in auth.last_error
    # No cleartext authorization page was opened; the code went to no cleartext token endpoint.
    assert len(authorized) == (1 if endpoint == "token_endpoint" else 0)


def test_the_bearer_token_never_goes_to_a_plain_http_server_on_another_host(names_on_loopback: None) -> None:
    with HostileAS("mcp.example") as server:
        storage = mcp.MemoryTokenStorage()
        storage.save(server.server_url, {"tokens": {"access_token": "tok-secret"}})
        auth = mcp.OAuth(storage=storage, on_authorize=refuse)
        with pytest.raises(ValueError, match=rf"refused to send the bearer token to {server.origin}: OAuth needs"):
            mcp.connect(server.server_url, auth=auth, reconnect=False, connect_timeout=5.0)
        with pytest.raises(ValueError, match="refused to send the bearer token"):
            auth.bearer(server.server_url)  # nor to anyone asking the object directly
    assert server.requests == []


def test_the_bearer_token_never_goes_to_a_plain_ws_server_on_another_host(names_on_loopback: None) -> None:
    with HostileAS("mcp.example") as server:
        url = f"ws://mcp.example:{server.port}/mcp"
        storage = mcp.MemoryTokenStorage()
        storage.save(server.server_url, {"tokens": {"access_token": "tok-secret"}})
        transport = mcp.WebSocketTransport(url, auth=mcp.OAuth(storage=storage, on_authorize=refuse))
        refused = rf"refused to send the bearer token to ws://mcp\.example:{server.port}: OAuth needs wss"
        with pytest.raises(mcp.TransportError, match=refused):
            transport.open(RecordingSink(), timeout=5.0)
        transport.close()
    assert server.requests == []


# -- the loopback callback listener cannot be held ---------------------------------------------


def _listener_port(authorization_url: str) -> int:
    port = urlsplit(parse_qs(urlsplit(authorization_url).query)["redirect_uri"][0]).port
    assert port is not None
    return port


def _browser_with_company(
    peer: HostileAS, company: Callable[[int], None], held: contextlib.ExitStack, *, callback: bool
) -> tuple[Callable[[str], bool], list[int]]:
    """A ``webbrowser.open`` that lets a local process connect first (``company(port)``), then
    (with ``callback``) follows the redirect to the listener as a browser would."""
    statuses: list[int] = []

    def browser(url: str) -> bool:
        company(_listener_port(url))
        if callback:
            target = peer.approve(url)

            def come_back() -> None:
                with urllib.request.urlopen(target, timeout=WAIT) as answer:
                    statuses.append(answer.status)

            thread = threading.Thread(target=come_back, name="test-browser")
            thread.start()
            held.callback(thread.join, WAIT)
        return True

    return browser, statuses


def test_an_idle_local_connection_does_not_hold_up_the_browser_callback(monkeypatch: pytest.MonkeyPatch) -> None:
    with HostileAS() as peer, contextlib.ExitStack() as held:

        def idle(port: int) -> None:  # another local process: connects, says nothing
            held.enter_context(socket.create_connection(("127.0.0.1", port)))

        browser, statuses = _browser_with_company(peer, idle, held, callback=True)
        monkeypatch.setattr(_browser.webbrowser, "open", browser)
        auth = mcp.OAuth(authorize_timeout=WAIT)
        answer, took = run_flow(auth, peer, within=WAIT + 5)
        assert (answer, auth.last_error) == (True, None)
        assert took < WAIT / 2
    assert statuses == [200]


def test_the_flow_ends_at_authorize_timeout_whatever_is_connected(monkeypatch: pytest.MonkeyPatch) -> None:
    connections: list[socket.socket] = []
    with HostileAS() as peer, contextlib.ExitStack() as held:

        def crowd(port: int) -> None:  # three silent connections and one that trickles a head
            for _ in range(4):
                connections.append(held.enter_context(socket.create_connection(("127.0.0.1", port))))
            connections[-1].sendall(b"GET /callback?code=")

        browser, _ = _browser_with_company(peer, crowd, held, callback=False)
        monkeypatch.setattr(_browser.webbrowser, "open", browser)
        auth = mcp.OAuth(authorize_timeout=1.0)
        answer, took = run_flow(auth, peer, within=WAIT)
        assert answer is False and took < 4.0
        assert auth.last_error == "no authorization callback on the loopback redirect within 1s"
        for conn in connections:  # the listener let go of every one
            conn.settimeout(WAIT)
            with contextlib.suppress(ConnectionResetError):
                assert conn.recv(1) == b""


def test_a_connection_that_sends_no_request_in_time_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_browser, "_HEAD_SECONDS", 0.3)
    listener = LoopbackListener("http://127.0.0.1:0/callback", state="s")
    try:
        with socket.create_connection(("127.0.0.1", listener.port)) as idle:
            idle.settimeout(WAIT)
            started = time.monotonic()
            assert idle.recv(1) == b""
            assert time.monotonic() - started < WAIT / 2
        base = f"http://127.0.0.1:{listener.port}/callback"
        with urllib.request.urlopen(f"{base}?code=c&state=s", timeout=WAIT) as answer:
            assert answer.status == 200
        assert listener.wait(base, WAIT) == f"{base}?code=c&state=s"
    finally:
        listener.close()


def test_connections_past_the_listeners_bound_are_closed_unanswered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_browser, "_MAX_CONNECTIONS", 2)
    listener = LoopbackListener("http://127.0.0.1:0/callback", state="s")
    try:
        with contextlib.ExitStack() as held:
            for _ in range(2):
                held.enter_context(socket.create_connection(("127.0.0.1", listener.port)))
            extra = held.enter_context(socket.create_connection(("127.0.0.1", listener.port)))
            extra.settimeout(WAIT)
            with contextlib.suppress(ConnectionResetError):
                assert extra.recv(1) == b""
    finally:
        listener.close()


# -- every answer bounded: size and time -------------------------------------------------------


def _peak_bytes_during(action: Callable[[], Any]) -> tuple[Any, int]:
    import authlib.oauth2.client  # noqa: F401  (imported before: its import is not the answer's cost)

    tracemalloc.start()
    try:
        result = action()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


FLOOD = 64 * 1024 * 1024


@pytest.mark.parametrize("path", ["/register", "/token"])
def test_a_flooded_answer_is_read_no_further_than_the_cap(path: str) -> None:
    with HostileAS() as peer:
        answers: list[Exchange] = []
        flooding = flood(FLOOD)

        def answer(exchange: Exchange) -> None:
            answers.append(exchange)
            flooding(exchange)

        peer.routes[path] = answer
        auth = mcp.OAuth(on_authorize=peer.approve)
        (result, _), peak = _peak_bytes_during(lambda: run_flow(auth, peer))
        assert result is False
        assert auth.last_error == (f"the answer of {peer.origin}{path} is larger than {CAP} bytes: not read")
        assert peak < 16 * 1024 * 1024, peak  # a 64 MiB answer read whole costs more than 64 MiB
    assert answers[0].sent < FLOOD // 4  # the client hung up long before the end


def test_a_compressed_answer_is_not_inflated() -> None:
    bomb = gzip.compress(b'{"access_token": "' + b"a" * FLOOD + b'"}')

    def answer(exchange: Exchange) -> None:
        exchange.head("200 OK", {"Content-Type": "application/json", "Content-Encoding": "gzip"})
        exchange.write(bomb)

    with HostileAS() as peer:
        peer.routes["/token"] = answer
        auth = mcp.OAuth(on_authorize=peer.approve)
        (result, _), peak = _peak_bytes_during(lambda: run_flow(auth, peer))
    assert result is False
    assert auth.last_error == f"the answer of {peer.origin}/token is encoded (gzip): not read"
    assert peak < 16 * 1024 * 1024, peak


@pytest.mark.parametrize("part", ["head", "body"])
def test_a_trickled_metadata_answer_ends_at_the_request_deadline(part: str) -> None:
    with HostileAS() as peer:
        peer.routes["/.well-known/oauth-authorization-server"] = trickle(peer.stopping, 0.05, head=part == "head")
        auth = mcp.OAuth(on_authorize=refuse, timeout=1.0)
        result, took = run_flow(auth, peer, within=WAIT)
        assert result is False, f"the flow was still reading after {took:.1f}s"
    assert took < 3.0
    assert auth.last_error == f"cannot fetch metadata from {peer.origin}: ReadTimeout"


# -- one HTTP stack: httpx, whether httpx2 is installed or not ---------------------------------


def test_an_unreachable_token_endpoint_fails_the_flow_with_a_sentence() -> None:
    with socket.socket() as gone:
        gone.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{gone.getsockname()[1]}/token"
    with HostileAS() as peer:
        peer.metadata["token_endpoint"] = closed
        auth = mcp.OAuth(grant="client_credentials", client_id="svc", client_secret="svc-secret")
        assert run_flow(auth, peer)[0] is False
    assert auth.last_error == f"token request to {closed} failed: ConnectError"


def test_the_flows_http_records_are_httpx_ones_and_hold_no_secret(all_logs: list[str]) -> None:
    def token_with_cookie(exchange: Exchange) -> None:
        exchange.json(
            "200 OK",
            {"access_token": "at-cookie-secret", "token_type": "Bearer", "expires_in": 60},
            {"Set-Cookie": "sid=cookie-secret-1; Path=/"},
        )

    with HostileAS() as peer:
        peer.metadata["token_endpoint"] = f"{peer.origin}/token?tenant=query-secret-1"
        peer.routes["/token"] = token_with_cookie
        auth = mcp.OAuth(on_authorize=peer.approve)
        assert run_flow(auth, peer)[0] is True
        assert auth.bearer(peer.server_url) == "at-cookie-secret"
    assert "/token" in peer.paths()
    assert [line for line in all_logs if line.startswith("httpcore.http11 DEBUG receive_response_headers")]
    assert not [line for line in all_logs if line.startswith(("httpx2", "httpcore2"))]
    for secret in ("query-secret-1", "cookie-secret-1", "at-cookie-secret", "code-1"):
        assert not [line for line in all_logs if secret in line], secret


def test_these_tests_pass_with_httpx2_hidden() -> None:
    """The whole file again, in a child whose ``import httpx2`` fails (authlib's fallback)."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.hide_httpx2"]
    child = subprocess.run(
        [*command, __file__, "-k", "not httpx2_hidden"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-2000:]
    assert " passed" in child.stdout and " skipped" not in child.stdout, child.stdout[-1000:]


_SDK_CLIENT = """
import sys
import tests.hide_httpx2
import httpx
import exmcp_actors as mcp

def follow(url):
    return httpx.get(url, follow_redirects=False, timeout=10.0).headers["location"]

storage = mcp.MemoryTokenStorage()
with mcp.connect(sys.argv[1], auth=mcp.OAuth(storage=storage, on_authorize=follow), reconnect=False) as client:
    print([tool["name"] for tool in client.list_tools()])
assert not [name for name in sys.modules if name.startswith(("httpx2", "httpcore2"))]
"""


def test_the_sdk_servers_code_flow_runs_with_httpx2_hidden() -> None:
    from tests.peers.auth_server import AuthPeer  # the MCP SDK's server needs httpx2: here only

    with AuthPeer() as peer:
        child = subprocess.run(
            [sys.executable, "-c", _SDK_CLIENT, peer.url],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert child.returncode == 0, child.stderr[-3000:]
        assert child.stdout.strip() == "['echo']"
        assert peer.provider.issued == [("code", peer.url)]


# -- token files: no planted link is followed ----------------------------------------------------


def _record() -> dict[str, Any]:
    return {"tokens": {"access_token": "tok-file-secret"}}


def test_a_link_planted_at_the_old_temporary_name_is_not_followed(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    stolen = tmp_path / "attacker" / "stolen.json"
    stolen.parent.mkdir()
    planted = tmp_path / f".tokens.json.{os.getpid()}.tmp"
    planted.symlink_to(stolen)  # dangling: opening it with O_CREAT would create the attacker's file
    mcp.FileTokenStorage(path).save("https://srv/mcp", _record())
    assert not stolen.exists()
    assert not path.is_symlink() and (path.stat().st_mode & 0o777) == 0o600
    assert mcp.FileTokenStorage(path).load("https://srv/mcp") == _record()
    assert planted.is_symlink()  # not ours: left as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == [planted.name, "attacker", "tokens.json"]


def test_a_link_planted_at_a_guessed_temporary_name_makes_another_name_drawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens.json"
    stolen = tmp_path / "stolen.json"
    stolen.write_text("")
    guesses = iter(["guessed", "guessed", "fresh"])
    monkeypatch.setattr(_storage, "_temp_suffix", lambda: next(guesses))
    (tmp_path / ".tokens.json.guessed.tmp").symlink_to(stolen)
    mcp.FileTokenStorage(path).save("https://srv/mcp", _record())
    assert stolen.read_text() == ""
    assert mcp.FileTokenStorage(path).load("https://srv/mcp") == _record()
    assert not (tmp_path / ".tokens.json.fresh.tmp").exists()  # renamed into place


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tokens.json"
    storage = mcp.FileTokenStorage(path)
    storage.save("https://srv/mcp", _record())
    with pytest.raises(TypeError):
        storage.save("https://srv/mcp", {"tokens": object()})  # not JSON-able
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokens.json"]
    assert storage.load("https://srv/mcp") == _record()


def test_two_token_files_on_one_path_keep_each_others_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tokens.json"
    first, second = mcp.FileTokenStorage(path), mcp.FileTokenStorage(path)  # one per OAuth, as hosts make them
    inside, second_done = threading.Event(), threading.Event()
    create_temp = _storage.FileTokenStorage._create_temp

    def slow_first(self: mcp.FileTokenStorage) -> Any:
        if self is first:  # it has read the file: hold it there while the other saves
            inside.set()
            # Bounded: once the two saves take turns, the second cannot finish meanwhile.
            second_done.wait(1.0)
        return create_temp(self)

    monkeypatch.setattr(_storage.FileTokenStorage, "_create_temp", slow_first)
    saving = threading.Thread(target=first.save, args=("https://a/mcp", _record()), daemon=True)
    saving.start()
    assert inside.wait(WAIT)
    other = threading.Thread(target=lambda: (second.save("https://b/mcp", _record()), second_done.set()), daemon=True)
    other.start()
    saving.join(WAIT)
    other.join(WAIT)
    assert mcp.FileTokenStorage(path).load("https://a/mcp") == _record()
    assert mcp.FileTokenStorage(path).load("https://b/mcp") == _record(), "one save overwrote the other's record"
