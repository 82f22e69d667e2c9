"""A scriptable protected resource and authorization server on 127.0.0.1 that a test can
make misbehave on any one endpoint (stdlib only: it runs with or without ``httpx2``).

Well-behaved by default: protected resource metadata naming the issuer, RFC 8414 metadata
(PKCE S256), dynamic registration, a token endpoint for the code and refresh grants. The
authorization endpoint is the test's: :meth:`HostileAS.approve` is an ``on_authorize`` that
answers the callback a browser would bring back. A test replaces ``routes[path]`` with its
own ``answer(exchange)`` to trickle, flood or hang; each connection has its own thread, and
answers that stall wait on :attr:`HostileAS.stopping`.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode, urlsplit

from tests.raw_http import CHUNK, WAIT, LoopbackServer

if TYPE_CHECKING:
    import exmcp_actors as mcp


class Exchange:
    """One request: ``method``, ``path`` (with its query), ``headers`` (lower-cased), ``body``."""

    def __init__(self, conn: socket.socket, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.conn = conn
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        #: Bytes written so far.
        self.sent = 0

    def form(self) -> dict[str, str]:
        return {name: values[0] for name, values in parse_qs(self.body.decode("latin-1")).items()}

    def write(self, data: bytes) -> None:
        self.conn.sendall(data)
        self.sent += len(data)

    def head(self, status: str, headers: dict[str, str] | None = None) -> None:
        lines = [f"HTTP/1.1 {status}", "Connection: close", *(f"{k}: {v}" for k, v in (headers or {}).items())]
        self.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def json(self, status: str, value: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(value).encode()
        self.head(status, {"Content-Type": "application/json", "Content-Length": str(len(body)), **(headers or {})})
        self.write(body)


class HostileAS(LoopbackServer[Exchange]):
    """Serves until :meth:`stop`. ``name`` is the host name its URLs use (the test resolves it)."""

    def __init__(self, name: str = "127.0.0.1") -> None:
        super().__init__(Exchange, self._route, thread_name="hostile-as")
        self.origin = f"http://{name}:{self.port}"
        self.server_url = f"{self.origin}/mcp"
        self.issuer = self.origin
        #: Access and refresh tokens handed out, for the leak checks.
        self.issued: list[str] = []
        self.metadata: dict[str, Any] = {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.origin}/authorize",
            "token_endpoint": f"{self.origin}/token",
            "registration_endpoint": f"{self.origin}/register",
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
        }
        self.routes: dict[str, Callable[[Exchange], None]] = {
            "/.well-known/oauth-protected-resource/mcp": self._resource_metadata,
            "/.well-known/oauth-authorization-server": lambda ex: ex.json("200 OK", self.metadata),
            "/register": lambda ex: ex.json("201 Created", {"client_id": "cid", "token_endpoint_auth_method": "none"}),
            "/token": self._token,
        }

    @property
    def challenge(self) -> str:
        """The ``WWW-Authenticate`` of a 401 from the MCP server."""
        return f'Bearer resource_metadata="{self.origin}/.well-known/oauth-protected-resource/mcp"'

    def approve(self, authorization_url: str) -> str:
        """``on_authorize``: the callback URL of an authorization approved at once."""
        query = parse_qs(urlsplit(authorization_url).query)
        redirect = query["redirect_uri"][0]
        return f"{redirect}?{urlencode({'code': 'code-1', 'state': query['state'][0], 'iss': self.issuer})}"

    def paths(self) -> list[str]:
        with self._cond:
            return [urlsplit(r.path).path for r in self.requests]

    def _resource_metadata(self, exchange: Exchange) -> None:
        exchange.json("200 OK", {"resource": self.server_url, "authorization_servers": [self.issuer]})

    def _token(self, exchange: Exchange) -> None:
        n = len(self.issued)
        tokens = {"access_token": f"at-{n}-secret", "refresh_token": f"rt-{n}-secret"}
        self.issued += tokens.values()
        exchange.json("200 OK", {**tokens, "token_type": "Bearer", "expires_in": 3600})

    def _route(self, exchange: Exchange) -> bool:
        """Answer with the route of the request's path (404 without one), then close."""
        answer = self.routes.get(urlsplit(exchange.path).path)
        if answer is None:
            exchange.head("404 Not Found", {"Content-Length": "0"})
        else:
            answer(exchange)
        return False


def flood(size: int) -> Callable[[Exchange], None]:
    """An answer of ``size`` bytes of JSON, written as fast as the client reads it."""

    def answer(exchange: Exchange) -> None:
        exchange.head("200 OK", {"Content-Type": "application/json", "Content-Length": str(size)})
        exchange.write(b'{"client_id": "')
        left = size - len(b'{"client_id": "') - 2
        block = b"a" * CHUNK
        while left > 0:  # until written, or the client hangs up (OSError)
            piece = block[: min(left, CHUNK)]
            exchange.write(piece)
            left -= len(piece)
        exchange.write(b'"}')

    return answer


def trickle(stopping: threading.Event, interval: float, *, head: bool = False) -> Callable[[Exchange], None]:
    """An answer sent one byte every ``interval`` seconds (its head too, with ``head``), until stopped."""

    def answer(exchange: Exchange) -> None:
        body = b'{"resource": "' + b"x" * 10_000 + b'"}'
        start = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        if not head:
            exchange.write(start)
        for byte in (start if head else b"") + body:
            if stopping.wait(interval):
                return
            exchange.write(bytes([byte]))

    return answer


def import_what_a_token_request_imports() -> None:
    """Import what an OAuth flow imports on first use (authlib's protocol client and its
    grants, joserfc), so a test that times or traces a flow does not count it: seconds on a
    loaded machine when no earlier test of the process made a token."""
    import authlib.integrations.base_client
    import authlib.oauth2.client
    import authlib.oauth2.rfc7523  # noqa: F401
    import joserfc.errors  # noqa: F401


def run_flow(auth: mcp.OAuth, peer: HostileAS, within: float = WAIT) -> tuple[bool | None, float]:
    """What a transport does on the 401 of ``peer``'s MCP server, on a thread.

    Returns (the flow's answer, or None when it had not ended after ``within`` seconds; seconds taken).
    """
    outcome: list[Any] = []
    done = threading.Event()

    def flow() -> None:
        try:
            outcome.append(auth.challenge(peer.server_url, 401, peer.challenge, None))
        except BaseException as exc:  # shown by the test, not lost on the thread
            outcome.append(exc)
        finally:
            done.set()

    started = time.monotonic()
    threading.Thread(target=flow, name="test-flow", daemon=True).start()
    ended = done.wait(within)
    took = time.monotonic() - started
    if ended and isinstance(outcome[0], BaseException):
        raise outcome[0]
    return (outcome[0] if ended else None), took
