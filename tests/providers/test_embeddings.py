"""The bundled MiniLM, offline, int8 and fp32."""

from __future__ import annotations

import numpy as np
import pytest

from ragidx.providers.embeddings import LocalEmbedding, resolve_model_path


@pytest.fixture(scope="session")
def minilm() -> LocalEmbedding:
    return LocalEmbedding(num_threads=2)


def cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_constructor_loads_nothing() -> None:
    emb = LocalEmbedding()
    assert emb._model is None


@pytest.mark.slow
def test_minilm_embeds_offline_and_ranks_related_text_higher(minilm: LocalEmbedding) -> None:
    q = minilm.get_query_embedding("How do I insert a table in a text document?")
    docs = minilm.get_text_embedding_batch(
        ["To insert a table, choose Table - Insert Table.", "Export the slide show as a PDF file."]
    )
    assert len(q) == 384 and abs(np.linalg.norm(q) - 1.0) < 1e-3
    assert cos(q, docs[0]) > cos(q, docs[1]) + 0.2


@pytest.mark.slow
def test_int8_stays_close_to_fp32(minilm: LocalEmbedding) -> None:
    texts = [
        "Conditional formatting highlights cells that meet a condition.",
        "Use the Navigator to jump between headings.",
        "Printing a spreadsheet on one page: Format - Page Style - Sheet - Scale.",
    ]
    fp32 = LocalEmbedding(quantize=False, num_threads=2).get_text_embedding_batch(texts)
    int8 = minilm.get_text_embedding_batch(texts)
    assert min(cos(a, b) for a, b in zip(fp32, int8, strict=True)) > 0.95


def test_unknown_model_name_offline_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="pass a folder with a sentence-transformers model"):
        resolve_model_path("sentence-transformers/not-here")
