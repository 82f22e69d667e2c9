"""Dynamic Client Registration as MCP 2026-07-28 asks it (SEP-837): the client says which
``application_type`` it is, since OpenID Connect servers assume ``"web"`` when it is left out
and then refuse a loopback redirect URI. This client's redirect is always loopback: native."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

import exmcp_actors as mcp


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
