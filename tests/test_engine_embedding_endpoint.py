"""The engine with an [embedding] table: ingest and search through a service (our loopback server), the model
recorded in the index, and an index of another model refused on the query side and the ingest side."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ragidx.article import Article
from ragidx.config import Settings
from ragidx.engine import Engine
from ragidx.providers.embedding_endpoint import EmbeddingEndpoint
from ragidx.stores.lancedb_store import EmbeddingMismatch
from tests.embedding_server import Server


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


def endpoint(server: Server, model: str = "words-64") -> EmbeddingEndpoint:
    return EmbeddingEndpoint(model=model, api_base=f"{server.url}/v1", batch_size=8, concurrency=2)


def test_ingest_and_search_through_the_service(server: Server, tmp_path: Path, writer_kb_file: str) -> None:
    with Engine(Settings(data_dir=tmp_path, embedding=endpoint(server))) as engine:
        report = engine.ingest(writer_kb_file)
        articles = engine.retrieve("printing", top_k=3)
        recorded = engine._stores.index_model()

    assert report.new == 26 and not report.errors
    assert recorded == "words-64@openai"
    assert any("Print" in a.title for a in articles)
    assert len(server.bodies) > 4  # chunks went out in batches of 8


def test_another_model_is_refused_when_asking_and_ingesting(
    server: Server, tmp_path: Path, writer_kb_file: str
) -> None:
    with Engine(Settings(data_dir=tmp_path, embedding=endpoint(server))) as engine:
        engine.ingest(writer_kb_file)

    bundled = Engine(Settings(data_dir=tmp_path, embed_model="minilm"))
    with bundled, pytest.raises(EmbeddingMismatch, match="ragidx reindex") as asking:
        bundled.retrieve("printing")
    assert "the OpenAI-compatible service's 'words-64'" in str(asking.value)

    auto = Engine(Settings(data_dir=tmp_path))  # "auto" cannot embed a service's questions either
    with auto, pytest.raises(EmbeddingMismatch, match="set \\[embedding\\] model = 'words-64'"):
        auto.retrieve("printing")

    with Engine(Settings(data_dir=tmp_path, embedding=endpoint(server, "other-64"))) as other:
        with pytest.raises(EmbeddingMismatch, match="'other-64' is configured now"):
            other.retrieve("printing")
        with pytest.raises(EmbeddingMismatch, match="'other-64' is configured now"):
            other.ingest([Article("new-1", "Printing in colour", "https://x/new-1", "Choose a colour printer.")])


def test_a_service_model_is_refused_on_an_index_of_a_bundled_one(
    server: Server, tmp_path: Path, writer_kb_file: str
) -> None:
    with Engine(Settings(data_dir=tmp_path, embed_model="minilm")) as engine:
        engine.ingest(writer_kb_file)

    service = Engine(Settings(data_dir=tmp_path, embedding=endpoint(server)))
    with service, pytest.raises(EmbeddingMismatch, match="embedded by embed_model 'minilm'") as asking:
        service.retrieve("printing")
    assert "remove the [embedding] table" in str(asking.value) and "ragidx reindex" in str(asking.value)
