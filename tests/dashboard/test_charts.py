from __future__ import annotations

from ragidx.budget.report import BudgetReport
from ragidx.dashboard.charts import LATENCY_METRICS, stages_chart, tokens_chart, window_gauge


def test_gauge_draws_prompt_before_and_after_against_the_limits() -> None:
    report = BudgetReport(
        context_window=4096,
        trigger_tokens=3400,
        target_tokens=3200,
        hard_limit_tokens=3380,
        tokens_before=5200,
        tokens_after=3150,
    )
    spec = window_gauge(report).to_dict()
    bars, rules = spec["layer"]
    assert {r["part"]: r["tokens"] for r in bars["data"]["values"]} == {
        "prompt before budget": 5200,
        "prompt sent": 3150,
    }
    assert bars["encoding"]["x"]["stack"] is None  # overlaid, not stacked: the sent bar reads off the axis
    assert {r["line"]: r["tokens"] for r in rules["data"]["values"]} == {
        "target": 3200,
        "trigger": 3400,
        "hard limit": 3380,
        "window": 4096,
    }
    assert bars["encoding"]["x"]["scale"]["domain"] == [0, 5200]  # an overflowing prompt stays visible


def test_tokens_chart_groups_before_and_after_per_article() -> None:
    rows = [{"article": "1. A", "stage": "before", "tokens": 9, "status": "kept", "normalized_rank": 0.0}]
    spec = tokens_chart(rows).to_dict()
    assert spec["data"]["values"] == rows
    assert spec["encoding"]["yOffset"]["field"] == "stage" and spec["encoding"]["y"]["field"] == "article"


def test_stages_chart_keeps_stage_order_and_only_the_asked_metrics() -> None:
    rows = [
        {"stage": s, "metric": m, "value": v}
        for s, v in (("dense", 1.0), ("hybrid", 2.0), ("full_chain", 3.0))
        for m in ("ndcg@10", "p50_ms", "p95_ms")
    ]
    spec = stages_chart(rows, LATENCY_METRICS).to_dict()
    assert {r["metric"] for r in spec["data"]["values"]} == {"p50_ms", "p95_ms"}
    assert spec["encoding"]["xOffset"]["sort"] == ["dense", "hybrid", "full_chain"]
    assert spec["encoding"]["y"]["title"] == "milliseconds"
