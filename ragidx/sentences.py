"""Sentence units of a text (English and Russian), for extractive compression and pseudo-queries.

``split_units`` cuts text into sentences without losing layout: each unit is a span of the original
text, so selected units can be put back together with their own separators. Lines (list items,
headings, table rows) never merge; inside a line, a sentence ends at ``. ! ? …`` followed by a capital,
digit or opening quote, unless the word before the dot is an initial or a known abbreviation.

Example:
    >>> [u.text for u in split_units("Dr. Smith came. He left!\\n- item one\\nМама мыла раму. Рама чистая.")]
    ['Dr. Smith came.', 'He left!', '- item one', 'Мама мыла раму.', 'Рама чистая.']
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["Unit", "split_units"]

_BOUNDARY = re.compile(r"[.!?…]+[\"'»”’)\]]*\s+(?=[\"'«“‘(\[]?[A-ZА-ЯЁ0-9])")
_LIST_MARKER = re.compile(r"^(?:\d{1,3}|[a-zа-я])[.)]$")


_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e no fig al inc ltd co corp jan feb mar apr jun jul aug sep "
    "sept oct nov dec u.s u.k т.е т.д т.п т.к др г гг ул им см рис стр тыс млн млрд руб".split()
)


class Unit(NamedTuple):
    """One sentence (or line) as a span ``text[start:end]`` of the source (a named tuple: thousands are
    made per call, and a frozen dataclass costs several times more to build)."""

    start: int
    end: int
    text: str


def _is_abbreviation(before: str) -> bool:
    word = before.rstrip(".!?…").lstrip("\"'«“(").lower()
    if len(word) == 1 and word.isalpha():  # an initial: "J. Smith"
        return True
    return word in _ABBREVIATIONS


def split_units(text: str) -> list[Unit]:
    """Sentences and lines of ``text`` as spans, in order; blank text gives ``[]``."""
    units: list[Unit] = []
    append = units.append
    pos = 0
    boundary = _BOUNDARY.search
    for line in text.splitlines(keepends=True):
        line_start, body = pos, line.rstrip("\r\n")
        pos += len(line)
        stripped = body.strip()
        if not stripped:
            continue
        first = boundary(body)
        if first is None:  # most lines: one unit, the line without its surrounding whitespace
            start = line_start + body.find(stripped[0])  # everything before that character is whitespace
            append(Unit(start, start + len(stripped), stripped))
            continue
        cut = 0
        for m in _BOUNDARY.finditer(body, first.start()):
            end_punct = m.start() + len(m.group(0).rstrip())
            before = body[cut : m.start() + 1].rsplit(None, 1)  # the word before the dot (no regex: O(n))
            if before and _is_abbreviation(before[-1]):
                continue
            if _LIST_MARKER.match(body[cut : m.start() + 1].strip()):
                continue  # "1. Open File" is one item, not a sentence "1."
            _append(units, text, line_start + cut, line_start + end_punct)
            cut = m.end()
        _append(units, text, line_start + cut, line_start + len(body))
    return units


def _append(units: list[Unit], text: str, start: int, end: int) -> None:
    span = text[start:end]
    left = span.lstrip()
    piece = left.rstrip()
    if piece:
        start += len(span) - len(left)
        units.append(Unit(start, start + len(piece), piece))
