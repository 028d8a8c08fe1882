"""Links that open a web page at a passage and highlight it: URL text fragments (``#:~:text=start,end``).

A citation carries the sentence of its article that supports the statement it closes (``Citation.quote``); for a
web page or an HTML file its link ends in a text directive, so a browser that supports them (Chromium, Safari,
Firefox 131+) scrolls to that sentence and highlights it, and one that does not opens the page as before (a text
directive is never sent to the server and is ignored where unknown). The directive follows the WICG
specification: ``text=[prefix-,]textStart[,textEnd][,-suffix]``; each term is matched case-insensitively on
word boundaries in the page's rendered text, and a term cannot span two blocks (table cells, list items,
paragraphs), so a quote is cut at line breaks and table pipes and the directive names its first and last words.
Markup that a reader keeps in an article's text but a page does not show (Markdown emphasis, code ticks, link
targets, heading hashes) is left out of the terms.

Example:
    >>> text_directive("Backups are kept for 35 days in the vault, then deleted.")
    'text=Backups%20are%20kept%20for%2035,the%20vault%2C%20then%20deleted.'
    >>> with_text_fragment("https://docs.example.org/ops.html#retention", "Backups are kept 35 days.")
    'https://docs.example.org/ops.html#retention:~:text=Backups%20are%20kept%2035%20days.'
    >>> with_text_fragment("file:///kb/manual.pdf#page=3", "Backups are kept 35 days.")
    'file:///kb/manual.pdf#page=3'
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from urllib.parse import quote, urlsplit

DIRECTIVE = ":~:"
"""What separates a URL's fragment from its directives."""
WHOLE_TERM_WORDS = 10
"""A quote of at most this many words is matched whole (one term); a longer one by its first and last words."""
START_WORDS = 5
END_WORDS = 4
PAGE_SUFFIXES = frozenset({"", ".html", ".htm", ".xhtml", ".shtml", ".php", ".asp", ".aspx", ".jsp"})
"""URL path suffixes of pages a browser renders as HTML (a path without one is a site's page)."""
HTML_FORMATS = frozenset({"html", "htm", "xhtml"})

_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_HEADING = re.compile(r"(?m)^\s{0,3}#{1,6}\s+")
# Paired emphasis and code only: a lone "*" or "_" is text ("SELECT * FROM", "huge_pages"), and a page shows it
_PAIRED = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|`([^`\n]+)`|(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)")
_BLOCKS = re.compile(r"\s*(?:\|\s*|\n\s*)+")


def _terms(quote_text: str) -> list[str]:
    """The quote's text as a page shows it, in pieces that each lie inside one block."""
    plain = _HEADING.sub(
        "", _PAIRED.sub(lambda m: next(g for g in m.groups() if g is not None), _LINK.sub(r"\1", quote_text))
    )
    pieces = [" ".join(p.split()) for p in _BLOCKS.split(plain)]
    return [p for p in pieces if re.search(r"\w", p)]


def _encode(term: str) -> str:
    # '-', ',' and '&' are the directive's own syntax inside a term: percent-encoded as the specification asks
    return quote(term, safe="").replace("-", "%2D")


def text_directive(quote_text: str) -> str:
    """The ``text=`` directive that finds ``quote_text`` in a page ('' when it holds no word)."""
    pieces = _terms(quote_text)
    if not pieces:
        return ""
    words = " ".join(pieces).split()
    if len(pieces) == 1 and len(words) <= WHOLE_TERM_WORDS:
        return f"text={_encode(pieces[0])}"
    first, last = pieces[0].split(), pieces[-1].split()
    if len(pieces) == 1:  # one long sentence: its opening words to its closing words, which do not overlap
        start, end = first[:START_WORDS], first[-END_WORDS:]
    else:
        start, end = first[:START_WORDS], last[-END_WORDS:]
    return f"text={_encode(' '.join(start))},{_encode(' '.join(end))}"


def renders_as_page(url: str, fmt: str | None = None) -> bool:
    """Whether ``url`` opens as an HTML page in a browser: http(s) or file, and an HTML document (by the article's
    ``format`` when known, else by the path's suffix); a PDF, Word or Markdown file does not.

    Example:
        >>> [renders_as_page(u) for u in ("https://x.org/a/b", "https://x.org/m.pdf", "file:///kb/p.html")]
        [True, False, True]
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https", "file"):
        return False
    if fmt:
        return fmt.lower() in HTML_FORMATS
    return PurePosixPath(parts.path).suffix.lower() in PAGE_SUFFIXES


def with_text_fragment(url: str, quote_text: str, fmt: str | None = None) -> str:
    """``url`` with a text directive for ``quote_text`` after its fragment (kept: a section's ``#anchor`` still
    names where the page opens in a browser without text fragments); ``url`` unchanged when it is not a page
    (see :func:`renders_as_page`) or the quote holds no word."""
    directive = text_directive(quote_text) if quote_text and renders_as_page(url, fmt) else ""
    if not directive:
        return url
    base, _, fragment = url.partition("#")
    return f"{base}#{fragment.split(DIRECTIVE, 1)[0]}{DIRECTIVE}{directive}"
