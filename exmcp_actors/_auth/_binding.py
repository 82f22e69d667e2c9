"""What an authorization server issued stays with it: tokens, a registration
and its secret are kept with the issuer that issued them, and go to no other.

A stored record (one per MCP server) holds ``issuer`` next to ``tokens`` and
``client``; the flow writes the three together, so the record's tokens and
client are always its issuer's. When the server's protected resource metadata
names another authorization server, the record is discarded and the flow
starts anew there (as the MCP Python SDK drops its tokens and registration).
A pre-registered client cannot be re-created elsewhere: meeting another issuer
is an error for the host to settle, as MCP authorization asks.
"""

from __future__ import annotations

import logging
from typing import Any

from .._protocol._peer_text import peer_text
from ._discovery import AuthError, Discovery, same_issuer
from ._fetch import origin as shown_origin
from ._storage import TokenStorage

__all__ = ["bound_record", "pre_registered_issuer"]

logger = logging.getLogger("exmcp_actors.auth")


def pre_registered_issuer(
    client_id: str, given: str | None, found: Discovery, record: dict[str, Any], server: str
) -> str:
    """The issuer the pre-registered ``client_id`` belongs to, checked against what ``server`` names now.

    ``given`` is the host's ``client_issuer``, or the issuer this object met
    first; without either, the one the stored record of ``client_id`` names;
    without that, the issuer found now (first use).

    Raises:
        AuthError: the server names an issuer the client is not registered with.
    """
    bound = given
    client = record.get("client")
    if bound is None and isinstance(client, dict) and client.get("client_id") == client_id:
        held = record.get("issuer")
        bound = held if isinstance(held, str) else None
    if bound is None:
        return found.issuer
    if not same_issuer(bound, found.issuer):
        raise AuthError(
            f"the pre-registered client_id belongs to the authorization server {peer_text(bound)}, but"
            f" {shown_origin(server)} now names {peer_text(found.issuer)}: its credentials are not sent there"
            " (give client_issuer= if the client is registered there)"
        )
    return bound


def bound_record(storage: TokenStorage, server: str, found: Discovery, record: dict[str, Any]) -> dict[str, Any]:
    """``record``, or an empty one (saved at once) when what it holds is not from ``found.issuer``.

    A record that names no issuer (written by a host, or by hand) has tokens
    nobody can say who issued: it is discarded too, so its refresh token goes nowhere.
    """
    held = record.get("issuer")
    if not record or (isinstance(held, str) and same_issuer(held, found.issuer)):
        return record
    if isinstance(held, str):
        logger.warning(
            "the authorization server of %s changed from %s to %s: its tokens and client registration"
            " are discarded, and the authorization starts anew",
            shown_origin(server),
            peer_text(held),
            peer_text(found.issuer),
        )
    else:
        logger.debug("the stored record of %s names no authorization server: discarded", shown_origin(server))
    storage.save(server, {})  # no later step, and no later run, finds the other server's tokens
    return {}
