"""``benchmarks/prompt_recall.py`` on a three-article KB: the real retrieval and budget, the stand-in model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.helpers import load_benchmark


def test_prompt_recall_finds_the_answer_in_the_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kb = tmp_path / "kb.jsonl"
    articles = [
        ("tables", "Inserting Tables", "To insert a table, choose Table - Insert Table and set the number of rows."),
        ("sheets", "Sheet Limits", "A Calc document can hold at most 10,000 sheets; each sheet has 1,048,576 rows."),
        ("print", "Printing in Reverse", "Tick Print in reverse page order in the print dialog to print backwards."),
    ]
    kb.write_text("".join(json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in articles))
    questions = tmp_path / "questions.jsonl"
    rows = [
        {"id": "q1", "question": "How many sheets can a Calc document hold?", "answers": ["10,000"]},
        {"id": "q2", "question": "Which option prints the last page first?", "answers": ["reverse page order"]},
        {"id": "q3", "question": "Is a table inserted from the Table menu?", "answers": ["yes"]},  # yes/no: skipped
    ]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "rows.jsonl"

    code = load_benchmark("prompt_recall").main(
        ["--kb", str(kb), "--questions", str(questions), "--data-dir", str(tmp_path / "idx"),
         "--caps", "768", "--model", "qwen2.5-0.5b", "--out", str(out)]
    )  # fmt: skip

    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["questions"] == 2
    assert result["cap768"]["answer_in_prompt"] == 1.0
    assert 0 < result["cap768"]["prompt_tokens_mean"] <= 768
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["q1", "q2"]
