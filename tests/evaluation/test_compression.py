from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragidx.article import Article
from ragidx.evaluation.compression import bm25_rank, evaluate_compression, linked_bm25_rank, main
from tests.fakes.scripted_llm import ScriptedLLM

FILLER = " ".join(f"Filler sentence number {i} talks about unrelated weather and sports." for i in range(8))


def _item(qid: int, question: str, answer: str, support: str) -> dict:
    contexts = [
        {"doc_id": f"d{qid}-{j}", "title": f"Other {j}", "text": FILLER, "is_supporting": False} for j in range(8)
    ]
    contexts.insert(2, {"doc_id": f"d{qid}-s", "title": "Lighthouse", "text": support, "is_supporting": True})
    contexts.insert(5, {"doc_id": f"d{qid}-t", "title": "Keeper", "text": FILLER, "is_supporting": True})
    return {"id": str(qid), "question": question, "answers": [answer], "contexts": contexts}


@pytest.fixture
def qa_file(tmp_path: Path) -> Path:
    support = FILLER + " The Bell Rock Lighthouse was completed in 1810 by Robert Stevenson. " + FILLER
    items = [
        _item(1, "In which year was the Bell Rock Lighthouse completed?", "1810", support),
        _item(2, "Who completed the Bell Rock Lighthouse?", "Robert Stevenson", support),
        _item(3, "Is the Bell Rock Lighthouse old?", "yes", support),
        _item(4, "Who painted it?", "Turner", support),  # answer not in the paragraphs: not eligible
    ]
    path = tmp_path / "qa.jsonl"
    path.write_text("\n".join(json.dumps(i) for i in items) + "\n", encoding="utf-8")
    return path


def test_rows_per_method_and_budget(qa_file: Path) -> None:
    rows = evaluate_compression(qa_file, budgets=(0.5, 0.25))
    assert {(r["method"], r["budget"]) for r in rows} == {
        (m, b) for m in ("extractive", "uniform_truncation", "drop_lowest") for b in (0.5, 0.25)
    }
    for r in rows:
        assert r["questions"] == 4 and r["eligible"] == 2
        assert r["overflows"] == 0
        assert r["tokens_after_mean"] <= r["budget_tokens_mean"]
    by = {(r["method"], r["budget"]): r for r in rows}
    # the answer sits mid-paragraph: query-aware extraction keeps it, uniform truncation cuts it
    assert by[("extractive", 0.25)]["retention"] == 1.0
    assert by[("uniform_truncation", 0.25)]["retention"] == 0.0


def test_llm_method_runs_on_subset_only(qa_file: Path) -> None:
    llm = ScriptedLLM(["The Bell Rock Lighthouse was completed in 1810 by Robert Stevenson."], cycle=True)
    rows = evaluate_compression(qa_file, budgets=(0.25,), llm=llm, llm_subset=2)
    llm_row = next(r for r in rows if r["method"] == "llm")
    assert llm_row["questions"] == 2 and llm_row["retention"] == 1.0


def test_rank_fns_put_the_matching_paragraph_first() -> None:
    arts = [
        Article("a", "Other", "", FILLER),
        Article("b", "Lighthouse", "", "Bell Rock Lighthouse built 1810."),
    ]
    for fn in (bm25_rank, linked_bm25_rank):
        scores = fn("When was Bell Rock Lighthouse built?", arts)
        assert scores[1] > scores[0]


def test_linked_rank_boosts_bridge_article() -> None:
    arts = [
        Article("a", "Kiss and Tell", "", "Kiss and Tell is a film starring Shirley Temple as Corliss Archer."),
        Article("b", "Shirley Temple", "", "She later served as Chief of Protocol."),
        Article("c", "Other", "", "An unrelated film about a kiss."),
    ]
    q = "What position did the actress who played Corliss Archer in Kiss and Tell hold?"
    assert bm25_rank(q, arts)[1] <= bm25_rank(q, arts)[2]
    linked = linked_bm25_rank(q, arts)
    assert linked[1] > linked[2]


def test_main_prints_one_json_line_per_row(qa_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--hotpotqa", str(qa_file), "--limit", "2", "--budgets", "0.5"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3
    assert all(json.loads(line)["questions"] == 2 for line in lines)
