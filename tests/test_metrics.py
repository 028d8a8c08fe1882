from __future__ import annotations

import math

import pytest

from ragidx.metrics import mrr_at_k, ndcg_at_k, percentile, recall_at_k, score_runs


def test_ndcg_matches_hand_computed_values() -> None:
    assert ndcg_at_k(["a", "b"], {"a": 1}, 10) == 1.0
    assert ndcg_at_k(["x", "a"], {"a": 1}, 10) == pytest.approx(1 / math.log2(3))
    # graded: the grade-2 document first is ideal; swapped loses
    ideal = 2 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at_k(["b", "a"], {"a": 2, "b": 1}, 10) == pytest.approx((1 + 2 / math.log2(3)) / ideal)
    assert ndcg_at_k(["x"] * 10 + ["a"], {"a": 1}, 10) == 0.0


def test_recall_and_mrr() -> None:
    assert recall_at_k(["a", "x", "b"], {"a": 1, "b": 1, "c": 1}, 2) == pytest.approx(1 / 3)
    assert mrr_at_k(["x", "y", "a"], {"a": 1}, 10) == pytest.approx(1 / 3)
    assert mrr_at_k(["x", "y", "a"], {"a": 1}, 2) == 0.0


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) == 0.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 95) == 4.0


def test_score_runs_means_over_judged_queries() -> None:
    scores = score_runs({"q1": ["a"], "q2": ["x"]}, [10.0, 30.0], {"q1": {"a": 1}, "q2": {"b": 1}})
    assert scores["ndcg@10"] == 0.5
    assert scores["mrr@10"] == 0.5
    assert scores["p50_ms"] == 10.0
    assert scores["p95_ms"] == 30.0
