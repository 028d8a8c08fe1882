"""The multilingual USE from nanoranker's ONNX graph, offline: Russian reads like English, across languages too."""

from __future__ import annotations

import numpy as np
import pytest

from ragidx.config import Settings
from ragidx.providers.embedding_factory import build_embed_model
from ragidx.providers.use_embedding import UseEmbedding

pytest.importorskip("onnxruntime_extensions", reason="the 'multilingual' extra is not installed")

PARAGRAPHS = {
    "ru-pages": "Чтобы пронумеровать страницы, вставьте поле «Номер страницы» в нижний колонтитул.",
    "ru-print": "Чтобы напечатать документ, выберите Файл - Печать и укажите принтер.",
    "en-pages": "To number the pages, insert a Page Number field into the footer.",
    "en-print": "To print a document, choose File - Print and pick the printer.",
}


@pytest.fixture(scope="session")
def use() -> UseEmbedding:
    model = build_embed_model(Settings(embed_model="use-multilingual", embed_threads=2))
    assert isinstance(model, UseEmbedding)
    return model


def test_a_russian_query_finds_its_paragraph_in_either_language(use: UseEmbedding) -> None:
    ids = list(PARAGRAPHS)
    docs = np.array(use.get_text_embedding_batch(list(PARAGRAPHS.values())))
    assert docs.shape == (4, 512) and np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-4)
    for query, topic in (("как пронумеровать страницы", "pages"), ("печать документа на принтере", "print")):
        scores = docs @ np.array(use.get_query_embedding(query))
        ranked = [ids[i] for i in np.argsort(-scores)]
        assert set(ranked[:2]) == {f"ru-{topic}", f"en-{topic}"}, ranked


def test_russian_is_sized_in_a_multilingual_vocabulary_not_minilms_word_pieces(use: UseEmbedding) -> None:
    from ingestion.pipeline import _embedding_tokenizer
    from ragidx.providers.embeddings import LocalEmbedding

    count = _embedding_tokenizer(use)  # cl100k_base
    minilm = _embedding_tokenizer(LocalEmbedding(backend="torch"))
    ru = PARAGRAPHS["ru-pages"]
    # Fewer tokens means fewer chunks to embed: 36 vs MiniLM's 68 here (1.6x vs 2.6x English on real pages).
    assert len(count(ru)) < 0.6 * len(minilm(ru))
    assert use.get_text_embedding("") == use.get_text_embedding(" ")  # empty text does not break the graph


def test_it_says_which_languages_it_reads() -> None:
    languages = UseEmbedding().languages  # nothing is loaded for this
    assert {"en", "ru", "de", "zh"} <= languages and "uk" not in languages
