from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from ragidx.config import Settings
from ragidx.evaluation.flash import _chars, evaluate_flash, set_scores
from ragidx.evaluation.retrieval import load_beir, main, open_scratch_index
from ragidx.retrieval.factory import build_retriever
from ragidx.retrieval.flash import FlashReranker, FlashTrace, replay
from tests.evaluation.test_retrieval import write_beir
from tests.fakes.hash_embedding import HashEmbedding
from tests.fakes.scripted_llm import ScriptedLLM

GOLD_TITLES = {"how do I insert a table": "Insert a table", "print the document on a printer": "Printing a document"}


def pick_gold(messages, call):  # type: ignore[no-untyped-def]
    """A perfect reranker: selects exactly the candidate titled like the query's gold article."""
    text = "\n".join(m.content or "" for m in messages)
    query = re.search(r"Query: (.+)", text).group(1)  # type: ignore[union-attr]
    ids = {title.strip(): int(n) for n, title in re.findall(r"\[ID:(\d+)\] [^|]*\|[^|]*\| (.+)", text)}
    title = GOLD_TITLES.get(query, "Docker volumes")
    return json.dumps({"topics": [{"id": ids[title], "reason": "matches the query"}]})


@pytest.fixture
def chain(tmp_path: Path):  # type: ignore[no-untyped-def]
    ds = load_beir(write_beir(tmp_path / "beir"))
    settings = Settings(chunk_tokens=64, chunk_overlap_tokens=8, top_k=3)
    embed = HashEmbedding(dim=256)
    chunks, articles, _ = open_scratch_index(ds, settings, embed, tmp_path / "cache")
    return ds, build_retriever(settings, chunks, articles, embed)


def test_set_scores() -> None:
    assert set_scores(["a", "b"], {"a": 1, "c": 2}) == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "all_found": 0.0}
    assert set_scores(["a", "c"], {"a": 1, "c": 1})["all_found"] == 1.0
    assert set_scores([], {"a": 1}) == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "all_found": 0.0}
    assert set_scores(["a"], {"a": 0, "b": 1})["precision"] == 0.0  # grade 0 is not relevant


def test_a_perfect_selection_scores_one_beside_the_chain_baseline(chain, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ds, retriever = chain
    flash = FlashReranker(ScriptedLLM([pick_gold], cycle=True), max_topics=3)

    result = asyncio.run(evaluate_flash(ds.queries, ds.qrels, retriever, flash, candidates=6, trace_dir=tmp_path))

    assert result["queries"] == 3 and result["candidates"] == 6 and result["max_topics"] == 3
    assert result["flash"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "all_found": 1.0}
    assert result["chain_top_k"]["precision"] < 1.0  # the chain returns 3 articles for one gold each
    assert result["candidate_recall"] == 1.0
    assert result["decisions"] == {"accepted": 3} and result["fallbacks"] == 0
    assert result["selected_mean"] == 1.0 and result["tokens_shown_mean"] > 0
    json.dumps(result)
    saved = FlashTrace.load(tmp_path / "q1.json")
    assert replay(saved).selected_kb_ids == ["tables"]  # traces replay offline to the same choice


def test_a_dead_model_is_counted_as_fallbacks_not_a_crash(chain) -> None:  # type: ignore[no-untyped-def]
    ds, retriever = chain
    flash = FlashReranker(ScriptedLLM([RuntimeError("connection refused")], cycle=True), max_topics=3)

    result = asyncio.run(evaluate_flash(ds.queries, ds.qrels, retriever, flash, candidates=6))

    assert result["decisions"] == {"api_error": 3} and result["sources"] == {"upstream": 3}
    assert result["fallbacks"] == 3
    assert result["flash"] == result["chain_top_k"]  # the fallback is the chain's own top 3


def test_excerpts_and_the_characters_the_answer_model_reads_are_reported(chain) -> None:  # type: ignore[no-untyped-def]
    ds, retriever = chain
    flash = FlashReranker(ScriptedLLM([pick_gold], cycle=True), max_topics=3)
    result = asyncio.run(evaluate_flash(ds.queries, ds.qrels, retriever, flash, candidates=6))
    assert result["excerpts"] == 0 and result["selected_chars_mean"] == result["selected_full_chars_mean"] > 0

    big = "Filler paragraph.\n\n" * 400 + "The fix is to set max_batch=8.\n\nEnd."
    nodes = [NodeWithScore(node=TextNode(id_="big", text=big, metadata={"kb_id": "big", "title": "Big"}), score=1.0)]
    picked = json.dumps({"topics": [{"id": 1, "reason": "r", "excerpt": "The fix is to set max_batch=8."}]})
    reranked = FlashReranker(ScriptedLLM([picked]), excerpt_threshold_chars=500).rerank_detailed("fix?", nodes)
    assert _chars(reranked, full=True) == len(big)
    assert _chars(reranked) < len(big) / 20  # what the answer model reads: the marked excerpt


def test_the_chain_must_not_already_hold_a_flash_step(chain) -> None:  # type: ignore[no-untyped-def]
    ds, retriever = chain
    flash = FlashReranker(ScriptedLLM([]))
    retriever.article_reranker = flash
    with pytest.raises(ValueError, match="without an article reranker"):
        asyncio.run(evaluate_flash(ds.queries, ds.qrels, retriever, flash))


@pytest.mark.slow
def test_cli_flash_stage_against_a_dead_endpoint_reports_fallbacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_beir(tmp_path / "beir")
    args = ["--beir", str(root), "--cache-dir", str(tmp_path / "cache"), "--depth", "10", "--limit", "2"]
    args += ["--flash", "--flash-api-base", "http://127.0.0.1:9/v1", "--flash-model", "m", "--flash-limit", "2"]

    status = main(args)

    out = capsys.readouterr().out.strip().splitlines()
    assert status == 0 and len(out) == 1
    flash = json.loads(out[0])["flash"]
    assert flash["queries"] == 2 and flash["decisions"] == {"api_error": 2} and flash["model"] == "m"
