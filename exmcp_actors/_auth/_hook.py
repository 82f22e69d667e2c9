"""The narrow hook between :class:`~exmcp_actors.OAuth` and the transports:
an ``httpx.Auth`` for the HTTP transport's client, and the two calls the
WebSocket transport makes around its upgrade request."""

from __future__ import annotations

import hashlib
from collections.abc import Generator
from typing import TYPE_CHECKING, Final

import httpx

from ._discovery import canonical
from ._fetch import require_secure

if TYPE_CHECKING:
    from ._oauth import OAuth

__all__ = ["BearerAuth"]

#: New tokens tried for one request before its 401/403 goes to the caller
#: (the OAuth object bounds step-ups on its own).
_MAX_ROUNDS: Final = 4


class BearerAuth(httpx.Auth):
    """Attach the server's bearer token; on 401/403 let the OAuth object act, and retry."""

    def __init__(self, oauth: OAuth, server: str) -> None:
        require_secure(server, "the bearer token")  # at construction: the host's URL is the mistake
        self._oauth = oauth
        self._server = canonical(server)
        #: A digest of the token last sent ("" before any): who the requests are made as,
        #: for the private cache entries of one authorization context (never the token itself).
        self.sent = ""

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        # The token goes only to the server it was issued for.
        if canonical(str(request.url.copy_with(query=None))) != self._server.split("?")[0]:
            yield request
            return
        for _ in range(_MAX_ROUNDS):
            token = self._oauth.bearer(self._server)
            if token is not None:
                request.headers["Authorization"] = f"Bearer {token}"
            self.sent = hashlib.sha256(token.encode()).hexdigest() if token is not None else ""
            response = yield request
            if response.status_code not in (401, 403):
                return
            if not self._oauth.challenge(
                self._server, response.status_code, response.headers.get("www-authenticate"), token
            ):
                return
