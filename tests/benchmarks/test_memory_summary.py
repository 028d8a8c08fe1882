"""``benchmarks/memory_summary.py``: the 12-turn conversation is built from the sample and its facts are scored."""

from __future__ import annotations

import json

import pytest

from tests.benchmarks.helpers import load_benchmark


def test_the_conversation_carries_one_fact_per_answer_and_the_extractive_run_is_scored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    benchmark = load_benchmark("memory_summary")
    history = benchmark.conversation()
    assert len(history) == 2 * len(benchmark.TURNS) == 22
    for (_, fact), answer in zip(benchmark.TURNS, history[1::2], strict=True):
        assert fact in (answer.content or "")  # each answer states its fact, from the article

    assert benchmark.main(["--model", "none", "--summary-tokens", "409"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert (row["turns"], row["facts_folded"], row["facts_asked"]) == (12, 10, 3)
    extractive = row["extractive"]
    assert extractive["method"] == "extractive" and extractive["messages_folded"] == 20
    assert 0 <= extractive["kept_asked"] <= 3 and 0 <= extractive["kept_all"] <= 10
    assert extractive["summary_tokens"] <= 409 and "llm" not in row


def test_a_fact_counts_as_kept_whatever_its_case_and_spacing() -> None:
    benchmark = load_benchmark("memory_summary")
    summary = "Use FORMAT -  Cells, then\nInsert - Frame."
    assert benchmark.kept(summary, ["Format - Cells", "Insert - Caption", "Insert - Frame"]) == [True, False, True]
