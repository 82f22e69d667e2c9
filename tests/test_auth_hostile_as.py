"""OAuth against a hostile authorization server and plain http: cleartext refused, every
answer bounded in size and time, a token answer of the wrong shape (a lifetime that is no
number, an access token that could split a header) refused where it arrives, URLs no parser
takes, registrations the client cannot use, one HTTP stack (httpx, with or without ``httpx2``
installed), token files written where nobody planted a link. The loopback callback listener
against hostile local processes: tests/test_auth_callback.py.

Every peer is on 127.0.0.1 (tests/hostile_as.py, stdlib only, so this file also runs with
``httpx2`` hidden: see the last tests); a non-loopback *name* is resolved to 127.0.0.1
in-process (:func:`names_on_loopback`).
"""

from __future__ import annotations

import gzip
import logging
import os
import socket
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors._auth import _storage
from tests.child_python import rerun_with_httpx2_hidden, run_python
from tests.helpers_transport import RecordingSink
from tests.hostile_as import Exchange, HostileAS, flood, import_what_a_token_request_imports, run_flow, trickle
from tests.hostile_text import seconds_taken
from tests.sdk_helpers import every_log_record

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


# -- every answer bounded: size and time -------------------------------------------------------


def _peak_bytes_during(action: Callable[[], Any]) -> tuple[Any, int]:
    import_what_a_token_request_imports()  # their import is not the answer's cost
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
            took = seconds_taken(lambda: run_flow(auth, peer))
    finally:
        httpx_logger.setLevel(level)
    assert took < 2.0, f"the flow took {took:.1f}s"


def test_a_step_up_refusal_quotes_the_servers_scope_bounded() -> None:
    scope = "s" * 50_000
    header = f'Bearer error="insufficient_scope", scope="{scope}"'
    with HostileAS() as peer:
        auth = mcp.OAuth(on_authorize=peer.approve)
        outcomes = [auth.challenge(peer.server_url, 403, header, auth.bearer(peer.server_url)) for _ in range(3)]
    assert outcomes == [True, True, False]
    assert auth.last_error is not None and auth.last_error.startswith("the server still refuses scope 'sss")
    assert len(auth.last_error) < 1000


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
        assert run_flow(auth, peer)[0] is False
    assert auth.last_error is not None and auth.last_error.startswith("the authorization_code token request failed")
    assert "secret" not in auth.last_error


def test_a_refresh_answer_whose_lifetime_is_no_number_leaves_bearer_without_a_token() -> None:
    with HostileAS() as peer:
        auth = mcp.OAuth(on_authorize=peer.approve)
        assert run_flow(auth, peer)[0] is True
        peer.routes["/token"] = _token_answer(expires_in=[1])
        record = auth.storage.load(peer.server_url)
        assert record is not None
        record["tokens"]["expires_at"] = 0  # expired: bearer() refreshes
        auth.storage.save(peer.server_url, record)
        assert auth.bearer(peer.server_url) is None
    assert auth.last_error == "the refresh_token token request failed: ValueError"


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
        assert run_flow(auth, peer)[0] is False
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
    child = rerun_with_httpx2_hidden(__file__)
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
        child = run_python("-c", _SDK_CLIENT, peer.url, timeout=120)
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
