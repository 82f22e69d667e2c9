"""What a peer sent, made safe to put into a log record or the text of an error (sans-IO).

A server's strings (error messages, HTTP reason phrases, method names, bodies) and values
(frames, ids, acknowledgments) end up in our log records and in the messages of the errors
we raise. Raw, a string could forge log lines (CR LF), drive the terminal that shows the
log (ESC, BEL) or hide what follows it (bidirectional overrides); a value could cost the
repr of megabytes, or recurse past the stack, for a line that shows 200 characters. Every
such text goes through :func:`peer_text`; a whole line made of bounded parts (a formatted log
record, a line for a terminal, an error's text) through :func:`escape_unsafe`, the same
escaping without the bound.
"""

from __future__ import annotations

import re
import reprlib
from typing import Any, Final

#: How many characters of a peer's text a record or a message quotes, unless told otherwise.
DEFAULT_LIMIT: Final = 200

# C0 and C1 controls, DEL, the line and paragraph separators, the bidirectional embeddings,
# overrides and isolates, and lone surrogates (JSON can carry them; no log stream can).
_UNSAFE: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _bounded_repr(limit: int) -> reprlib.Repr:
    shown = reprlib.Repr()
    shown.maxlevel = 4  # a nested value shows its first levels: no recursion past the stack
    shown.maxstring = shown.maxother = shown.maxlong = limit
    shown.maxdict = shown.maxlist = shown.maxtuple = shown.maxset = shown.maxfrozenset = 12
    return shown


_REPR: Final = _bounded_repr(DEFAULT_LIMIT)


def escape_unsafe(text: str) -> str:
    """``text`` with the characters :func:`peer_text` escapes escaped, and nothing cut.

    For a whole line that quotes bounded peer text among our own words (a log record as a
    handler formats it, a line for a terminal): the bound was applied where each part was made.
    """
    return _UNSAFE.sub(_escaped, text)


def peer_text(value: Any, limit: int = DEFAULT_LIMIT, *, quote: bool = False) -> str:
    """``value``, safe to print, in at most about ``limit`` characters.

    A string is shown as it is, its unsafe characters escaped (``\\x1b``, ``\\u202e``);
    with ``quote`` (an id, where ``"1"`` and ``1`` differ), and for anything else, a bounded
    repr (whose strings ``repr`` escapes). What is cut ends in ``...``.
    """
    if isinstance(value, str) and not quote:
        text = escape_unsafe(value[:limit])
        return text + "..." if len(value) > limit else text
    shown = _REPR if limit == DEFAULT_LIMIT else _bounded_repr(limit)
    text = escape_unsafe(shown.repr(value))  # an object's own __repr__ may not escape
    return text[:limit] + "..." if len(text) > limit else text
