"""What one URI is, whatever its spelling: the key form every spelling of it shares, and
whether a ``resources/updated`` URI is a subscribed one or a sub-resource of one (sans-IO)."""

from __future__ import annotations

import functools
import re
import string
from typing import Final
from urllib.parse import urlsplit, urlunsplit, uses_netloc


def uri_within(uri: str, subscribed: tuple[str, ...]) -> bool:
    """Whether a resources/updated ``uri`` is a subscribed one or a sub-resource of one (the
    spec's ``ResourceUpdatedNotificationParams.uri``, in every revision), either in another
    spelling (see :func:`uri_key`)."""
    key = uri_key(uri)
    for base in subscribed:
        if uri == base or uri.startswith(base.rstrip("/") + "/"):
            return True
        base_key = uri_key(base)
        if key == base_key or key.startswith(base_key.rstrip("/") + "/"):
            return True
    return False


_UNRESERVED: Final = frozenset(string.ascii_letters + string.digits + "-._~")
#: Schemes whose authority with an empty path means the path "/" (WHATWG's special schemes).
_SLASHED: Final = frozenset({"http", "https", "ws", "wss", "ftp"})


#: URIs at most this long have their key cached (at most :data:`_KEYS_CACHED` of them): what a
#: server sends cannot make the cache hold more than a few MiB.
_CACHED_CHARS: Final = 2048
_KEYS_CACHED: Final = 1024


#: A URI already in its key form (see :func:`_uri_key`), told at C speed: a lower-case scheme
#: and authority, a path of characters a URI holds as they are, and no escape, query or
#: fragment (an empty query or fragment is dropped by the slow path). Most URIs a host
#: registers are so, and need neither a parse nor a cache slot.
_KEY_FORM: Final = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.\-]*)://(?P<authority>[a-z0-9\-._~!$&'()*+,;=:@\[\]]*)"
    r"(?P<path>/[A-Za-z0-9\-._~:/@!$&'()*+,;=\[\]]*)?\Z"
)


def uri_key(uri: str) -> str:
    """The form every spelling of one URI shares (see :func:`_uri_key`); short ones are cached."""
    return _cached_key(uri) if len(uri) <= _CACHED_CHARS else _key_of(uri)


def _key_of(uri: str) -> str:
    """:func:`_uri_key`, without its parse for a URI already in key form (most of them)."""
    known = _KEY_FORM.match(uri)
    # What the slow path would change all the same: a slashed scheme's empty path, and the "//"
    # of an empty authority (in a scheme urllib does not know to have one, or before a path
    # that starts with "//" itself).
    if known is not None:
        scheme, authority, path = known["scheme"], known["authority"], known["path"]
        if (path is not None or scheme not in _SLASHED) and (
            authority or (scheme in uses_netloc and not (path or "").startswith("//"))
        ):
            return uri
    return _uri_key(uri)


def _uri_key(uri: str) -> str:
    """The form every spelling of one URI shares, for matching a ``resources/updated`` to what
    was subscribed: scheme and host in lower case, escapes in upper case (an unreserved character
    unescaped), what a URI cannot hold (a space, non-ASCII) escaped as UTF-8, and an http(s) or
    ws(s) authority's empty path as "/". Servers that keep URIs as parsed URLs send them back so
    (pydantic's ``AnyUrl`` in the Python SDK 1.x). An escaped "/" stays escaped: it is another URI.
    """
    try:
        parts = urlsplit(uri)
    except ValueError:  # not a URI a parser takes (a bad IPv6 host): only itself matches it
        return uri
    userinfo, at, host = parts.netloc.rpartition("@")
    path = _escaped(parts.path)
    if not path and parts.netloc and parts.scheme.lower() in _SLASHED:
        path = "/"
    query, fragment = _escaped(parts.query), _escaped(parts.fragment)
    scheme = parts.scheme.lower()
    if not parts.netloc and path.startswith("//"):
        # An empty authority before such a path: urlunsplit drops the "//" of it, which makes
        # the path's first segment an authority ("http:////x/" would be "http://x/").
        return (
            (scheme + ":" if scheme else "")
            + "//"
            + path
            + ("?" + query if query else "")
            + ("#" + fragment if fragment else "")
        )
    return urlunsplit((scheme, userinfo + at + host.lower(), path, query, fragment))


_cached_key: Final = functools.lru_cache(maxsize=_KEYS_CACHED)(_key_of)


#: A part :func:`_escaped` leaves as it is: characters a URI holds as they are (RFC 3986:
#: unreserved and reserved), no "%".
_PLAIN: Final = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]*\Z")
#: What :func:`_escaped` changes, found at C speed: an escape with a lower-case hex digit or of
#: an unreserved character, a lone "%", and a run of characters a URI cannot hold.
_CHANGED: Final = re.compile(
    r"%(?:[a-f][0-9A-Fa-f]|[0-9A-F][a-f]|3[0-9]|4[1-9A-F]|5[0-9AF]|6[1-9A-F]|7[0-9AE]|2[DE])"
    r"|%(?![0-9A-Fa-f]{2})"
    r"|[^A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+"
)
#: Every spelling of an escape -> its one form (the unreserved character, or upper-case hex).
_ESCAPE_FORMS: Final = {
    f"%{high}{low}": chr(int(high + low, 16)) if chr(int(high + low, 16)) in _UNRESERVED else f"%{high}{low}".upper()
    for high in string.hexdigits
    for low in string.hexdigits
}


def _escaped(part: str) -> str:
    """``part`` with every escape in one form: see :func:`_uri_key`. Only what changes costs a
    step of Python (a run of what a URI cannot hold is one): a server's URI may be megabytes."""
    if _PLAIN.match(part):
        return part
    return _CHANGED.sub(_one_form, part)


def _one_form(found: re.Match[str]) -> str:
    text = found[0]
    if text[0] == "%":
        return _ESCAPE_FORMS[text] if len(text) == 3 else "%25"  # a lone "%" is escaped itself
    return "%" + text.encode("utf-8", "surrogatepass").hex("%").upper()
