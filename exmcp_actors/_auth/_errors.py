"""What the authorization flow raises (a leaf: the fetch code and the flow both raise these)."""

from __future__ import annotations

__all__ = ["AnswerRefused", "AuthError", "CleartextRefused"]


class AuthError(Exception):
    """The authorization flow could not get a token (the text names the step, never a secret)."""


class CleartextRefused(AuthError, ValueError):
    """An OAuth request, or a bearer token, would have gone over plain http to a host that is not loopback.

    A ``ValueError`` too: given an ``http://`` MCP server URL with ``auth=``, it is the host's mistake.
    """


class AnswerRefused(AuthError):
    """An authorization server's answer was not read to its end: larger than the cap, or encoded."""
