"""Requirements of the texts behind the OAuth and HTTP hardening, each checked against a peer
on 127.0.0.1: MCP authorization 2026-07-28 (dynamic registration names an
``application_type``, a refused registration says why), RFC 6749 section 10.12 with the MCP
rule to discard a redirect without the request's ``state`` (a local process cannot end the
flow with a forged callback), and the HTML Living Standard's ``retry`` field (any run of
ASCII digits is a reconnection time, however long).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import pytest
from raw_http import WAIT

import exmcp_actors as mcp
from tests.hostile_as import HostileAS
from tests.test_auth_hostile_as import run_flow

# -- dynamic client registration (MCP authorization 2026-07-28) --------------------------------


def _registrations(peer: HostileAS) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in peer.requests if urlsplit(r.path).path == "/register"]


def test_a_dynamic_registration_names_the_client_a_native_application() -> None:
    # "MCP clients MUST specify an appropriate application_type during Dynamic Client
    # Registration": a loopback redirect is a native application's (OIDC registration).
    with HostileAS() as peer:
        auth = mcp.OAuth(on_authorize=peer.approve, timeout=WAIT)
        assert run_flow(auth, peer)[0] is True
        [registration] = _registrations(peer)
    assert registration["application_type"] == "native"
    assert registration["redirect_uris"] == [auth._redirect()]


@pytest.mark.parametrize(
    ("error", "shown"),
    [("invalid_redirect_uri", "invalid_redirect_uri"), ("bad\x1b]0;pwned\x07\r\nforged", "bad\\x1b]0;pwned")],
)
def test_a_refused_registration_says_the_servers_error_code_escaped(error: str, shown: str) -> None:
    # "When a registration request is rejected, clients SHOULD surface a meaningful error."
    with HostileAS() as peer:
        peer.routes["/register"] = lambda ex: ex.json("400 Bad Request", {"error": error, "error_description": "x"})
        auth = mcp.OAuth(on_authorize=peer.approve, timeout=WAIT)
        assert run_flow(auth, peer)[0] is False
    assert auth.last_error is not None and "answered HTTP 400" in auth.last_error and shown in auth.last_error
    assert not any(c in auth.last_error for c in "\x1b\x07\r\n")
