""":class:`OAuth`: MCP authorization (OAuth 2.1) for the HTTP and WebSocket
transports.

A transport asks :meth:`OAuth.bearer` for the token of its server before each
request, and on a 401 or 403 hands the challenge to :meth:`OAuth.challenge`,
which discovers the authorization server, identifies the client, obtains a
token (refreshing first when it can) and says whether a retry makes sense.
Every step runs under one lock, so concurrent 401s cause one flow.

What an authorization server issued (tokens, a registration and its secret)
is kept with its issuer and goes to no other: when the server's metadata
starts naming another authorization server, they are discarded and the flow
starts anew there; a pre-registered client is used with its own issuer only.

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
from urllib.parse import urlsplit, urlunsplit

import httpx

from .._protocol._peer_text import peer_text
from ._binding import bound_record, pre_registered_issuer
from ._browser import LoopbackListener, free_port, loopback_redirect, open_browser, reusable_redirect
from ._callback import authorization_code
from ._discovery import AuthError, Discovery, canonical, check_pkce, discover, parse_challenge
from ._fetch import Answer, exchange, oauth_client, require_secure, require_url, shown
from ._fetch import origin as _origin
from ._storage import MemoryTokenStorage, TokenStorage
from ._tokens import (
    JWT_BEARER,
    REGISTRATION_METHODS,
    ClientIdentity,
    authorization_url,
    choose_auth_method,
    request_token,
)

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


class OAuth:
    """OAuth 2.1 authorization for MCP servers over HTTP (and the WebSocket upgrade).

    Args:
        client_name: the name registered with the authorization server.
        redirect_uri: loopback redirect URI; port 0 picks a free port (fixed
            for this object's life, so a registration stays valid), or the
            port a stored registration registered, when it is free.
        scopes: scopes to request; None: what the server asks for
            (``WWW-Authenticate``, else its ``scopes_supported``, else none).
        client_id: a pre-registered client id (skips registration).
        client_secret: its secret, if it has one.
        client_issuer: the issuer of the authorization server ``client_id`` is
            registered with; its credentials go to no other (a server naming
            another one fails with :class:`AuthError`). None: the first
            authorization server this object uses them with (or the one a
            stored record names) is taken for it.
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
        timeout: seconds for each request to an authorization server, whole
            (connecting, then its answer to the last byte).
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
        client_issuer: str | None = None,
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
        if client_issuer is not None and not client_id:
            raise ValueError("client_issuer names where a pre-registered client_id is registered: give the client_id")
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
        #: The issuer the pre-registered client belongs to (given, or the first one met).
        self.client_issuer = client_issuer
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
        require_secure(server, "the bearer token")
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
        with oauth_client(self.timeout, self.verify) as http:
            found = discover(http, key, params)
            record = self.storage.load(key) or {}
            if self.client_id:
                self.client_issuer = pre_registered_issuer(self.client_id, self.client_issuer, found, record, key)
            record = bound_record(self.storage, key, found, record)
            if self.grant == "authorization_code":
                check_pkce(found)  # before anything is sent to the authorization server
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
        challenged = params.get("scope", "").split()
        if self.scopes is not None:
            asked = list(self.scopes)
        elif challenged:
            asked = challenged
        else:
            asked = list(found.scopes_supported)
        if status == 403:
            # A step-up asks what was asked before and what the challenge names, whatever
            # the host chose: the challenge's scopes are what the operation needs (MCP).
            tokens = record.get("tokens") or {}
            asked = list(dict.fromkeys([*str(tokens.get("requested_scope") or "").split(), *asked, *challenged]))
            wanted = frozenset(asked)
            seen, count = self._step_ups.get(key, (frozenset(), 0))
            count = count + 1 if wanted == seen else 1
            if count > MAX_STEP_UPS:
                refused = peer_text(" ".join(asked), quote=True)  # the server's words, up to a header long
                raise AuthError(f"the server still refuses scope {refused} after {MAX_STEP_UPS} step-ups")
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
        saved = record.get("client")  # the record is this issuer's (bound_record saw to it)
        if isinstance(saved, dict) and saved.get("client_id") and self._registered_redirect_usable(saved):
            return ClientIdentity(
                saved["client_id"],
                saved.get("client_secret"),
                saved.get("token_endpoint_auth_method") or "none",
                redirect_uri=saved.get("redirect_uri"),
            )
        if self.client_metadata_url and found.metadata.get("client_id_metadata_document_supported") is True:
            return ClientIdentity(self.client_metadata_url, None, "none")
        registration = found.endpoint("registration_endpoint")
        if registration is None:
            raise AuthError("no client_id was given and the authorization server offers no client registration")
        return self._register(http, registration, supported, scope)

    def _registered_redirect_usable(self, saved: dict[str, Any]) -> bool:
        """Whether this flow can use the redirect URI a stored registration registered (see
        :func:`reusable_redirect`); on True, the flow uses it."""
        if self.grant != "authorization_code":
            return True  # no redirect in the grant
        registered = saved.get("redirect_uri")
        if self._frozen_redirect is not None:
            return registered == self._frozen_redirect
        self._frozen_redirect = reusable_redirect(registered, self.redirect_uri)
        return self._frozen_redirect is not None

    def _register(self, http: httpx.Client, endpoint: str, supported: Any, scope: str | None) -> ClientIdentity:
        methods = supported if isinstance(supported, list) and supported else ["client_secret_basic"]
        method = next((m for m in REGISTRATION_METHODS if m in methods), "none")
        interactive = self.grant == "authorization_code"
        redirect = self._redirect() if interactive else None
        body: dict[str, Any] = {
            "client_name": self.client_name,
            "redirect_uris": [redirect] if redirect else [],
            "grant_types": ["authorization_code", "refresh_token"] if interactive else [self.grant],
            "response_types": ["code"] if interactive else [],
            "token_endpoint_auth_method": method,
            # MCP authorization (2026-07-28) asks for one: OIDC servers take its absence
            # for "web", whose rules refuse a loopback redirect URI.
            "application_type": "native",
        }
        if scope:
            body["scope"] = scope
        try:
            answer = exchange(http, "POST", endpoint, json=body)
        except httpx.HTTPError as exc:
            raise AuthError(f"client registration at {shown(endpoint)} failed: {type(exc).__name__}") from exc
        return _registered_identity(endpoint, answer, method, redirect)

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
        require_url(endpoint, "the authorization_endpoint")  # before authlib takes it apart
        from authlib.common.security import generate_token  # on first use: see _tokens.py

        redirect = self._redirect()
        verifier = generate_token(64)
        state = generate_token(32)
        url = authorization_url(
            endpoint,
            client_id=identity.client_id,
            redirect_uri=redirect,
            scope=scope,
            state=state,
            code_verifier=verifier,
            resource=found.resource,
        )
        # Checked before the code goes to any token endpoint (RFC 9207 section 2.4).
        code = authorization_code(self._authorize(url, redirect, state), state, found.metadata)
        params = {"code": code, "redirect_uri": redirect, "code_verifier": verifier, "resource": found.resource}
        return self._token(identity, found.issuer, token_endpoint, "authorization_code", params)

    def _authorize(self, url: str, redirect: str, state: str) -> str:
        require_secure(url, "the authorization request")
        if self._on_authorize is not None:
            try:
                return str(self._on_authorize(url))
            except Exception as exc:
                raise AuthError(f"on_authorize failed: {type(exc).__name__}") from exc
        # Only the response to this request ends the wait: any local process can reach the
        # listener, and a forged callback taken first would fail the flow.
        listener = LoopbackListener(redirect, state)
        try:
            open_browser(url)
        except BaseException as exc:
            listener.close()  # else it holds the redirect's port, and every later flow fails to bind it
            if isinstance(exc, Exception):
                raise AuthError(f"opening the browser failed: {type(exc).__name__}") from exc
            raise
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
        if not isinstance(tokens.get("refresh_token"), str):  # a server's answer, kept as it came
            raise AuthError("the refresh token is not a string: there is nothing to refresh with")
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


def _registered_identity(endpoint: str, answer: Answer, method: str, redirect: str | None) -> ClientIdentity:
    """The client a registration answer made (RFC 7591 section 3.2), checked before it is saved."""
    info = answer.json()
    if answer.status not in (200, 201) or not isinstance(info, dict) or not isinstance(info.get("client_id"), str):
        # RFC 7591 section 3.2.2: a refusal's ``error`` says why (invalid_redirect_uri...).
        error = info.get("error") if isinstance(info, dict) and answer.status >= 400 else None
        why = f": {peer_text(error, 100)}" if isinstance(error, str) else ""
        raise AuthError(f"client registration at {shown(endpoint)} answered HTTP {answer.status}{why}")
    secret = info.get("client_secret") if isinstance(info.get("client_secret"), str) else None
    given = info.get("token_endpoint_auth_method")
    chosen = given if isinstance(given, str) else method
    if secret is None:
        chosen = "none"
    elif chosen == "none":
        chosen = "client_secret_basic"
    if chosen not in REGISTRATION_METHODS:  # refused before it is saved, and reused by every flow
        raise AuthError(
            f"client registration at {shown(endpoint)} chose the token endpoint auth method"
            f" {peer_text(chosen, 60, quote=True)}, which this client cannot use"
        )
    return ClientIdentity(info["client_id"], secret, chosen, redirect_uri=redirect)
