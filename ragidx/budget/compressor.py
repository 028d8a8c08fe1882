"""The compressor protocol: shorten one article's content to a token target, guided by the question.

``compress(article, target_tokens, question) -> str`` returns the new *content* (title and URL stay in
their own fields and always survive). ``acompress`` is its async form and ``acompress_many`` runs many
at once. The caller (the budget hook) re-counts and truncates whatever comes back, so a compressor may
be wrong about length without breaking the budget.

Example:
    >>> from ragidx.article import Article
    >>> TruncateCompressor().compress(Article("a", "T", "", "one two three four"), 2, "q")
    'one two'
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ragidx.article import Article
from ragidx.providers.tokenizer import TokenCounter

__all__ = ["ArticleCompressor", "TruncateCompressor", "acompress_many"]


@runtime_checkable
class ArticleCompressor(Protocol):
    """What the budget needs from a compressor. ``name`` shows in reports."""

    name: str

    def compress(self, article: Article, target_tokens: int, question: str) -> str: ...

    async def acompress(self, article: Article, target_tokens: int, question: str) -> str: ...


async def acompress_many(
    compressor: ArticleCompressor,
    articles: Sequence[Article],
    targets: Sequence[int],
    question: str,
    *,
    max_concurrency: int = 4,
) -> list[str | BaseException]:
    """Compress concurrently (at most ``max_concurrency`` at a time); exceptions fill their slots.

    A compressor with its own ``acompress_many(articles, targets, question)`` (e.g. to share term
    statistics across articles) is used as is.
    """
    own = getattr(compressor, "acompress_many", None)
    if callable(own):
        try:
            return list(await own(articles, targets, question))
        except Exception as exc:
            return [exc] * len(articles)
    gate = asyncio.Semaphore(max(1, max_concurrency))

    async def one(article: Article, target: int) -> str:
        async with gate:
            return await compressor.acompress(article, target, question)

    results = await asyncio.gather(*(one(a, t) for a, t in zip(articles, targets, strict=True)), return_exceptions=True)
    return [r if isinstance(r, str | BaseException) else TypeError(f"not a str: {r!r}") for r in results]


class TruncateCompressor:
    """Keeps the first ``target_tokens`` tokens. The baseline, and the last resort of the budget.

    Example:
        >>> TruncateCompressor().name
        'truncate'
    """

    verbatim = True
    """Its text is the article's own sentences (a citation may quote it)."""

    name = "truncate"

    def __init__(self, token_counter: TokenCounter | None = None) -> None:
        self.tokens = token_counter or TokenCounter()

    def compress(self, article: Article, target_tokens: int, question: str) -> str:
        return self.tokens.truncate(article.content, target_tokens)

    async def acompress(self, article: Article, target_tokens: int, question: str) -> str:
        return self.compress(article, target_tokens, question)
