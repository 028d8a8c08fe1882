"""Calibration on a KB where one configuration clearly wins: the tuner must find it, without labels."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ingestion.pipeline import Ingestor
from ragidx.article import Article
from ragidx.config import Settings
from ragidx.stores.article_store import ArticleStore
from ragidx.stores.lancedb_store import LanceDBChunkStore
from ragidx.tuning.calibrate import calibrate
from ragidx.tuning.candidates import RetrievalConfig
from tests.fakes.hash_embedding import HashEmbedding


def _code(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(6))


def parts_kb(seed: int = 7, n: int = 40) -> list[Article]:
    """Spare parts told apart only by their made-up codes; each title names the *next* part's code."""
    rng = random.Random(seed)
    codes = [(_code(rng), _code(rng)) for _ in range(n)]
    return [
        Article(
            f"p{i}",
            f"Spare part {codes[(i + 1) % n][0]} {codes[(i + 1) % n][1]}",
            "",
            f"Spare part {a} replaces the older part {b} in the pump assembly. Order part {a} through the "
            f"service portal; the kit for {b} ships with new seals. Technicians fit {a} after draining the pump "
            f"and checking the seals of {b}.",
        )
        for i, (a, b) in enumerate(codes)
    ]


def index(folder: Path, articles: list[Article], embed: HashEmbedding) -> tuple[LanceDBChunkStore, ArticleStore]:
    chunks = LanceDBChunkStore(uri=folder / "lancedb", table_name="Kb")
    store = ArticleStore(folder / "articles.sqlite")
    Ingestor(chunks, store, embed, chunk_tokens=128, chunk_overlap=8).ingest(articles, source="test")
    return chunks, store


def test_keyword_search_is_chosen_where_the_dense_side_cannot_tell_articles_apart(tmp_path: Path) -> None:
    embed = HashEmbedding(dim=2)  # two hashed dimensions: near-random dense ranking
    chunks, store = index(tmp_path, parts_kb(n=120), embed)
    settings = Settings(reranker="none")  # set explicitly, so held fixed: alpha, fusion and depth are tuned
    result = calibrate(settings, chunks, store, embed, queries=60)
    scores = {row["config"]: row["ndcg@10"] for row in result.candidates}
    assert {row["settings"]["reranker"] for row in result.candidates} == {"none"}
    assert result.settings["hybrid_alpha"] <= 0.35, result.picked
    assert scores[result.picked] == max(scores.values())
    assert scores[result.picked] >= scores["dense c50 norerank"] + 0.3
    assert scores[result.picked] >= scores[result.untuned] + 0.05, (result.untuned, scores)
    assert result.queries == 60 and len(scores) == len(result.candidates)


def test_a_rerank_stage_that_lowers_ndcg_is_switched_off(tmp_path: Path) -> None:
    embed = HashEmbedding(dim=256)
    chunks, store = index(tmp_path, parts_kb(), embed)
    settings = Settings(rerank_title_weight=1.0)  # the titles point at the wrong article
    untuned = RetrievalConfig.from_settings(settings)
    off = RetrievalConfig(untuned.alpha, untuned.fusion, untuned.candidate_chunks, "none")
    result = calibrate(settings, chunks, store, embed, queries=40, configs=[untuned, off])
    scores = {row["config"]: row["ndcg@10"] for row in result.candidates}
    assert scores[off.label] > scores[untuned.label]
    assert result.settings["reranker"] == "none"


def test_an_empty_kb_says_what_to_do(tmp_path: Path) -> None:
    embed = HashEmbedding(dim=8)
    chunks, store = index(tmp_path, [], embed)
    with pytest.raises(ValueError, match="run `ragidx ingest PATH`"):
        calibrate(Settings(), chunks, store, embed)
