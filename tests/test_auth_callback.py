"""The browser step of the OAuth code flow: the loopback listener that takes the callback,
against hostile local processes (idle and silent connections, a crowd at the bound, forged
callbacks without the request's ``state``, a request target no URL parser takes) and in a
host with more than 1024 files open; and the URL printed for a person when no browser opens.

RFC 6749 section 10.12 and MCP: a redirect without the request's ``state`` is discarded, so
a local process cannot end the flow with a forged callback.

Every peer is on 127.0.0.1 and stdlib only, so the file runs again with ``httpx2`` hidden.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import resource
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

import exmcp_actors as mcp
from exmcp_actors._auth import _browser
from exmcp_actors._auth._browser import LoopbackListener, free_port
from tests.child_python import rerun_with_httpx2_hidden
from tests.hostile_as import HostileAS, import_what_a_token_request_imports, run_flow

WAIT = 10.0


@pytest.fixture(autouse=True, scope="module")
def _imported_before() -> None:
    """The flows here are timed against the listener's bounds, not against the imports of a
    process's first flow."""
    import_what_a_token_request_imports()


def _listener_port(authorization_url: str) -> int:
    port = urlsplit(parse_qs(urlsplit(authorization_url).query)["redirect_uri"][0]).port
    assert port is not None
    return port


def _get(url: str) -> int:
    """The status of a GET, as a browser (or another process) sees it; 0 when the connection broke."""
    try:
        with urllib.request.urlopen(url, timeout=WAIT) as answer:
            status: int = answer.status
            return status
    except urllib.error.HTTPError as refused:
        return refused.code
    except (urllib.error.URLError, ConnectionError, OSError):
        return 0


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
            thread = threading.Thread(target=lambda: statuses.append(_get(target)), name="test-browser")
            thread.start()
            held.callback(thread.join, WAIT)
        return True

    return browser, statuses


# -- the listener cannot be held -------------------------------------------------------------


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


def test_a_crowd_of_silent_connections_at_the_bound_does_not_keep_the_browser_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_browser, "_MAX_CONNECTIONS", 3)
    monkeypatch.setattr(_browser, "_EVICTABLE_AFTER", 0.0, raising=False)  # the crowd waited long enough
    crowd: list[socket.socket] = []
    with HostileAS() as peer, contextlib.ExitStack() as held:

        def fill(port: int) -> None:  # as many silent connections as the listener serves at once
            for _ in range(3):
                crowd.append(held.enter_context(socket.create_connection(("127.0.0.1", port))))

        browser, statuses = _browser_with_company(peer, fill, held, callback=True)
        monkeypatch.setattr(_browser.webbrowser, "open", browser)
        auth = mcp.OAuth(authorize_timeout=WAIT)
        assert (run_flow(auth, peer, within=WAIT + 5)[0], auth.last_error) == (True, None)
        crowd[0].settimeout(WAIT)
        with contextlib.suppress(ConnectionResetError):
            assert crowd[0].recv(1) == b""  # the oldest made room, unanswered
    assert statuses == [200]


def test_a_request_target_no_url_parser_takes_is_answered_400() -> None:
    listener = LoopbackListener("http://127.0.0.1:0/callback")
    try:
        with socket.create_connection(("127.0.0.1", listener.port)) as conn:
            conn.settimeout(WAIT)
            conn.sendall(b"GET http://[::1/callback?code=c HTTP/1.1\r\nHost: x\r\n\r\n")
            assert conn.recv(64).startswith(b"HTTP/1.1 400 ")
        base = f"http://127.0.0.1:{listener.port}/callback"
        assert _get(f"{base}?code=c&state=s") == 200  # the listener serves on
        assert listener.wait(base, WAIT) == f"{base}?code=c&state=s"
    finally:
        listener.close()


# -- forged callbacks: the redirect's state ------------------------------------------------------


def test_a_forged_callback_from_another_local_process_does_not_end_the_flow(monkeypatch: pytest.MonkeyPatch) -> None:
    forged: list[int] = []
    with HostileAS() as peer, contextlib.ExitStack() as held:

        def forge(port: int) -> None:  # it can find the port, not guess the state
            forged.append(_get(f"http://127.0.0.1:{port}/callback?code=forged&state=guessed"))
            forged.append(_get(f"http://127.0.0.1:{port}/callback?code=forged"))

        browser, statuses = _browser_with_company(peer, forge, held, callback=True)
        monkeypatch.setattr(_browser.webbrowser, "open", browser)
        auth = mcp.OAuth(authorize_timeout=WAIT)
        assert (run_flow(auth, peer, within=WAIT + 5)[0], auth.last_error) == (True, None)
        redeemed = [r.form().get("code") for r in peer.requests if urlsplit(r.path).path == "/token"]
    assert forged == [400, 400]
    assert statuses == [200]
    assert redeemed == ["code-1"]


@pytest.fixture
def browser_after_a_forger(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """``webbrowser.open`` as a browser does, but a local process calls the loopback redirect
    first, with forged callbacks; the statuses the forger got are yielded."""
    forged: list[int] = []
    threads: list[threading.Thread] = []

    def browser(url: str) -> bool:
        query = parse_qs(urlsplit(url).query)
        redirect, state = query["redirect_uri"][0], query["state"][0]
        for attempt in ({"code": "evil"}, {"code": "evil", "state": "guess"}, {"code": "evil", "state": state * 2}):
            forged.append(_get(f"{redirect}?{urlencode(attempt)}"))
        approved = f"{redirect}?{urlencode({'code': 'code-1', 'state': state})}"
        thread = threading.Thread(target=_get, args=(approved,), name="test-browser")
        threads.append(thread)
        thread.start()
        return True

    monkeypatch.setattr(_browser.webbrowser, "open", browser)
    yield forged
    for thread in threads:
        thread.join(WAIT)


def test_a_forged_callback_without_the_requests_state_is_discarded_and_the_real_one_still_taken(
    browser_after_a_forger: list[int],
) -> None:
    with HostileAS() as peer:
        auth = mcp.OAuth(authorize_timeout=WAIT, timeout=WAIT)
        answer, _ = run_flow(auth, peer, within=WAIT + 5)
        redeemed = [r.form().get("code") for r in peer.requests if urlsplit(r.path).path == "/token"]
    assert (answer, auth.last_error) == (True, None)
    assert browser_after_a_forger == [400, 400, 400]
    assert redeemed == ["code-1"]  # the forged code went to no token endpoint


# -- a host with more than 1024 files open ---------------------------------------------------------


@pytest.fixture
def files_open_past_1024() -> Iterator[None]:
    """Every descriptor up to past 1024 taken while the test makes its sockets, as in a host
    with many connections open: select() cannot watch those."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        if hard != resource.RLIM_INFINITY and hard < 1200:
            pytest.skip("this machine allows fewer than 1200 open files")
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    taken = [os.dup(0) for _ in range(1100)]
    try:
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_callback_listener_takes_the_callback_when_its_sockets_are_numbered_past_1024(
    files_open_past_1024: None,
) -> None:
    port = free_port("127.0.0.1")
    redirect = f"http://127.0.0.1:{port}/callback"
    listener = LoopbackListener(redirect)
    answered: list[int] = []

    def browser() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        try:
            connection.request("GET", "/callback?code=c0de&state=s1")
            answered.append(connection.getresponse().status)
        finally:
            connection.close()

    thread = threading.Thread(target=browser, daemon=True)
    thread.start()
    assert listener.wait(redirect, 5.0) == f"{redirect}?code=c0de&state=s1"
    thread.join(WAIT)
    assert answered == [200]


def test_the_listener_accepts_in_a_process_with_more_than_1024_files_open(files_open_past_1024: None) -> None:
    listener = LoopbackListener("http://127.0.0.1:0/callback")
    try:
        base = f"http://127.0.0.1:{listener.port}/callback"
        assert _get(f"{base}?code=c&state=s") == 200
        assert listener.wait(base, WAIT) == f"{base}?code=c&state=s"
    finally:
        listener.close()


# -- what is printed for a person ------------------------------------------------------------------


def test_the_url_printed_when_no_browser_opens_carries_no_control_character(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_browser.webbrowser, "open", lambda url: False)
    with HostileAS() as peer:
        # A clipboard write (OSC 52, in its 8-bit C1 form: httpx takes it, as any non-ASCII
        # letter) and a bidirectional override; the 7-bit ESC form is no usable URL at all.
        peer.metadata["authorization_endpoint"] = f"{peer.origin}/authorize\x9d52;c;ZXZpbA==\x9c\u202e"
        auth = mcp.OAuth(authorize_timeout=0.2)
        assert auth.challenge(peer.server_url, 401, peer.challenge, None) is False
    printed = capsys.readouterr().err
    assert "Open this URL in a browser to authorize" in printed
    assert "\x9d" not in printed and "\x9c" not in printed and "\u202e" not in printed
    assert "/authorize\\x9d52;c;ZXZpbA==\\x9c\\u202e?" in printed


def test_these_tests_pass_with_httpx2_hidden() -> None:
    """The whole file again, in a child whose ``import httpx2`` fails (authlib's fallback)."""
    child = rerun_with_httpx2_hidden(__file__)
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-2000:]
    assert " passed" in child.stdout and " skipped" not in child.stdout, child.stdout[-1000:]
