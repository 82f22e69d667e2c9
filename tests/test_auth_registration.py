"""Dynamic Client Registration as MCP 2026-07-28 asks it (SEP-837): the client says which
``application_type`` it is, since OpenID Connect servers assume ``"web"`` when it is left out
and then refuse a loopback redirect URI. This client's redirect is always loopback: native.
A refused registration says why ("clients SHOULD surface a meaningful error").

A client's redirect URIs are registered and matched exactly (MCP; RFC 8252 section 7.3): a
stored registration is used again with the loopback redirect it registered, against the SDK's
server, and replaced by a new one when that redirect cannot be had.

Registrations the client cannot use (an auth method it lacks): tests/test_auth_hostile_as.py."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

import exmcp_actors as mcp
from tests.hostile_as import WAIT, HostileAS, run_flow
from tests.peers.auth_server import AuthPeer, follow


def register(auth: mcp.OAuth) -> dict[str, Any]:
    """Register ``auth`` with an authorization server that records the request body."""
    bodies: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(201, json={"client_id": "issued", "token_endpoint_auth_method": "none"})

    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        identity = auth._register(http, "http://as.test/register", ["none"], None)
    assert identity.client_id == "issued"
    [body] = bodies
    return body


JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


@pytest.mark.parametrize("grant", ["authorization_code", JWT_BEARER])
def test_dynamic_registration_names_the_client_a_native_application(grant: str) -> None:
    auth = mcp.OAuth(client_name="host", grant=grant, assertion_provider=lambda audience, resource: "id-jag")
    body = register(auth)
    assert body["application_type"] == "native"
    if grant == "authorization_code":
        assert body["redirect_uris"][0].startswith("http://127.0.0.1:")


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


# -- the registered redirect URI (MCP: redirect URIs registered, matched exactly; RFC 8252 7.3) --


def _run_without_tokens(sdk: AuthPeer, storage: mcp.MemoryTokenStorage) -> mcp.OAuth:
    """A new run (a new ``OAuth``) on the stored registration, its tokens gone (revoked, or
    the refresh token expired): it must authorize again, in the browser."""
    [key] = storage._records
    record = storage.load(key)
    assert record is not None
    record.pop("tokens")
    storage.save(key, record)
    auth = mcp.OAuth(on_authorize=follow, storage=storage, timeout=WAIT)
    with mcp.connect(sdk.url, auth=auth, reconnect=False) as client:
        client.list_tools()
    return auth


@pytest.fixture
def registered() -> Iterator[tuple[AuthPeer, mcp.MemoryTokenStorage, str]]:
    """The SDK's authorization server (it matches redirect URIs exactly), a storage holding
    the registration a first run made, and the redirect URI it registered."""
    with AuthPeer() as sdk:
        storage = mcp.MemoryTokenStorage()
        first = mcp.OAuth(on_authorize=follow, storage=storage, timeout=WAIT)
        with mcp.connect(sdk.url, auth=first, reconnect=False) as client:
            client.list_tools()
        yield sdk, storage, first._redirect()


def test_a_stored_registration_is_used_with_the_redirect_uri_it_registered(
    registered: tuple[AuthPeer, mcp.MemoryTokenStorage, str],
) -> None:
    sdk, storage, redirect = registered
    later = _run_without_tokens(sdk, storage)
    assert later._redirect() == redirect
    assert len(sdk.provider.clients) == 1 and [grant for grant, _ in sdk.provider.issued] == ["code", "code"]


def test_a_stored_registration_whose_loopback_port_is_taken_now_is_replaced_by_a_new_one(
    registered: tuple[AuthPeer, mcp.MemoryTokenStorage, str],
) -> None:
    sdk, storage, redirect = registered
    port = urlsplit(redirect).port
    assert port is not None
    with socket.create_server(("127.0.0.1", port)):  # another program holds the port now
        later = _run_without_tokens(sdk, storage)
    assert later._redirect() != redirect and len(sdk.provider.clients) == 2


def test_a_stored_registration_that_does_not_say_its_redirect_uri_is_replaced_by_a_new_one(
    registered: tuple[AuthPeer, mcp.MemoryTokenStorage, str],
) -> None:
    sdk, storage, _ = registered
    [key] = storage._records
    record = storage.load(key)
    assert record is not None
    record["client"].pop("redirect_uri", None)  # as an earlier version stored it
    storage.save(key, record)
    _run_without_tokens(sdk, storage)
    assert len(sdk.provider.clients) == 2
