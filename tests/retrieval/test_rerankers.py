"""The reranker registry (issue 56.4): a name in the settings maps to a factory, read when the retriever is built;
the offline reranker, Cohere, the cross-encoder, none, and a program's own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle
from pydantic import PrivateAttr

from ragidx.config import Settings, SettingsError
from ragidx.engine import Engine
from ragidx.retrieval.cohere_reranker import CohereChunkReranker
from ragidx.retrieval.factory import build_chunk_reranker
from ragidx.retrieval.offline_reranker import OfflineChunkReranker
from ragidx.retrieval.rerank_fallback import FallbackReranker
from ragidx.retrieval.rerankers import make_reranker, register_reranker, reranker_names, unregister_reranker
from tests.fakes.hash_embedding import HashEmbedding


class Reversing(BaseNodePostprocessor):
    """A program's reranker: the searched chunks in reverse order, at most ``keep``, each call counted."""

    keep: int = 30
    _calls: list[int] = PrivateAttr(default_factory=list)

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        self._calls.append(len(nodes))
        kept = list(reversed(nodes))[: self.keep]
        return [NodeWithScore(node=n.node, score=1.0 - i / len(kept)) for i, n in enumerate(kept)]


@pytest.fixture()
def reversing() -> Iterator[None]:
    register_reranker("reversing", lambda settings: Reversing(keep=settings.rerank_top_n))
    yield
    unregister_reranker("reversing")


def test_the_built_in_names_make_their_rerankers() -> None:
    import ragidx

    assert ragidx.register_reranker is register_reranker
    assert reranker_names() == ("offline", "cohere", "cross-encoder", "none", "endpoint")
    assert isinstance(build_chunk_reranker(Settings()), OfflineChunkReranker)
    cohere = build_chunk_reranker(Settings(reranker="cohere", cohere_api_key="k", rerank_top_n=4))
    assert isinstance(cohere, FallbackReranker) and isinstance(cohere.primary, CohereChunkReranker)
    assert cohere.primary.top_n == 4 and isinstance(cohere.fallback, OfflineChunkReranker)
    assert build_chunk_reranker(Settings(reranker="none")) is None


def test_a_registered_reranker_is_named_by_the_settings_and_reranks_the_engines_search(
    reversing: None, tmp_path: Path, writer_kb_file: str
) -> None:
    settings = Settings(data_dir=tmp_path, reranker="reversing", rerank_top_n=12)
    made = build_chunk_reranker(settings)
    assert isinstance(made, Reversing) and made.keep == 12
    with Engine(settings, embed_model=HashEmbedding(dim=256, reads=frozenset({"en"}))) as engine:
        engine.ingest(writer_kb_file)
        reranker = engine.retriever.reranker
        assert isinstance(reranker, Reversing)
        assert engine.retrieve("How do I create a table of contents?")
    assert reranker._calls and reranker._calls[0] > 12  # it saw the whole candidate pool and kept 12


def test_the_registry_is_read_when_the_retriever_is_built(reversing: None) -> None:
    settings = Settings(reranker="reversing")
    unregister_reranker("reversing")
    with pytest.raises(ValueError, match=r"unknown reranker 'reversing': use one of offline, cohere, cross-encoder"):
        make_reranker(settings)
    register_reranker("offline", lambda settings: Reversing())  # a built-in replaced from a program
    try:
        assert isinstance(build_chunk_reranker(Settings()), Reversing)
    finally:
        from ragidx.retrieval import rerankers

        register_reranker("offline", rerankers._offline)
    assert isinstance(build_chunk_reranker(Settings()), OfflineChunkReranker)


def test_settings_refuse_a_name_no_one_registered() -> None:
    with pytest.raises(SettingsError, match=r"reranker: unknown reranker 'colbert': use one of offline, cohere, "):
        Settings(reranker="colbert")


@pytest.mark.parametrize(
    ("name", "factory", "error"), [("my reranker", Reversing, ValueError), ("x", "Reversing", TypeError)]
)
def test_bad_registrations_are_refused(name: str, factory: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        register_reranker(name, factory)  # type: ignore[arg-type]
    assert name not in reranker_names()
