"""Weaviate chunk store: exact hybrid arguments against a spec'd mock, plus a live suite when configured.

Weaviate cannot run on the build machines (no server binary on any registry, no Docker engine), so the
offline tests pin the exact ``collection.query.hybrid(...)`` calls; ``WEAVIATE_URL`` turns on the
integration tests, which run the same ingestion and search as the LanceDB default against a server.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from unittest.mock import MagicMock

import pytest
import weaviate
import weaviate.classes as wvc
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode
from llama_index.core.vector_stores.utils import node_to_metadata_dict

from ragidx.stores.lancedb_store import EmbeddingMismatch
from ragidx.stores.weaviate_store import WeaviateChunkStore


def mock_store(tenant: str | None = None) -> tuple[WeaviateChunkStore, MagicMock]:
    client = MagicMock(spec=weaviate.WeaviateClient)
    client.collections = MagicMock()
    collection = MagicMock()
    client.collections.get.return_value = collection
    collection.query.hybrid.return_value = SimpleNamespace(objects=[])
    return WeaviateChunkStore(weaviate_client=client, index_name="Articles", tenant=tenant), collection


def q(mode: VectorStoreQueryMode, alpha: float | None = None, **kw: object) -> VectorStoreQuery:
    return VectorStoreQuery(
        query_str="insert table", query_embedding=[0.1, 0.2], similarity_top_k=7, mode=mode, alpha=alpha, **kw
    )


@pytest.mark.parametrize(
    ("mode", "alpha", "expected"),
    [
        (VectorStoreQueryMode.HYBRID, 0.0, 0.0),  # the integration would turn 0.0 into 0.5
        (VectorStoreQueryMode.HYBRID, 0.3, 0.3),
        (VectorStoreQueryMode.HYBRID, None, 0.5),
        (VectorStoreQueryMode.DEFAULT, None, 1.0),
        (VectorStoreQueryMode.TEXT_SEARCH, None, 0.0),
    ],
)
def test_hybrid_arguments(mode: VectorStoreQueryMode, alpha: float | None, expected: float) -> None:
    store, collection = mock_store()
    store.query(q(mode, alpha))
    kwargs = collection.query.hybrid.call_args.kwargs
    assert kwargs["alpha"] == expected
    # BM25 runs on the stemmed search_terms property with the query stemmed the same way.
    assert kwargs["query"] == "insert tabl" and kwargs["query_properties"] == ["search_terms"]
    assert kwargs["vector"] == [0.1, 0.2] and kwargs["limit"] == 7
    if mode == VectorStoreQueryMode.HYBRID:
        assert kwargs["fusion_type"] == wvc.query.HybridFusion.RELATIVE_SCORE
    assert kwargs["filters"] is None


def test_hybrid_top_k_widens_the_candidate_limit() -> None:
    store, collection = mock_store()
    store.query(q(VectorStoreQueryMode.HYBRID, 0.5, hybrid_top_k=40))
    assert collection.query.hybrid.call_args.kwargs["limit"] == 40


def leaves(flt: object) -> list[tuple[str, object]]:
    """(property, value) of every leaf of a Weaviate filter tree."""
    children = getattr(flt, "filters", None)
    if isinstance(children, list):
        return [leaf for child in children for leaf in leaves(child)]
    return [(str(getattr(flt, "target", "")), getattr(flt, "value", None))]


def test_tenant_filter_on_every_query_and_delete() -> None:
    store, collection = mock_store(tenant="acme")
    store.query(q(VectorStoreQueryMode.HYBRID, 0.5))
    assert leaves(collection.query.hybrid.call_args.kwargs["filters"]) == [("tenant", "acme")]
    store.delete_articles(["a", "b"])
    where = collection.data.delete_many.call_args.kwargs["where"]
    assert sorted(leaves(where), key=str) == [("ref_doc_id", ["a", "b"]), ("tenant", "acme")]


def test_chunks_are_written_with_search_terms_in_their_language() -> None:
    store, _ = mock_store()
    batch = MagicMock()
    store.client.batch = MagicMock()  # an instance attribute of a real client, so not in the class spec
    store.client.batch.dynamic.return_value.__enter__.return_value = batch
    nodes = [
        TextNode(
            id_="6f1c2a52-0000-4c1e-9a55-2c1d0b7a9e12",
            text="Вставка таблиц в документы",
            metadata={"kb_id": "k1", "title": "Таблицы", "language": "ru"},
            embedding=[0.1, 0.2],
        ),
        TextNode(
            id_="6f1c2a52-0000-4c1e-9a55-2c1d0b7a9e13",
            text="Die Tabellen wurden eingefügt",
            metadata={"kb_id": "k2", "title": "Tabellen", "language": "de"},
            embedding=[0.2, 0.1],
        ),
    ]
    assert store.add(nodes) == [n.node_id for n in nodes]
    written = [c.kwargs["properties"] for c in batch.add_object.call_args_list]
    assert [p["search_terms"] for p in written] == ["таблиц вставк таблиц документ", "tabell tabell wurd eingefugt"]
    assert all(p["kb_id"] for p in written) and "search_terms" not in nodes[0].metadata


def test_the_query_is_stemmed_in_its_language_among_the_collections() -> None:
    store, collection = mock_store()
    groups = [SimpleNamespace(grouped_by=SimpleNamespace(value=v)) for v in ("en", "ru", "")]
    collection.aggregate.over_all.return_value = SimpleNamespace(groups=groups)
    assert store.languages() == {"en", "ru"}
    assert store.query_terms("Как вставить таблицами") == "встав таблиц"
    assert store.query_terms("inserting tables") == "insert tabl"


def test_results_are_parsed_into_nodes_with_scores() -> None:
    store, collection = mock_store()
    node = TextNode(id_="6f1c2a52-0000-4c1e-9a55-2c1d0b7a9e11", text="Insert a table.", metadata={"kb_id": "k1"})
    node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id="k1")
    props = {**node_to_metadata_dict(node, remove_text=True, flat_metadata=False), "text": node.text}
    entry = SimpleNamespace(
        properties=props, metadata=SimpleNamespace(score=0.83, distance=None), vector={}, uuid=node.node_id
    )
    collection.query.hybrid.return_value = SimpleNamespace(objects=[entry])
    result = store.query(q(VectorStoreQueryMode.HYBRID, 0.5))
    assert result.similarities == [0.83]
    assert result.nodes[0].metadata["kb_id"] == "k1" and result.nodes[0].ref_doc_id == "k1"
    assert result.nodes[0].get_content() == "Insert a table."


def test_the_vectors_width_is_read_back_and_another_width_refused_before_any_request() -> None:
    store, collection = mock_store(tenant="acme")
    collection.query.fetch_objects.return_value = SimpleNamespace(objects=[])
    assert store.vector_dim() is None  # empty: any model may start it
    store.check_embedding_dim(512)
    stored = SimpleNamespace(vector={"default": [0.0] * 384}, properties={}, uuid="u")
    collection.query.fetch_objects.return_value = SimpleNamespace(objects=[stored])
    assert store.vector_dim() == 384
    # the whole collection, not the tenant's share: all tenants live in one vector index
    assert collection.query.fetch_objects.call_args.kwargs == {"limit": 1, "include_vector": True}
    store.check_embedding_dim(384)
    with pytest.raises(EmbeddingMismatch, match=r"Weaviate collection Articles holds 384.*\(minilm\).*512"):
        store.query(VectorStoreQuery(query_str="table", query_embedding=[0.1] * 512, similarity_top_k=3))
    collection.query.hybrid.assert_not_called()
    node = TextNode(id_="6f1c2a52-0000-4c1e-9a55-2c1d0b7a9e11", text="Insert a table.", embedding=[0.1] * 512)
    store.client.batch = MagicMock()
    with pytest.raises(EmbeddingMismatch, match="a new collection"):
        store.add([node])
    store.client.batch.dynamic.assert_not_called()  # nothing written


def test_a_first_write_sets_the_width_without_asking_again() -> None:
    store, collection = mock_store()
    collection.query.fetch_objects.return_value = SimpleNamespace(objects=[])
    store.client.batch = MagicMock()
    node = TextNode(id_="6f1c2a52-0000-4c1e-9a55-2c1d0b7a9e11", text="Insert a table.", embedding=[0.1] * 384)
    node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id="k1")
    store.add([node])
    asked = collection.query.fetch_objects.call_count
    assert store.vector_dim() == 384 and collection.query.fetch_objects.call_count == asked


@pytest.mark.integration
@pytest.mark.skipif(not os.environ.get("WEAVIATE_URL"), reason="set WEAVIATE_URL to run against a Weaviate server")
def test_live_ingest_and_search(tmp_path: object) -> None:
    from pathlib import Path

    from ingestion.pipeline import Ingestor
    from ragidx.config import Settings
    from ragidx.stores.article_store import ArticleStore
    from ragidx.stores.factory import build_weaviate_store
    from tests.fakes.hash_embedding import HashEmbedding
    from tests.ingestion.crash_worker import corpus

    settings = Settings(
        store="weaviate",
        weaviate_url=os.environ["WEAVIATE_URL"],
        weaviate_grpc_port=int(os.environ.get("WEAVIATE_GRPC_PORT", "50051")),
        weaviate_api_key=os.environ.get("WEAVIATE_API_KEY"),
        collection="RagidxTest",
        tenant="t-live",
    )
    store = build_weaviate_store(settings)
    try:
        ing = Ingestor(store, ArticleStore(Path(str(tmp_path)) / "a.sqlite"), HashEmbedding(dim=32), chunk_tokens=40)
        ing.ingest(corpus(6), source="gen")
        before = store.count()
        ing.ingest(corpus(6), source="gen")
        assert store.count() == before > 0  # idempotent
        fresh = build_weaviate_store(settings)  # another process's view: the width read from a stored object
        try:
            assert fresh.vector_dim() == 32
        finally:
            fresh.client.close()
        emb = HashEmbedding(dim=32)
        text = "Sentence 3 of article 4 talks about topic4"
        for alpha in (0.0, 0.5, 1.0):
            result = store.query(
                VectorStoreQuery(
                    query_str=text,
                    query_embedding=emb.get_query_embedding(text),
                    similarity_top_k=3,
                    mode=VectorStoreQueryMode.HYBRID,
                    alpha=alpha,
                )
            )
            assert result.nodes and result.nodes[0].metadata["kb_id"] == "a4"
        ing.delete(["a4"])
        assert store.count() < before
    finally:
        store.client.collections.delete("RagidxTest")
        store.client.close()


def test_chunks_record_their_embedding_model_and_another_of_the_same_width_is_refused() -> None:
    store, collection = mock_store()
    collection.query.fetch_objects.return_value = SimpleNamespace(objects=[])
    store.client.batch = MagicMock()
    store.check_embedding(384, "e5-multilingual")  # empty: anything may start it
    node = TextNode(id_="6f1c2a52-0000-4c1e-9a55-2c1d0b7a9e11", text="Insert a table.", embedding=[0.1] * 384)
    store.add([node])
    batch = store.client.batch.dynamic.return_value.__enter__.return_value
    assert batch.add_object.call_args.kwargs["properties"]["embed_model"] == "e5-multilingual"
    assert store.embed_model_name() == "e5-multilingual"
    # another process reads it back from one stored object
    other, collection = mock_store()
    stored = SimpleNamespace(vector={"default": [0.0] * 384}, properties={"embed_model": "e5-multilingual"}, uuid="u")
    collection.query.fetch_objects.return_value = SimpleNamespace(objects=[stored])
    assert other.embed_model_name() == "e5-multilingual" and other.vector_dim() == 384
    with pytest.raises(EmbeddingMismatch, match=r"built with embed_model 'e5-multilingual' but 'minilm'.*collection"):
        other.check_embedding(384, "minilm")
    older, collection = mock_store()
    collection.query.fetch_objects.return_value = SimpleNamespace(
        objects=[SimpleNamespace(vector=[0.0] * 384, properties={}, uuid="u")]
    )
    assert older.embed_model_name() is None  # written before the record: the width alone speaks
    older.check_embedding(384, "minilm")


def test_filters_and_permissions_are_translated_natively() -> None:
    from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

    from ragidx.stores.access import Principal, scoped_filters
    from ragidx.stores.weaviate_store import filters_to_weaviate

    user = MetadataFilters(
        filters=[
            MetadataFilter(key="product", value=["writer", "calc"], operator=FilterOperator.IN),
            MetadataFilter(key="version", value="7", operator=FilterOperator.GTE),
        ]
    )
    flt = filters_to_weaviate(scoped_filters(user, Principal.of("ann", ["hr"])), {"version": "int"})
    text = rendered(flt)
    assert "'writer'" in text and "'calc'" in text and "value=7" in text  # "7" as an int for an int property
    assert "ContainsAny" in text and "'user:ann'" in text and "'group:hr'" in text and "public" in text
    store, collection = mock_store()
    store.query(q(VectorStoreQueryMode.HYBRID, filters=scoped_filters(None, Principal())))
    sent = rendered(collection.query.hybrid.call_args.kwargs["filters"])
    assert "target='public'" in sent and "value=True" in sent


def rendered(flt: object) -> str:
    """A Weaviate filter tree as text (its objects have no repr of their own; their leaves do)."""
    inner = getattr(flt, "filters", None)
    if isinstance(inner, list):
        return f"{type(flt).__name__}(" + ", ".join(rendered(f) for f in inner) + ")"
    return repr(flt)
