"""The one redaction point: secrets stay out of every log record the library causes.

Secrets are URL credentials and query values, header values, a stdio
server's arguments and environment. Our own messages are built without them
(:func:`redact_url`; argv shows the program only). Our dependencies are
another matter: httpx logs each request's URL at INFO, httpcore logs response
headers at DEBUG, and websocket-client's trace logs the whole handshake. So
:func:`install` puts a :class:`RedactingFilter` on their loggers and ours, at
import: it rewrites a record's message before any handler sees it.

A filter on a logger applies only to records created at that logger (not to
those propagating from its children), so :func:`install` also wraps the
log-record factory: every record whose logger name falls under
:data:`PREFIXES` (``exmcp_actors.hub``, ``authlib.oauth2...``, any added later)
is redacted when it is created.

The same point escapes what is left of a record's control characters
(:func:`~exmcp_actors._protocol._peer_text.escape_unsafe`): no record the library causes can
drive the terminal that shows it or forge a line of the log.
"""

from __future__ import annotations

import builtins
import logging
import re
import urllib.parse
from collections.abc import Callable
from typing import Any, Final

from .._protocol._peer_text import escape_unsafe

#: Every logger the library or its dependencies log to while it works.
LOGGERS: Final = (
    "exmcp_actors",
    "exmcp_actors.transport",
    "exmcp_actors.stdio",
    "exmcp_actors.http",
    "httpx",
    "httpcore",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "hpack",
    "websocket",
)
#: Logger-name roots whose whole subtree is redacted, whatever the child's name. ``httpx2``
#: and ``httpcore2`` are the stack authlib's httpx integration switches to when installed: the
#: library sends nothing through it, but a host's own authlib (or MCP SDK) calls may.
PREFIXES: Final = ("exmcp_actors", "httpx", "httpcore", "hpack", "websocket", "authlib", "httpx2", "httpcore2")
MASK: Final = "***"

# scheme://[userinfo@]host[:port][/path][?query][#fragment], up to a space or a quote. The
# head is the whole run of scheme characters before "://", started where none precedes it:
# with a word boundary instead, each "." or "+" of a long run of them (a server's reason
# phrase in httpx's record) started a match scanning to the run's end, quadratic in its length.
_URL = re.compile(r"""(?P<head>(?<![a-zA-Z0-9+.-])[a-zA-Z0-9+.-]*://)(?P<user>[^/\s@'"<>]*@)?(?P<rest>[^\s'"<>]*)""")
# httpcore's header lists: (b'name', b'value').
_HEADER_PAIR = re.compile(r"""\((b?)(['"])([^'"]*)\2, b?(['"]).*?\4\)""")
# The request line of a dumped HTTP head: "GET /mcp?token=x HTTP/1.1".
_REQUEST_LINE = re.compile(r"^([A-Z]+ [^\s?]*)\?\S*( HTTP/)", re.MULTILINE)
# A header line of a dumped HTTP head (websocket-client's trace): "Name: value".
_HEADER_LINE = re.compile(r"^([A-Za-z0-9-]+):[ \t]*\S.*$", re.MULTILINE)
#: What such a line is not: a traceback's last line, "RuntimeError: its message" (the other
#: exceptions' names have a module and a dot, which no header name has). Not the warnings:
#: "Warning" is a header's name too.
_BUILTIN_EXCEPTIONS: Final = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException) and not issubclass(value, Warning)
)


def redact_url(url: str, *, query_names: bool = False) -> str:
    """``url`` without credentials, fragment or query: ``https://host:8443/mcp``.

    With ``query_names`` the query's names stay, each value masked (``...?token=...``): a
    person reading an error then sees what the URL carries, and none of it.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unparsable URL>"
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port else host
    query = ""
    if query_names:
        query = "&".join(f"{name}=..." for name, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _url_sub(match: re.Match[str]) -> str:
    rest = match.group("rest")
    path, query_mark, _ = rest.partition("?")
    path = path.partition("#")[0]
    return f"{match.group('head')}{path}" + (f"?{MASK}" if query_mark else "")


def redact_text(text: str) -> str:
    """``text`` with URL credentials and query values, and header values, masked."""
    if "://" in text:
        text = _URL.sub(_url_sub, text)
    if "(b'" in text or '(b"' in text:
        text = _HEADER_PAIR.sub(lambda m: f"({m.group(1)}{m.group(2)}{m.group(3)}{m.group(2)}, {MASK})", text)
    if " HTTP/" in text:
        text = _REQUEST_LINE.sub(rf"\1?{MASK}\2", text)
    if ": " in text and "\n" in text:
        text = _HEADER_LINE.sub(_header_sub, text)
    return text


def _header_sub(found: re.Match[str]) -> str:
    name = found.group(1)
    return found.group(0) if name in _BUILTIN_EXCEPTIONS else f"{name}: {MASK}"


class RedactingFilter(logging.Filter):
    """Rewrites a record's message through :func:`redact_text`, its control characters escaped
    (it never drops a record).

    The escaping is the last line of defence: a server's words are escaped where our messages
    quote them, but a dependency quotes them raw (httpx logs each response's reason phrase).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken record: leave it to the handler to report
            return True
        redacted = escape_unsafe(redact_text(message))  # redacted first: header lines end in CR LF
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and record.exc_text is None and record.exc_info[1] is not None:
            # The traceback's last line repeats the exception's message: format it redacted,
            # each line escaped (its line ends stay: a traceback is many lines).
            text = redact_text(logging.Formatter().formatException(record.exc_info))
            record.exc_text = "\n".join(escape_unsafe(line) for line in text.split("\n"))
        return True


_FILTER: Final = RedactingFilter()


def covered(name: str) -> bool:
    """True when records of logger ``name`` are redacted (it lies under :data:`PREFIXES`)."""
    return any(name == root or name.startswith(root + ".") for root in PREFIXES)


class _RedactingFactory:
    """Wraps the previous log-record factory; redacts records of loggers under :data:`PREFIXES`."""

    def __init__(self, previous: Callable[..., logging.LogRecord]) -> None:
        self.previous = previous

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.previous(*args, **kwargs)
        if covered(record.name):
            _FILTER.filter(record)
        return record


def install() -> None:
    """Redact every record of the loggers under :data:`PREFIXES` (idempotent)."""
    for name in LOGGERS:  # kept too: a host may replace the record factory without chaining
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    if not isinstance(logging.getLogRecordFactory(), _RedactingFactory):
        logging.setLogRecordFactory(_RedactingFactory(logging.getLogRecordFactory()))
