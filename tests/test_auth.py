"""MCP authorization (mcp.OAuth) end to end against a real authorization
server (the MCP SDK's own auth pieces, tests/peers/auth_server.py), plus the
parts a real server cannot be made to misbehave for (httpx.MockTransport, or the
scriptable tests/hostile_as.py): the challenge, parsed in time in proportion to its
length, and a step-up asking the scopes it names."""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

import exmcp_actors as mcp
from exmcp_actors._auth import BearerAuth
from exmcp_actors._auth._discovery import AuthError, discover, parse_challenge
from tests.hostile_as import WAIT, HostileAS, run_flow
from tests.hostile_text import LONG, seconds_taken
from tests.peers.auth_server import SCOPE, AuthPeer, MemoryProvider, follow
from tests.sdk_helpers import every_log_record

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def refuse(url: str) -> str:
    raise AssertionError("no new authorization was expected")


@pytest.fixture
def peer() -> Iterator[AuthPeer]:
    with AuthPeer() as running:
        yield running


@pytest.fixture
def all_logs() -> Iterator[list[str]]:
    """Every log record of every logger, rendered (messages and exceptions)."""
    with every_log_record() as lines:
        yield lines


def test_the_code_flow_with_pkce_registers_once_and_gets_one_code_grant_bound_to_the_server(peer: AuthPeer) -> None:
    auth = mcp.OAuth(client_name="test-host", on_authorize=follow)
    with mcp.connect(peer.url, auth=auth, reconnect=False) as client:
        assert [t["name"] for t in client.list_tools()] == ["echo"]
        assert client.call_tool("echo", {"text": "hi"})["structuredContent"] == {"result": "hi"}
    # One registration, one code grant, bound (RFC 8707) to this server.
    assert len(peer.provider.clients) == 1
    assert peer.provider.issued == [("code", peer.url)]


def test_reconnect_reuses_stored_tokens_then_refreshes_an_expired_one(peer: AuthPeer, tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "tokens.json"
    with mcp.connect(peer.url, auth=mcp.OAuth(storage=mcp.FileTokenStorage(path), on_authorize=follow)) as client:
        client.list_tools()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # A new run (new OAuth object, same file): the stored token, no authorization.
    with mcp.connect(peer.url, auth=mcp.OAuth(storage=mcp.FileTokenStorage(path), on_authorize=refuse)) as client:
        client.list_tools()
    assert peer.provider.issued == [("code", peer.url)]
    # The token expired: refreshed, not re-authorized.
    records = json.loads(path.read_text())
    (record,) = records.values()
    record["tokens"]["expires_at"] = time.time() - 60
    path.write_text(json.dumps(records))
    with mcp.connect(peer.url, auth=mcp.OAuth(storage=mcp.FileTokenStorage(path), on_authorize=refuse)) as client:
        client.list_tools()
    assert peer.provider.issued == [("code", peer.url), ("refresh", peer.url)]


def test_a_token_the_server_forgot_is_refreshed_on_401(peer: AuthPeer) -> None:
    storage = mcp.MemoryTokenStorage()
    with mcp.connect(peer.url, auth=mcp.OAuth(storage=storage, on_authorize=follow)) as client:
        client.list_tools()
        peer.provider.access.clear()  # the server no longer knows the access token
        client.list_tools()
    assert peer.provider.issued == [("code", peer.url), ("refresh", peer.url)]


def test_cross_app_access_exchanges_the_assertion_with_jwt_bearer() -> None:
    provider = MemoryProvider()
    with AuthPeer(provider, identity_assertion=True) as peer:
        from mcp.server.auth.provider import OAuthClientInformationFull

        provider.clients["app"] = OAuthClientInformationFull(
            client_id="app",
            client_secret="app-secret",
            redirect_uris=None,
            grant_types=[JWT_BEARER],
            token_endpoint_auth_method="client_secret_basic",
            scope=SCOPE,
        )
        asked: list[tuple[str, str]] = []

        def assertion(audience: str, resource: str) -> str:
            asked.append((audience, resource))
            return "id-jag-for-tests"

        auth = mcp.OAuth(grant=JWT_BEARER, client_id="app", client_secret="app-secret", assertion_provider=assertion)
        with mcp.connect(peer.url, auth=auth) as client:
            client.list_tools()
        assert asked == [(peer.base, peer.url)]
        assert provider.issued == [("jwt-bearer", peer.url)]


def test_no_log_record_or_error_holds_a_token_a_code_or_a_secret(peer: AuthPeer, all_logs: list[str]) -> None:
    callbacks: list[str] = []

    def forged(url: str) -> str:
        location = follow(url)
        callbacks.append(location)
        query = parse_qs(urlsplit(location).query)
        return location.split("?")[0] + "?" + urlencode({"code": query["code"][0], "state": "forged"})

    auth = mcp.OAuth(on_authorize=forged)
    with pytest.raises(mcp.ConnectError) as caught:
        mcp.connect(peer.url, auth=auth, reconnect=False)
    assert auth.last_error is not None and "state" in auth.last_error
    # Then a good flow and a refresh, all logged at DEBUG.
    storage = mcp.MemoryTokenStorage()
    with mcp.connect(peer.url, auth=mcp.OAuth(storage=storage, on_authorize=follow)) as client:
        client.list_tools()
        peer.provider.access.clear()
        client.list_tools()
    assert callbacks and peer.provider.secrets
    texts = [*all_logs, str(caught.value), auth.last_error]
    for secret in peer.provider.secrets:
        assert not [t for t in texts if secret in t]
    assert any("authorized with" in t for t in all_logs)  # the capture did see the flow


def test_the_token_goes_only_to_its_own_server() -> None:
    seen: list[tuple[str, str | None]] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers.get("authorization")))
        return httpx.Response(200)

    storage = mcp.MemoryTokenStorage()
    storage.save("https://a.test/mcp", {"tokens": {"access_token": "tok-a"}})
    auth = BearerAuth(mcp.OAuth(storage=storage, on_authorize=refuse), "https://a.test/mcp")
    with httpx.Client(transport=httpx.MockTransport(record), auth=auth) as client:
        client.post("https://a.test/mcp")
        client.post("https://b.test/mcp")
        client.post("https://a.test/other")
    assert seen == [("a.test", "Bearer tok-a"), ("b.test", None), ("a.test", None)]


def _metadata_server(prm: dict[str, Any] | None, as_metadata: bool = True) -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.startswith("/.well-known/oauth-protected-resource") and prm is not None:
            return httpx.Response(200, json=prm)
        if path == "/.well-known/oauth-authorization-server" and as_metadata:
            return httpx.Response(200, json={"issuer": "http://as.test", "token_endpoint": "http://as.test/t"})
        return httpx.Response(404)

    return httpx.Client(transport=httpx.MockTransport(answer))


def test_metadata_for_another_resource_is_refused() -> None:
    prm = {"resource": "http://other.test/mcp", "authorization_servers": ["http://as.test"]}
    with _metadata_server(prm) as client, pytest.raises(AuthError, match="does not match the server URL"):
        discover(client, "http://srv.test/mcp", {})
    ok = {"resource": "http://srv.test/", "authorization_servers": ["http://as.test"], "scopes_supported": ["a"]}
    with _metadata_server(ok) as client:
        found = discover(client, "http://srv.test/mcp", {})
    assert (found.issuer, found.scopes_supported) == ("http://as.test", ["a"])


def test_a_2025_03_26_server_without_metadata_uses_the_default_endpoints() -> None:
    with _metadata_server(None, as_metadata=False) as client:
        found = discover(client, "http://srv.test/mcp", {})
    assert found.resource is None
    assert found.endpoint("authorization_endpoint") == "http://srv.test/authorize"


def test_challenge_parameters_are_read_from_www_authenticate() -> None:
    header = 'Bearer error="insufficient_scope", scope="a b", resource_metadata="http://x/.well-known/p"'
    assert parse_challenge(header) == {
        "error": "insufficient_scope",
        "scope": "a b",
        "resource_metadata": "http://x/.well-known/p",
    }
    assert parse_challenge("Basic realm=x") == {}


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
    took = seconds_taken(lambda: parse_challenge(f'Bearer {rest}, scope="s1"'))
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


def test_a_step_up_asks_for_the_challenged_scopes_also_when_the_host_chose_scopes() -> None:
    # "Clients MUST treat the scopes provided in the challenge as authoritative for the current
    # operation"; the step-up asks the union of what was asked before and what is challenged.
    with HostileAS() as peer:
        asked: list[str] = []

        def approve(url: str) -> str:
            asked.append(parse_qs(urlsplit(url).query).get("scope", [""])[0])
            return peer.approve(url)

        auth = mcp.OAuth(scopes=["files:read"], on_authorize=approve, timeout=WAIT)
        assert run_flow(auth, peer)[0] is True
        refused = 'Bearer error="insufficient_scope", scope="files:write"'
        assert auth.challenge(peer.server_url, 403, refused, auth.bearer(peer.server_url)) is True
    assert asked == ["files:read", "files:read files:write"]


def test_websocket_upgrade_carries_the_token() -> None:
    from websockets.sync.server import serve

    headers: list[str | None] = []

    def handler(connection: Any) -> None:
        headers.append(connection.request.headers.get("Authorization"))

    with serve(handler, "127.0.0.1", 0, subprotocols=["mcp"]) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        url = f"ws://127.0.0.1:{server.socket.getsockname()[1]}/mcp"
        storage = mcp.MemoryTokenStorage()
        storage.save(url.replace("ws://", "http://"), {"tokens": {"access_token": "tok-ws"}})
        transport = mcp.WebSocketTransport(url, auth=mcp.OAuth(storage=storage, on_authorize=refuse))
        transport.open(_NullSink(), timeout=5.0)
        transport.close()
        server.shutdown()
        thread.join(5)
    assert headers == ["Bearer tok-ws"]


class _NullSink:
    def frames_received(self, frames: Any) -> None:
        pass

    def transport_lost(self, reason: str) -> None:
        pass


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="grant must be one of"):
        mcp.OAuth(grant="password")
    with pytest.raises(ValueError, match="redirect_uri"):
        mcp.OAuth(redirect_uri="https://example.com/cb")
    with pytest.raises(ValueError, match="client_credentials"):
        mcp.OAuth(grant="client_credentials")
    with pytest.raises(ValueError, match="assertion_provider"):
        mcp.OAuth(grant=JWT_BEARER)
    with pytest.raises(ValueError, match="auth needs"):
        mcp.connect(["python", "server.py"], auth=mcp.OAuth())
    with pytest.raises(TypeError, match="auth must be"):
        mcp.connect("http://127.0.0.1:1/mcp", auth="token")  # type: ignore[arg-type]


def test_default_on_authorize_opens_the_browser_and_takes_the_loopback_callback(
    peer: AuthPeer, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []

    def browser(url: str) -> bool:
        # What a browser does: the server redirects to the loopback listener, which answers a page.
        opened.append(url)
        location = follow(url)
        assert location.startswith("http://127.0.0.1:")
        assert httpx.get(location, timeout=10.0).status_code == 200
        return True

    monkeypatch.setattr("exmcp_actors._auth._browser.webbrowser.open", browser)
    with mcp.connect(peer.url, auth=mcp.OAuth(authorize_timeout=10.0), reconnect=False) as client:
        client.list_tools()
    assert len(opened) == 1 and peer.provider.issued == [("code", peer.url)]


def test_a_browser_that_fails_to_open_leaves_no_callback_listener_behind(
    peer: AuthPeer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def browser(url: str) -> bool:
        raise RuntimeError("webbrowser.open refused by an audit hook")

    monkeypatch.setattr("exmcp_actors._auth._browser.webbrowser.open", browser)
    auth = mcp.OAuth(authorize_timeout=10.0)
    with pytest.raises(mcp.ConnectError):
        mcp.connect(peer.url, auth=auth, reconnect=False, connect_timeout=10.0)
    listening = [t.name for t in threading.enumerate() if t.name.startswith("exmcp-oauth-callback")]
    assert listening == [], "the loopback listener kept its port and threads after the flow failed"
    assert auth.last_error is not None and "browser" in auth.last_error

    def working(url: str) -> bool:
        assert httpx.get(follow(url), timeout=10.0).status_code == 200
        return True

    monkeypatch.setattr("exmcp_actors._auth._browser.webbrowser.open", working)
    with mcp.connect(peer.url, auth=auth, reconnect=False) as client:  # the redirect's port is free again
        client.list_tools()


def test_metadata_naming_another_issuer_is_refused() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/.well-known/oauth-protected-resource"):
            return httpx.Response(
                200, json={"resource": "http://srv.test/mcp", "authorization_servers": ["http://as.test"]}
            )
        if request.url.path == "/.well-known/oauth-authorization-server":
            return httpx.Response(200, json={"issuer": "http://evil.test", "token_endpoint": "http://as.test/t"})
        return httpx.Response(404)

    with (
        httpx.Client(transport=httpx.MockTransport(answer)) as client,
        pytest.raises(AuthError, match="another issuer"),
    ):
        discover(client, "http://srv.test/mcp", {})


def _client(provider: MemoryProvider, client_id: str, secret: str | None, method: str) -> None:
    from mcp.server.auth.provider import OAuthClientInformationFull

    provider.clients[client_id] = OAuthClientInformationFull(
        client_id=client_id,
        client_secret=secret,
        redirect_uris=None,
        grant_types=["client_credentials"],
        token_endpoint_auth_method=method,
        scope=SCOPE,
    )


def test_client_credentials_with_a_secret_get_a_token_with_basic_authentication(peer: AuthPeer) -> None:
    _client(peer.provider, "svc", "svc-secret", "client_secret_basic")
    auth = mcp.OAuth(grant="client_credentials", client_id="svc", client_secret="svc-secret", on_authorize=refuse)
    with mcp.connect(peer.url, auth=auth) as client:
        client.list_tools()
    assert [(c, how) for c, how, _ in peer.app.grants] == [("svc", "client_secret_basic")]
    assert peer.provider.issued == [("client_credentials", peer.url)]


def test_client_credentials_with_a_private_key_get_a_token_with_a_signed_jwt(peer: AuthPeer) -> None:
    from joserfc.jwk import ECKey

    key = ECKey.generate_key("P-256")
    peer.app.public_keys["k"] = key
    _client(peer.provider, "svc-jwt", None, "private_key_jwt")
    pem = key.as_pem(private=True).decode()
    auth = mcp.OAuth(grant="client_credentials", client_id="svc-jwt", private_key_pem=pem)
    with mcp.connect(peer.url, auth=auth) as client:
        client.list_tools()
    ((client_id, how, claims),) = peer.app.grants
    assert (client_id, how, claims["aud"], claims["iss"]) == ("svc-jwt", "private_key_jwt", peer.base, "svc-jwt")


def test_oversized_metadata_is_ignored() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/.well-known/oauth-protected-resource"):
            return httpx.Response(200, content=b"{" + b" " * 400_000 + b"}")
        return httpx.Response(404)

    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        found = discover(client, "http://srv.test/mcp", {})
    assert found.resource is None  # treated as absent: the 2025-03-26 fallback


def test_an_unopened_browser_leaves_the_authorization_url_out_of_logs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    from exmcp_actors._auth._browser import open_browser

    monkeypatch.setattr("exmcp_actors._auth._browser.webbrowser.open", lambda url: False)
    url = "https://as.test/authorize?client_id=cid&state=st4te&code_challenge=ch4l&redirect_uri=http%3A%2F%2F127.0.0.1"
    with caplog.at_level(logging.DEBUG):
        open_browser(url)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "https://as.test/authorize" in logged
    assert "st4te" not in logged and "ch4l" not in logged and "cid" not in logged
    assert url in capsys.readouterr().err  # the user still gets the URL to open


def test_bearer_waits_bounded_while_another_connection_authorizes() -> None:
    auth = mcp.OAuth(on_authorize=refuse, timeout=0.2)
    held, release = threading.Event(), threading.Event()

    def authorizing() -> None:
        with auth._lock:  # what a browser authorization does for minutes
            held.set()
            release.wait(10.0)

    worker = threading.Thread(target=authorizing)
    worker.start()
    try:
        assert held.wait(10.0)
        started = time.monotonic()
        with pytest.raises(AuthError, match="another connection has been authorizing"):
            auth.bearer("https://a.test/mcp")
        assert time.monotonic() - started < 5.0
        assert auth.challenge("https://a.test/mcp", 401, None, None) is False
    finally:
        release.set()
        worker.join(10.0)
    assert auth.bearer("https://a.test/mcp") is None  # free again
