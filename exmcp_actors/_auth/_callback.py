"""Reading the authorization response that came back on the redirect URI.

In this order, each before anything of the response is acted on: ``state``
(forgery), then the issuer (RFC 9207 section 2.4: the mix-up defence), then
``error``, then ``code``. On an issuer mismatch the response's ``error`` and
``error_description`` are neither acted on nor shown: they may come from
another authorization server.
"""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .._protocol._peer_text import peer_text
from ._discovery import AuthError

__all__ = ["authorization_code", "carries_state"]


def carries_state(callback_url: str, state: str) -> bool:
    """Whether the authorization response at ``callback_url`` carries ``state``, once: whether
    it can answer the request made with that state (anything else is a forgery, or stale)."""
    returned = parse_qs(urlsplit(callback_url).query, keep_blank_values=True).get("state", [])
    return len(returned) == 1 and secrets.compare_digest(returned[0].encode(), state.encode())


def authorization_code(callback_url: str, state: str, metadata: dict[str, Any]) -> str:
    """The code of an authorization response, once the response is known to answer our request.

    ``metadata`` is the validated metadata of the authorization server the
    request went to: its ``issuer`` is what a present ``iss`` must equal, and
    ``authorization_response_iss_parameter_supported`` says whether ``iss``
    must be present.

    Raises:
        AuthError: forged (``state``), from another authorization server
            (``iss``), a refusal (``error``), or no code.
    """
    # Blank values kept: an empty iss is a wrong iss, not a missing one.
    if not carries_state(callback_url, state):
        raise AuthError("the authorization callback's state does not match the request (possible forgery)")
    query = parse_qs(urlsplit(callback_url).query, keep_blank_values=True)
    _check_issuer(query.get("iss"), metadata)
    if "error" in query:
        error = peer_text(query["error"][0], 100)
        description = query.get("error_description", [""])[0]
        raise AuthError(
            f"the authorization server refused: {error}" + (f": {peer_text(description)}" if description else "")
        )
    codes = query.get("code", [])
    if len(codes) != 1 or not codes[0]:
        raise AuthError("the authorization callback carries no code")
    return codes[0]


def _check_issuer(values: list[str] | None, metadata: dict[str, Any]) -> None:
    """RFC 9207 section 2.4, as MCP authorization applies it: a present ``iss`` is always
    compared, by simple string comparison (no normalization at all); a missing one is
    refused when the server advertises that it sends it."""
    expected = metadata.get("issuer")
    if values is None:
        if metadata.get("authorization_response_iss_parameter_supported") is True:
            raise AuthError(
                f"the authorization server {peer_text(expected)} says it identifies itself in its responses (iss),"
                " but this one carries no iss (possible mix-up attack): its code is not redeemed"
            )
        return
    if len(values) != 1:
        raise AuthError("the authorization response carries iss more than once: it is not redeemed")
    if values[0] != expected:
        raise AuthError(
            f"the authorization response comes from issuer {peer_text(values[0], quote=True)},"
            f" not {peer_text(expected, quote=True)} (possible mix-up attack): its code is not redeemed"
        )
