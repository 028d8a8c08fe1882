"""PostgreSQL chunk store (pgvector): the same ranks as LanceDB, filters and readers inside the SQL, tenants apart,
writes that replace instead of doubling, the HNSW index. Each test runs against a real PostgreSQL with pgvector
(``tests/postgres_server.py``; the ``pgvector_url`` fixture)."""

from __future__ import annotations

import random
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

from ingestion.pipeline import chunk_id
from ragidx.config import Settings
from ragidx.stores.access import Principal, scoped_filters
from ragidx.stores.lancedb_store import EmbeddingMismatch, LanceDBChunkStore
from ragidx.stores.postgres_settings import PgvectorSettings
from ragidx.stores.postgres_store import PostgresChunkStore, filters_to_pg
from tests.dashboard.fakes import make_engine
from tests.fakes.hash_embedding import HashEmbedding

EMB = HashEmbedding(dim=64)
TEXTS = {
    "tables": "Insert a table in Writer with Table > Insert Table or Ctrl+F12.",
    "charts": "Create a chart in Calc from a selected cell range with Insert > Chart.",
    "print": "Print a document with File > Print; choose the printer and the page range.",
    "pdf": "Export a document as PDF with File > Export as PDF.",
    "quote": "O'Reilly's guide to styles: paragraph styles and character styles, and tables of styles.",
    "tables2": "Table borders: select the table, then Table > Properties > Borders. Tables hold rows.",
}
META: dict[str, dict[str, object]] = {
    "tables": {"product": "writer", "version": 7, "tags": ["table", "insert"]},
    "charts": {"product": "calc", "version": 6, "tags": ["chart"]},
    "print": {"product": "writer", "version": 8, "allowed": ["group:support"]},
    "pdf": {"product": "writer", "version": 7.5, "allowed": ["user:ann"]},
    "quote": {"product": "calc"},
    "tables2": {"product": "writer", "version": 5, "tags": ["table"]},
}
QUERIES = ("insert a table", "print the page range", "export PDF", "styles", "chart from cells", "table borders rows")


def embed(text: str) -> list[float]:
    """Hashed words plus a little noise of the text's own: no two chunks are equally far from a query (LanceDB
    returns equal distances in no fixed order, and reciprocal-rank fusion would follow it)."""
    noise = random.Random(text)
    return [x + noise.gauss(0, 0.01) for x in EMB.get_text_embedding(text)]


def node(kb_id: str, text: str, n: int = 0, **meta: object) -> TextNode:
    return TextNode(
        id_=chunk_id(kb_id, n, meta.get("tenant") or None),  # type: ignore[arg-type]
        text=text,
        metadata={"kb_id": kb_id, "chunk_no": n, "title": kb_id.title(), "url": f"u/{kb_id}", **meta},
        embedding=embed(text),
    )


def nodes() -> list[TextNode]:
    return [node(k, t, **META[k]) for k, t in TEXTS.items()]


def query(text: str, mode: VectorStoreQueryMode, k: int = 3, **kw: object) -> VectorStoreQuery:
    return VectorStoreQuery(query_str=text, query_embedding=embed(text), similarity_top_k=k, mode=mode, **kw)


def ids(result: object) -> list[str]:
    return [n.metadata["kb_id"] for n in result.nodes]  # type: ignore[attr-defined]


def ranked(result: object) -> list[frozenset[str]]:
    """The ids best first, those of one score together (LanceDB returns equal scores in no fixed order)."""
    groups: dict[float, set[str]] = {}
    for kb_id, score in zip(ids(result), result.similarities, strict=True):  # type: ignore[attr-defined]
        groups.setdefault(round(score, 5), set()).add(kb_id)
    return [frozenset(groups[s]) for s in sorted(groups, reverse=True)]


@pytest.fixture()
def pg(pgvector_url: str) -> PostgresChunkStore:
    store = PostgresChunkStore(url=pgvector_url)
    store.add(nodes())
    store.finalize()
    return store


@pytest.fixture()
def lance(tmp_path: Path) -> LanceDBChunkStore:
    store = LanceDBChunkStore(uri=tmp_path / "db")
    store.add(nodes())
    store.finalize()
    return store


@pytest.mark.parametrize(
    "mode", [VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.HYBRID]
)
def test_every_mode_ranks_and_scores_as_lancedb(
    pg: PostgresChunkStore, lance: LanceDBChunkStore, mode: VectorStoreQueryMode
) -> None:
    for text in QUERIES:
        for fusion in ("relative_score", "rrf"):
            q = query(text, mode, k=len(TEXTS), alpha=0.4 if mode == VectorStoreQueryMode.HYBRID else None)
            ours, theirs = pg.query(q, fusion=fusion), lance.query(q, fusion=fusion)
            assert ranked(ours) == ranked(theirs), (text, fusion)
            assert ours.similarities == pytest.approx(theirs.similarities, rel=1e-5, abs=1e-6), (text, fusion)


def test_an_engine_over_postgres_finds_the_same_articles_in_the_same_order(
    pgvector_url: str, tmp_path: Path, writer_kb_file: str
) -> None:
    questions = (
        "How do I insert a table of contents?",
        "print only the selected pages",
        "page numbers in the footer",
        "merge table cells",
        "header on the first page only",
        "update an index",
    )
    postgres = Settings(data_dir=tmp_path / "pg", store="postgres", article_store_url=pgvector_url)
    with make_engine(postgres) as on_postgres, make_engine(Settings(data_dir=tmp_path / "lance")) as on_lance:
        assert on_postgres.ingest(writer_kb_file).new == on_lance.ingest(writer_kb_file).new == 26
        assert on_postgres.chunk_store.count() == on_lance.chunk_store.count()
        for question in questions:
            found = [a.kb_id for a in on_postgres.retrieve(question, top_k=5)]
            assert found == [a.kb_id for a in on_lance.retrieve(question, top_k=5)], question
            assert len(found) == 5


FILTERS = [
    MetadataFilters(filters=[MetadataFilter(key="product", value="writer")]),
    MetadataFilters(filters=[MetadataFilter(key="version", value="7", operator=FilterOperator.GTE)]),
    MetadataFilters(filters=[MetadataFilter(key="version", value=7, operator=FilterOperator.NE)]),
    MetadataFilters(filters=[MetadataFilter(key="product", value=["calc"], operator=FilterOperator.NIN)]),
    MetadataFilters(filters=[MetadataFilter(key="tags", value="table", operator=FilterOperator.CONTAINS)]),
    MetadataFilters(filters=[MetadataFilter(key="tags", value=["table", "insert"], operator=FilterOperator.ALL)]),
    MetadataFilters(filters=[MetadataFilter(key="tags", value=["chart"], operator=FilterOperator.NIN)]),
    MetadataFilters(filters=[MetadataFilter(key="version", value=None, operator=FilterOperator.IS_EMPTY)]),
    MetadataFilters(
        filters=[
            MetadataFilter(key="product", value="calc"),
            MetadataFilters(
                filters=[MetadataFilter(key="version", value=7.5, operator=FilterOperator.LT)],
                condition=FilterCondition.NOT,
            ),
        ],
        condition=FilterCondition.OR,
    ),
]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: repr(f.filters[0].key))
def test_filters_select_what_lancedb_selects(
    pg: PostgresChunkStore, lance: LanceDBChunkStore, filters: MetadataFilters
) -> None:
    for principal in (None, Principal(user="ann"), Principal(user="bob", groups=("support",))):
        scoped = scoped_filters(filters, principal)
        q = query("table", VectorStoreQueryMode.HYBRID, k=10, filters=scoped)
        assert ranked(pg.query(q)) == ranked(lance.query(q)), principal
        assert sorted(n.node_id for n in pg.get_nodes(filters=scoped)) == sorted(
            n.node_id for n in lance.get_nodes(filters=scoped)
        )


def test_readers_and_filters_are_predicates_before_top_k(pg: PostgresChunkStore) -> None:
    """The k best among what the reader may read, not the k best then filtered: a narrow filter still fills k."""
    anybody = scoped_filters(None, None)
    assert sorted(ids(pg.query(query("print pdf", VectorStoreQueryMode.DEFAULT, k=6, filters=anybody)))) == sorted(
        ["tables", "charts", "quote", "tables2"]
    )
    ann = scoped_filters(MetadataFilters(filters=[MetadataFilter(key="product", value="writer")]), Principal("ann"))
    assert ids(pg.query(query("charts", VectorStoreQueryMode.HYBRID, k=3, filters=ann))) != []
    assert set(ids(pg.query(query("charts", VectorStoreQueryMode.HYBRID, k=3, filters=ann)))) <= {
        "tables",
        "pdf",
        "tables2",
    }
    assert len(pg.query(query("charts", VectorStoreQueryMode.DEFAULT, k=3, filters=ann)).nodes) == 3


def test_filter_values_never_reach_the_sql() -> None:
    params: list[object] = []
    sql = filters_to_pg(
        MetadataFilters(filters=[MetadataFilter(key="product", value="x'); DROP TABLE t; --", operator="!=")]),
        {"product": "string"},
        params,
    )
    assert "DROP" not in sql and params == ["product", "x'); DROP TABLE t; --"]


def test_bad_filters_are_refused_with_the_fields_there_are(pg: PostgresChunkStore) -> None:
    with pytest.raises(ValueError, match="cannot filter on 'colour'.*product"):
        pg.check_filters(MetadataFilters(filters=[MetadataFilter(key="colour", value="red")]))
    with pytest.raises(ValueError, match="'abc' is not a finite number"):
        pg.check_filters(MetadataFilters(filters=[MetadataFilter(key="version", value="abc", operator=">=")]))
    assert pg.metadata_fields()["version"] == "float" and pg.metadata_fields()["tags"] == "list[string]"


def test_tenants_are_apart(pgvector_url: str) -> None:
    acme, globex = (
        PostgresChunkStore(url=pgvector_url, tenant="acme"),
        PostgresChunkStore(url=pgvector_url, tenant="globex"),
    )
    acme.add([node("tables", TEXTS["tables"], tenant="acme"), node("print", TEXTS["print"], tenant="acme")])
    globex.add([node("tables", TEXTS["tables"], tenant="globex")])
    assert (acme.count(), globex.count(), PostgresChunkStore(url=pgvector_url).count()) == (2, 1, 3)
    assert ids(globex.query(query("print", VectorStoreQueryMode.HYBRID, k=5))) == ["tables"]
    globex.delete_articles(["tables"])
    assert (acme.count(), globex.count()) == (2, 0)
    assert acme.kb_ids() == {"tables", "print"}


def test_an_add_again_replaces_and_keeps_the_statistics_exact(pg: PostgresChunkStore, pgvector_url: str) -> None:
    pg.add(nodes())  # a run repeated after a crash
    pg.delete_articles(["charts"])
    pg.add([node("charts", TEXTS["charts"], **META["charts"])])
    assert pg.count() == len(TEXTS)
    fresh = PostgresChunkStore(url=pgvector_url, collection="fresh")
    fresh.add(nodes())
    q = query("insert table styles", VectorStoreQueryMode.TEXT_SEARCH, k=6)
    assert pg.query(q).similarities == pytest.approx(fresh.query(q).similarities)


def test_an_article_metadata_update_changes_its_readers_in_place(pg: PostgresChunkStore) -> None:
    ann = scoped_filters(None, Principal("ann"))
    pg.update_article_metadata({"pdf": {"product": "writer", "allowed": ["user:bob"]}})
    assert "pdf" not in ids(pg.query(query("export PDF", VectorStoreQueryMode.HYBRID, k=6, filters=ann)))
    assert pg.get_nodes(filters=MetadataFilters(filters=[MetadataFilter(key="kb_id", value="pdf")]))[0].metadata[
        "allowed"
    ] == ["user:bob"]


def test_the_embedding_model_is_recorded_and_checked(pgvector_url: str) -> None:
    store = PostgresChunkStore(url=pgvector_url)
    store.check_embedding(64, "hash")
    store.add(nodes())
    assert (store.vector_dim(), store.embed_model_name()) == (64, "hash")
    with pytest.raises(EmbeddingMismatch, match="384"):
        store.check_embedding(384, "minilm")
    with pytest.raises(EmbeddingMismatch, match="'hash'"):
        store.check_embedding(64, "other")


def test_the_hnsw_index_is_built_once_large_enough_and_filtered_searches_fill_k(pgvector_url: str) -> None:
    rng = random.Random(7)
    store = PostgresChunkStore(url=pgvector_url, hnsw=PgvectorSettings(index_min_rows=300, m=8, ef_construction=32))
    many = []
    for i in range(400):
        vector = [rng.gauss(0, 1) for _ in range(16)]
        many.append(
            TextNode(
                id_=f"c{i}",
                text=f"chunk {i}",
                metadata={"kb_id": f"a{i}", "chunk_no": 0, "title": "", "url": "", "shelf": i % 40},
                embedding=vector,
            )
        )
    store.add(many[:200])
    store.finalize()
    assert not _has_hnsw(store)
    store.add(many[200:])
    store.finalize()
    assert _has_hnsw(store)
    narrow = MetadataFilters(filters=[MetadataFilter(key="shelf", value=3)])
    q = VectorStoreQuery(query_embedding=many[0].embedding, similarity_top_k=10, filters=narrow)
    found = store.query(q)
    assert len(found.nodes) == 10 and {n.metadata["shelf"] for n in found.nodes} == {3}
    assert found.similarities == sorted(found.similarities, reverse=True)


def _has_hnsw(store: PostgresChunkStore) -> bool:
    with store._connection() as conn:
        return conn.execute("SELECT to_regclass(%s)", (f"{store.table}_hnsw",)).fetchone()[0] is not None  # type: ignore[index]
