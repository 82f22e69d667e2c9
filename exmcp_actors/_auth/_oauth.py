""":class:`OAuth`: MCP authorization (OAuth 2.1) for the HTTP and WebSocket
transports.

A transport asks :meth:`OAuth.bearer` for the token of its server before each
request, and on a 401 or 403 hands the challenge to :meth:`OAuth.challenge`,
which discovers the authorization server, identifies the client, obtains a
token (refreshing first when it can) and says whether a retry makes sense.
Every step runs under one lock, so concurrent 401s cause one flow.

Secrets (tokens, codes, verifiers, client secrets, assertions) never reach a
log record or an exception text: messages name the step and the server's
``error`` code only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit, urlunsplit

import httpx

from ._browser import LoopbackListener, free_port, loopback_redirect, open_browser
from ._discovery import AuthError, Discovery, canonical, discover, parse_challenge
from ._storage import MemoryTokenStorage, TokenStorage
from ._tokens import JWT_BEARER, ClientIdentity, choose_auth_method, request_token

__all__ = ["OAuth"]

logger = logging.getLogger("exmcp_actors.auth")

GRANTS: Final = ("authorization_code", "client_credentials", JWT_BEARER)
#: Authorizations for the same scopes after a 403 ``insufficient_scope`` before giving up.
MAX_STEP_UPS: Final = 2
#: A token this close to its expiry is refreshed before use (seconds).
_EXPIRY_MARGIN: Final = 30.0


def _http_url(server: str) -> str:
    """The http(s) URL discovery uses for a server (ws -> http, wss -> https)."""
    parts = urlsplit(server)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme.lower(), parts.scheme.lower())
    return canonical(urlunsplit((scheme, parts.netloc, parts.path, parts.query, "")))


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


class OAuth:
    """OAuth 2.1 authorization for MCP servers over HTTP (and the WebSocket upgrade).

    Args:
        client_name: the name registered with the authorization server.
        redirect_uri: loopback redirect URI; port 0 picks a free port (fixed
            for this object's life, so a registration stays valid).
        scopes: scopes to request; None: what the server asks for
            (``WWW-Authenticate``, else its ``scopes_supported``, else none).
        client_id: a pre-registered client id (skips registration).
        client_secret: its secret, if it has one.
        client_metadata_url: a Client ID Metadata Document URL, used when the
            authorization server supports it.
        grant: ``"authorization_code"``, ``"client_credentials"`` or
            ``"urn:ietf:params:oauth:grant-type:jwt-bearer"`` (cross-app access).
        private_key_pem: a PEM private key: the client authenticates with
            ``private_key_jwt`` (with ``client_id``).
        signing_algorithm: its JWS algorithm; None: ES256 for an EC key, else RS256.
        assertion_provider: ``fn(audience, resource) -> str``, the identity
            assertion grant (ID-JAG) for the jwt-bearer grant; ``audience`` is
            the authorization server's issuer, ``resource`` the MCP server.
        storage: where tokens and registrations are kept (default: in memory);
            see :class:`~exmcp_actors.FileTokenStorage`.
        on_authorize: ``fn(authorization_url) -> callback_url``; None: open the
            system browser and wait for the redirect on the loopback listener.
        authorize_timeout: seconds the default ``on_authorize`` waits for the browser.
        timeout: seconds for each request to an authorization server.
        verify: TLS verification for authorization servers (as httpx takes it).

    Raises:
        ValueError, TypeError: an argument is unusable (the text names it).

    Example:
        >>> auth = OAuth(client_name="my-host", on_authorize=lambda url: "http://127.0.0.1:1/cb?code=x")
        >>> auth.grant
        'authorization_code'
    """

    def __init__(
        self,
        client_name: str = "exmcp_actors",
        redirect_uri: str = "http://127.0.0.1:0/callback",
        scopes: Sequence[str] | None = None,
        client_id: str | None = None,
        client_secret: str | None = None,
        client_metadata_url: str | None = None,
        grant: str = "authorization_code",
        private_key_pem: str | None = None,
        signing_algorithm: str | None = None,
        assertion_provider: Callable[[str, str], str] | None = None,
        storage: TokenStorage | None = None,
        on_authorize: Callable[[str], str] | None = None,
        *,
        authorize_timeout: float = 300.0,
        timeout: float = 30.0,
        verify: bool = True,
    ) -> None:
        if grant not in GRANTS:
            raise ValueError(f"grant must be one of {GRANTS}, got {grant!r}")
        loopback_redirect(redirect_uri)
        if isinstance(scopes, str):
            raise TypeError("scopes must be a list of scope strings, not one string")
        if grant == "client_credentials" and not client_id:
            raise ValueError("grant='client_credentials' needs a client_id (and a client_secret or private_key_pem)")
        if private_key_pem is not None and not client_id:
            raise ValueError("private_key_pem needs the client_id it was registered for")
        if grant == JWT_BEARER and not callable(assertion_provider):
            raise ValueError("the jwt-bearer grant needs assertion_provider, a function (audience, resource) -> str")
        if on_authorize is not None and not callable(on_authorize):
            raise TypeError("on_authorize must be a function (authorization_url) -> callback_url")
        if storage is not None and not isinstance(storage, TokenStorage):
            raise TypeError("storage must have load(server) and save(server, record) methods")
        self.client_name = client_name
        self.redirect_uri = redirect_uri
        self.scopes = list(scopes) if scopes is not None else None
        self.client_id = client_id
        self._client_secret = client_secret
        self.client_metadata_url = client_metadata_url
        self.grant = grant
        self._private_key_pem = private_key_pem
        self.signing_algorithm = signing_algorithm
        self._assertion_provider = assertion_provider
        self.storage: TokenStorage = storage if storage is not None else MemoryTokenStorage()
        self._on_authorize = on_authorize
        self.authorize_timeout = authorize_timeout
        self.timeout = timeout
        self.verify = verify
        #: Why the last flow failed (no secret in it), or None.
        self.last_error: str | None = None
        self._lock = threading.RLock()
        self._frozen_redirect: str | None = None
        #: server -> (scopes asked after a 403, how many times).
        self._step_ups: dict[str, tuple[frozenset[str], int]] = {}

    def __repr__(self) -> str:
        return f"OAuth(client_name={self.client_name!r}, grant={self.grant!r})"

    # -- the transports' side ------------------------------------------------

    def bearer(self, server: str) -> str | None:
        """The access token for ``server`` (refreshed first when it expired), or None."""
        key = _http_url(server)
        # Bounded: another connection may hold the lock through a browser authorization.
        if not self._lock.acquire(timeout=self.timeout):
            raise AuthError(
                f"another connection has been authorizing with this OAuth object for over {self.timeout:.0f}s;"
                " no token to send yet"
            )
        try:
            record = self.storage.load(key) or {}
            tokens = record.get("tokens")
            if not isinstance(tokens, dict) or not isinstance(tokens.get("access_token"), str):
                return None
            expires_at = tokens.get("expires_at")
            if isinstance(expires_at, int | float) and expires_at < time.time() + _EXPIRY_MARGIN:
                if not tokens.get("refresh_token"):
                    return None
                try:
                    tokens = self._refresh(key, record)
                except AuthError as exc:
                    self._failed(key, exc)
                    return None
            token: str = tokens["access_token"]
            return token
        finally:
            self._lock.release()

    def challenge(self, server: str, status: int, www_authenticate: str | None, sent: str | None) -> bool:
        """Handle a 401/403 from ``server``; True when a retry with a new token makes sense."""
        key = _http_url(server)
        params = parse_challenge(www_authenticate)
        if not self._lock.acquire(timeout=self.timeout):
            return False  # another connection is still authorizing: its caller gets the 401
        try:
            current = self.bearer(key)
            if current is not None and current != sent:
                return True  # another request already got a new token
            if status == 403 and params.get("error") != "insufficient_scope":
                return False
            try:
                self._obtain(key, status, params)
            except AuthError as exc:
                self._failed(key, exc)
                return False
            self.last_error = None
            return True
        finally:
            self._lock.release()

    def _failed(self, key: str, exc: AuthError) -> None:
        self.last_error = str(exc)
        logger.warning("authorization for %s failed: %s", _origin(key), exc)

    # -- the flow ---------------------------------------------------------------

    def _obtain(self, key: str, status: int, params: dict[str, str]) -> None:
        with httpx.Client(timeout=self.timeout, verify=self.verify, follow_redirects=False) as http:
            found = discover(http, key, params)
            record = self.storage.load(key) or {}
            scope = self._scope(key, found, params, record, status)
            identity = self._identity(http, found, record, scope)
        record.update(
            client=identity.record(),
            issuer=found.issuer,
            token_endpoint=found.endpoint("token_endpoint"),
            resource=found.resource,
        )
        self.storage.save(key, record)  # a registration is kept even if the grant fails
        tokens = record.get("tokens")
        if status == 401 and isinstance(tokens, dict) and tokens.get("refresh_token"):
            try:
                self._refresh(key, record)
                return
            except AuthError as exc:
                logger.debug("refresh for %s refused (%s): authorizing anew", _origin(key), exc)
        new = self._grant(key, found, identity, scope)
        new["requested_scope"] = scope
        record["tokens"] = new
        self.storage.save(key, record)
        logger.info("authorized with %s for %s", _origin(found.issuer), _origin(key))

    def _scope(
        self, key: str, found: Discovery, params: dict[str, str], record: dict[str, Any], status: int
    ) -> str | None:
        if self.scopes is not None:
            asked = list(self.scopes)
        elif params.get("scope"):
            asked = params["scope"].split()
        else:
            asked = list(found.scopes_supported)
        if status == 403:
            tokens = record.get("tokens") or {}
            before = str(tokens.get("requested_scope") or "").split()
            asked = before + [s for s in asked if s not in before]
            wanted = frozenset(asked)
            seen, count = self._step_ups.get(key, (frozenset(), 0))
            count = count + 1 if wanted == seen else 1
            if count > MAX_STEP_UPS:
                raise AuthError(f"the server still refuses scope {' '.join(asked)!r} after {MAX_STEP_UPS} step-ups")
            self._step_ups[key] = (wanted, count)
        supported = found.metadata.get("scopes_supported")
        if (
            self.grant == "authorization_code"
            and isinstance(supported, list)
            and "offline_access" in supported
            and "offline_access" not in asked
        ):
            asked.append("offline_access")  # so the server issues a refresh token
        return " ".join(asked) or None

    def _identity(
        self, http: httpx.Client, found: Discovery, record: dict[str, Any], scope: str | None
    ) -> ClientIdentity:
        supported = found.metadata.get("token_endpoint_auth_methods_supported")
        if self.client_id:
            method = choose_auth_method(supported, bool(self._client_secret), bool(self._private_key_pem))
            return ClientIdentity(
                self.client_id, self._client_secret, method, self._private_key_pem, self.signing_algorithm
            )
        saved = record.get("client")
        if isinstance(saved, dict) and record.get("issuer") == found.issuer and saved.get("client_id"):
            return ClientIdentity(
                saved["client_id"], saved.get("client_secret"), saved.get("token_endpoint_auth_method") or "none"
            )
        if self.client_metadata_url and found.metadata.get("client_id_metadata_document_supported") is True:
            return ClientIdentity(self.client_metadata_url, None, "none")
        registration = found.endpoint("registration_endpoint")
        if registration is None:
            raise AuthError("no client_id was given and the authorization server offers no client registration")
        return self._register(http, registration, supported, scope)

    def _register(self, http: httpx.Client, endpoint: str, supported: Any, scope: str | None) -> ClientIdentity:
        methods = supported if isinstance(supported, list) and supported else ["client_secret_basic"]
        method = next((m for m in ("client_secret_basic", "client_secret_post", "none") if m in methods), "none")
        interactive = self.grant == "authorization_code"
        body: dict[str, Any] = {
            "client_name": self.client_name,
            "redirect_uris": [self._redirect()] if interactive else [],
            "grant_types": ["authorization_code", "refresh_token"] if interactive else [self.grant],
            "response_types": ["code"] if interactive else [],
            "token_endpoint_auth_method": method,
            # The redirect is loopback, so a native client; OIDC would assume "web" (SEP-837).
            "application_type": "native",
        }
        if scope:
            body["scope"] = scope
        try:
            response = http.post(endpoint, json=body)
        except httpx.HTTPError as exc:
            raise AuthError(f"client registration at {endpoint} failed: {type(exc).__name__}") from exc
        try:
            info = response.json() if response.status_code in (200, 201) else None
        except ValueError:
            info = None
        if not isinstance(info, dict) or not isinstance(info.get("client_id"), str):
            raise AuthError(f"client registration at {endpoint} answered HTTP {response.status_code}")
        secret = info.get("client_secret") if isinstance(info.get("client_secret"), str) else None
        given = info.get("token_endpoint_auth_method")
        chosen = given if isinstance(given, str) else method
        if secret is None:
            chosen = "none"
        elif chosen == "none":
            chosen = "client_secret_basic"
        return ClientIdentity(info["client_id"], secret, chosen)

    def _grant(self, key: str, found: Discovery, identity: ClientIdentity, scope: str | None) -> dict[str, Any]:
        token_endpoint = found.endpoint("token_endpoint")
        assert token_endpoint is not None  # discovery guarantees it
        resource = found.resource
        if self.grant == "client_credentials":
            params: dict[str, Any] = {"scope": scope, "resource": resource}
        elif self.grant == JWT_BEARER:
            assert self._assertion_provider is not None
            try:
                assertion = self._assertion_provider(found.issuer, resource or key)
            except Exception as exc:
                raise AuthError(f"assertion_provider failed: {type(exc).__name__}") from exc
            params = {"assertion": assertion, "scope": scope, "resource": resource}
        else:
            return self._authorization_code(found, identity, scope)
        return self._token(identity, found.issuer, token_endpoint, self.grant, params)

    def _authorization_code(self, found: Discovery, identity: ClientIdentity, scope: str | None) -> dict[str, Any]:
        endpoint = found.endpoint("authorization_endpoint")
        token_endpoint = found.endpoint("token_endpoint")
        if endpoint is None or token_endpoint is None:
            raise AuthError("the authorization server metadata has no authorization_endpoint")
        from authlib.common.security import generate_token  # on first use: see _tokens.py
        from authlib.integrations.httpx_client import OAuth2Client

        redirect = self._redirect()
        verifier = generate_token(64)
        state = generate_token(32)
        with OAuth2Client(
            client_id=identity.client_id, redirect_uri=redirect, scope=scope, code_challenge_method="S256"
        ) as client:
            url, _ = client.create_authorization_url(
                endpoint, state=state, code_verifier=verifier, resource=found.resource
            )
        callback = self._authorize(url, redirect)
        query = parse_qs(urlsplit(callback).query)
        if query.get("state", [None])[0] != state:
            raise AuthError("the authorization callback's state does not match the request (possible forgery)")
        if "error" in query:
            raise AuthError(f"the authorization server refused: {query['error'][0][:100]}")
        code = query.get("code", [None])[0]
        if not code:
            raise AuthError("the authorization callback carries no code")
        params = {"code": code, "redirect_uri": redirect, "code_verifier": verifier, "resource": found.resource}
        return self._token(identity, found.issuer, token_endpoint, "authorization_code", params)

    def _authorize(self, url: str, redirect: str) -> str:
        if self._on_authorize is not None:
            try:
                return str(self._on_authorize(url))
            except Exception as exc:
                raise AuthError(f"on_authorize failed: {type(exc).__name__}") from exc
        listener = LoopbackListener(redirect)
        open_browser(url)
        return listener.wait(redirect, self.authorize_timeout)

    def _redirect(self) -> str:
        if self._frozen_redirect is None:
            host, port, path = loopback_redirect(self.redirect_uri)
            if port == 0:
                port = free_port(host)
            netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            self._frozen_redirect = urlunsplit(("http", netloc, path, "", ""))
        return self._frozen_redirect

    def _refresh(self, key: str, record: dict[str, Any]) -> dict[str, Any]:
        tokens = dict(record.get("tokens") or {})
        client = record.get("client") or {}
        token_endpoint = record.get("token_endpoint")
        if not isinstance(token_endpoint, str) or not client.get("client_id"):
            raise AuthError("nothing known of the authorization server to refresh with")
        identity = ClientIdentity(
            client["client_id"],
            client.get("client_secret"),
            client.get("token_endpoint_auth_method") or "none",
            self._private_key_pem if client["client_id"] == self.client_id else None,
            self.signing_algorithm,
        )
        params = {"refresh_token": tokens.get("refresh_token"), "resource": record.get("resource")}
        new = self._token(identity, str(record.get("issuer")), token_endpoint, "refresh_token", params)
        new.setdefault("refresh_token", tokens.get("refresh_token"))
        new["requested_scope"] = tokens.get("requested_scope")
        record["tokens"] = new
        self.storage.save(key, record)
        logger.info("refreshed the token for %s", _origin(key))
        return new

    def _token(
        self, identity: ClientIdentity, issuer: str, endpoint: str, grant: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        return request_token(identity, endpoint, issuer, grant, params, timeout=self.timeout, verify=self.verify)
