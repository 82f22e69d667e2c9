"""A review of the hardened OAuth flow and log redaction, attacking as a hostile MCP server,
a hostile authorization server and a hostile local process would (every peer on 127.0.0.1).

- Sizes: a long ``WWW-Authenticate`` challenge, or a long reason phrase in a dependency's
  record, costs time in proportion to its length, not to its square.
- A token answer of the wrong shape fails the flow with a sentence, never an exception
  out of the transport's call; an access token that could split a header is refused where
  it arrives, so it never reaches a request head, a log record or an error text.
- The loopback listener: a forged callback from another local process does not end the
  flow, and a crowd of silent connections at the bound does not keep the browser out.
- What the library prints for a person (the URL to open when no browser starts) carries
  no control character a server put in it; a refusal quotes a server's scope bounded.

Every peer is stdlib only, so the file runs again with ``httpx2`` hidden (the last test).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

import exmcp_actors as mcp
from exmcp_actors._auth import _browser
from exmcp_actors._auth._discovery import parse_challenge
from exmcp_actors._util._redact import redact_text
from tests.helpers_transport import RecordingSink
from tests.hostile_as import Exchange, HostileAS
from tests.sdk_helpers import every_log_record

ROOT = Path(__file__).resolve().parents[1]
WAIT = 10.0
#: A long server text: httpcore reads a response head of up to 100 KiB, so a hostile server can
#: put five times this in one header; this is enough to tell linear time from quadratic.
LONG = 20_000


@pytest.fixture
def all_logs() -> Iterator[list[str]]:
    with every_log_record() as lines:
        yield lines


def _took(action: Callable[[], Any]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def _flow(auth: mcp.OAuth, peer: HostileAS, within: float) -> bool | None:
    """``auth.challenge`` on the 401 of ``peer``'s MCP server, on a thread; None when it had not
    ended after ``within`` seconds."""
    outcome: list[Any] = []
    done = threading.Event()

    def flow() -> None:
        try:
            outcome.append(auth.challenge(peer.server_url, 401, peer.challenge, None))
        except BaseException as exc:
            outcome.append(exc)
        finally:
            done.set()

    threading.Thread(target=flow, name="test-flow", daemon=True).start()
    if not done.wait(within):
        return None
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    result: bool = outcome[0]
    return result


# -- sizes: time in proportion to the length -------------------------------------------------


@pytest.mark.parametrize(
    "rest",
    [
        "a" * LONG,  # one long token: every position of it used to start a param name
        "a." * (LONG // 2),
        'a="' + "x" * LONG,  # an unterminated quoted string
        "a-" * (LONG // 2) + "=",
    ],
    ids=["token", "dotted", "unterminated", "dashed"],
)
def test_a_long_challenge_is_parsed_at_once(rest: str) -> None:
    took = _took(lambda: parse_challenge(f'Bearer {rest}, scope="s1"'))
    assert took < 1.0, f"{took:.1f}s for a {len(rest)}-character challenge"


def test_a_challenge_parses_as_it_did() -> None:
    header = 'Bearer realm="r", error="insufficient_scope", scope="a b", resource_metadata="https://h/x?y=1",x=y'
    assert parse_challenge(header) == {
        "realm": "r",
        "error": "insufficient_scope",
        "scope": "a b",
        "resource_metadata": "https://h/x?y=1",
        "x": "y",
    }
    assert parse_challenge('Basic realm="b", Bearer error="e\\"q"') == {"error": 'e"q'}


@pytest.mark.parametrize(
    "text", ["a." * (LONG // 2), "a+" * (LONG // 2), "1." * (LONG // 2)], ids=["dots", "pluses", "digits"]
)
def test_a_record_quoting_a_long_server_text_is_redacted_at_once(text: str) -> None:
    message = f'HTTP Request: GET https://h/x?token=secret "HTTP/1.1 200 {text}"'
    took = _took(lambda: redact_text(message))
    assert took < 1.0, f"{took:.1f}s to redact a {len(message)}-character record"
    assert "secret" not in redact_text(message)


def test_urls_are_redacted_as_they_were() -> None:
    assert redact_text("x https://u:p@h/p?q=1#f y") == "x https://h/p?*** y"
    assert redact_text("1.https://h/p?q=1 git+ssh://u@h/r?k=v") == "1.https://h/p?*** git+ssh://h/r?***"


def test_a_hostile_reason_phrase_does_not_hold_the_flow_in_the_redaction_of_httpxs_record() -> None:
    def metadata(exchange: Exchange) -> None:
        exchange.head("200 " + "a." * 20_000, {"Content-Type": "application/json", "Content-Length": "2"})
        exchange.write(b"{}")

    httpx_logger = logging.getLogger("httpx")
    level = httpx_logger.level
    httpx_logger.setLevel(logging.INFO)  # as a host's logging.basicConfig(level=INFO) has it
    try:
        with HostileAS() as peer:
            peer.routes["/.well-known/oauth-protected-resource/mcp"] = metadata
            auth = mcp.OAuth(on_authorize=peer.approve, timeout=2.0)
            took = _took(lambda: _flow(auth, peer, within=WAIT))
    finally:
        httpx_logger.setLevel(level)
    assert took < 2.0, f"the flow took {took:.1f}s"


# -- a token answer of the wrong shape ---------------------------------------------------------


def _token_answer(**fields: Any) -> Callable[[Exchange], None]:
    def answer(exchange: Exchange) -> None:
        exchange.json("200 OK", {"access_token": "at-shape-secret", "token_type": "Bearer", **fields})

    return answer


@pytest.mark.parametrize(
    "fields",
    [{"expires_in": [1]}, {"expires_in": {"s": 1}}, {"expires_in": float("inf")}, {"expires_at": [1]}],
    ids=["list", "object", "infinite", "expires_at-list"],
)
def test_a_token_answer_whose_lifetime_is_no_number_fails_the_flow_with_a_sentence(fields: dict[str, Any]) -> None:
    with HostileAS() as peer:
        peer.routes["/token"] = _token_answer(**fields)
        auth = mcp.OAuth(on_authorize=peer.approve)
        assert _flow(auth, peer, within=WAIT) is False
    assert auth.last_error is not None and auth.last_error.startswith("the authorization_code token request failed")
    assert "secret" not in auth.last_error


def test_a_refresh_answer_whose_lifetime_is_no_number_leaves_bearer_without_a_token() -> None:
    with HostileAS() as peer:
        auth = mcp.OAuth(on_authorize=peer.approve)
        assert _flow(auth, peer, within=WAIT) is True
        peer.routes["/token"] = _token_answer(expires_in=[1])
        record = auth.storage.load(peer.server_url)
        assert record is not None
        record["tokens"]["expires_at"] = 0  # expired: bearer() refreshes
        auth.storage.save(peer.server_url, record)
        assert auth.bearer(peer.server_url) is None
    assert auth.last_error == "the refresh_token token request failed: ValueError"


SPLIT = "at-split-secret\r\nX-Injected: 1"


@pytest.mark.parametrize(
    "token",
    [SPLIT, "at secret", "at-\x1b[2J-secret", "at-é-secret", ""],
    ids=["crlf", "space", "esc", "latin", "empty"],
)
def test_an_access_token_that_is_no_bearer_token_is_refused_where_it_arrives(token: str, all_logs: list[str]) -> None:
    with HostileAS() as peer:
        peer.routes["/token"] = lambda exchange: exchange.json("200 OK", {"access_token": token, "expires_in": 60})
        auth = mcp.OAuth(on_authorize=peer.approve)
        assert _flow(auth, peer, within=WAIT) is False
        assert auth.bearer(peer.server_url) is None
    assert auth.last_error == (
        "the token response's access_token is no bearer token (RFC 6750: visible ASCII, one or more characters)"
    )
    assert not [line for line in all_logs if token and token in line]


def _mcp_refusing_until_a_token(peer: HostileAS, seen: list[Exchange]) -> Callable[[Exchange], None]:
    """The MCP endpoint (an HTTP POST or a WebSocket upgrade): 401 without a token, 500 with one."""

    def answer(exchange: Exchange) -> None:
        if "authorization" not in exchange.headers:
            exchange.head("401 Unauthorized", {"WWW-Authenticate": peer.challenge, "Content-Length": "0"})
            return
        seen.append(exchange)
        exchange.head("500 Internal Server Error", {"Content-Length": "0"})

    return answer


def test_a_token_that_could_split_a_header_never_reaches_an_http_request_an_error_text_or_a_record(
    all_logs: list[str],
) -> None:
    seen: list[Exchange] = []
    with HostileAS() as peer:
        peer.routes["/token"] = _token_answer(access_token=SPLIT, expires_in=60)
        peer.routes["/mcp"] = _mcp_refusing_until_a_token(peer, seen)
        auth = mcp.OAuth(on_authorize=peer.approve)
        with pytest.raises(mcp.ConnectError) as caught:
            mcp.connect(peer.server_url, protocol="legacy", reconnect=False, connect_timeout=WAIT, auth=auth)
    assert seen == []
    assert "secret" not in str(caught.value)
    assert not [line for line in all_logs if "at-split-secret" in line]


def test_a_token_that_could_split_a_header_never_reaches_a_websocket_upgrade() -> None:
    seen: list[Exchange] = []
    with HostileAS() as peer:
        peer.routes["/token"] = _token_answer(access_token=SPLIT, expires_in=60)
        peer.routes["/mcp"] = _mcp_refusing_until_a_token(peer, seen)
        url = f"ws://127.0.0.1:{peer.port}/mcp"
        transport = mcp.WebSocketTransport(url, auth=mcp.OAuth(on_authorize=peer.approve))
        with pytest.raises(mcp.TransportError):
            transport.open(RecordingSink(), timeout=WAIT)
        transport.close()
    assert [exchange.headers for exchange in seen if "x-injected" in exchange.headers] == []


# -- the loopback listener and other local processes -----------------------------------------------


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


def _browser_after(
    peer: HostileAS, first: Callable[[int], None], held: contextlib.ExitStack
) -> tuple[Callable[[str], bool], list[int]]:
    """A ``webbrowser.open``: another local process acts first (``first(port)``), then the
    browser comes back with the authorization server's redirect."""
    statuses: list[int] = []

    def browser(url: str) -> bool:
        first(_listener_port(url))
        target = peer.approve(url)
        thread = threading.Thread(target=lambda: statuses.append(_get(target)), name="test-browser")
        thread.start()
        held.callback(thread.join, WAIT)
        return True

    return browser, statuses


def test_a_forged_callback_from_another_local_process_does_not_end_the_flow(monkeypatch: pytest.MonkeyPatch) -> None:
    forged: list[int] = []
    with HostileAS() as peer, contextlib.ExitStack() as held:

        def forge(port: int) -> None:  # it can find the port, not guess the state
            forged.append(_get(f"http://127.0.0.1:{port}/callback?code=forged&state=guessed"))
            forged.append(_get(f"http://127.0.0.1:{port}/callback?code=forged"))

        browser, statuses = _browser_after(peer, forge, held)
        monkeypatch.setattr(_browser.webbrowser, "open", browser)
        auth = mcp.OAuth(authorize_timeout=WAIT)
        assert (_flow(auth, peer, within=WAIT + 5), auth.last_error) == (True, None)
        redeemed = [r.form().get("code") for r in peer.requests if urlsplit(r.path).path == "/token"]
    assert forged == [400, 400]
    assert statuses == [200]
    assert redeemed == ["code-1"]


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

        browser, statuses = _browser_after(peer, fill, held)
        monkeypatch.setattr(_browser.webbrowser, "open", browser)
        auth = mcp.OAuth(authorize_timeout=WAIT)
        assert (_flow(auth, peer, within=WAIT + 5), auth.last_error) == (True, None)
        crowd[0].settimeout(WAIT)
        with contextlib.suppress(ConnectionResetError):
            assert crowd[0].recv(1) == b""  # the oldest made room, unanswered
    assert statuses == [200]


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


def test_a_step_up_refusal_quotes_the_servers_scope_bounded() -> None:
    scope = "s" * 50_000
    header = f'Bearer error="insufficient_scope", scope="{scope}"'
    with HostileAS() as peer:
        auth = mcp.OAuth(on_authorize=peer.approve)
        outcomes = [auth.challenge(peer.server_url, 403, header, auth.bearer(peer.server_url)) for _ in range(3)]
    assert outcomes == [True, True, False]
    assert auth.last_error is not None and auth.last_error.startswith("the server still refuses scope 'sss")
    assert len(auth.last_error) < 1000


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


# -- URLs no parser takes ----------------------------------------------------------------------


def _prm_naming(peer: HostileAS, issuer: str) -> Callable[[Exchange], None]:
    return lambda exchange: exchange.json("200 OK", {"resource": peer.server_url, "authorization_servers": [issuer]})


@pytest.mark.parametrize(
    ("where", "url"),
    [
        ("token_endpoint", "http://[::1/token"),
        ("token_endpoint", "http://127.0.0.1:1/to\x7fken"),
        ("registration_endpoint", "http://127.0.0.1:1/register\x00"),
        ("authorization_endpoint", "http://[::1/authorize"),
        ("issuer", "http://[::1/"),
        ("resource_metadata", "http://[::1/prm"),
    ],
    ids=["token-bracket", "token-del", "register-nul", "authorize-bracket", "issuer-bracket", "hint-bracket"],
)
def test_a_url_a_server_names_that_is_no_url_fails_the_flow_with_a_sentence(where: str, url: str) -> None:
    with HostileAS() as peer:
        challenge = peer.challenge
        if where == "issuer":
            peer.routes["/.well-known/oauth-protected-resource/mcp"] = _prm_naming(peer, url)
        elif where == "resource_metadata":
            challenge = f'Bearer resource_metadata="{url}"'
        else:
            peer.metadata[where] = url
        auth = mcp.OAuth(on_authorize=peer.approve)
        assert auth.challenge(peer.server_url, 401, challenge, None) is False
    assert auth.last_error is not None and "is no usable URL" in auth.last_error
    assert "\x7f" not in auth.last_error and "\x00" not in auth.last_error


def test_a_request_target_no_url_parser_takes_is_answered_400() -> None:
    listener = _browser.LoopbackListener("http://127.0.0.1:0/callback")
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


def test_a_url_that_is_no_url_is_named_without_its_credentials_or_query() -> None:
    with HostileAS() as peer:
        peer.metadata["token_endpoint"] = "http://user:pw-secret@[::1/token?key=query-secret"
        auth = mcp.OAuth(on_authorize=peer.approve)
        assert auth.challenge(peer.server_url, 401, peer.challenge, None) is False
    assert auth.last_error == "the request URL 'http://[::1/token?***' is no usable URL"


# -- a registration the client cannot use ------------------------------------------------------


@pytest.mark.parametrize("method", ["private_key_jwt", "tls_client_auth", "client_secret_jwt"])
def test_a_registration_for_an_auth_method_the_client_cannot_use_fails_the_flow_and_is_not_kept(method: str) -> None:
    with HostileAS() as peer:
        peer.routes["/register"] = lambda exchange: exchange.json(
            "201 Created", {"client_id": "cid", "client_secret": "reg-secret", "token_endpoint_auth_method": method}
        )
        auth = mcp.OAuth(on_authorize=peer.approve)
        assert [auth.challenge(peer.server_url, 401, peer.challenge, None) for _ in range(2)] == [False, False]
        assert peer.paths().count("/register") == 2  # nothing unusable was kept to be reused
        assert "/token" not in peer.paths()
    assert auth.last_error == (
        f"client registration at {peer.origin}/register chose the token endpoint auth method '{method}',"
        " which this client cannot use"
    )


def test_a_stored_client_with_an_auth_method_the_client_cannot_use_fails_the_refresh_with_a_sentence() -> None:
    with HostileAS() as peer:
        storage = mcp.MemoryTokenStorage()
        client = {"client_id": "cid", "client_secret": "s", "token_endpoint_auth_method": "tls_client_auth"}
        tokens = {"access_token": "at", "refresh_token": "rt", "expires_at": 0}
        record = {"issuer": peer.issuer, "token_endpoint": f"{peer.origin}/token", "client": client, "tokens": tokens}
        storage.save(peer.server_url, record)
        auth = mcp.OAuth(storage=storage, on_authorize=peer.approve)
        assert auth.bearer(peer.server_url) is None
        assert "/token" not in peer.paths()
    assert auth.last_error == "the token endpoint auth method 'tls_client_auth' is not one this client can use"


@pytest.mark.parametrize("refresh_token", [{"a": 1}, [1], 5], ids=["object", "list", "number"])
def test_a_refresh_token_that_is_no_string_is_never_sent(refresh_token: Any) -> None:
    with HostileAS() as peer:
        peer.routes["/token"] = lambda exchange: exchange.json(
            "200 OK", {"access_token": "at", "expires_in": 0, "refresh_token": refresh_token}
        )
        auth = mcp.OAuth(on_authorize=peer.approve)
        assert auth.challenge(peer.server_url, 401, peer.challenge, None) is True
        assert auth.bearer(peer.server_url) is None  # expired, and nothing to refresh it with
        assert peer.paths().count("/token") == 1
    assert auth.last_error == "the refresh token is not a string: there is nothing to refresh with"


def test_the_listener_accepts_in_a_process_with_more_than_1024_files_open() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        pytest.skip(f"needs 1200 open files, the limit is {soft}")
    opened = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # as a busy host may have
    try:
        listener = _browser.LoopbackListener("http://127.0.0.1:0/callback")
        try:
            base = f"http://127.0.0.1:{listener.port}/callback"
            assert _get(f"{base}?code=c&state=s") == 200
            assert listener.wait(base, WAIT) == f"{base}?code=c&state=s"
        finally:
            listener.close()
    finally:
        for fd in opened:
            os.close(fd)
