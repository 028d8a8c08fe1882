"""Search terms of a text, one pipeline for ragidx: words, stop words, stems, per language.

Words are ``\\w+`` runs, lower-cased. Stop words are bm25s's English and Russian lists plus the list of
the text's language where bm25s has one; single letters are dropped too. Stems come from NLTK's
Snowball stemmers, chosen per word:

- a word in the script of the text's ``language`` (Latin for ``de``, Cyrillic for ``ru``...) gets that
  language's Snowball stemmer, when Snowball has one;
- any other Cyrillic word gets the Russian stemmer, any other word the English one (so an English menu
  path inside a Russian article stems as English, and a text of unknown language as before).

English and Russian text therefore get the same terms whatever language is declared, and two texts
of one language always get comparable terms. The full-text index (``ragidx.stores``), the offline
reranker, the extractive compressor, the compression evaluation and the citation fallback all read
text through :func:`terms`.

Example:
    >>> terms("The cats were running")
    ['cat', 'run']
    >>> terms("Мама мыла раму")
    ['мам', 'мыл', 'рам']
    >>> terms("Die Tabellen wurden eingefügt", language="de")
    ['tabell', 'wurd', 'eingefugt']
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

__all__ = [
    "SNOWBALL_LANGUAGES",
    "TERMS_FORMAT",
    "base_language",
    "is_cyrillic_language",
    "is_stop_word",
    "stem",
    "terms",
    "words",
]

TERMS_FORMAT = 2
"""Version of what :func:`terms` returns. Bump when stems or stop words change: indexes of stored terms
(the LanceDB ``terms`` column) are then rebuilt."""

SNOWBALL_LANGUAGES = {
    "ar": "arabic",
    "da": "danish",
    "de": "german",
    "en": "english",
    "es": "spanish",
    "fi": "finnish",
    "fr": "french",
    "hu": "hungarian",
    "it": "italian",
    "nb": "norwegian",
    "nl": "dutch",
    "nn": "norwegian",
    "no": "norwegian",
    "pt": "portuguese",
    "ro": "romanian",
    "ru": "russian",
    "sv": "swedish",
}
"""ISO 639-1 code → NLTK Snowball stemmer name."""

_STOP_LISTS = {
    "da": "STOPWORDS_DANISH",
    "de": "STOPWORDS_GERMAN",
    "es": "STOPWORDS_SPANISH",
    "fr": "STOPWORDS_FRENCH",
    "it": "STOPWORDS_ITALIAN",
    "nb": "STOPWORDS_NORWEGIAN",
    "nl": "STOPWORDS_DUTCH",
    "no": "STOPWORDS_NORWEGIAN",
    "pt": "STOPWORDS_PORTUGUESE",
    "sv": "STOPWORDS_SWEDISH",
}
_CYRILLIC_LANGUAGES = frozenset({"ru", "uk", "be", "bg", "mk", "sr", "kk", "ky", "mn", "tg"})
_NON_LATIN_LANGUAGES = frozenset({"ar"})

_WORD = re.compile(r"\w+", re.UNICODE)
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")
_LATIN = re.compile(r"[a-z\u00c0-\u024f]")


def base_language(language: str | None) -> str | None:
    """The lower-case ISO 639-1 part of a language tag (``'en-US'`` → ``'en'``); None for an empty one."""
    if not language:
        return None
    return re.split(r"[-_.]", language.strip().lower(), maxsplit=1)[0] or None


def is_cyrillic_language(language: str | None) -> bool:
    """Whether ``language`` (a tag such as ``'ru'`` or ``'uk-UA'``) is written in Cyrillic."""
    return base_language(language) in _CYRILLIC_LANGUAGES


@lru_cache(maxsize=32)
def _stop_words(language: str | None) -> frozenset[str]:
    import bm25s.stopwords as lists

    words = frozenset(lists.STOPWORDS_EN_PLUS) | frozenset(lists.STOPWORDS_RUSSIAN)
    name = _STOP_LISTS.get(language or "")
    return words | frozenset(getattr(lists, name)) if name else words


@lru_cache(maxsize=32)
def _stemmer(name: str) -> object:
    from nltk.stem.snowball import SnowballStemmer

    return SnowballStemmer(name)


def words(text: str) -> list[str]:
    """The lower-cased words of ``text``, in order."""
    return _WORD.findall(text.lower())


def is_stop_word(word: str, language: str | None = None) -> bool:
    """Whether a lower-cased word carries no meaning for search (a stop word or a single letter)."""
    return word in _stop_words(base_language(language)) or (len(word) == 1 and word.isalpha())


def _stemmer_name(word: str, language: str | None) -> str:
    cyrillic = bool(_CYRILLIC.search(word))
    own = SNOWBALL_LANGUAGES.get(language or "")
    if own is not None:
        if language in _CYRILLIC_LANGUAGES:
            same_script = cyrillic
        elif language in _NON_LATIN_LANGUAGES:
            same_script = not cyrillic and not _LATIN.search(word)
        else:
            same_script = not cyrillic and bool(_LATIN.search(word))
        if same_script:
            return own
    return "russian" if cyrillic else "english"


@lru_cache(maxsize=1 << 17)
def stem(word: str, language: str | None = None) -> str:
    """The Snowball stem of a lower-cased word, by ``language`` and the word's script (see module doc)."""
    stemmer = _stemmer(_stemmer_name(word, base_language(language)))
    return str(stemmer.stem(word))  # type: ignore[attr-defined]


@lru_cache(maxsize=1 << 17)
def _term(word: str, language: str | None) -> str:
    return "" if is_stop_word(word, language) else stem(word, language)


def terms(text: str, *, language: str | None = None, extra_stop_words: Iterable[str] = ()) -> list[str]:
    """Search terms of ``text`` in order: lower-cased words minus stop words, stemmed.

    Args:
        text: any text.
        language: the text's language (ISO 639-1, ``'en'``, ``'ru'``, ``'de-AT'``...); None: English
            rules for non-Cyrillic words, Russian for Cyrillic ones.
        extra_stop_words: lower-cased words dropped as well, before stemming.
    """
    lang = base_language(language)
    found = words(text)
    if extra_stop_words:
        extra = set(extra_stop_words)
        found = [w for w in found if w not in extra]
    return [t for t in (_term(w, lang) for w in found) if t]
