from __future__ import annotations

from pathlib import Path

import pytest

from ragidx.config import FlashSettings, LLMEndpoint, Settings
from ragidx.retrieval.cohere_reranker import CohereChunkReranker
from ragidx.retrieval.cross_encoder_reranker import CrossEncoderChunkReranker
from ragidx.retrieval.factory import build_chunk_reranker, build_flash_reranker, build_retriever
from ragidx.retrieval.offline_reranker import OfflineChunkReranker
from ragidx.retrieval.rerank_fallback import FallbackReranker
from tests.fakes.scripted_llm import ScriptedLLM
from tests.retrieval.helpers import build_kb


def test_reranker_follows_settings(tmp_path: Path) -> None:
    assert build_chunk_reranker(Settings(reranker="none")) is None
    offline = build_chunk_reranker(Settings(reranker="offline", rerank_top_n=7))
    assert isinstance(offline, OfflineChunkReranker) and offline.top_n == 7
    cohere = build_chunk_reranker(Settings(reranker="cohere", cohere_api_key="k", cohere_model="rerank-x"))
    assert isinstance(cohere, FallbackReranker)  # a failing API answers in the offline reranker's order
    assert isinstance(cohere.primary, CohereChunkReranker) and cohere.primary.model == "rerank-x"
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


def test_flash_follows_settings_local_and_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGIDX_FLASH__ENABLED", "true")
    monkeypatch.setenv("RAGIDX_FLASH__CANDIDATES", "12")
    local = Settings(top_k=4)
    assert local.flash.enabled
    flash = build_flash_reranker(local, ScriptedLLM([]))
    assert (flash.max_candidates, flash.top_n) == (12, 4)
    # the local Qwen gets the protocol it follows, and CPU-sized time
    assert (flash.tool_mode, flash.inline_tool_results, flash.response_format) == ("forced", True, "json_object")
    assert flash.timeout_s == 300.0 and flash.context_window == local.llm.context_window

    endpoint = LLMEndpoint(model="gpt-4o-mini", api_base="https://api.example/v1", context_window=128_000)
    remote = Settings(flash=FlashSettings(enabled=True, llm=endpoint, top_n=3, timeout_s=None))
    flash = build_flash_reranker(remote, ScriptedLLM([]))
    assert (flash.tool_mode, flash.inline_tool_results, flash.response_format) == ("auto", False, "none")
    assert (flash.timeout_s, flash.top_n, flash.context_window) == (10.0, 3, 128_000)


def test_flash_settings_old_max_topics_sets_top_n_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.warns(DeprecationWarning, match=r"flash\.max_topics is now flash\.top_n"):
        written = Settings(flash=FlashSettings(enabled=True, max_topics=2))
    assert build_flash_reranker(written, ScriptedLLM([])).top_n == 2
    monkeypatch.setenv("RAGIDX_FLASH__MAX_TOPICS", "3")  # an old environment still works
    with pytest.warns(DeprecationWarning):
        assert Settings().flash.top_n == 3
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="disagree; set flash.top_n only"):
        FlashSettings(max_topics=2, top_n=4)


def test_retriever_hands_flash_its_candidate_count(tmp_path: Path) -> None:
    chunks, articles, embed = build_kb(tmp_path)
    settings = Settings(top_k=2, flash=FlashSettings(enabled=True, candidates=7))
    flash = build_flash_reranker(settings, ScriptedLLM([]))
    retriever = build_retriever(settings, chunks, articles, embed, article_reranker=flash)
    assert retriever.article_reranker is flash and retriever.article_candidates == 7
    assert build_retriever(Settings(), chunks, articles, embed).article_reranker is None


def test_flash_gets_a_follow_up_rewriter_and_excerpt_setting_from_settings() -> None:
    flash = build_flash_reranker(Settings(flash=FlashSettings(enabled=True)), ScriptedLLM([]))
    assert flash.contextualizer is not None and flash.contextualizer.timeout_s == 60.0  # the local model
    assert flash.excerpt_replaces_text

    endpoint = LLMEndpoint(model="gpt-4o-mini", api_base="https://api.example/v1")
    remote = Settings(flash=FlashSettings(enabled=True, llm=endpoint))
    assert build_flash_reranker(remote, ScriptedLLM([])).contextualizer.timeout_s == 5.0  # type: ignore[union-attr]

    off = Settings(flash=FlashSettings(enabled=True, contextualize=False, excerpt_replaces_text=False))
    flash = build_flash_reranker(off, ScriptedLLM([]))
    assert flash.contextualizer is None and not flash.excerpt_replaces_text
