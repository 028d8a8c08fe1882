"""Score fusion for hybrid search.

Relative score fusion (Weaviate's default): min-max normalize each result list to [0, 1], then
``alpha * dense + (1 - alpha) * keyword``. A hit missing from one list gets 0 there.

Example:
    >>> relative_score_fusion({"a": 0.9, "b": 0.5}, {"b": 12.0, "c": 3.0}, alpha=0.5)[0][0]
    'b'
"""

from __future__ import annotations


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
