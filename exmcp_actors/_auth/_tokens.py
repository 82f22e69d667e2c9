"""Token endpoint requests, through authlib: client authentication
(``client_secret_basic``, ``client_secret_post``, ``none``,
``private_key_jwt``), the grants (authorization code with PKCE, refresh,
client credentials, jwt-bearer) and RFC 8707 ``resource`` on each; and the
authorization URL.

authlib does the encoding, the client authentication, the JWT signing and
the parsing of the token response; this module chooses what to send. The
requests go through the flow's own client (``_fetch.py``: https, a deadline,
a bounded answer), never through authlib's httpx integration: from authlib
1.7 that one uses ``httpx2`` whenever it is importable, a second HTTP stack
with its own exceptions and unredacted loggers.
"""

from __future__ import annotations

import functools
import math
import re
import time
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlencode

import httpx

from .._protocol._peer_text import peer_text
from ._errors import AuthError
from ._fetch import Answer, exchange, oauth_client, shown

__all__ = [
    "JWT_BEARER",
    "REGISTRATION_METHODS",
    "ClientIdentity",
    "authorization_url",
    "choose_auth_method",
    "request_token",
]

#: RFC 7523 authorization grant (cross-app access hands an ID-JAG with it).
JWT_BEARER: Final = "urn:ietf:params:oauth:grant-type:jwt-bearer"

_SECRET_METHODS: Final = ("client_secret_basic", "client_secret_post")
#: The token endpoint auth methods of a client without a key (a registered one), in the order preferred.
REGISTRATION_METHODS: Final = (*_SECRET_METHODS, "none")
_BEARER_TOKEN: Final = re.compile("[\x21-\x7e]+")


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """Who the client is at one authorization server."""

    client_id: str
    client_secret: str | None
    auth_method: str
    private_key_pem: str | None = None
    signing_algorithm: str | None = None
    #: The redirect URI a dynamic registration registered (None: not registered by us).
    redirect_uri: str | None = None

    def record(self) -> dict[str, Any]:
        kept = {
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "token_endpoint_auth_method": self.auth_method,
        }
        return kept | ({"redirect_uri": self.redirect_uri} if self.redirect_uri is not None else {})


def choose_auth_method(supported: Any, has_secret: bool, has_key: bool) -> str:
    """The token endpoint auth method to use, among those the server advertises."""
    if has_key:
        return "private_key_jwt"
    if not has_secret:
        return "none"
    # RFC 8414: the default when the server advertises nothing.
    methods = supported if isinstance(supported, list) and supported else ["client_secret_basic"]
    for method in _SECRET_METHODS:
        if method in methods:
            return method
    return "client_secret_basic"


def _signing_key(pem: str, given: str | None) -> tuple[Any, str]:
    """The joserfc key of a PEM private key, and the JWS algorithm to use with it."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from joserfc.jwk import ECKey, OKPKey, RSAKey

    try:
        key = load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise AuthError("private_key_pem is not a readable unencrypted PEM private key") from exc
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return ECKey.import_key(pem), given or "ES256"
    if isinstance(key, rsa.RSAPrivateKey):
        return RSAKey.import_key(pem), given or "RS256"
    return OKPKey.import_key(pem), given or "EdDSA"


class _Session:
    """What authlib's protocol client asks of its HTTP session (``post``), on the flow's client."""

    def __init__(self, http: httpx.Client) -> None:
        self._http = http

    def post(self, url: str, *, data: dict[str, Any], headers: dict[str, str], auth: Any) -> _TokenAnswer:
        # A copy: authlib hands its module-wide default headers, which client
        # authentication would otherwise write the Basic credentials into.
        url, sent, body = auth.prepare("POST", url, dict(headers), urlencode(data))
        return _TokenAnswer(exchange(self._http, "POST", url, headers=sent, content=body), url)


class _TokenAnswer:
    """A token endpoint's answer, as authlib's response parsing reads it."""

    def __init__(self, answer: Answer, url: str) -> None:
        self._answer = answer
        self._url = url
        self.status_code = answer.status

    def json(self) -> Any:
        value = self._answer.json()
        if value is None:
            raise ValueError("the token response is not JSON")
        if isinstance(value, dict):
            for name in ("expires_in", "expires_at"):
                if not _usable_lifetime(value.get(name)):
                    # authlib converts both with int(): a list, an object or an infinity
                    # would escape it as a TypeError or an OverflowError.
                    raise ValueError(f"the token response's {name} is not a number")
        return value

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise AuthError(f"the token endpoint {shown(self._url)} answered HTTP {self.status_code}")


def _usable_lifetime(value: Any) -> bool:
    """Absent, a finite number, or a string (authlib refuses one that is no number, as a ValueError)."""
    return value is None or isinstance(value, str) or (isinstance(value, int | float) and math.isfinite(value))


def _is_bearer_token(value: Any) -> bool:
    """One or more visible ASCII characters: what can go after ``Bearer `` in a header (RFC 6750
    section 2.1 asks for fewer still). A space, a control or a CR LF would split the header (the
    WebSocket upgrade writes it as it is) or make the HTTP client refuse it quoting the token."""
    return isinstance(value, str) and _BEARER_TOKEN.fullmatch(value) is not None


@functools.cache
def _protocol_client_class() -> Any:
    """authlib's protocol client, which has no HTTP of its own (:class:`_Session` is its session)."""
    from authlib.integrations.base_client import OAuthError
    from authlib.oauth2.client import OAuth2Client

    class ProtocolClient(OAuth2Client):  # type: ignore[misc]
        # As in authlib's httpx client: an error answer's description is not vetted (it is never shown).
        oauth_error_class = OAuthError

    return ProtocolClient


def _protocol_client(**kwargs: Any) -> Any:
    return _protocol_client_class()(**kwargs)


def authorization_url(
    endpoint: str,
    *,
    client_id: str,
    redirect_uri: str,
    scope: str | None,
    state: str,
    code_verifier: str,
    resource: str | None,
) -> str:
    """The authorization request URL, with its PKCE S256 challenge and RFC 8707 ``resource``."""
    client = _protocol_client(
        session=None, client_id=client_id, redirect_uri=redirect_uri, scope=scope, code_challenge_method="S256"
    )
    url, _ = client.create_authorization_url(endpoint, state=state, code_verifier=code_verifier, resource=resource)
    return str(url)


def request_token(
    identity: ClientIdentity,
    token_endpoint: str,
    issuer: str,
    grant_type: str,
    params: dict[str, Any],
    *,
    timeout: float,
    verify: bool,
) -> dict[str, Any]:
    """One token request; the token response with ``expires_at`` (epoch seconds) when it has ``expires_in``.

    Raises:
        AuthError: the server refused (its ``error`` code is in the text) or could not be reached.
    """
    # Imported on first use: authlib costs a noticeable part of a second to import,
    # which hosts that never meet a protected server should not pay.
    from authlib.common.errors import AuthlibBaseError as OAuthError
    from authlib.oauth2.rfc7523 import PrivateKeyJWT
    from joserfc.errors import JoseError

    if identity.auth_method not in (*REGISTRATION_METHODS, "private_key_jwt"):
        # authlib would take an unknown name for a callable (a TypeError): a registration
        # answer or a stored record may name any.
        shown_method = peer_text(identity.auth_method, 60, quote=True)
        raise AuthError(f"the token endpoint auth method {shown_method} is not one this client can use")
    secret: Any = identity.client_secret
    method: Any = identity.auth_method
    if identity.auth_method == "private_key_jwt":
        if identity.private_key_pem is None:
            raise AuthError("the client authenticates with private_key_jwt, but no private_key_pem was given")
        secret, alg = _signing_key(identity.private_key_pem, identity.signing_algorithm)
        # The audience is the issuer, as the MCP extension asks. A fresh object
        # per request: authlib stores the jti it adds in ``claims``.
        method = PrivateKeyJWT(token_endpoint, claims={"aud": issuer}, alg=alg)
    body = {k: v for k, v in params.items() if v is not None}
    if identity.auth_method == "client_secret_basic":
        # Also in the body, as RFC 6749 section 4.1.3 allows: some servers (the MCP SDK's) look it up there.
        body["client_id"] = identity.client_id
    with oauth_client(timeout, verify) as http:
        client = _protocol_client(
            session=_Session(http),
            client_id=identity.client_id,
            client_secret=secret,
            token_endpoint_auth_method=method,
        )
        try:
            token = client.fetch_token(token_endpoint, grant_type=grant_type, **body)
        except httpx.HTTPError as exc:
            raise AuthError(f"token request to {shown(token_endpoint)} failed: {type(exc).__name__}") from exc
        except AuthError:  # said by the fetch code (cleartext, answer too large): already a sentence
            raise
        except OAuthError as exc:
            refused = peer_text(exc.error, 100)  # the server's own words: escaped, never raw
            raise AuthError(f"the authorization server refused the {grant_type} token request: {refused}") from exc
        except (ValueError, JoseError) as exc:  # an unusable key or token response
            raise AuthError(f"the {grant_type} token request failed: {type(exc).__name__}") from exc
    result = dict(token)
    if "access_token" not in result:
        raise AuthError("the token response has no access_token")
    if not _is_bearer_token(result["access_token"]):
        raise AuthError(
            "the token response's access_token is no bearer token (RFC 6750: visible ASCII, one or more characters)"
        )
    if "expires_at" not in result and isinstance(result.get("expires_in"), int | float):
        result["expires_at"] = time.time() + float(result["expires_in"])
    return result
