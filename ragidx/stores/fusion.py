"""Score fusion for hybrid search: the two methods both stores offer (``Settings.hybrid_fusion``).

- ``relative_score`` (Weaviate's default): min-max normalize each result list to [0, 1], then
  ``alpha * dense + (1 - alpha) * keyword``. A hit missing from one list gets 0 there.
- ``rrf``: reciprocal-rank fusion, ``alpha / (k + dense rank) + (1 - alpha) / (k + keyword rank)``
  (ranks from 1, ``k = 60``); scores are ignored, only positions count. Weaviate's ``rankedFusion``.

Example:
    >>> relative_score_fusion({"a": 0.9, "b": 0.5}, {"b": 12.0, "c": 3.0}, alpha=0.4)  # b: 0.4 * 0 + 0.6 * 1
    [('b', 0.6), ('a', 0.4), ('c', 0.0)]
    >>> reciprocal_rank_fusion({"a": 0.9, "b": 0.5}, {"b": 12.0, "c": 3.0}, alpha=0.5)[0][0]
    'b'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

__all__ = ["FUSIONS", "Fusion", "fuse", "reciprocal_rank_fusion", "relative_score_fusion"]

Fusion = Literal["relative_score", "rrf"]
FUSIONS: tuple[Fusion, ...] = ("relative_score", "rrf")
RRF_K = 60


def _min_max(scores: dict[str, float]) -> dict[str, float]:
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi == lo:
        return dict.fromkeys(scores, 1.0)
    return {k: (v - lo) / (hi - lo) for k, v in scores.items()}


def relative_score_fusion(
    dense: dict[str, float], keyword: dict[str, float], alpha: float = 0.5
) -> list[tuple[str, float]]:
    """Fuse two id→score maps; returns (id, fused score) best first, ties broken by id order seen."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    d, k = _min_max(dense), _min_max(keyword)
    ids = list(dict.fromkeys([*dense, *keyword]))
    fused = {i: alpha * d.get(i, 0.0) + (1.0 - alpha) * k.get(i, 0.0) for i in ids}
    return sorted(fused.items(), key=lambda kv: kv[1], reverse=True)


def reciprocal_rank_fusion(
    dense: dict[str, float], keyword: dict[str, float], alpha: float = 0.5, k: int = RRF_K
) -> list[tuple[str, float]]:
    """Fuse two id→score maps (each best first) by weighted reciprocal rank; (id, fused score) best first."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    fused: dict[str, float] = {}
    for weight, ranked in ((alpha, dense), (1.0 - alpha, keyword)):
        order = sorted(ranked, key=lambda i: -ranked[i])
        for rank, i in enumerate(order, start=1):
            fused[i] = fused.get(i, 0.0) + weight / (k + rank)
    ids = list(dict.fromkeys([*dense, *keyword]))
    position = {i: n for n, i in enumerate(ids)}
    return sorted(fused.items(), key=lambda kv: (-kv[1], position[kv[0]]))


_FUSE: dict[str, Callable[..., list[tuple[str, float]]]] = {
    "relative_score": relative_score_fusion,
    "rrf": reciprocal_rank_fusion,
}


def fuse(
    dense: dict[str, float], keyword: dict[str, float], alpha: float = 0.5, method: str = "relative_score"
) -> list[tuple[str, float]]:
    """Fuse with ``method`` (``relative_score`` or ``rrf``)."""
    if method not in _FUSE:
        raise ValueError(f"unknown fusion {method!r}: use {' or '.join(FUSIONS)}")
    return _FUSE[method](dense, keyword, alpha=alpha)
