"""Token endpoint requests, through authlib: client authentication
(``client_secret_basic``, ``client_secret_post``, ``none``,
``private_key_jwt``), the grants (authorization code with PKCE, refresh,
client credentials, jwt-bearer) and RFC 8707 ``resource`` on each.

authlib does the encoding, the client authentication, the JWT signing and
the parsing of the token response; this module chooses what to send.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

import httpx
from authlib.integrations.httpx_client import OAuth2Client
from authlib.oauth2.rfc7523 import PrivateKeyJWT

from ._discovery import AuthError

__all__ = ["JWT_BEARER", "ClientIdentity", "choose_auth_method", "request_token"]

#: RFC 7523 authorization grant (cross-app access hands an ID-JAG with it).
JWT_BEARER: Final = "urn:ietf:params:oauth:grant-type:jwt-bearer"

_SECRET_METHODS: Final = ("client_secret_basic", "client_secret_post")


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """Who the client is at one authorization server."""

    client_id: str
    client_secret: str | None
    auth_method: str
    private_key_pem: str | None = None
    signing_algorithm: str | None = None

    def record(self) -> dict[str, Any]:
        return {
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "token_endpoint_auth_method": self.auth_method,
        }


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


def _algorithm(pem: str, given: str | None) -> str:
    if given:
        return given
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise AuthError("private_key_pem is not a readable PEM private key") from exc
    return "ES256" if isinstance(key, ec.EllipticCurvePrivateKey) else "RS256"


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
    secret = identity.private_key_pem if identity.auth_method == "private_key_jwt" else identity.client_secret
    client = OAuth2Client(
        client_id=identity.client_id,
        client_secret=secret,
        token_endpoint_auth_method=identity.auth_method,
        timeout=timeout,
        verify=verify,
        follow_redirects=False,
    )
    with client:
        if identity.auth_method == "private_key_jwt":
            assert identity.private_key_pem is not None
            # A fresh object per request: authlib stores the jti it adds in ``claims``.
            # The audience is the issuer (the token endpoint is also accepted by most servers).
            client.register_client_auth_method(
                PrivateKeyJWT(
                    token_endpoint,
                    claims={"aud": issuer},
                    alg=_algorithm(identity.private_key_pem, identity.signing_algorithm),
                )
            )
        body = {k: v for k, v in params.items() if v is not None}
        try:
            token = client.fetch_token(token_endpoint, grant_type=grant_type, **body)
        except httpx.HTTPError as exc:
            raise AuthError(f"token request to {token_endpoint} failed: {type(exc).__name__}") from exc
        except Exception as exc:  # authlib's OAuthError and its parse errors
            error = getattr(exc, "error", None) or type(exc).__name__
            raise AuthError(f"the authorization server refused the {grant_type} token request: {error}") from exc
    result = dict(token)
    if not isinstance(result.get("access_token"), str):
        raise AuthError("the token response has no access_token")
    if "expires_at" not in result and isinstance(result.get("expires_in"), int | float):
        result["expires_at"] = time.time() + float(result["expires_in"])
    return result
