"""Sentence units and search terms for extractive compression (English and Russian).

``split_units`` cuts text into sentences without losing layout: each unit is a span of the original
text, so selected units can be put back together with their own separators. Lines (list items,
headings, table rows) never merge; inside a line, a sentence ends at ``. ! ? …`` followed by a capital,
digit or opening quote, unless the word before the dot is an initial or a known abbreviation.
``terms`` lower-cases, drops stop words and strips common English and Russian endings.

Example:
    >>> [u.text for u in split_units("Dr. Smith came. He left!\\n- item one\\nМама мыла раму. Рама чистая.")]
    ['Dr. Smith came.', 'He left!', '- item one', 'Мама мыла раму.', 'Рама чистая.']
    >>> terms("The cats were running")
    ['cat', 'runn']
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

__all__ = ["Unit", "split_units", "stem", "terms"]

_BOUNDARY = re.compile(r"[.!?…]+[\"'»”’)\]]*\s+(?=[\"'«“‘(\[]?[A-ZА-ЯЁ0-9])")
_LIST_MARKER = re.compile(r"^(?:\d{1,3}|[a-zа-я])[.)]$")
_WORD = re.compile(r"\w+", re.UNICODE)
_CYRILLIC = re.compile(r"[а-яё]")


def _words(text: str) -> list[str]:
    return text.split()


_ABBREVIATIONS = frozenset(
    _words(
        "mr mrs ms dr prof sr jr st vs etc e.g i.e no fig al inc ltd co corp jan feb mar apr jun jul aug sep "
        "sept oct nov dec u.s u.k т.е т.д т.п т.к др г гг ул им см рис стр тыс млн млрд руб"
    )
)
_STOP = frozenset(
    _words(
        """a an the and or but if of at by for with about against between into through during before after
    above below to from up down in out on off over under again further then once here there when where
    why how all any both each few more most other some such no nor not only own same so than too very
    can will just don should now is are was were be been being have has had having do does did doing i
    me my we our you your he him his she her it its they them their what which who whom this that these
    those am would could also as s t ve ll re d m
    и в во не что он на я с со как а то все она так его но да ты к у же вы за бы по только ее мне было
    вот от меня еще нет о из ему теперь когда даже ну вдруг ли если уже или ни быть был него до вас
    нибудь опять уж вам ведь там потом себя ничего ей может они тут где есть надо ней для мы тебя их чем
    была сам чтоб без будто чего раз тоже себе под будет ж тогда кто этот того потому этого какой
    совсем ним здесь этом один почти мой тем чтобы нее сейчас были куда зачем всех никогда можно при
    наконец два об другой хоть после над больше тот через эти нас про всего них какая много разве три
    эту моя впрочем хорошо свою этой перед иногда лучше чуть том нельзя такой им более всегда конечно
    всю между это как"""
    )
)
_EN_SUFFIXES = ("ingly", "edly", "ness", "ing", "ies", "ied", "ed", "es", "ly", "s")
_RU_ENDINGS = tuple(
    sorted(
        _words(
            """ами ями ого его ому ему ыми ими ой ей ий ый ая яя ое ее ом ем ам ям ах ях ую юю
        ов ев ых их ые ие ться тся ешь ет ют ут ит ат ят ишь ем им ал ил ла ло ли ть ти а я о е ы и у ю ь"""
        ),
        key=len,
        reverse=True,
    )
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


class _Terms(dict[str, str]):
    """Lower-cased word -> its search term ("" for a stop word), filled on first sight."""

    def __missing__(self, word: str) -> str:
        term = "" if word in _STOP else stem(word)
        if len(self) < 1 << 17:
            self[word] = term
        return term


_TERMS = _Terms()


class _AsciiTerms(dict[bytes, str]):
    """``_Terms`` keyed by the ASCII bytes of the word."""

    def __missing__(self, word: bytes) -> str:
        term = _TERMS[word.decode("ascii")]
        if len(self) < 1 << 17:
            self[word] = term
        return term


_ASCII_TERMS = _AsciiTerms()
_ASCII_FOLD = bytes((b + 32 if 65 <= b <= 90 else b) if chr(b).isalnum() or b == 95 else 32 for b in range(256))
"""Lower-cases ASCII letters, keeps digits and "_" (what ``\\w`` matches in ASCII), blanks the rest."""


@lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """Strip one common ending (Russian for Cyrillic words, English otherwise), keeping 3+ letters."""
    if word.isdigit():
        return word
    endings = _RU_ENDINGS if _CYRILLIC.search(word) else _EN_SUFFIXES
    for ending in endings:
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            base = word[: -len(ending)]
            if ending in ("ies", "ied"):
                base += "y"
            return base
    return word


def terms(text: str) -> list[str]:
    """Search terms of ``text``: lower-cased words minus stop words, stemmed."""
    if text.isascii():  # the same words as the regex, found by a byte table (several times faster)
        return list(filter(None, map(_ASCII_TERMS.__getitem__, text.encode("ascii").translate(_ASCII_FOLD).split())))
    return list(filter(None, map(_TERMS.__getitem__, _WORD.findall(text.lower()))))
