"""Ranking metrics shared by the retrieval evaluation and the tuner: nDCG, recall and MRR at k.

Example:
    >>> ndcg_at_k(["d1", "d2"], {"d2": 1}, 10) < 1.0
    True
    >>> score_runs({"q": ["d2"]}, [12.0], {"q": {"d2": 1}})["ndcg@10"]
    1.0
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def ndcg_at_k(ranked: Sequence[str], relevant: dict[str, int], k: int) -> float:
    """nDCG@k with graded gains (``rel``) and log2 discounts, as pytrec_eval / BEIR compute it."""
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at_k(ranked: Sequence[str], relevant: dict[str, int], k: int) -> float:
    """Share of the relevant documents found in the first ``k``."""
    if not relevant:
        return 0.0
    return len(set(ranked[:k]) & set(relevant)) / len(relevant)


def mrr_at_k(ranked: Sequence[str], relevant: dict[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant document within the first ``k`` (0 if none)."""
    for i, d in enumerate(ranked[:k]):
        if relevant.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def percentile(values: Sequence[float], pct: float) -> float:
    """The nearest-rank ``pct``-th percentile of ``values`` (0.0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, math.ceil(pct / 100 * len(ordered)) - 1))
    return ordered[idx]


def score_runs(
    runs: dict[str, list[str]], latencies_ms: Sequence[float], qrels: dict[str, dict[str, int]]
) -> dict[str, float]:
    """Mean metrics over queries plus latency percentiles, rounded for printing."""
    metrics: dict[str, list[float]] = {"ndcg@10": [], "recall@10": [], "recall@100": [], "mrr@10": []}
    for qid, relevant in qrels.items():
        ranked = runs.get(qid, [])
        metrics["ndcg@10"].append(ndcg_at_k(ranked, relevant, 10))
        metrics["recall@10"].append(recall_at_k(ranked, relevant, 10))
        metrics["recall@100"].append(recall_at_k(ranked, relevant, 100))
        metrics["mrr@10"].append(mrr_at_k(ranked, relevant, 10))
    out = {name: round(statistics.fmean(vals), 4) if vals else 0.0 for name, vals in metrics.items()}
    out["p50_ms"] = round(percentile(latencies_ms, 50), 1)
    out["p95_ms"] = round(percentile(latencies_ms, 95), 1)
    return out
