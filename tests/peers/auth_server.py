"""A real authorization server for the OAuth tests: the MCP Python SDK's own
auth pieces (``MCPServer`` with ``auth_server_provider``: metadata,
registration, ``/authorize``, ``/token`` with PKCE checks, protected resource
metadata, bearer middleware; the ``client_credentials`` grant, which the SDK
lacks, is added in front of its ``/token``) around an in-memory provider that approves every
authorization at once (so an ``on_authorize`` that follows the redirect is
the whole browser part).

Run in-process by :class:`AuthPeer` (uvicorn on a thread, port 0).
"""

from __future__ import annotations

import base64
import http.client
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import uvicorn
from joserfc import jwt
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    IdentityAssertionParams,
    OAuthClientInformationFull,
    OAuthToken,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from starlette.datastructures import Headers
from starlette.responses import JSONResponse

SCOPE = "mcp:tools"


@dataclass
class MemoryProvider:
    """Auto-approving in-memory OAuth provider; records what it issued."""

    token_lifetime: int = 3600
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    access: dict[str, AccessToken] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    #: (grant, resource) of each token issued, in order.
    issued: list[tuple[str, str | None]] = field(default_factory=list)
    #: Every secret handed out (tokens, codes, client secrets), for the leak checks.
    secrets: list[str] = field(default_factory=list)

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        if client_info.client_secret:
            self.secrets.append(client_info.client_secret)

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        self.secrets.append(code)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None, grant: str) -> OAuthToken:
        token, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        self.secrets += [token, refresh]
        self.access[token] = AccessToken(
            token=token,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + self.token_lifetime,
            resource=resource,
        )
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource)
        self.issued.append((grant, resource))
        return OAuthToken(
            access_token=token,
            token_type="Bearer",
            expires_in=self.token_lifetime,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        return self._issue(client.client_id or "", authorization_code.scopes, authorization_code.resource, "code")

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        del self.refresh[refresh_token.token]
        return self._issue(client.client_id or "", scopes or refresh_token.scopes, refresh_token.resource, "refresh")

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: Any) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: IdentityAssertionParams
    ) -> OAuthToken:
        if params.assertion != "id-jag-for-tests":
            raise TokenError(error="invalid_grant", error_description="unknown assertion")
        return self._issue(client.client_id or "", params.scopes or [SCOPE], params.resource, "jwt-bearer")


class ClientCredentialsGrant:
    """ASGI middleware adding the ``client_credentials`` grant to the SDK's ``/token``
    (which has none): ``client_secret_basic`` against the registered secret, or
    ``private_key_jwt`` verified with the client's public key (``public_keys``)."""

    def __init__(self, app: Any, provider: MemoryProvider, issuer: str) -> None:
        self.app = app
        self.provider = provider
        self.issuer = issuer
        #: client_id -> joserfc public key, for private_key_jwt.
        self.public_keys: dict[str, Any] = {}
        #: (client_id, how it authenticated, the assertion's claims) per grant.
        self.grants: list[tuple[str, str, dict[str, Any]]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/token" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        if form.get("grant_type") != "client_credentials":
            sent = False

            async def replay() -> Any:
                nonlocal sent
                if sent:
                    return await receive()
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}

            await self.app(scope, replay, send)
            return
        answer = self._grant(form, dict(Headers(scope=scope)))
        await JSONResponse(answer[1], status_code=answer[0])(scope, receive, send)

    def _grant(self, form: dict[str, str], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        claims: dict[str, Any] = {}
        if "client_assertion" in form:
            token = jwt.decode(
                form["client_assertion"], lambda guest: self.public_keys[guest.headers().get("kid", "k")]
            )
            claims = dict(token.claims)
            client_id, how = str(claims.get("sub")), "private_key_jwt"
            if claims.get("aud") != self.issuer or claims.get("iss") != client_id:
                return 401, {"error": "invalid_client"}
        else:
            user, _, secret = base64.b64decode(headers.get("authorization", "Basic ")[6:]).decode().partition(":")
            client = self.provider.clients.get(user)
            if client is None or client.client_secret != secret:
                return 401, {"error": "invalid_client"}
            client_id, how = user, "client_secret_basic"
        self.grants.append((client_id, how, claims))
        token = self.provider._issue(
            client_id, form.get("scope", SCOPE).split(), form.get("resource"), "client_credentials"
        )
        return 200, token.model_dump(exclude_none=True)


class AuthPeer:
    """An SDK MCP server behind the SDK's OAuth pieces, on 127.0.0.1 (port 0), on a thread."""

    def __init__(self, provider: MemoryProvider | None = None, *, identity_assertion: bool = False) -> None:
        self.provider = provider or MemoryProvider()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self._sock = sock
        port = sock.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        self.url = f"{self.base}/mcp"
        server: MCPServer[Any] = MCPServer(
            "auth-peer",
            auth_server_provider=self.provider,
            auth=AuthSettings(
                issuer_url=self.base,  # type: ignore[arg-type]
                resource_server_url=self.url,  # type: ignore[arg-type]
                required_scopes=[SCOPE],
                client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=[SCOPE]),
                identity_assertion_enabled=identity_assertion,
                validate_token_resource=True,
            ),
        )

        @server.tool()
        def echo(text: str) -> str:
            """Echo the text."""
            return text

        self.app = ClientCredentialsGrant(server.streamable_http_app(), self.provider, self.base)
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)

    def __enter__(self) -> AuthPeer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the auth peer did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._sock.close()


def follow(url: str) -> str:
    """A browser-less on_authorize: the peer approves at once with a redirect.

    Plain http.client, which logs nothing: the log checks see only the library's records.
    """
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=10.0)
    try:
        connection.request("GET", f"{parts.path}?{parts.query}")
        response = connection.getresponse()
        assert response.status == 302, response.status
        return str(response.getheader("location"))
    finally:
        connection.close()
