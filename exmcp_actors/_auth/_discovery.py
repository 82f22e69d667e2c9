"""Finding the authorization server of an MCP server (MCP authorization
2025-11-25, with the 2025-03-26 fallbacks).

1. ``WWW-Authenticate`` of the 401/403: ``resource_metadata``, ``scope``, ``error``.
2. Protected Resource Metadata (RFC 9728): the URL the header names, else the
   path-based well-known URL, else the root one. Its ``resource`` must match
   the MCP server URL. No metadata at all: a 2025-03-26 server, which is its
   own authorization server.
3. Authorization Server Metadata: RFC 8414 then OpenID discovery, in the
   order the spec gives for issuers with and without a path; none found on a
   2025-03-26 server: the default endpoints ``/authorize``, ``/token``, ``/register``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import httpx

from ._errors import AnswerRefused, AuthError
from ._fetch import exchange, misbehaviour

__all__ = ["AuthError", "Discovery", "canonical", "discover", "parse_challenge", "same_origin"]

logger = logging.getLogger("exmcp_actors.auth")

# auth-param = token "=" ( token / quoted-string ), RFC 9110 section 11.2.
_PARAM: Final = re.compile(r'([A-Za-z0-9_\-.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,"]+))')


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
    """Same scheme, host and port."""
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme.lower(), pa.hostname, pa.port) == (pb.scheme.lower(), pb.hostname, pb.port)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def _resource_allowed(server: str, resource: str) -> bool:
    """The metadata's ``resource`` covers the server URL: same origin, and a path prefix of it."""
    if not same_origin(server, resource):
        return False
    path = urlsplit(server).path.rstrip("/") + "/"
    prefix = urlsplit(resource).path.rstrip("/") + "/"
    return path.startswith(prefix)


@dataclass(slots=True)
class Discovery:
    """What discovery found for one MCP server."""

    resource: str | None
    issuer: str
    metadata: dict[str, Any]
    scopes_supported: list[str] = field(default_factory=list)

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
        raise AuthError(f"cannot fetch metadata from {_origin(url)}: {type(exc).__name__}") from exc
    if answer.status >= 500:
        raise AuthError(f"metadata at {_origin(url)} answered HTTP {answer.status}")
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
            authorization server, or a server failed.
    """
    prm: dict[str, Any] | None = None
    for url in _prm_urls(server, challenge.get("resource_metadata")):
        prm = _get_json(http, url)
        if prm is not None:
            break
    if prm is None:
        # 2025-03-26: the MCP server's origin is the authorization server. Its
        # metadata's issuer is not checked: servers of that revision often name
        # another one (the Python SDK refuses them, and so fails that scenario).
        issuer = _origin(server)
        metadata: dict[str, Any] = _fetch_as_metadata(http, issuer) or {
            "issuer": issuer,
            "authorization_endpoint": f"{issuer}/authorize",
            "token_endpoint": f"{issuer}/token",
            "registration_endpoint": f"{issuer}/register",
        }
        logger.debug("no protected resource metadata for %s: using %s", _origin(server), issuer)
        return Discovery(None, issuer, metadata)
    resource = prm.get("resource")
    if isinstance(resource, str) and not _resource_allowed(server, resource):
        raise AuthError(
            f"the protected resource metadata names resource {resource!r}, which does not match the server URL"
        )
    servers = prm.get("authorization_servers")
    if not isinstance(servers, list) or not servers or not isinstance(servers[0], str):
        raise AuthError("the protected resource metadata names no authorization server")
    issuer = servers[0]
    found = _fetch_as_metadata(http, issuer)
    if found is None:
        raise AuthError(f"no authorization server metadata found for {issuer}")
    named = found.get("issuer")
    if isinstance(named, str) and named.rstrip("/") != issuer.rstrip("/"):
        # RFC 8414 section 3.3: metadata naming another issuer may be a mix-up attack.
        raise AuthError(f"the authorization server metadata of {issuer} names another issuer, {named!r}")
    scopes = prm.get("scopes_supported")
    return Discovery(
        canonical(resource) if isinstance(resource, str) else canonical(server),
        issuer,
        found,
        [s for s in scopes if isinstance(s, str)] if isinstance(scopes, list) else [],
    )


def _fetch_as_metadata(http: httpx.Client, issuer: str) -> dict[str, Any] | None:
    for url in _as_metadata_urls(issuer):
        metadata = _get_json(http, url)
        if metadata is not None and isinstance(metadata.get("token_endpoint"), str):
            return metadata
    return None
