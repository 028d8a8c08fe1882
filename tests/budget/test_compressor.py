from __future__ import annotations

import asyncio

from ragidx.article import Article
from ragidx.budget.compressor import ArticleCompressor, TruncateCompressor, acompress_many
from ragidx.budget.extractive import ExtractiveCompressor

ART = Article("k", "T", "", "one two three four five six")


class Flaky:
    name = "flaky"

    def compress(self, article: Article, target_tokens: int, question: str) -> str:
        if article.kb_id == "bad":
            raise ValueError("nope")
        return article.content[:5]

    async def acompress(self, article: Article, target_tokens: int, question: str) -> str:
        return self.compress(article, target_tokens, question)


def test_protocol_is_satisfied() -> None:
    assert isinstance(TruncateCompressor(), ArticleCompressor)
    assert isinstance(ExtractiveCompressor(), ArticleCompressor)


def test_truncate_keeps_prefix() -> None:
    assert TruncateCompressor().compress(ART, 3, "q") == "one two three"


def test_errors_fill_their_slot() -> None:
    arts = [ART, Article("bad", "T", "", "x"), ART]
    out = asyncio.run(acompress_many(Flaky(), arts, [1, 1, 1], "q", max_concurrency=2))
    assert out[0] == out[2] == "one t" and isinstance(out[1], ValueError)
