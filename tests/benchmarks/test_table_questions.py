"""``benchmarks/table_questions.py``: its documents hold each question's answer row in the question's section, as
ragidx's readers read them, and the benchmark finds every answer cell in its top chunks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingestion.sources import read_source
from ragidx.article import SECTIONS
from tests.benchmarks.helpers import load_benchmark

bench = load_benchmark("table_questions")


def test_the_documents_hold_each_answer_row_in_its_section(tmp_path: Path) -> None:
    bench.build(tmp_path)  # written afresh, as the committed fixtures were
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in bench.FIXTURES.iterdir())
    articles = {a.kb_id: a for a in read_source(tmp_path)}
    assert len(articles) == 10 and len(bench.QUESTIONS) == 15
    for q in bench.QUESTIONS:
        article = articles[q.file]
        row = "| " + " | ".join(q.row) + " |"
        at = article.content.find(row)
        assert at >= 0 and bench.holds_cell(article.content, q), (q.text, row)
        section = [s for s in article.metadata[SECTIONS] if s["start"] <= at][-1]
        assert section["section"] == q.section, q.text


def test_the_benchmark_prints_one_line_of_figures(capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["--top-k", "5"])
    figures = json.loads(capsys.readouterr().out)
    assert (figures["documents"], figures["questions"], figures["ingest_errors"]) == (10, 15, [])
    # every answer cell is in the top five chunks, every cell in its column, named by its chunk's sections
    assert figures["cell_at_k"] == figures["row_at_k"] == figures["spanned_at_k"] == 1.0
    assert 0 < figures["cell_at_1"] <= 1 and figures["section_at_k"] >= 0.8


def test_a_shifted_column_is_not_the_answer_cell() -> None:
    q = bench.QUESTIONS[0]  # Agent: yes, no, no; asked for Delete users
    assert bench.holds_cell("| Agent | yes | no | no |", q)
    assert not bench.holds_cell("| Agent | yes | no |", q)  # a cell merged away: the column is missing
    assert not bench.holds_row("| Agent | yes | no |", q)
