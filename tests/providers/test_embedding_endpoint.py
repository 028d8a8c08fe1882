"""The [embedding] table: read from the environment like [llm], the model families' prefixes, the name an index
records, and the refusal for an index of another model."""

from __future__ import annotations

import pytest

from ragidx.config import Settings, SettingsError
from ragidx.providers.embedding_endpoint import (
    EmbeddingEndpoint,
    endpoint_identity,
    endpoint_kind_of,
    endpoint_mismatch,
    preset_prefixes,
)


def test_read_from_the_environment_with_a_secret_key(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("RAGIDX_EMBEDDING__MODEL", "bge-m3")
    monkeypatch.setenv("RAGIDX_EMBEDDING__API_BASE", "http://127.0.0.1:8080/v1")
    monkeypatch.setenv("RAGIDX_EMBEDDING__API_KEY", "sk-from-env")
    monkeypatch.setenv("RAGIDX_EMBEDDING__CONCURRENCY", "4")

    embedding = Settings(data_dir=tmp_path).embedding

    assert embedding is not None
    assert (embedding.model, embedding.api_base, embedding.concurrency) == ("bge-m3", "http://127.0.0.1:8080/v1", 4)
    assert embedding.api_key is not None and embedding.api_key.get_secret_value() == "sk-from-env"
    assert "sk-from-env" not in repr(embedding) and "sk-from-env" not in str(Settings(data_dir=tmp_path))


def test_the_bundled_models_stay_the_default(tmp_path) -> None:
    assert Settings(data_dir=tmp_path).embedding is None


def test_a_base_without_a_model_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("RAGIDX_EMBEDDING__API_BASE", "http://127.0.0.1:8080/v1")

    with pytest.raises(SettingsError, match="embedding.model"):
        Settings(data_dir=tmp_path)


def test_an_unknown_key_is_refused(tmp_path) -> None:
    with pytest.raises(SettingsError, match="embedding"):
        Settings(data_dir=tmp_path, embedding={"model": "m", "api_bsae": "http://x"})


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("intfloat/multilingual-e5-large", ("query: ", "passage: ")),
        ("e5-mistral-7b-instruct", ("query: ", "passage: ")),
        ("BAAI/bge-small-en-v1.5", ("Represent this sentence for searching relevant passages: ", "")),
        ("bge-m3", ("", "")),
        ("nomic-embed-text", ("search_query: ", "search_document: ")),
        ("hkunlp/instructor-large", ("Represent the question for retrieving supporting documents: ",
                                     "Represent the document for retrieval: ")),
        ("text-embedding-3-small", ("", "")),
    ],
)  # fmt: skip
def test_prefixes_by_model_family(model: str, expected: tuple[str, str]) -> None:
    assert preset_prefixes(EmbeddingEndpoint(model=model)) == expected


def test_own_prefixes_win_and_typed_apis_get_none() -> None:
    own = EmbeddingEndpoint(model="nomic-embed-text", query_prefix="Q: ")
    assert preset_prefixes(own) == ("Q: ", "search_document: ")
    assert preset_prefixes(EmbeddingEndpoint(model="multilingual-e5", kind="cohere")) == ("", "")
    assert preset_prefixes(EmbeddingEndpoint(model="nomic-embed-text", prefix="none")) == ("", "")


def test_identity_names_model_and_kind() -> None:
    assert endpoint_identity(EmbeddingEndpoint(model="bge-m3", kind="tei")) == "bge-m3@tei"
    assert endpoint_kind_of("bge-m3@tei") == "tei"
    assert endpoint_kind_of("e5-multilingual@onnx-int8") is None  # a bundled model's engine, not a service
    assert endpoint_kind_of("minilm") is None


def test_mismatch_names_both_models_and_the_way_out() -> None:
    to_service = endpoint_mismatch("the index in /kb", "minilm", "bge-m3@openai")
    back = endpoint_mismatch("the index in /kb", "bge-m3@openai", "minilm")

    assert to_service is not None and back is not None
    assert "embed_model 'minilm'" in to_service and "the OpenAI-compatible service's 'bge-m3'" in to_service
    assert "remove the [embedding] table" in to_service and "ragidx reindex" in to_service
    assert "set [embedding] model = 'bge-m3' and kind = 'openai' again" in back
    assert endpoint_mismatch("the index", "minilm", "e5-multilingual@onnx-int8") is None
    weaviate = endpoint_mismatch("the collection", "minilm", "bge-m3@tei", reindex=False)
    assert weaviate is not None and "reindex" not in weaviate
