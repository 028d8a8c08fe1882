from __future__ import annotations

from pathlib import Path

import pytest

from ragidx.config import Settings
from ragidx.retrieval.cohere_reranker import CohereChunkReranker
from ragidx.retrieval.cross_encoder_reranker import CrossEncoderChunkReranker
from ragidx.retrieval.factory import build_chunk_reranker, build_retriever
from ragidx.retrieval.offline_reranker import OfflineChunkReranker
from tests.retrieval.helpers import build_kb


def test_reranker_follows_settings(tmp_path: Path) -> None:
    assert build_chunk_reranker(Settings(reranker="none")) is None
    offline = build_chunk_reranker(Settings(reranker="offline", rerank_top_n=7))
    assert isinstance(offline, OfflineChunkReranker) and offline.top_n == 7
    cohere = build_chunk_reranker(Settings(reranker="cohere", cohere_api_key="k", cohere_model="rerank-x"))
    assert isinstance(cohere, CohereChunkReranker) and cohere.model == "rerank-x"
    ce = build_chunk_reranker(Settings(reranker="cross-encoder", cross_encoder_path=str(tmp_path)))
    assert isinstance(ce, CrossEncoderChunkReranker) and not ce.is_loaded


def test_retriever_gets_the_configured_counts_and_alpha(tmp_path: Path) -> None:
    chunks, articles, embed = build_kb(tmp_path)
    settings = Settings(candidate_chunks=9, rerank_top_n=4, top_k=2, hybrid_alpha=0.3, article_score_threshold=0.1)
    retriever = build_retriever(settings, chunks, articles, embed)
    assert (retriever.candidate_chunks, retriever.rerank_top_n, retriever.top_k) == (9, 4, 2)
    assert retriever.alpha == 0.3 and retriever.mode == "hybrid"
    assert retriever.grouper.score_threshold == 0.1
    assert len(retriever.retrieve("insert a table")) <= 2


def test_tenant_becomes_a_filter_on_every_search(tmp_path: Path) -> None:
    chunks, articles, embed = build_kb(tmp_path)
    retriever = build_retriever(Settings(tenant="acme"), chunks, articles, embed)
    assert retriever.filters is not None and retriever.filters.filters[0].value == "acme"
    # The test KB was ingested without a tenant, so another tenant sees nothing.
    assert retriever.retrieve("insert a table") == []


@pytest.mark.parametrize("reranker", ["offline", "none"])
def test_settings_round_trip_through_the_factory(reranker: str) -> None:
    settings = Settings(reranker=reranker)  # type: ignore[arg-type]
    again = Settings(**settings.model_dump())
    assert type(build_chunk_reranker(again)) is type(build_chunk_reranker(settings))
