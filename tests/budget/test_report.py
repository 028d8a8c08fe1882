from __future__ import annotations

import json

from ragidx.budget.report import ArticleOutcome, BudgetReport, ContextBudgetEvent


def test_report_round_trips_as_json() -> None:
    report = BudgetReport(
        context_window=8192,
        path=["compressed"],
        articles=[ArticleOutcome(kb_id="a", tokens_before=100, tokens_after=40, status="compressed")],
    )
    data = json.loads(report.model_dump_json())
    assert data["articles"][0]["status"] == "compressed"
    assert BudgetReport.model_validate(data) == report


def test_event_names_itself() -> None:
    event = ContextBudgetEvent(report=BudgetReport(context_window=4096))
    assert event.class_name() == "ContextBudgetEvent"
    assert event.model_dump()["report"]["context_window"] == 4096
