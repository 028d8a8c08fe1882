from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragidx.config import Settings
from ragidx.evaluation.retrieval import (
    STAGES,
    TUNED_STAGES,
    corpus_key,
    evaluate,
    load_beir,
    main,
)
from tests.fakes.hash_embedding import HashEmbedding
from tests.retrieval.helpers import KB

QUERIES = {
    "q1": ("how do I insert a table", {"tables": 1}),
    "q2": ("print the document on a printer", {"print": 1}),
    "q3": ("keep container data with docker volumes", {"volumes": 2, "images": 0}),
    "q4": ("unjudged query", {}),
}


def write_beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    with (root / "corpus.jsonl").open("w") as fh:
        for a in KB:
            fh.write(json.dumps({"_id": a.kb_id, "title": a.title, "text": a.content}) + "\n")
    with (root / "queries.jsonl").open("w") as fh:
        for qid, (text, _) in QUERIES.items():
            fh.write(json.dumps({"_id": qid, "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{q}\t{d}\t{s}" for q, (_, rel) in QUERIES.items() for d, s in rel.items()]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return root


def test_load_beir_skips_the_header_unjudged_and_zero_grade(tmp_path: Path) -> None:
    ds = load_beir(write_beir(tmp_path))
    assert set(ds.queries) == {"q1", "q2", "q3"}
    assert ds.qrels["q3"] == {"volumes": 2}
    assert load_beir(tmp_path, limit=1).queries == {"q1": "how do I insert a table"}
    assert [a.kb_id for a in ds.articles()] == [a.kb_id for a in KB]


def test_load_beir_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="qrels/test.tsv"):
        load_beir(tmp_path)


def test_cache_key_changes_with_corpus_and_settings(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "b")
    key = corpus_key(root / "corpus.jsonl", chunk_tokens=200)
    assert key == corpus_key(root / "corpus.jsonl", chunk_tokens=200)
    assert key != corpus_key(root / "corpus.jsonl", chunk_tokens=100)
    with (root / "corpus.jsonl").open("a") as fh:
        fh.write(json.dumps({"_id": "new", "title": "t", "text": "x"}) + "\n")
    assert key != corpus_key(root / "corpus.jsonl", chunk_tokens=200)


def test_evaluate_reports_every_stage_and_reuses_the_index(tmp_path: Path) -> None:
    ds = load_beir(write_beir(tmp_path / "beir"))
    embed = HashEmbedding(dim=256)
    settings = Settings(chunk_tokens=64, chunk_overlap_tokens=8, top_k=3)
    result = evaluate(ds, settings, embed, tmp_path / "cache", depth=10)
    assert set(result["stages"]) == {*STAGES, *TUNED_STAGES}
    tuning = result["tuning"]
    assert tuning["pseudo_queries"] == len(KB)  # one per article, at most
    assert tuning["picked"] in [c["config"] for c in tuning["candidates"]]
    assert {"pseudo_ndcg@10", "ndcg@10"} <= set(tuning["candidates"][0]) and -1.0 <= tuning["spearman"] <= 1.0
    assert tuning["picked_ndcg@10"] <= tuning["best_ndcg@10"] and tuning["regret"] >= 0.0
    for stage in result["stages"].values():
        assert set(stage) == {"ndcg@10", "recall@10", "recall@100", "mrr@10", "p50_ms", "p95_ms"}
        assert 0.0 <= stage["ndcg@10"] <= 1.0 and stage["p95_ms"] >= stage["p50_ms"] >= 0.0
    assert result["queries"] == 3 and result["articles"] == len(KB)
    assert result["stages"]["full_chain"]["recall@10"] == 1.0  # six articles: everything is in the top 10
    assert result["default_config"]["top_k"] == 3
    json.dumps(result)  # printable as one JSON line
    embedded = embed.calls
    evaluate(ds, settings, embed, tmp_path / "cache", depth=10)
    assert embed.calls == embedded, "the second run must reuse the cached index, not re-embed the corpus"


def test_no_tune_leaves_the_calibration_out(tmp_path: Path) -> None:
    ds = load_beir(write_beir(tmp_path / "beir"))
    result = evaluate(
        ds, Settings(chunk_tokens=64, chunk_overlap_tokens=8), HashEmbedding(dim=256), tmp_path / "c", tune=False
    )
    assert set(result["stages"]) == set(STAGES) and "tuning" not in result


def test_llm_pseudo_queries_come_from_the_configured_llm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ragidx.providers import llms
    from tests.fakes.scripted_llm import ScriptedLLM

    llm = ScriptedLLM(["Which menu do I use to add rows and columns to a text document?"], cycle=True)
    started: list[str] = []

    class Provider:  # the local model server's stand-in: hands out the scripted LLM, closes once
        def __init__(self, **_: object) -> None:
            pass

        def __enter__(self) -> Provider:
            return self

        def __exit__(self, *_: object) -> None:
            started.append("closed")

        def get(self, endpoint: object) -> ScriptedLLM:
            started.append("started")
            return llm

    monkeypatch.setattr(llms, "LLMProvider", Provider)
    ds = load_beir(write_beir(tmp_path / "beir"))
    result = evaluate(
        ds, Settings(chunk_tokens=64, chunk_overlap_tokens=8), HashEmbedding(dim=256), tmp_path / "c", tune_method="llm"
    )
    assert started == ["started", "closed"]
    assert result["tuning"]["method"] == "llm" and result["tuning"]["pseudo_queries"] == len(KB)
    assert len(llm.calls) == len(KB)  # one question written per sampled article
    assert "tuned" in result["stages"]


def test_depth_below_ten_is_refused(tmp_path: Path) -> None:
    ds = load_beir(write_beir(tmp_path / "beir"))
    with pytest.raises(ValueError, match="depth must be >= 10"):
        evaluate(ds, Settings(), HashEmbedding(), tmp_path / "cache", depth=5)


def test_main_reports_a_bad_folder_with_exit_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--beir", str(tmp_path / "nope")]) == 2
    assert "not a BEIR folder" in capsys.readouterr().err


@pytest.mark.slow
def test_main_prints_one_json_line_with_the_real_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_beir(tmp_path / "beir")
    status = main(["--beir", str(root), "--cache-dir", str(tmp_path / "cache"), "--depth", "10", "--limit", "2"])
    out = capsys.readouterr().out.strip().splitlines()
    assert status == 0 and len(out) == 1
    result = json.loads(out[0])
    assert result["queries"] == 2 and result["reranker"] == "OfflineChunkReranker"
    assert result["stages"]["full_chain"]["ndcg@10"] > 0.5
