"""Search terms of a text, one pipeline for ragidx: words, stop words, stems (English and Russian).

Words are ``\\w+`` runs, lower-cased. Stop words are bm25s's English and Russian lists; single letters
are dropped too. Stems come from NLTK's Snowball stemmers: Russian for Cyrillic words, English
otherwise. The extractive compressor, the offline reranker, the compression evaluation and the
citation fallback all read text through :func:`terms`.

Example:
    >>> terms("The cats were running")
    ['cat', 'run']
    >>> terms("Мама мыла раму")
    ['мам', 'мыл', 'рам']
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

__all__ = ["is_stop_word", "stem", "terms", "words"]

_WORD = re.compile(r"\w+", re.UNICODE)
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")


@lru_cache(maxsize=1)
def _stop_words() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN_PLUS, STOPWORDS_RUSSIAN

    return frozenset(STOPWORDS_EN_PLUS) | frozenset(STOPWORDS_RUSSIAN)


@lru_cache(maxsize=2)
def _stemmer(language: str) -> object:
    from nltk.stem.snowball import SnowballStemmer

    return SnowballStemmer(language)


def words(text: str) -> list[str]:
    """The lower-cased words of ``text``, in order."""
    return _WORD.findall(text.lower())


def is_stop_word(word: str) -> bool:
    """Whether a lower-cased word carries no meaning for search (a stop word or a single letter)."""
    return word in _stop_words() or (len(word) == 1 and word.isalpha())


@lru_cache(maxsize=1 << 17)
def stem(word: str) -> str:
    """The Snowball stem of a lower-cased word (Russian for Cyrillic, English otherwise)."""
    stemmer = _stemmer("russian" if _CYRILLIC.search(word) else "english")
    return str(stemmer.stem(word))  # type: ignore[attr-defined]


@lru_cache(maxsize=1 << 17)
def _term(word: str) -> str:
    return "" if is_stop_word(word) else stem(word)


def terms(text: str, *, extra_stop_words: Iterable[str] = ()) -> list[str]:
    """Search terms of ``text`` in order: lower-cased words minus stop words, stemmed.

    ``extra_stop_words`` (lower-cased words) are dropped as well, before stemming.
    """
    found = words(text)
    if extra_stop_words:
        extra = set(extra_stop_words)
        found = [w for w in found if w not in extra]
    return [t for t in map(_term, found) if t]
