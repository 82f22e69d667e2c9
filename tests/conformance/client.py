"""The client the official MCP conformance suite drives (public API only).

The suite runs ``python tests/conformance/client.py <server-url>`` with
``MCP_CONFORMANCE_SCENARIO`` naming the scenario and, for some,
``MCP_CONFORMANCE_CONTEXT`` holding JSON (client credentials, keys, the
identity provider of cross-app access). Exit 0 once the scenario's calls are
done; the suite judges what it saw on the wire.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

import httpx

import exmcp_actors as mcp

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def follow_redirect(authorization_url: str) -> str:
    """on_authorize without a browser: the suite's server redirects at once."""
    response = httpx.get(authorization_url, follow_redirects=False, timeout=10.0)
    location = response.headers.get("location")
    if response.status_code not in (301, 302, 303, 307, 308) or not location:
        raise RuntimeError(f"the authorization endpoint answered HTTP {response.status_code}, not a redirect")
    return location


def accept_with_defaults(params: dict[str, Any]) -> dict[str, Any]:
    """An elicitation handler that accepts without filling anything: the library applies the defaults."""
    return {"action": "accept", "content": {}}


def context() -> dict[str, Any]:
    raw = os.environ.get("MCP_CONFORMANCE_CONTEXT")
    return json.loads(raw) if raw else {}


def cross_app_assertion(ctx: dict[str, Any]) -> Any:
    """The host's side of cross-app access: trade the IdP's ID token for an ID-JAG (RFC 8693)."""

    def provide(audience: str, resource: str) -> str:
        response = httpx.post(
            ctx["idp_token_endpoint"],
            data={
                "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                "subject_token": ctx["idp_id_token"],
                "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
                "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
                "audience": audience,
                "resource": resource,
                "client_id": ctx.get("idp_client_id", ""),
            },
            timeout=10.0,
        )
        response.raise_for_status()
        token: str = response.json()["access_token"]
        return token

    return provide


def make_auth(scenario: str, ctx: dict[str, Any]) -> mcp.OAuth | None:
    if not scenario.startswith("auth/"):
        return None
    if scenario == "auth/client-credentials-jwt":
        return mcp.OAuth(
            grant="client_credentials",
            client_id=ctx["client_id"],
            private_key_pem=ctx["private_key_pem"],
            signing_algorithm=ctx.get("signing_algorithm"),
        )
    if scenario == "auth/client-credentials-basic":
        return mcp.OAuth(grant="client_credentials", client_id=ctx["client_id"], client_secret=ctx["client_secret"])
    if scenario == "auth/cross-app-access-complete-flow":
        return mcp.OAuth(
            grant=JWT_BEARER,
            client_id=ctx["client_id"],
            client_secret=ctx.get("client_secret"),
            assertion_provider=cross_app_assertion(ctx),
        )
    return mcp.OAuth(
        client_name="exmcp-conformance",
        client_id=ctx.get("client_id"),
        client_secret=ctx.get("client_secret"),
        client_metadata_url="https://conformance-test.local/client-metadata.json",
        on_authorize=follow_redirect,
    )


def main() -> int:
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    kwargs: dict[str, Any] = {"reconnect": False}
    auth = make_auth(scenario, context())
    if auth is not None:
        kwargs["auth"] = auth
    with mcp.connect(url, elicitation=accept_with_defaults, **kwargs) as client:
        tools = client.list_tools()
        if scenario.startswith("auth/") and tools:
            # Some servers want more scope for a call (step-up): the suite checks the flow, not the result.
            client.call_tool(tools[0]["name"], {})
        elif scenario == "tools_call":
            client.call_tool("add_numbers", {"a": 5, "b": 3})
        elif scenario == "sse-retry":
            client.call_tool("test_reconnection", {})
        elif scenario == "elicitation-sep1034-client-defaults":
            client.call_tool("test_client_elicitation_defaults", {})
    return 0


if __name__ == "__main__":
    sys.exit(main())
