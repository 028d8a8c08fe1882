"""Property: no query returns, shows or cites an article its principal may not read, and none comes back empty
while a readable article matches; filters are exact and run before top-k.

Random knowledge bases (articles with random words, a product, a version, tags and random principals), random
principals and random filters, on real parts: the ingestion pipeline, LanceDB and the article store (SQLite,
and the PostgreSQL server the tests start), searched through the whole chain with the offline chunk reranker.
Each example ingests one KB (its own table and tenant, in stores shared by the batch) and runs
``QUERIES_PER_EXAMPLE`` queries against an oracle computed in Python. Filter values include quotes, SQL
fragments, unicode and very long strings.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from ingestion.pipeline import Ingestor
from ragidx.article import Article
from ragidx.retrieval.offline_reranker import OfflineChunkReranker
from ragidx.retrieval.retriever import ArticleRetriever
from ragidx.stores.access import Principal, allowed_of
from ragidx.stores.article_store import ArticleStore
from ragidx.stores.lancedb_store import LanceDBChunkStore
from ragidx.tools.retrieve_context import make_retrieve_context_tool
from tests.fakes.hash_embedding import HashEmbedding

EXAMPLES = int(os.environ.get("RAGIDX_PERMISSION_EXAMPLES", "25"))
QUERIES_PER_EXAMPLE = 40
TOP_K = 4
EMBED = HashEmbedding(dim=64)
WORDS = ["table", "print", "chart", "volume", "image", "spell", "index", "style", "macro", "export", "font"]
USERS = ["ann", "bob", "o'hara", "zoë"]
GROUPS = ["support", "hr", "eng", "a-b"]  # a name has no spaces (an entry with one is refused)
NASTY = [
    "writer",
    "calc",
    "O'Reilly",
    "'; DROP TABLE articles; --",
    "a' OR '1'='1",
    'double "quoted"',
    "back\\slash",
    "%_like*",
    "Тест ✓ 日本語",
    "x" * 3000,
    "",
]
_TABLES = itertools.count()


@dataclass
class Kb:
    articles: list[Article]
    retriever: ArticleRetriever
    store: ArticleStore
    seen_by_reranker: list[set[str]]


class RecordingReranker(BaseNodePostprocessor):
    """The offline chunk reranker, recording which articles it was shown."""

    inner: Any = None
    seen: Any = None

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        self.seen.append({str(n.node.metadata["kb_id"]) for n in nodes})
        out: list[NodeWithScore] = self.inner.postprocess_nodes(nodes, query_bundle=query_bundle)
        return out


principals = st.builds(
    Principal.of,
    st.one_of(st.none(), st.sampled_from(USERS)),
    st.lists(st.sampled_from(GROUPS), max_size=2),
)
allowed_lists = st.one_of(
    st.just([]),
    st.lists(st.sampled_from([f"user:{u}" for u in USERS] + [f"group:{g}" for g in GROUPS]), min_size=1, max_size=3),
)
filter_values = st.one_of(st.sampled_from(NASTY), st.text(max_size=30))


@st.composite
def knowledge_bases(draw: st.DrawFn) -> list[Article]:
    n = draw(st.integers(min_value=3, max_value=14))
    out = []
    for i in range(n):
        words = draw(st.lists(st.sampled_from(WORDS), min_size=2, max_size=12))
        meta: dict[str, Any] = {
            "product": draw(st.sampled_from(NASTY[:-1])),
            "version": draw(st.integers(min_value=1, max_value=9)),
            "tags": draw(st.lists(st.sampled_from(["new", "old", "beta"]), max_size=2, unique=True)),
        }
        allowed = draw(allowed_lists)
        if allowed:
            meta["allowed"] = allowed
        text = " ".join(words) + f". Article {i} explains " + " and ".join(words[:3]) + "."
        out.append(Article(f"k{i}", f"About {words[0]} {i}", f"https://kb/{i}", text, "en", meta))
    return out


@st.composite
def metadata_filters(draw: st.DrawFn) -> MetadataFilters | None:
    kind = draw(st.sampled_from(["none", "eq", "ne", "in", "nin", "range", "tags", "or"]))
    if kind == "none":
        return None
    if kind == "eq":
        f = MetadataFilter(key="product", value=draw(filter_values), operator=FilterOperator.EQ)
    elif kind == "ne":
        f = MetadataFilter(key="product", value=draw(filter_values), operator=FilterOperator.NE)
    elif kind in ("in", "nin"):
        values = draw(st.lists(filter_values, min_size=1, max_size=3))
        f = MetadataFilter(key="product", value=values, operator=FilterOperator(kind))
    elif kind == "range":
        op = draw(st.sampled_from([FilterOperator.GTE, FilterOperator.LT, FilterOperator.GT, FilterOperator.LTE]))
        f = MetadataFilter(key="version", value=str(draw(st.integers(0, 10))), operator=op)
    elif kind == "tags":
        f = MetadataFilter(key="tags", value=draw(st.sampled_from(["new", "old", "beta"])), operator=FilterOperator.EQ)
    else:  # an OR of the caller's own can only narrow what the principal reads, never widen it
        a = MetadataFilter(key="product", value=draw(filter_values), operator=FilterOperator.EQ)
        b = MetadataFilter(key="version", value=draw(st.integers(1, 9)), operator=FilterOperator.GTE)
        return MetadataFilters(filters=[a, b], condition=FilterCondition.OR)
    return MetadataFilters(filters=[f])


def matches(article: Article, filters: MetadataFilters | None) -> bool:
    """The oracle: what the filter means, in Python."""
    if filters is None:
        return True
    results = [matches(article, f) if isinstance(f, MetadataFilters) else _one(article, f) for f in filters.filters]
    return any(results) if filters.condition == FilterCondition.OR else all(results)


def _one(article: Article, f: MetadataFilter) -> bool:
    value = article.metadata.get(f.key)
    op = f.operator
    if f.key == "tags":
        return f.value in value
    if f.key == "version":
        target = float(f.value)  # type: ignore[arg-type]
        return {
            FilterOperator.GTE: value >= target,
            FilterOperator.GT: value > target,
            FilterOperator.LT: value < target,
            FilterOperator.LTE: value <= target,
        }[op]
    if op == FilterOperator.EQ:
        return bool(value == f.value)
    if op == FilterOperator.NE:
        return bool(value != f.value)
    if op == FilterOperator.IN:
        return value in f.value  # type: ignore[operator]
    return value not in f.value  # type: ignore[operator]


def ingest(folder: Path, location: str | Path, articles: list[Article]) -> Kb:
    n = next(_TABLES)
    tenant = f"example-{n}"  # one article database for the batch, a tenant per example (chunks and articles alike)
    chunks = LanceDBChunkStore(uri=folder / "lancedb", table_name=f"Kb{n}", tenant=tenant)
    store = ArticleStore(location, tenant=tenant)
    ingestor = Ingestor(chunks, store, EMBED, chunk_tokens=64, chunk_overlap=4, tenant=tenant)
    report = ingestor.ingest(articles, source="prop")
    assert not report.errors and report.new == len(articles)
    seen: list[set[str]] = []
    reranker = RecordingReranker(inner=OfflineChunkReranker(top_n=30), seen=seen)
    retriever = ArticleRetriever(chunks, store, EMBED, reranker=reranker, candidate_chunks=40, top_k=TOP_K)
    return Kb(articles, retriever, store, seen)


def check_queries(kb: Kb, queries: list[tuple[str, Principal, MetadataFilters | None]]) -> int:
    for text, principal, filters in queries:
        readable = {a.kb_id for a in kb.articles if principal.may_read(allowed_of(a.metadata))}
        visible = {a.kb_id for a in kb.articles if a.kb_id in readable and matches(a, filters)}
        kb.seen_by_reranker.clear()
        got = kb.retriever.retrieve(text, filters=filters, principal=principal)
        got_ids = [a.kb_id for a in got]
        assert set(got_ids) <= visible, f"leak: {set(got_ids) - visible} for {principal} {filters}"
        assert all(s <= visible for s in kb.seen_by_reranker), "the reranker saw an article it should not"
        # Filters and permissions run before top-k: the best k of what is visible, never fewer.
        assert len(got_ids) == min(TOP_K, len(visible)), (got_ids, visible, principal, filters)
        # What the model is shown: the tool's JSON, scoped the same way.
        tool = make_retrieve_context_tool(kb.retriever, filters=filters, principal=principal)
        shown = {a["kb_id"] for a in json.loads(tool.call(query=text).content)["articles"]}
        assert shown <= visible and len(shown) == len(got_ids)
    # Whole-article reads by kb_id take the principal too.
    everyone = [a.kb_id for a in kb.articles]
    for principal, _, _ in {(q[1], None, None) for q in queries}:
        readable = {a.kb_id for a in kb.articles if principal.may_read(allowed_of(a.metadata))}
        assert set(kb.store.get(everyone, principal=principal)) == readable
    return len(queries)


queries_strategy = st.lists(
    st.tuples(
        st.one_of(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join), st.sampled_from(NASTY[:-1])),
        principals,
        metadata_filters(),
    ),
    min_size=QUERIES_PER_EXAMPLE,
    max_size=QUERIES_PER_EXAMPLE,
)


@pytest.fixture(params=["sqlite", "postgresql"])
def article_location(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path_factory.mktemp("prop") / "articles.sqlite")
    else:
        yield request.getfixturevalue("pg_url")


RUNS: dict[str, int] = {}


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(articles=knowledge_bases(), queries=queries_strategy)
def test_no_query_sees_what_its_principal_may_not_read(
    articles: list[Article],
    queries: list[tuple[str, Principal, MetadataFilters | None]],
    article_location: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    kb = ingest(tmp_path_factory.mktemp("lancedb"), article_location, articles)
    backend = "postgresql" if article_location.startswith("postgresql") else "sqlite"
    RUNS[backend] = RUNS.get(backend, 0) + check_queries(kb, queries)
    print(f"queries so far on {backend}: {RUNS[backend]}")  # the size of the proof, with -s
