"""Requirements of the texts behind the OAuth and HTTP hardening, each checked against a peer
on 127.0.0.1: MCP authorization 2026-07-28 (dynamic registration names an
``application_type``, a refused registration says why), RFC 6749 section 10.12 with the MCP
rule to discard a redirect without the request's ``state`` (a local process cannot end the
flow with a forged callback), the HTML Living Standard's ``retry`` field (any run of
ASCII digits is a reconnection time, however long), and the MCP rule that a client's
redirect URIs are registered (a stored registration is used with the loopback redirect it
registered, against the SDK's server, which matches redirect URIs exactly).
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from raw_http import WAIT, Exchange, RawHttp, legacy_basics, rpc_result

import exmcp_actors as mcp
from exmcp_actors._auth import _browser
from exmcp_actors._transport.http._resume import GetStreams
from exmcp_actors._transport.http._sse import SSEParser
from tests.hostile_as import HostileAS
from tests.peers.auth_server import AuthPeer
from tests.test_auth import follow
from tests.test_auth_hostile_as import run_flow
from tests.test_hostile_http import http_config

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


# -- the redirect's state (RFC 6749 section 10.12, MCP: discard a mismatched result) -----------


@pytest.fixture
def browser_after_a_forger(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """``webbrowser.open`` as a browser does, but a local process calls the loopback redirect
    first, with forged callbacks; the statuses the forger got are yielded."""
    forged: list[int] = []
    threads: list[threading.Thread] = []

    def get(url: str) -> int:
        try:
            with urllib.request.urlopen(url, timeout=WAIT) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as refused:
            return refused.code
        except urllib.error.URLError:
            return 0  # the listener was gone

    def browser(url: str) -> bool:
        query = parse_qs(urlsplit(url).query)
        redirect, state = query["redirect_uri"][0], query["state"][0]
        for attempt in ({"code": "evil"}, {"code": "evil", "state": "guess"}, {"code": "evil", "state": state * 2}):
            forged.append(get(f"{redirect}?{urlencode(attempt)}"))
        approved = f"{redirect}?{urlencode({'code': 'code-1', 'state': state})}"
        thread = threading.Thread(target=get, args=(approved,), name="test-browser")
        threads.append(thread)
        thread.start()
        return True

    monkeypatch.setattr(_browser.webbrowser, "open", browser)
    yield forged
    for thread in threads:
        thread.join(WAIT)


def test_a_forged_callback_without_the_requests_state_is_discarded_and_the_real_one_still_taken(
    browser_after_a_forger: list[int],
) -> None:
    with HostileAS() as peer:
        auth = mcp.OAuth(authorize_timeout=WAIT, timeout=WAIT)
        answer, _ = run_flow(auth, peer, within=WAIT + 5)
        redeemed = [r.form().get("code") for r in peer.requests if urlsplit(r.path).path == "/token"]
    assert (answer, auth.last_error) == (True, None)
    assert browser_after_a_forger == [400, 400, 400]
    assert redeemed == ["code-1"]  # the forged code went to no token endpoint


# -- the SSE retry field (HTML Living Standard, event stream interpretation) ---------------------


def test_a_retry_of_more_digits_than_python_converts_is_the_longest_wait_not_a_broken_stream() -> None:
    # "If the field value consists of only ASCII digits, then interpret the field value as an
    # integer in base ten": Python refuses to convert more than 4,300 digits at once.
    parser = SSEParser(1 << 20)
    events = parser.feed(b"retry: " + b"9" * 5000 + b"\ndata: {}\n\n")
    assert [event.data for event in events] == [b"{}"] and parser.violation is None
    assert parser.retry_ms is not None and parser.retry_ms >= 10**9
    streams = GetStreams(http_config(max_retry_delay=30.0), None, None, None)  # type: ignore[arg-type]
    assert streams.retry_delay(parser) == 30.0
    parser.feed(b"retry: " + b"0" * 5000 + b"2500\n\n")  # leading zeros are no part of the number
    assert parser.retry_ms == 2500


def test_a_response_after_a_retry_of_thousands_of_digits_still_answers_its_request() -> None:
    def answer(exchange: Exchange) -> bool:
        if legacy_basics(exchange):
            return True
        if exchange.method == "GET":
            exchange.whole("405 Method Not Allowed")
            return True
        exchange.start_sse()
        result = rpc_result(exchange.body["id"], {"tools": []})
        exchange.chunk(b"retry: " + b"7" * 5000 + b"\n\ndata: " + result + b"\n\n")
        exchange.end_chunks()
        return True

    with RawHttp(answer) as server:
        client = mcp.connect(mcp.HttpTransport(server.url), protocol="legacy", reconnect=False)
        try:
            with ThreadPoolExecutor(1) as pool:
                assert pool.submit(client.request, "tools/list", timeout=WAIT).result(WAIT) == {"tools": []}
        finally:
            client.disconnect()


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


# -- a step-up asks for what the challenge names (MCP: the challenge's scopes are authoritative) --


def test_a_step_up_asks_for_the_challenged_scopes_also_when_the_host_chose_scopes() -> None:
    # "Clients MUST treat the scopes provided in the challenge as authoritative for the current
    # operation"; the step-up asks the union of what was asked before and what is challenged.
    with HostileAS() as peer:
        asked: list[str] = []

        def approve(url: str) -> str:
            asked.append(parse_qs(urlsplit(url).query).get("scope", [""])[0])
            return peer.approve(url)

        auth = mcp.OAuth(scopes=["files:read"], on_authorize=approve, timeout=WAIT)
        assert run_flow(auth, peer)[0] is True
        refused = 'Bearer error="insufficient_scope", scope="files:write"'
        assert auth.challenge(peer.server_url, 403, refused, auth.bearer(peer.server_url)) is True
    assert asked == ["files:read", "files:read files:write"]
