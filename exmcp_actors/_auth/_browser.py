"""The default ``on_authorize``: open the system browser on the
authorization URL and wait, bounded, for the authorization server's redirect
to the loopback listener (RFC 8252 section 7.3)."""

from __future__ import annotations

import http.server
import logging
import socket
import sys
import threading
import webbrowser
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from .._util._redact import redact_url
from ._discovery import AuthError

__all__ = ["LoopbackListener", "loopback_redirect"]

logger = logging.getLogger("exmcp_actors.auth")

_PAGE: Final = b"<!doctype html><title>Authorized</title><p>Authorization complete: you may close this window.</p>"


def loopback_redirect(redirect_uri: str) -> tuple[str, int, str]:
    """(host, port, path) of a loopback redirect URI.

    Raises:
        ValueError: not an ``http://`` loopback URI.
    """
    parts = urlsplit(redirect_uri)
    host = parts.hostname or ""
    if parts.scheme != "http" or host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(
            f"redirect_uri must be an http:// loopback URI (127.0.0.1, localhost or [::1]), got {redirect_uri!r}"
        )
    return host, parts.port or 0, parts.path or "/"


def free_port(host: str) -> int:
    """A port free on ``host`` now (for a redirect URI the host's own ``on_authorize`` serves)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class _Server6(http.server.HTTPServer):
    address_family = socket.AF_INET6


class LoopbackListener:
    """A one-shot HTTP listener on the redirect URI; :meth:`wait` returns the callback URL."""

    def __init__(self, redirect_uri: str) -> None:
        host, port, self._path = loopback_redirect(redirect_uri)
        self._result: str | None = None
        self._done = threading.Event()
        listener = self

        class _Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if urlsplit(self.path).path != listener._path:
                    self.send_error(404)
                    return
                listener._result = self.path
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(_PAGE)))
                self.end_headers()
                self.wfile.write(_PAGE)
                listener._done.set()

            def log_message(self, format: str, *args: object) -> None:
                # The request line holds the authorization code: never logged.
                return

        self._server = (_Server6 if ":" in host else http.server.HTTPServer)((host, port), _Handler)
        self.port: int = self._server.server_address[1]
        self._host = host
        self._thread = threading.Thread(target=self._server.serve_forever, name="exmcp-oauth-callback", daemon=True)
        self._thread.start()

    def wait(self, base_uri: str, timeout: float) -> str:
        """The full callback URL, once the browser came back.

        Raises:
            AuthError: nothing came back within ``timeout`` seconds.
        """
        try:
            if not self._done.wait(timeout):
                raise AuthError(f"no authorization callback on the loopback redirect within {timeout:.0f}s")
            parts = urlsplit(base_uri)
            path = urlsplit(self._result or "")
            return urlunsplit((parts.scheme, parts.netloc, path.path, path.query, ""))
        finally:
            self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(2.0)


def open_browser(authorization_url: str) -> None:
    """Open the system browser; say where to go when there is none."""
    if not webbrowser.open(authorization_url):
        # The URL (state, code challenge, client id) goes to the user on stderr, never to a log.
        logger.warning("could not open a browser to authorize with %s", redact_url(authorization_url))
        print(f"Open this URL in a browser to authorize:\n{authorization_url}", file=sys.stderr)
