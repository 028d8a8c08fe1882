"""Deduplicate articles across all tool results and re-normalize their ranks.

Per ``kb_id`` the copy with the highest ``rerank_score`` wins; an article ranked high by any retrieval
call stays high. The survivors are sorted by score (best first; ties keep first-seen order) and get
fresh ``normalized_rank`` (0.0 best .. 1.0 worst, a lone article 0.0) and ``article_rank`` (0, 1, ...).
Inputs are never mutated: returned articles are new objects.

Example:
    >>> from ragidx.article import Article
    >>> call1 = [Article("a", "A", "", "A", metadata={"rerank_score": 0.2})]
    >>> call2 = [Article("b", "B", "", "B", metadata={"rerank_score": 0.9}),
    ...          Article("a", "A", "", "A", metadata={"rerank_score": 0.7})]
    >>> [(a.kb_id, a.metadata["normalized_rank"]) for a in dedupe_articles([call1, call2])]
    [('b', 0.0), ('a', 1.0)]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

from ragidx.article import ARTICLE_RANK, NORMALIZED_RANK, RERANK_SCORE, Article

__all__ = ["article_key", "dedupe_articles", "dedupe_keyed", "rerank_score_of"]


def article_key(article: Article, fallback: str) -> str:
    """The dedup key: ``kb_id`` when present, else ``fallback`` (such articles are never merged)."""
    return article.kb_id or fallback


def rerank_score_of(article: Article) -> float:
    """``metadata.rerank_score`` as a float; ``-inf`` when missing or not a number."""
    try:
        score = float(article.metadata.get(RERANK_SCORE))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return -math.inf
    return -math.inf if math.isnan(score) else score


def _old_rank(article: Article) -> float:
    try:
        return float(article.metadata.get(NORMALIZED_RANK, 1.0))
    except (TypeError, ValueError):
        return 1.0


def dedupe_articles(calls: Iterable[Sequence[Article]]) -> list[Article]:
    """Unique articles over all ``calls`` (each the article list of one tool result), best first.

    Sort key: ``rerank_score`` desc, then the call's own ``normalized_rank``, then first appearance.
    Articles without ``kb_id`` are kept apart (keyed by position).
    """
    return [article for _, article in dedupe_keyed(calls)]


def dedupe_keyed(calls: Iterable[Sequence[Article]]) -> list[tuple[str, Article]]:
    """``dedupe_articles`` with each article's key: its ``kb_id``, or ``"#<call>:<position>"`` without one."""
    best: dict[str, tuple[float, float, int, Article]] = {}
    seen = 0
    for c_idx, articles in enumerate(calls):
        for a_idx, article in enumerate(articles):
            key = article_key(article, f"#{c_idx}:{a_idx}")
            score = rerank_score_of(article)
            current = best.get(key)
            if current is None:
                best[key] = (score, _old_rank(article), seen, article)
            elif score > current[0]:
                best[key] = (score, _old_rank(article), current[2], article)
            seen += 1
    ordered = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[1][1], kv[1][2]))
    n = len(ordered)
    result: list[tuple[str, Article]] = []
    for rank, (key, (score, _, _, article)) in enumerate(ordered):
        meta = dict(article.metadata)
        if math.isfinite(score):
            meta[RERANK_SCORE] = score
        meta[NORMALIZED_RANK] = rank / (n - 1) if n > 1 else 0.0
        meta[ARTICLE_RANK] = rank
        result.append((key, replace(article, metadata=meta)))
    return result
