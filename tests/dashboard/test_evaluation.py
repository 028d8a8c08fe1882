from __future__ import annotations

from pathlib import Path

import pytest

from ragidx.config import Settings
from ragidx.dashboard.evaluation import run_retrieval_eval, stage_rows, stage_table
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
    assert set(result["stages"]) == {"dense", "hybrid", "hybrid+rerank", "full_chain"}
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
