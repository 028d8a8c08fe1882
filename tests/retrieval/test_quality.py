"""Real-model quality check on a labelled slice of BEIR SciFact (MiniLM, LanceDB, the whole chain).

The slice: the first 30 judged test queries, their relevant abstracts, and for each relevant abstract
the four non-relevant abstracts closest to its title by BM25 as topical distractors (~170 abstracts). SciFact may
not be redistributed, so it is read from ``RAGIDX_BEIR_SCIFACT`` (default ``../shared/data/beir_scifact``)
and the test is skipped where it is absent.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest

from ingestion.pipeline import Ingestor
from ragidx.article import Article
from ragidx.evaluation.retrieval import load_beir
from ragidx.metrics import ndcg_at_k
from ragidx.retrieval.article_grouper import group_chunks
from ragidx.retrieval.offline_reranker import OfflineChunkReranker
from ragidx.retrieval.retriever import ArticleRetriever
from ragidx.stores.article_store import ArticleStore
from ragidx.stores.lancedb_store import LanceDBChunkStore

pytestmark = pytest.mark.slow

SCIFACT = Path(
    os.environ.get("RAGIDX_BEIR_SCIFACT", Path(__file__).resolve().parents[2] / ".." / "shared/data/beir_scifact")
)
QUERIES = 30
NEGATIVES = 4


@pytest.fixture(scope="session")
def scifact_slice(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    if not (SCIFACT / "corpus.jsonl").is_file():
        pytest.skip(f"SciFact not found at {SCIFACT} (set RAGIDX_BEIR_SCIFACT)")
    import bm25s

    from ragidx.providers.embeddings import LocalEmbedding

    ds = load_beir(SCIFACT, limit=QUERIES)
    corpus = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").open(encoding="utf-8")]
    ids = [str(d["_id"]) for d in corpus]
    index = bm25s.BM25()
    index.index(bm25s.tokenize([f"{d['title']} {d['text']}" for d in corpus], stopwords="en", show_progress=False))
    titles = {str(d["_id"]): d["title"] for d in corpus}
    keep: set[str] = set()
    for qid in ds.queries:
        keep |= set(ds.qrels[qid])
        # Distractors from the relevant abstracts' topic (BM25 on their titles), not picked with the
        # query: picking them with the query would make them hard for one retriever and not the other.
        for doc_id in ds.qrels[qid]:
            found, _ = index.retrieve(bm25s.tokenize([titles[doc_id]], stopwords="en", show_progress=False), k=12)
            negatives = [ids[i] for i in found[0] if ids[i] not in ds.qrels[qid]]
            keep |= set(negatives[:NEGATIVES])
    articles = [
        Article(str(d["_id"]), d["title"] or str(d["_id"]), "", d["text"]) for d in corpus if str(d["_id"]) in keep
    ]
    folder = tmp_path_factory.mktemp("scifact")
    embed = LocalEmbedding("minilm")
    chunks = LanceDBChunkStore(uri=folder / "lancedb", table_name="Scifact")
    store = ArticleStore(folder / "articles.sqlite")
    Ingestor(chunks, store, embed).ingest(articles, source="scifact-slice")
    return ds, chunks, store, embed


def mean_ndcg(ds, rank) -> float:  # type: ignore[no-untyped-def]
    return statistics.fmean(ndcg_at_k(rank(q), ds.qrels[qid], 10) for qid, q in ds.queries.items())


def test_full_chain_ranks_relevant_abstracts_first(scifact_slice) -> None:  # type: ignore[no-untyped-def]
    """A quality bar for the whole chain with real models.

    Not a dense-vs-chain comparison: on ~170 abstracts the full-text index's IDF statistics are poor
    and dense search wins here (measured: dense 0.93, chain 0.88); on the full corpus the chain wins
    (0.72 vs 0.67, ``ragidx eval retrieval``). A broken stage (random reranker, lost articles, wrong
    grouping) falls far below the bar.
    """
    ds, chunks, store, embed = scifact_slice
    dense = ArticleRetriever(chunks, store, embed, mode="dense", candidate_chunks=50)
    chain = ArticleRetriever(chunks, store, embed, reranker=OfflineChunkReranker(), candidate_chunks=50, top_k=10)
    dense_ndcg = mean_ndcg(ds, lambda q: [g.kb_id for g in group_chunks(dense.search(q))])
    chain_ndcg = mean_ndcg(ds, lambda q: [a.kb_id for a in chain.retrieve(q)])
    print(f"slice nDCG@10: dense {dense_ndcg:.3f}, full chain {chain_ndcg:.3f}")
    assert chain_ndcg >= 0.8
    assert dense_ndcg >= 0.8
