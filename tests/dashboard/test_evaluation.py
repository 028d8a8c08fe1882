from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragidx.config import Settings
from ragidx.dashboard.evaluation import answer_table, run_answer_eval, run_retrieval_eval, stage_rows, stage_table
from tests.dashboard.fakes import make_engine


def test_stage_rows_and_table_follow_pipeline_order() -> None:
    result = {"stages": {"full_chain": {"ndcg@10": 0.9}, "dense": {"ndcg@10": 0.5, "p50_ms": 2.0}}}
    assert [r["stage"] for r in stage_rows(result)] == ["dense", "dense", "full_chain"]
    assert stage_table(result) == [
        {"stage": "dense", "ndcg@10": 0.5, "p50_ms": 2.0},
        {"stage": "full_chain", "ndcg@10": 0.9},
    ]


def test_run_retrieval_eval_on_a_beir_folder(tmp_path: Path, beir_folder: Path) -> None:
    with make_engine(Settings(data_dir=tmp_path / "data", reranker="offline")) as engine:
        result = run_retrieval_eval(engine, f"  {beir_folder}  ", limit=2, depth=10)
    assert result["queries"] == 2 and result["articles"] == 26 and result["reranker"] != "none"
    stages = {"dense", "bm25", "hybrid", "hybrid+rerank", "full_chain", "untuned", "tuned"}
    assert set(result["stages"]) == stages
    assert (tmp_path / "data" / "eval-cache").is_dir()


def test_run_retrieval_eval_explains_bad_folders(tmp_path: Path) -> None:
    with make_engine(Settings(data_dir=tmp_path)) as engine:
        with pytest.raises(FileNotFoundError, match="give the path of a BEIR folder"):
            run_retrieval_eval(engine, " ")
        with pytest.raises(FileNotFoundError, match="is not a folder"):
            run_retrieval_eval(engine, tmp_path / "nope")
        (tmp_path / "b" / "qrels").mkdir(parents=True)
        for name in ("corpus.jsonl", "queries.jsonl"):
            (tmp_path / "b" / name).write_text("", encoding="utf-8")
        (tmp_path / "b" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n", encoding="utf-8")
        with pytest.raises(ValueError, match="no judged queries"):
            run_retrieval_eval(engine, tmp_path / "b")


def _questions(tmp_path: Path) -> Path:
    rows = [
        {"id": "toc", "question": "How do I create a table of contents?", "answers": ["Table of Contents"]},
        {"id": "none", "question": "Welche Farbe hat der Himmel über Tokio?", "answers": [], "answerable": False},
    ]
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_run_answer_eval_on_the_engines_kb(kb_dir: Path, tmp_path: Path) -> None:
    with make_engine(Settings(data_dir=kb_dir)) as engine:
        summary, rows = run_answer_eval(engine, f" {_questions(tmp_path)} ")
    assert summary["questions"] == 2 and summary["containment"] == 1.0 and summary["abstention"] == 1.0
    table = answer_table(rows)
    assert [r["id"] for r in table] == ["toc", "none"]
    assert table[0]["right"] is True and "Table of Contents" in table[0]["answer"] and table[0]["cited"]
    assert table[1]["not_found"] is True and table[1]["right"] is None


def test_run_answer_eval_explains_bad_input(tmp_path: Path) -> None:
    with make_engine(Settings(data_dir=tmp_path / "data")) as engine:
        with pytest.raises(FileNotFoundError, match="give the path of a questions JSONL"):
            run_answer_eval(engine, "  ")
        with pytest.raises(FileNotFoundError, match="not found"):
            run_answer_eval(engine, tmp_path / "nope.jsonl")
        with pytest.raises(ValueError, match="is empty: ingest it first"):
            run_answer_eval(engine, _questions(tmp_path))
