"""What every part of the HTTP transport shares: its settings, its logger and
the errors an HTTP exchange may raise."""

from __future__ import annotations

import logging
import ssl
import threading
from dataclasses import dataclass, field
from typing import Final

import httpx

from ..._protocol._peer_text import peer_text
from ..._protocol._ratelog import RateLimitedLog

__all__ = ["IO_ERRORS", "Config", "io_error_text", "logger", "status_line"]

logger = logging.getLogger("exmcp_actors.http")

#: What an HTTP exchange may raise: httpx's errors, socket errors, a client
#: closed under our feet (RuntimeError), a header that is not ASCII (ValueError).
IO_ERRORS: Final = (
    httpx.HTTPError,
    httpx.InvalidURL,
    OSError,
    RuntimeError,
    ValueError,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """Settings shared by every connection of one transport (read-only)."""

    url: str
    headers: dict[str, str]
    verify: bool | str | ssl.SSLContext
    max_frame_bytes: int
    sse_retry_default: float
    io_timeout: float
    delete_timeout: float
    reconnect_attempts: int
    max_retry_delay: float
    #: Attaches the OAuth bearer token and answers 401/403 (see ``exmcp_actors._auth``).
    auth: httpx.Auth | None = None
    #: What the server does wrong, logged at most once per interval and kind for the transport.
    misbehaviour: RateLimitedLog = field(default_factory=lambda: RateLimitedLog(logger), compare=False, repr=False)
    #: Set once a server that cannot push was warned about: once per transport, not per connection.
    warned_deaf: threading.Event = field(default_factory=threading.Event)


def status_line(response: httpx.Response) -> str:
    """``503 Service Unavailable``: the status and the server's reason phrase, safe to print
    (HTTP/1.1 lets a reason phrase carry ESC, BEL and other controls)."""
    return f"{response.status_code} {peer_text(response.reason_phrase, 100)}".rstrip()


def io_error_text(exc: BaseException) -> str:
    """``ReadTimeout: timed out``: a failed exchange's error, safe to print (an HTTP library's
    message may quote what the server sent)."""
    return peer_text(f"{type(exc).__name__}: {exc}", 500)
