"""The stored tuning: where it lives, what invalidates it, and explicit settings winning over it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragidx.config import Settings
from ragidx.stores.article_store import ArticleStore
from ragidx.tuning.stored import (
    TuningResult,
    apply_tuning,
    index_fingerprint,
    load_tuning,
    save_tuning,
    tuning_path,
)
from tests.retrieval.helpers import KB

TUNED = {"hybrid_alpha": 0.2, "hybrid_fusion": "rrf", "reranker": "none", "candidate_chunks": 30}


def result(fingerprint: str, values: dict | None = None) -> TuningResult:
    return TuningResult(
        settings=dict(values or TUNED),
        picked="rrf a0.2 c30 norerank",
        untuned="rsf a0.5 c100 offline(1,0.1,0.1,0)",
        method="masked_sentence",
        queries=6,
        candidates=[],
        fingerprint=fingerprint,
    )


def test_each_collection_and_tenant_has_its_own_file(tmp_path: Path) -> None:
    assert tuning_path(Settings(data_dir=tmp_path)) == tmp_path / "tuning.json"
    assert (
        tuning_path(Settings(data_dir=tmp_path, collection="Docs", tenant="acme/eu")).name == "tuning.Docs.acme_eu.json"
    )


def test_tuned_values_fill_only_the_fields_not_set_explicitly(monkeypatch: pytest.MonkeyPatch) -> None:
    tuned = apply_tuning(Settings(), TUNED)
    assert (tuned.hybrid_alpha, tuned.hybrid_fusion, tuned.reranker, tuned.candidate_chunks) == (
        0.2,
        "rrf",
        "none",
        30,  # the default is 100
    )

    kept = apply_tuning(Settings(hybrid_alpha=0.5, reranker="offline"), TUNED)
    assert (kept.hybrid_alpha, kept.reranker) == (0.5, "offline")  # set as keyword arguments
    assert (kept.hybrid_fusion, kept.candidate_chunks) == ("rrf", 30)

    monkeypatch.setenv("RAGIDX_CANDIDATE_CHUNKS", "40")  # an environment variable is explicit too
    assert apply_tuning(Settings(), TUNED).candidate_chunks == 40


def test_invalid_or_unknown_tuned_values_are_ignored() -> None:
    assert apply_tuning(Settings(), {"hybrid_alpha": 7.0}).hybrid_alpha == 0.5
    assert apply_tuning(Settings(), {"top_k": 50}).top_k == 5  # not a tunable field


def test_the_fingerprint_follows_the_ledger_and_the_index_settings(tmp_path: Path) -> None:
    store = ArticleStore(tmp_path / "articles.sqlite")
    settings = Settings(data_dir=tmp_path)
    empty = index_fingerprint(settings, store)
    store.save_pending(KB[:2], source="t")
    store.mark_indexed({KB[0].kb_id: 1, KB[1].kb_id: 1})
    two = index_fingerprint(settings, store)
    assert two != empty
    assert index_fingerprint(settings, store) == two  # stable while nothing changes
    assert index_fingerprint(settings.model_copy(update={"chunk_tokens": 128}), store) != two
    assert index_fingerprint(settings.model_copy(update={"hybrid_alpha": 0.1, "top_k": 9}), store) == two
    store.delete([KB[0].kb_id])
    assert index_fingerprint(settings, store) != two


def test_load_returns_the_result_only_for_the_index_it_was_made_on(tmp_path: Path) -> None:
    store = ArticleStore(tmp_path / "articles.sqlite")
    settings = Settings(data_dir=tmp_path)
    assert load_tuning(settings, store) is None  # nothing stored
    save_tuning(result(index_fingerprint(settings, store)), tuning_path(settings))
    loaded = load_tuning(settings, store)
    assert loaded is not None and loaded.settings == TUNED
    store.save_pending(KB[:1], source="t")
    assert load_tuning(settings, store) is None  # the index changed
    tuning_path(settings).write_text("{not json")
    assert load_tuning(settings, store) is None
