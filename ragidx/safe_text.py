"""Text from a knowledge base, made safe to print on a terminal or render on a page.

Titles, ids, URLs and article text come from files ragidx does not control. Printed raw, a NUL or an ESC
sequence can rewrite what a terminal shows, and a right-to-left override (U+202E) can show ``exe.txt`` as
``txt.exe``. :func:`printable` writes every such character as a visible escape (``\\x1b``, ``\\u202e``);
:func:`printable_json` does the same inside JSON, where the escape reads back as the same character; and
:func:`web_url` tells the URLs that may become links (http and https) from the rest (``javascript:``,
``data:``, ``file:``).

Example:
    >>> printable("Report\\u202etxt.exe\\x1b[2J")
    'Report\\\\u202etxt.exe\\\\x1b[2J'
    >>> web_url("javascript:alert(1)") is None
    True
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote, urlsplit

__all__ = ["UNSAFE_CHARACTERS", "printable", "printable_json", "web_url"]

# Bidirectional controls (embeddings, overrides, isolates, marks): they reorder what is shown around them.
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# C0 controls (NUL, ESC, newline ...), DEL, C1 controls (U+0080-U+009F: CSI and friends on some terminals), the
# line and paragraph separators some terminals break lines at, and the bidi controls.
UNSAFE_CHARACTERS = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029{_BIDI}]")
_UNSAFE_KEEPING_LINES = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f\\u2028\\u2029{_BIDI}]")


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with control, C1 and bidi-control characters written as visible escapes.

    ``keep_newlines`` keeps ``\\n`` and ``\\t`` (an answer's paragraphs); a title, id or URL is one line.

    Example:
        >>> printable("a\\x00b\\nc"), printable("a\\nb\\tc", keep_newlines=True)
        ('a\\\\x00b\\\\nc', 'a\\nb\\tc')
    """
    pattern = _UNSAFE_KEEPING_LINES if keep_newlines else UNSAFE_CHARACTERS
    return pattern.sub(_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable_json(value: Any, **dumps: Any) -> str:
    """``json.dumps(value, ensure_ascii=False)`` with every unsafe character as a ``\\uXXXX`` escape: the same
    data for a program that reads it, nothing a terminal acts on for a person who sees it.

    Example:
        >>> printable_json({"title": "a\\u202eb"})
        '{"title": "a\\\\u202eb"}'
        >>> json.loads(printable_json({"title": "a\\u202eb"}))["title"] == "a\\u202eb"
        True
    """
    return UNSAFE_CHARACTERS.sub(_json_escape, json.dumps(value, ensure_ascii=False, **dumps))


# Characters a Markdown link target or an HTML attribute would end at or act on; percent-encoded (the URL
# stays the same address): spaces, parentheses, angle brackets, quotes, backslashes, backticks.
_URL_SAFE = "/:?#[]@!$&'*+,;=%~-._"


def web_url(url: str | None) -> str | None:
    """``url`` fit to be a link: an http(s) URL with a host, the characters that could end a Markdown link or
    an attribute percent-encoded; ``None`` for anything else (``javascript:``, ``data:``, ``file:``, relative).

    Example:
        >>> web_url("https://help.example/a page(1)")
        'https://help.example/a%20page%281%29'
        >>> web_url(" JavaScript:alert(1)"), web_url("data:text/html,x"), web_url("//evil")
        (None, None, None)
    """
    if not url:
        return None
    candidate = url.strip()
    try:
        parts = urlsplit(candidate)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return quote(candidate, safe=_URL_SAFE)
