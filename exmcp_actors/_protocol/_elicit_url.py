"""The check on a URL a server asks the user to open (URL-mode elicitation, sans-IO).

A URL the host shows and a person may open is a phishing surface: text that looks like one
host and is another. The check is strict, before any handler sees the URL: ``https``
(``http`` only for this machine), a host, no userinfo (``https://bank.example@evil``), no
backslash (browsers read it as ``/``), a host neither percent-encoded nor holding punctuation
that passes for a dot or slash, and no character a person cannot see or that reorders
what they see (controls, bidi marks, zero-width and tag characters, variation selectors).
"""

from __future__ import annotations

import ipaddress
import unicodedata
from typing import Any, Final
from urllib.parse import urlsplit

from ._peer_text import peer_text

#: Longest URL taken: more is no link a person can examine.
MAX_URL_LENGTH: Final = 8192
#: Unicode categories never in a URL a person should open: controls, format characters
#: (bidi marks, zero-width, tag characters, soft hyphen, BOM), surrogates, private use,
#: unassigned, and every kind of space or separator.
_REFUSED_CATEGORIES: Final = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"))
#: Invisible characters of other categories: the combining grapheme joiner, Mongolian free
#: variation selectors, and the Hangul fillers (letters that draw nothing).
_INVISIBLE: Final = frozenset((0x034F, 0x115F, 0x1160, 0x180B, 0x180C, 0x180D, 0x180E, 0x180F, 0x3164, 0xFFA0))
_LOOPBACK_NAMES: Final = frozenset(("localhost",))


def _unseen(char: str) -> bool:
    code = ord(char)
    if code in _INVISIBLE or 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF or 0xE0000 <= code <= 0xE007F:
        return True  # variation selectors and tag characters, whatever their category
    return unicodedata.category(char) in _REFUSED_CATEGORIES


def is_loopback(host: str) -> bool:
    """Whether ``host`` (as ``urlsplit`` gives it: lower case, no brackets) names this machine."""
    if host in _LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _disguised_host(host: str) -> str | None:
    """Why ``host`` reads as another host, or None. A browser percent-decodes a host
    (``bank.example%2Eevil.example`` opens a subdomain of evil.example) and maps look-alike
    punctuation to dots and slashes (U+2024, U+3002), or keeps it where it reads as a path
    (U+2044); an international name is made of letters, marks and digits only."""
    if "%" in host:
        return "url has a percent-encoded host, which a browser decodes into another host"
    odd = next((char for char in host if ord(char) > 0x7F and unicodedata.category(char)[0] not in "LMN"), None)
    if odd is not None:
        return f"url host contains punctuation or a symbol that can pass for a dot or slash (U+{ord(odd):04X})"
    return None


def check_elicit_url(url: Any) -> str | None:
    """Why ``url`` must not reach the host (a sentence), or None when it may."""
    if not isinstance(url, str) or not url:
        return "url must be a non-empty string"
    if len(url) > MAX_URL_LENGTH:
        return f"url is longer than {MAX_URL_LENGTH} characters"
    unseen = next((char for char in url if _unseen(char)), None)
    if unseen is not None:
        return f"url contains an invisible or control character (U+{ord(unseen):04X})"
    if "\\" in url:
        return "url contains a backslash"
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a port that is no number
    except ValueError as error:
        return f"url is malformed ({peer_text(str(error))})"  # its text quotes the url
    if "@" in parts.netloc:
        return "url carries userinfo (user@host), which can disguise the host"
    if not host:
        return "url has no host"
    why = _disguised_host(host)
    if why is not None:
        return why
    scheme = parts.scheme.lower()
    if scheme == "http" and not is_loopback(host):
        return f"url must use https (http only for localhost), got http to {peer_text(host, quote=True)}"
    if scheme not in ("https", "http"):
        return f"url must use https, got {peer_text(scheme or '(none)', quote=True)}"
    return None
