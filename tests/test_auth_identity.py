"""OAuth identity and binding against hostile authorization servers on 127.0.0.1.

Credentials stay with the authorization server that issued them (an issuer
change discards them; a pre-registered client goes only to its own issuer),
the RFC 9207 ``iss`` of the authorization response is checked before its code
is redeemed, PKCE S256 support is verified in the metadata, the metadata must
name itself (``issuer``, ``resource``), and what a server says reaches
exception texts and log records escaped.

Each peer is a scripted HTTP server (:class:`Peer`) that records every request,
so a test can say what one authorization server was never sent. The OAuth
object is driven as the transports drive it (``challenge`` on a 401, then
``bearer``), or through ``connect`` against the SDK's server where the whole
path matters.
"""

from __future__ import annotations

import base64
import http.server
import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

import exmcp_actors as mcp
from exmcp_actors._auth._discovery import AuthError, discover
from tests.peers.auth_server import AuthPeer, follow

Answer = tuple[int, Any]


@dataclass(frozen=True)
class Seen:
    """One request a peer received."""

    method: str
    path: str
    headers: dict[str, str]
    body: str

    def text(self) -> str:
        """Everything the request carried, a Basic credential decoded."""
        shown = [self.path, self.body, *self.headers.values()]
        authorization = self.headers.get("authorization", "")
        if authorization.lower().startswith("basic "):
            shown.append(base64.b64decode(authorization[6:]).decode())
        return "\n".join(shown)


class Peer:
    """A scripted HTTP server on 127.0.0.1: ``routes[(method, path)](request) -> (status, json)``."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Callable[[Seen], Answer]] = {}
        self.seen: list[Seen] = []
        peer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                request = Seen(
                    self.command,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length).decode() if length else "",
                )
                peer.seen.append(request)
                route = peer.routes.get((self.command, urlsplit(self.path).path))
                status, body = route(request) if route else (404, {"error": "not_found"})
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    def posts(self) -> list[Seen]:
        return [r for r in self.seen if r.method == "POST"]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)


class AuthorizationServer(Peer):
    """An authorization server whose answers carry its ``name``: ``access-of-<name>``, ``secret-of-<name>``..."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.metadata: dict[str, Any] = {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "registration_endpoint": f"{self.url}/register",
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic"],
        }
        self.routes[("GET", "/.well-known/oauth-authorization-server")] = lambda _: (200, self.metadata)
        self.routes[("POST", "/register")] = lambda _: (
            201,
            {"client_id": f"client-of-{name}", "client_secret": f"secret-of-{name}"},
        )
        self.routes[("POST", "/token")] = lambda _: (
            200,
            {
                "access_token": f"access-of-{name}",
                "token_type": "Bearer",
                "expires_in": 3600,
                "refresh_token": f"refresh-of-{name}",
            },
        )

    def secrets(self) -> list[str]:
        return [f"{kind}-of-{self.name}" for kind in ("access", "refresh", "secret", "code")]

    def token_grants(self) -> list[str]:
        return [parse_qs(r.body).get("grant_type", [""])[0] for r in self.posts() if r.path == "/token"]


class ResourceServer(Peer):
    """An MCP server's protected resource metadata, naming whichever authorization server ``names``."""

    def __init__(self) -> None:
        super().__init__()
        self.server = f"{self.url}/mcp"
        self.prm: dict[str, Any] = {"resource": self.server, "authorization_servers": []}
        self.routes[("GET", "/.well-known/oauth-protected-resource/mcp")] = lambda _: (200, self.prm)

    def names(self, authorization_server: Peer) -> None:
        self.prm["authorization_servers"] = [authorization_server.url]


@pytest.fixture
def peers() -> Iterator[tuple[ResourceServer, AuthorizationServer, AuthorizationServer]]:
    """A resource server and two authorization servers, ``a`` (named first) and ``b``."""
    made = [ResourceServer(), AuthorizationServer("a"), AuthorizationServer("b")]
    try:
        rs, a, b = made
        assert isinstance(rs, ResourceServer) and isinstance(a, AuthorizationServer)
        assert isinstance(b, AuthorizationServer)
        rs.names(a)
        yield rs, a, b
    finally:
        for made_peer in made:
            made_peer.close()


def approve(**extra: str) -> Callable[[str], str]:
    """An ``on_authorize`` that plays the authorization server's redirect: the code, the state, and ``extra``."""

    def redirect(url: str) -> str:
        query = parse_qs(urlsplit(url).query)
        host = urlsplit(url).port
        answer = {"code": f"code-of-{host}", "state": query["state"][0], **extra}
        return f"{query['redirect_uri'][0]}?{urlencode(answer)}"

    return redirect


def never(url: str) -> str:
    raise AssertionError("no authorization was expected")


# -- an issuer change ----------------------------------------------------------------------


def test_an_issuer_change_discards_the_first_servers_tokens_and_registration_and_authorizes_anew(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer],
) -> None:
    rs, a, b = peers
    storage = mcp.MemoryTokenStorage()
    auth = mcp.OAuth(storage=storage, on_authorize=approve(), timeout=5.0)
    assert auth.challenge(rs.server, 401, None, None) is True
    assert auth.bearer(rs.server) == "access-of-a"
    rs.names(b)  # the protected resource metadata now names another authorization server
    assert auth.challenge(rs.server, 401, None, "access-of-a") is True
    assert auth.bearer(rs.server) == "access-of-b"
    # b never saw a's refresh token or secret; it registered a client of its own and ran a fresh code grant.
    leaked = [(r.path, s) for r in b.seen for s in [*a.secrets(), "client-of-a"] if s in r.text()]
    assert leaked == []
    assert [r.path for r in b.posts()] == ["/register", "/token"]
    assert b.token_grants() == ["authorization_code"]
    record = storage.load(rs.server)
    assert record is not None and record["issuer"] == b.url
    assert "-of-a" not in json.dumps(record)  # the stored tokens and registration of a are gone


def test_a_refresh_after_an_issuer_change_never_reaches_the_new_server(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer],
) -> None:
    rs, _, b = peers
    storage = mcp.MemoryTokenStorage()
    assert mcp.OAuth(storage=storage, on_authorize=approve(), timeout=5.0).challenge(rs.server, 401, None, None)
    rs.names(b)
    # A new run with the stored record: the change is seen at the next 401, before any refresh.
    later = mcp.OAuth(storage=storage, on_authorize=approve(), timeout=5.0)
    assert later.challenge(rs.server, 401, None, "access-of-a") is True
    assert "refresh_token" not in b.token_grants()
    assert not [r for r in b.seen if "refresh-of-a" in r.text()]


def test_a_pre_registered_secret_is_never_sent_to_another_issuer(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer],
) -> None:
    rs, a, b = peers
    storage = mcp.MemoryTokenStorage()
    auth = mcp.OAuth(
        grant="client_credentials", client_id="svc", client_secret="svc-secret", storage=storage, timeout=5.0
    )
    assert auth.challenge(rs.server, 401, None, None) is True
    rs.names(b)
    refused = auth.challenge(rs.server, 401, None, "access-of-a")
    assert [r.path for r in b.seen if "svc-secret" in r.text()] == []
    assert refused is False and auth.client_issuer == a.url  # taken on first use
    assert auth.last_error is not None and "pre-registered client_id belongs to" in auth.last_error
    assert b.url in auth.last_error and "client_issuer=" in auth.last_error
    assert b.posts() == []  # not a token request, not a registration
    # A new object with the same storage knows the binding from the stored record.
    again = mcp.OAuth(grant="client_credentials", client_id="svc", client_secret="svc-secret", storage=storage)
    assert again.challenge(rs.server, 401, None, "access-of-a") is False
    assert b.posts() == []
    assert "svc-secret" not in (again.last_error or "")


def test_a_pre_registered_client_with_its_issuer_given_is_refused_by_any_other_from_the_first_request(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer],
) -> None:
    rs, a, b = peers
    rs.names(b)
    auth = mcp.OAuth(
        grant="client_credentials", client_id="svc", client_secret="svc-secret", client_issuer=a.url, timeout=5.0
    )
    assert auth.challenge(rs.server, 401, None, None) is False
    assert b.posts() == []
    rs.names(a)
    assert auth.challenge(rs.server, 401, None, None) is True
    assert a.token_grants() == ["client_credentials"]
    with pytest.raises(ValueError, match="client_issuer"):
        mcp.OAuth(client_issuer=a.url)


# -- RFC 9207 iss ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("advertised", "iss", "why"),
    [
        (True, None, "carries no iss"),
        (True, "http://evil.test", "not "),
        (None, "http://evil.test", "not "),  # a present iss is compared whatever the metadata says
        (True, "{issuer}/", "not "),  # simple string comparison: no trailing-slash normalization
        (True, "", "not "),
    ],
)
def test_an_authorization_response_from_another_issuer_is_refused_before_its_code_is_redeemed(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer],
    advertised: bool | None,
    iss: str | None,
    why: str,
) -> None:
    rs, a, _ = peers
    if advertised is not None:
        a.metadata["authorization_response_iss_parameter_supported"] = advertised
    extra = {} if iss is None else {"iss": iss.format(issuer=a.url)}
    auth = mcp.OAuth(on_authorize=approve(**extra), timeout=5.0)
    assert auth.challenge(rs.server, 401, None, None) is False
    assert auth.last_error is not None and why in auth.last_error and "mix-up" in auth.last_error
    assert a.token_grants() == []  # the code went to no token endpoint


@pytest.mark.parametrize(("advertised", "send_iss"), [(True, True), (None, True), (None, False)])
def test_an_authorization_response_with_the_right_iss_or_none_when_none_is_promised_is_redeemed(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer], advertised: bool | None, send_iss: bool
) -> None:
    rs, a, _ = peers
    if advertised is not None:
        a.metadata["authorization_response_iss_parameter_supported"] = advertised
    auth = mcp.OAuth(on_authorize=approve(**({"iss": a.url} if send_iss else {})), timeout=5.0)
    assert auth.challenge(rs.server, 401, None, None) is True
    assert a.token_grants() == ["authorization_code"]


def test_an_error_response_from_another_issuer_is_neither_acted_on_nor_shown(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer],
) -> None:
    rs, a, _ = peers

    def forged(url: str) -> str:
        query = parse_qs(urlsplit(url).query)
        answer = {"error": "access_denied", "error_description": "call +1-555-SCAM", "iss": "http://evil.test"}
        return f"{query['redirect_uri'][0]}?{urlencode({**answer, 'state': query['state'][0]})}"

    auth = mcp.OAuth(on_authorize=forged, timeout=5.0)
    assert auth.challenge(rs.server, 401, None, None) is False
    assert auth.last_error is not None and "mix-up" in auth.last_error
    assert "SCAM" not in auth.last_error and "access_denied" not in auth.last_error
    assert a.token_grants() == []


def test_the_loopback_listener_hands_the_iss_of_the_redirect_to_the_check(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    rs, a, _ = peers
    a.metadata["authorization_response_iss_parameter_supported"] = True
    sent: list[str] = []

    def browser(url: str) -> bool:
        # What the browser does with the authorization server's redirect: load it on the loopback listener.
        location = approve(iss=sent[-1])(url)
        assert httpx.get(location, timeout=10.0).status_code == 200
        return True

    monkeypatch.setattr("exmcp_actors._auth._browser.webbrowser.open", browser)
    sent.append("http://evil.test")
    auth = mcp.OAuth(authorize_timeout=10.0, timeout=5.0)
    assert auth.challenge(rs.server, 401, None, None) is False
    assert auth.last_error is not None and "mix-up" in auth.last_error and a.token_grants() == []
    sent.append(a.url)
    assert auth.challenge(rs.server, 401, None, None) is True
    assert a.token_grants() == ["authorization_code"]


# -- PKCE ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("methods", "why"), [(None, "does not list"), (["plain"], "without S256")])
def test_an_authorization_server_without_pkce_s256_in_its_metadata_is_refused_before_anything_is_sent(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer], methods: list[str] | None, why: str
) -> None:
    rs, a, _ = peers
    del a.metadata["code_challenge_methods_supported"]
    if methods is not None:
        a.metadata["code_challenge_methods_supported"] = methods
    auth = mcp.OAuth(on_authorize=never, timeout=5.0)
    assert auth.challenge(rs.server, 401, None, None) is False
    assert auth.last_error is not None and why in auth.last_error and "code_challenge" in auth.last_error
    assert a.posts() == []  # no registration, no token request


def test_pkce_is_not_asked_of_a_grant_without_an_authorization_request(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer],
) -> None:
    rs, a, _ = peers
    del a.metadata["code_challenge_methods_supported"]
    auth = mcp.OAuth(grant="client_credentials", client_id="svc", client_secret="svc-secret", timeout=5.0)
    assert auth.challenge(rs.server, 401, None, None) is True


# -- metadata identity -----------------------------------------------------------------------


def _discover(server: str) -> Any:
    with httpx.Client(timeout=5.0) as http:
        return discover(http, server, {})


def test_authorization_server_metadata_without_an_issuer_is_refused(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer],
) -> None:
    rs, a, _ = peers
    del a.metadata["issuer"]
    with pytest.raises(AuthError, match="has no issuer"):
        _discover(rs.server)


def test_protected_resource_metadata_without_a_resource_is_refused(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer],
) -> None:
    rs, _, _ = peers
    del rs.prm["resource"]
    with pytest.raises(AuthError, match="has no resource"):
        _discover(rs.server)
    auth = mcp.OAuth(on_authorize=never, timeout=5.0)
    assert auth.challenge(rs.server, 401, None, None) is False


def test_a_2025_03_26_server_may_not_pass_off_another_origin_as_its_issuer(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer],
) -> None:
    rs, a, _ = peers
    del rs.routes[("GET", "/.well-known/oauth-protected-resource/mcp")]  # no protected resource metadata
    own = dict(a.metadata)  # a's endpoints, served by the MCP server's origin as its own
    rs.routes[("GET", "/.well-known/oauth-authorization-server")] = lambda _: (200, own)
    with pytest.raises(AuthError, match="names another issuer"):
        _discover(rs.server)
    own["issuer"] = f"{rs.url}/oauth"  # the server's own origin, with its endpoints' prefix: its own
    found = _discover(rs.server)
    assert (found.issuer, found.metadata["issuer"]) == (rs.url, f"{rs.url}/oauth")


@pytest.mark.parametrize(
    ("issuer_path", "metadata_path", "named_as"),
    [
        ("/tenant1", "/.well-known/oauth-authorization-server/tenant1", "{url}/tenant1"),  # path inserted
        ("/tenant1", "/.well-known/openid-configuration/tenant1", "{url}/tenant1"),  # OIDC, path inserted
        ("/tenant1", "/tenant1/.well-known/openid-configuration", "{url}/tenant1"),  # OIDC, path appended
        ("", "/.well-known/openid-configuration", "{url}"),  # OIDC at the root
        ("", "/.well-known/oauth-authorization-server", "{url}/"),  # a root issuer with its slash
        ("/tenant1/", "/.well-known/oauth-authorization-server/tenant1", "{url}/tenant1"),  # the slash in the PRM
    ],
)
def test_the_metadata_variants_real_servers_publish_are_accepted(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer],
    issuer_path: str,
    metadata_path: str,
    named_as: str,
) -> None:
    rs, a, _ = peers
    del a.routes[("GET", "/.well-known/oauth-authorization-server")]
    document = {**a.metadata, "issuer": named_as.format(url=a.url)}
    a.routes[("GET", metadata_path)] = lambda _: (200, document)
    rs.prm["authorization_servers"] = [a.url + issuer_path]
    rs.prm["resource"] = rs.url  # the origin: a parent of the server URL, as servers publish
    found = _discover(rs.server)
    assert found.issuer == a.url + issuer_path and found.resource == rs.url


def test_metadata_for_another_tenant_of_the_same_host_is_refused(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer],
) -> None:
    rs, a, _ = peers
    document = {**a.metadata, "issuer": f"{a.url}/tenant2"}
    a.routes[("GET", "/.well-known/oauth-authorization-server/tenant1")] = lambda _: (200, document)
    rs.prm["authorization_servers"] = [f"{a.url}/tenant1"]
    with pytest.raises(AuthError, match="names another issuer"):
        _discover(rs.server)


# -- server text in exceptions and records ---------------------------------------------------

HOSTILE = "denied\x1b]0;pwned\x07\r\nWARNING forged line\u202e"


def _escaped(text: str) -> bool:
    return not any(c in text for c in "\x1b\x07\r\n\u202e")


def test_an_authorization_error_reaches_the_exception_and_the_log_escaped(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer], caplog: pytest.LogCaptureFixture
) -> None:
    rs, _, _ = peers
    auth = mcp.OAuth(on_authorize=approve(error=HOSTILE, error_description=HOSTILE), timeout=5.0)
    with caplog.at_level(logging.DEBUG, logger="exmcp_actors.auth"):
        assert auth.challenge(rs.server, 401, None, None) is False
    assert auth.last_error is not None and "forged line" in auth.last_error and _escaped(auth.last_error)
    logged = [r.getMessage() for r in caplog.records]
    assert any("forged line" in line for line in logged) and all(_escaped(line) for line in logged)


def test_a_token_endpoint_error_reaches_the_exception_escaped(
    peers: tuple[ResourceServer, AuthorizationServer, AuthorizationServer],
) -> None:
    rs, a, _ = peers
    a.routes[("POST", "/token")] = lambda _: (400, {"error": HOSTILE, "error_description": HOSTILE})
    auth = mcp.OAuth(on_authorize=approve(), timeout=5.0)
    assert auth.challenge(rs.server, 401, None, None) is False
    assert auth.last_error is not None and "forged line" in auth.last_error and _escaped(auth.last_error)


# -- the whole path, against the SDK's authorization server ------------------------------------


def test_the_sdk_server_passes_every_identity_check() -> None:
    with AuthPeer() as sdk:
        auth = mcp.OAuth(on_authorize=follow, timeout=5.0)
        with mcp.connect(sdk.url, auth=auth, reconnect=False) as client:
            client.list_tools()
        assert sdk.provider.issued == [("code", sdk.url)]
