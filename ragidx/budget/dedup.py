"""Deduplicate articles across all tool results and re-normalize their ranks.

Per ``kb_id`` the copy with the highest ``rerank_score`` wins; an article ranked high by any retrieval
call stays high. The survivors are sorted by score (best first; ties keep first-seen order) and get
fresh ``normalized_rank`` (0.0 best .. 1.0 worst, a lone article 0.0) and ``article_rank`` (0, 1, ...).
Inputs are never mutated: returned articles are new dicts.

Example:
    >>> call1 = [{"kb_id": "a", "content": "A", "metadata": {"rerank_score": 0.2}}]
    >>> call2 = [{"kb_id": "b", "content": "B", "metadata": {"rerank_score": 0.9}},
    ...          {"kb_id": "a", "content": "A", "metadata": {"rerank_score": 0.7}}]
    >>> [(a["kb_id"], a["metadata"]["normalized_rank"]) for a in dedupe_articles([call1, call2])]
    [('b', 0.0), ('a', 1.0)]
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from typing import Any

from ragidx.article import ARTICLE_RANK, NORMALIZED_RANK, RERANK_SCORE

__all__ = ["article_key", "dedupe_articles", "dedupe_keyed", "rerank_score_of"]


def article_key(article: dict[str, Any], fallback: str) -> str:
    """The dedup key: ``kb_id`` when present, else ``fallback`` (such articles are never merged)."""
    kb_id = article.get("kb_id")
    return str(kb_id) if kb_id not in (None, "") else fallback


def rerank_score_of(article: dict[str, Any]) -> float:
    """``metadata.rerank_score`` as a float; ``-inf`` when missing or not a number."""
    meta = article.get("metadata")
    if not isinstance(meta, dict):
        return -math.inf
    try:
        score = float(meta.get(RERANK_SCORE))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return -math.inf
    return -math.inf if math.isnan(score) else score


def _old_rank(article: dict[str, Any]) -> float:
    meta = article.get("metadata")
    try:
        return float(meta.get(NORMALIZED_RANK, 1.0)) if isinstance(meta, dict) else 1.0
    except (TypeError, ValueError):
        return 1.0


def dedupe_articles(calls: Iterable[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Unique articles over all ``calls`` (each the article list of one tool result), best first.

    Sort key: ``rerank_score`` desc, then the call's own ``normalized_rank``, then first appearance.
    Articles without ``kb_id`` are kept apart (keyed by position).
    """
    return [article for _, article in dedupe_keyed(calls)]


def dedupe_keyed(calls: Iterable[Sequence[dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """``dedupe_articles`` with each article's key: its ``kb_id``, or ``"#<call>:<position>"`` without one."""
    best: dict[str, tuple[float, float, int, dict[str, Any]]] = {}
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
    result: list[tuple[str, dict[str, Any]]] = []
    for rank, (key, (score, _, _, article)) in enumerate(ordered):
        new = copy.deepcopy(article)
        meta = new.get("metadata")
        meta = dict(meta) if isinstance(meta, dict) else {}
        if math.isfinite(score):
            meta[RERANK_SCORE] = score
        meta[NORMALIZED_RANK] = rank / (n - 1) if n > 1 else 0.0
        meta[ARTICLE_RANK] = rank
        new["metadata"] = meta
        result.append((key, new))
    return result
