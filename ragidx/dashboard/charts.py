"""Altair charts of the dashboard: tokens per article, the context-window gauge, evaluation stages.

Each function returns a chart (``chart.to_dict()`` is its Vega-Lite spec), so tests check what is
drawn without a browser.

Example:
    >>> from ragidx.budget.report import BudgetReport
    >>> spec = window_gauge(BudgetReport(context_window=4096, trigger_tokens=3481, target_tokens=3276,
    ...                                  hard_limit_tokens=3635, tokens_before=5000, tokens_after=3200)).to_dict()
    >>> spec["layer"][0]["encoding"]["x"]["scale"]["domain"]
    [0, 5000]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import altair as alt

from ragidx.budget.report import BudgetReport

__all__ = ["stages_chart", "tokens_chart", "window_gauge"]

STAGE_COLORS = {"before": "#c7c7c7", "after": "#1f77b4"}


def tokens_chart(rows: Sequence[dict[str, Any]]) -> alt.Chart:
    """Grouped bars: each article's tokens before (grey) and after (blue) the budget."""
    stages = list(STAGE_COLORS)
    return (
        alt.Chart(alt.Data(values=list(rows)), title="Tokens per article, before and after the budget")
        .mark_bar()
        .encode(
            y=alt.Y("article:N", sort=None, title=None),
            x=alt.X("tokens:Q", title="tokens"),
            yOffset=alt.YOffset("stage:N", sort=stages),
            color=alt.Color(
                "stage:N",
                sort=stages,
                scale=alt.Scale(domain=stages, range=list(STAGE_COLORS.values())),
                title="stage",
            ),
            tooltip=["article:N", "stage:N", "tokens:Q", "status:N", "normalized_rank:Q"],
        )
    )


def window_gauge(report: BudgetReport) -> alt.LayerChart:
    """One bar of the context window: the prompt before (grey) and after (blue) the budget, with the
    target, trigger and hard-limit lines and the window's end."""
    top = max(report.context_window, report.tokens_before, report.tokens_after)
    scale = alt.Scale(domain=[0, top])
    bars = [
        {"part": "prompt before budget", "tokens": report.tokens_before, "order": 0},
        {"part": "prompt sent", "tokens": report.tokens_after, "order": 1},
    ]
    lines = [
        {"line": "target", "tokens": report.target_tokens},
        {"line": "trigger", "tokens": report.trigger_tokens},
        {"line": "hard limit", "tokens": report.hard_limit_tokens},
        {"line": "window", "tokens": report.context_window},
    ]
    line_names = [str(line["line"]) for line in lines]
    bar = (
        alt.Chart(alt.Data(values=bars))
        .mark_bar(size=28)
        .encode(
            x=alt.X("tokens:Q", scale=scale, stack=None, title=f"tokens of a {report.context_window}-token window"),
            color=alt.Color(
                "part:N",
                scale=alt.Scale(
                    domain=["prompt before budget", "prompt sent"],
                    range=[STAGE_COLORS["before"], STAGE_COLORS["after"]],
                ),
                title=None,
            ),
            order=alt.Order("order:Q"),
            tooltip=["part:N", "tokens:Q"],
        )
    )
    rules = (
        alt.Chart(alt.Data(values=lines))
        .mark_rule(strokeWidth=2, strokeDash=[4, 3])
        .encode(
            x=alt.X("tokens:Q", scale=scale),
            color=alt.Color(
                "line:N",
                scale=alt.Scale(domain=line_names, range=["#2ca02c", "#ff7f0e", "#d62728", "#000000"]),
                title="limits",
            ),
            tooltip=["line:N", "tokens:Q"],
        )
    )
    return alt.layer(bar, rules, title="Context window").resolve_scale(color="independent").properties(height=150)


QUALITY_METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
LATENCY_METRICS = ("p50_ms", "p95_ms")


def stages_chart(rows: Sequence[dict[str, Any]], metrics: Sequence[str] = QUALITY_METRICS) -> alt.Chart:
    """Grouped bars: each metric with one bar per retrieval stage, stages side by side.

    Args:
        rows: long-form ``{"stage", "metric", "value"}`` rows (``ragidx.dashboard.evaluation.stage_rows``).
        metrics: the metrics to draw, in this order.
    """
    wanted = [r for r in rows if r["metric"] in metrics]
    stages = list(dict.fromkeys(r["stage"] for r in wanted))
    latency = all(m.endswith("_ms") for m in metrics)
    return (
        alt.Chart(alt.Data(values=wanted), title="Latency per stage" if latency else "Quality per stage")
        .mark_bar()
        .encode(
            x=alt.X("metric:N", sort=list(metrics), title=None),
            xOffset=alt.XOffset("stage:N", sort=stages),
            y=alt.Y("value:Q", title="milliseconds" if latency else "score"),
            color=alt.Color("stage:N", sort=stages, title="stage"),
            tooltip=["stage:N", "metric:N", "value:Q"],
        )
    )
