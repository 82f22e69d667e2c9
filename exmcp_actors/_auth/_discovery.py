"""Finding the authorization server of an MCP server (MCP authorization
2025-11-25, with the 2025-03-26 fallbacks).

1. ``WWW-Authenticate`` of the 401/403: ``resource_metadata``, ``scope``, ``error``.
2. Protected Resource Metadata (RFC 9728): the URL the header names, else the
   path-based well-known URL, else the root one. It must have a ``resource``
   that covers the MCP server URL (RFC 9728 section 3.3). No metadata at all: a
   2025-03-26 server, which is its own authorization server.
3. Authorization Server Metadata: RFC 8414 then OpenID discovery, in the
   order the spec gives for issuers with and without a path. Its ``issuer``
   must be the one the well-known URL was built from (RFC 8414 section 3.3);
   on a 2025-03-26 server, one on the server's own origin. None found on a
   2025-03-26 server: the default endpoints ``/authorize``, ``/token``, ``/register``.

Every value a server supplied that reaches an exception text goes through
:func:`peer_text`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import httpx

from .._protocol._peer_text import peer_text
from ._errors import AnswerRefused, AuthError
from ._fetch import exchange, misbehaviour, require_url
from ._fetch import origin as shown_origin

__all__ = [
    "AuthError",
    "Discovery",
    "canonical",
    "check_pkce",
    "discover",
    "parse_challenge",
    "same_issuer",
    "same_origin",
]

logger = logging.getLogger("exmcp_actors.auth")

# auth-param = token "=" ( token / quoted-string ), RFC 9110 section 11.2. A name starts where
# no name character precedes it: else every position of a long run of them (a hostile
# challenge is up to a response head long) would start a match scanning to the run's end.
_PARAM: Final = re.compile(r'(?<![A-Za-z0-9_\-.])([A-Za-z0-9_\-.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,"]+))')


def parse_challenge(header: str | None) -> dict[str, str]:
    """The auth-params of a ``Bearer`` challenge (``resource_metadata``, ``scope``, ``error``...)."""
    if not header:
        return {}
    start = header.lower().find("bearer")
    if start < 0:
        return {}
    params: dict[str, str] = {}
    for match in _PARAM.finditer(header[start + len("bearer") :]):
        quoted, bare = match.group(2), match.group(3)
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        params.setdefault(match.group(1).lower(), value)
    return params


def canonical(url: str) -> str:
    """The canonical resource URI (RFC 8707): lower-case scheme and host, no fragment."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path, parts.query, ""))


def same_origin(a: str, b: str) -> bool:
    """Same scheme, host and port (False when either is no usable URL)."""
    try:
        pa, pb = urlsplit(a), urlsplit(b)
        return (pa.scheme.lower(), pa.hostname, pa.port) == (pb.scheme.lower(), pb.hostname, pb.port)
    except ValueError:  # a port that is no number, a broken IPv6 literal
        return False


def same_issuer(a: str, b: str) -> bool:
    """Two issuer identifiers name the same authorization server.

    RFC 8414 asks for identical strings; servers in use differ from what names
    them only in the case of scheme and host and in one trailing slash, which
    never makes them another server, so those are forgiven. Nothing else is.
    """
    try:
        return canonical(a).removesuffix("/") == canonical(b).removesuffix("/")
    except ValueError:
        return a == b


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def _resource_allowed(server: str, resource: str) -> bool:
    """The metadata's ``resource`` covers the server URL: same origin, and a path prefix of it.

    RFC 9728 section 3.3 asks for the very URL; both MCP SDKs also accept a
    parent of it (``https://host`` for ``https://host/mcp``), as servers publish.
    """
    if not same_origin(server, resource):
        return False
    path = urlsplit(server).path.rstrip("/") + "/"
    prefix = urlsplit(resource).path.rstrip("/") + "/"
    return path.startswith(prefix)


@dataclass(slots=True)
class Discovery:
    """What discovery found for one MCP server."""

    resource: str | None
    #: The authorization server the protected resource metadata names (the
    #: server's origin on a 2025-03-26 server): what tokens and clients are bound to.
    issuer: str
    metadata: dict[str, Any]
    scopes_supported: list[str] = field(default_factory=list)
    #: False when no metadata document was found (a 2025-03-26 server's default endpoints).
    documented: bool = True

    def endpoint(self, name: str) -> str | None:
        value = self.metadata.get(name)
        return value if isinstance(value, str) and value else None


def _get_json(http: httpx.Client, url: str) -> dict[str, Any] | None:
    """A metadata document, or None when there is none at ``url`` (any 4xx, too large, or not JSON)."""
    try:
        answer = exchange(http, "GET", url, headers={"Accept": "application/json"})
    except AnswerRefused as exc:
        misbehaviour.warning("metadata-refused", "metadata ignored: %s", exc)
        return None
    except httpx.HTTPError as exc:
        raise AuthError(f"cannot fetch metadata from {shown_origin(url)}: {type(exc).__name__}") from exc
    if answer.status >= 500:
        raise AuthError(f"metadata at {shown_origin(url)} answered HTTP {answer.status}")
    value = answer.json() if answer.status == 200 else None
    return value if isinstance(value, dict) else None


def _prm_urls(server: str, hinted: str | None) -> list[str]:
    parts = urlsplit(server)
    root = f"{_origin(server)}/.well-known/oauth-protected-resource"
    urls = [hinted] if hinted else []
    path = parts.path.rstrip("/")
    if path:
        urls.append(root + path)
    urls.append(root)
    return urls


def _as_metadata_urls(issuer: str) -> list[str]:
    origin = _origin(issuer)
    path = urlsplit(issuer).path.rstrip("/")
    if not path:
        return [f"{origin}/.well-known/oauth-authorization-server", f"{origin}/.well-known/openid-configuration"]
    return [
        f"{origin}/.well-known/oauth-authorization-server{path}",
        f"{origin}/.well-known/openid-configuration{path}",
        f"{origin}{path}/.well-known/openid-configuration",
    ]


def discover(http: httpx.Client, server: str, challenge: dict[str, str]) -> Discovery:
    """Protected resource metadata, then the authorization server's metadata.

    Raises:
        AuthError: the metadata names a resource other than ``server``, or no
            authorization server, or an issuer other than the one asked, or a
            server failed.
    """
    prm: dict[str, Any] | None = None
    for url in _prm_urls(server, challenge.get("resource_metadata")):
        prm = _get_json(http, url)
        if prm is not None:
            break
    if prm is None:
        # 2025-03-26: the MCP server's origin is the authorization server. Such
        # servers often publish an issuer with a path (their endpoints' prefix),
        # so only the origin must be the server's own.
        issuer = _origin(server)
        metadata = _fetch_as_metadata(http, issuer, lambda named: same_origin(named, issuer))
        logger.debug("no protected resource metadata for %s: using %s", shown_origin(server), shown_origin(issuer))
        if metadata is None:
            defaults = {
                "issuer": issuer,
                "authorization_endpoint": f"{issuer}/authorize",
                "token_endpoint": f"{issuer}/token",
                "registration_endpoint": f"{issuer}/register",
            }
            return Discovery(None, issuer, defaults, documented=False)
        return Discovery(None, issuer, metadata)
    resource = prm.get("resource")
    if not isinstance(resource, str):
        raise AuthError("the protected resource metadata has no resource: it cannot be told to be this server's")
    if not _resource_allowed(server, resource):
        raise AuthError(
            f"the protected resource metadata names resource {peer_text(resource, quote=True)},"
            " which does not match the server URL"
        )
    servers = prm.get("authorization_servers")
    if not isinstance(servers, list) or not servers or not isinstance(servers[0], str):
        raise AuthError("the protected resource metadata names no authorization server")
    issuer = servers[0]
    require_url(issuer, "the protected resource metadata names as its authorization server")
    found = _fetch_as_metadata(http, issuer, lambda named: same_issuer(named, issuer))
    if found is None:
        raise AuthError(f"no authorization server metadata found for {peer_text(issuer)}")
    scopes = prm.get("scopes_supported")
    return Discovery(
        canonical(resource),
        issuer,
        found,
        [s for s in scopes if isinstance(s, str)] if isinstance(scopes, list) else [],
    )


def check_pkce(found: Discovery) -> None:
    """Refuse an authorization server whose metadata does not say it supports PKCE with S256.

    MCP authorization: a client MUST verify PKCE support in the metadata and
    refuse to proceed when ``code_challenge_methods_supported`` is absent (for
    OpenID discovery too), and MUST use S256. A 2025-03-26 server without any
    metadata document has nothing to check; that revision requires PKCE of it.

    Raises:
        AuthError: the metadata lists no S256.
    """
    if not found.documented:
        return
    methods = found.metadata.get("code_challenge_methods_supported")
    if not isinstance(methods, list):
        raise AuthError(
            f"the authorization server {peer_text(found.issuer)} does not list code_challenge_methods_supported,"
            " so it cannot be known to support PKCE: the authorization is not attempted"
        )
    if "S256" not in methods:
        raise AuthError(
            f"the code_challenge_methods_supported of the authorization server {peer_text(found.issuer)} are"
            f" {peer_text(methods)}, without S256: the authorization is not attempted"
        )


def _fetch_as_metadata(http: httpx.Client, issuer: str, names_issuer: Callable[[str], bool]) -> dict[str, Any] | None:
    """The first metadata document of ``issuer`` with a token endpoint, or None.

    Raises:
        AuthError: the document has no ``issuer``, or ``names_issuer`` refuses
            it: metadata naming another issuer may be a mix-up attack (RFC 8414
            section 3.3), and is never used.
    """
    for url in _as_metadata_urls(issuer):
        metadata = _get_json(http, url)
        if metadata is None or not isinstance(metadata.get("token_endpoint"), str):
            continue
        named = metadata.get("issuer")
        if not isinstance(named, str):
            raise AuthError(f"the authorization server metadata of {peer_text(issuer)} has no issuer")
        if not names_issuer(named):
            raise AuthError(
                f"the authorization server metadata of {peer_text(issuer)} names another issuer,"
                f" {peer_text(named, quote=True)}"
            )
        return metadata
    return None
