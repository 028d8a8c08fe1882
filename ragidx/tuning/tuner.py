"""RetrievalTuner: score every candidate configuration on queries with known answers, pick the best.

Running the whole chain once per configuration and query would cost ~180 configurations × N queries
of searches. The tuner searches once per query instead: the dense list and the keyword list, each
``max(depths)`` deep, straight from the chunk store. Every configuration is then replayed from those
two lists exactly as the store and :class:`~ragidx.retrieval.retriever.ArticleRetriever` run it: the
top ``candidate_chunks`` of each list, fused (``ragidx.stores.fusion``, alpha 0 being keyword search
alone), reranked (the offline reranker's features computed once per pool, then each weighting), kept to
``rerank_top_n``, grouped to articles by their best chunk. The rankings are scored with the evaluation
code (``score_runs``: nDCG@10, Recall@10, MRR@10).

The queries are pseudo-queries (``ragidx.tuning.pseudo_queries``) for ``ragidx tune``, or labelled
queries when ``ragidx eval retrieval`` reports what each candidate would really score.

Example:
    >>> tuner = RetrievalTuner(chunk_store, embed_model, settings)            # doctest: +SKIP
    >>> pools = tuner.pools({"q1": "insert a table"})                          # doctest: +SKIP
    >>> tuner.score(candidate_configs(settings), pools, {"q1": {"lo-42": 1}})  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore
from llama_index.core.vector_stores.types import MetadataFilters, VectorStoreQuery, VectorStoreQueryMode

from ragidx.config import Settings
from ragidx.metrics import ndcg_at_k, score_runs
from ragidx.retrieval.article_grouper import chunk_kb_id
from ragidx.retrieval.factory import build_chunk_reranker
from ragidx.retrieval.offline_reranker import (
    ChunkTerms,
    OfflineChunkReranker,
    chunk_terms,
    node_language,
    pool_features,
    pool_language,
)
from ragidx.stores.fusion import fuse
from ragidx.tuning.candidates import RetrievalConfig

__all__ = ["CandidateScore", "QueryPool", "RetrievalTuner", "pick"]

logger = logging.getLogger(__name__)

RANKED_ARTICLES = 10
"""Articles ranked per query and configuration (nDCG@10 reads ten)."""
HIDDEN_MARGIN = 5
"""Extra hits fetched per list when some chunks will be hidden, so the lists stay ``depth`` long."""


@dataclass(frozen=True)
class QueryPool:
    """What the store returned for one query: dense and keyword hits, best first, ``depth`` each."""

    query: str
    dense: list[NodeWithScore]
    keyword: list[NodeWithScore]


@dataclass(frozen=True)
class CandidateScore:
    """A configuration and its mean metrics over the queries (``ndcg@10``, ``recall@10``, ``mrr@10``)."""

    config: RetrievalConfig
    metrics: dict[str, float]
    per_query: dict[str, float]
    """nDCG@10 of each query, for paired comparisons."""

    @property
    def ndcg(self) -> float:
        return self.metrics["ndcg@10"]


class RetrievalTuner:
    """Replays candidate configurations over once-searched candidate pools and scores them.

    Args:
        chunk_store: the vector store holding the chunks (dense and full-text search).
        embed_model: the embedding model the chunks were indexed with.
        settings: supplies ``rerank_top_n`` and the configured reranker (for non-offline rerankers).
        filters: metadata filters every search gets (the tenant).

    Example:
        >>> RetrievalTuner(store, embed, Settings()).depth      # doctest: +SKIP
        100
    """

    def __init__(
        self,
        chunk_store: Any,
        embed_model: Any,
        settings: Settings,
        *,
        filters: MetadataFilters | None = None,
        depth: int = 100,
    ) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.chunk_store = chunk_store
        self.embed_model = embed_model
        self.settings = settings
        self.filters = filters
        self.depth = depth
        self._rerankers: dict[str, BaseNodePostprocessor | None] = {}
        self._offline_rerankers: dict[tuple[float, float, float, float], OfflineChunkReranker] = {}
        self._terms: dict[str, ChunkTerms] = {}
        self._kb_ids: dict[str, str | None] = {}

    # --- searching once ------------------------------------------------------------------------------
    def pool(self, query: str, hide: Callable[[str | None, str], bool] | None = None) -> QueryPool:
        """Dense and keyword hits for ``query``, ``depth`` of each; chunks for which ``hide(kb_id, text)`` is
        true are left out (held-out pseudo-queries)."""
        embedding = self.embed_model.get_query_embedding(query)
        extra = HIDDEN_MARGIN if hide is not None else 0
        dense = self.chunk_store.query(
            VectorStoreQuery(
                query_embedding=embedding,
                similarity_top_k=self.depth + extra,
                mode=VectorStoreQueryMode.DEFAULT,
                filters=self.filters,
            )
        )
        keyword = self.chunk_store.query(
            VectorStoreQuery(
                query_str=query,
                similarity_top_k=self.depth + extra,
                mode=VectorStoreQueryMode.TEXT_SEARCH,
                filters=self.filters,
            )
        )
        dense_hits, keyword_hits = _with_scores(dense), _with_scores(keyword)
        if hide is not None:
            dense_hits = [n for n in dense_hits if not hide(chunk_kb_id(n), n.node.get_content())][: self.depth]
            keyword_hits = [n for n in keyword_hits if not hide(chunk_kb_id(n), n.node.get_content())][: self.depth]
        return QueryPool(query, dense_hits, keyword_hits)

    def pools(
        self,
        queries: Mapping[str, str],
        *,
        hide: Mapping[str, Callable[[str | None, str], bool]] | None = None,
        progress: bool = False,
    ) -> dict[str, QueryPool]:
        """One pool per query id (searches run here, once); ``hide`` maps a query id to its chunk filter."""
        bar = _bar(len(queries), progress, "search")
        out = {}
        for qid, query in queries.items():
            out[qid] = self.pool(query, (hide or {}).get(qid))
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        return out

    # --- replaying configurations --------------------------------------------------------------------
    def rankings(
        self, configs: Sequence[RetrievalConfig], pools: Mapping[str, QueryPool], *, progress: bool = False
    ) -> dict[RetrievalConfig, dict[str, list[str]]]:
        """Each configuration's article ranking (kb_ids, best first, ``RANKED_ARTICLES``) of each query."""
        for c in configs:
            if c.candidate_chunks > self.depth:
                raise ValueError(
                    f"{c.label}: candidate_chunks {c.candidate_chunks} exceeds the pool depth {self.depth}"
                )
        runs: dict[RetrievalConfig, dict[str, list[str]]] = {c: {} for c in configs}
        by_search: dict[tuple[float, str, int], list[RetrievalConfig]] = {}
        for c in configs:
            by_search.setdefault((c.alpha, c.fusion, c.candidate_chunks), []).append(c)
        bar = _bar(len(pools), progress, "score")
        for qid, pool in pools.items():
            nodes = {n.node.node_id: n.node for n in (*pool.keyword, *pool.dense)}
            for node_id, node in nodes.items():
                if node_id not in self._kb_ids:
                    self._kb_ids[node_id] = chunk_kb_id(NodeWithScore(node=node))
            dense = [(n.node.node_id, float(n.score or 0.0)) for n in pool.dense]
            keyword = [(n.node.node_id, float(n.score or 0.0)) for n in pool.keyword]
            for (alpha, fusion, depth), group in by_search.items():
                fused = _fused(dense, keyword, alpha, fusion, depth)
                for config, chunks in self._reranked(pool.query, fused, nodes, group):
                    runs[config][qid] = self._ranked_articles(chunks)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        return runs

    def score(
        self,
        configs: Sequence[RetrievalConfig],
        pools: Mapping[str, QueryPool],
        qrels: Mapping[str, Mapping[str, int]],
        *,
        progress: bool = False,
    ) -> list[CandidateScore]:
        """Every configuration's metrics on the pooled queries, in the order given."""
        judged = {q: dict(qrels[q]) for q in pools if q in qrels}
        runs = self.rankings(configs, {q: pools[q] for q in judged}, progress=progress)
        out = []
        for c in configs:
            metrics = score_runs(runs[c], [], judged)
            metrics = {k: v for k, v in metrics.items() if k in ("ndcg@10", "recall@10", "mrr@10")}
            per_query = {q: ndcg_at_k(runs[c].get(q, []), rel, 10) for q, rel in judged.items()}
            out.append(CandidateScore(c, metrics, per_query))
        return out

    def _reranked(
        self,
        query: str,
        fused: list[tuple[str, float]],
        nodes: Mapping[str, BaseNode],
        configs: Sequence[RetrievalConfig],
    ) -> list[tuple[RetrievalConfig, list[tuple[str, float]]]]:
        """The (chunk id, score) pairs each configuration keeps after its rerank stage, as
        ``ArticleRetriever.rerank`` keeps them."""
        keep_plain = max(self.settings.rerank_top_n, RANKED_ARTICLES)
        out: list[tuple[RetrievalConfig, list[tuple[str, float]]]] = []
        features = None
        for c in configs:
            if c.reranker == "none":
                out.append((c, fused[:keep_plain]))
            elif c.reranker == "offline" and c.weights is not None:
                reranker = self._offline(c.weights)
                if features is None:
                    docs = [self._chunk_terms(i, nodes[i]) for i, _ in fused]
                    language = pool_language(query, [node_language(nodes[i]) for i, _ in fused])
                    scores_in = [x for _, x in fused]
                    features = pool_features(
                        query, docs, scores_in, k1=reranker.k1, b=reranker.b, query_language=language
                    )
                scores = reranker.combine(features)
                order = sorted(range(len(fused)), key=lambda i: (-scores[i], i))[: self.settings.rerank_top_n]
                out.append((c, [(fused[i][0], scores[i]) for i in order]))
            else:
                other = self._reranker(c.reranker)
                candidates = [NodeWithScore(node=nodes[i], score=x) for i, x in fused]
                reranked = other.postprocess_nodes(candidates, query_str=query) if other is not None else candidates
                out.append((c, [(n.node.node_id, float(n.score or 0.0)) for n in reranked][:keep_plain]))
        return out

    def _offline(self, weights: tuple[float, float, float, float]) -> OfflineChunkReranker:
        if weights not in self._offline_rerankers:
            self._offline_rerankers[weights] = OfflineChunkReranker(
                retrieval_weight=weights[0],
                lexical_weight=weights[1],
                title_weight=weights[2],
                phrase_weight=weights[3],
            )
        return self._offline_rerankers[weights]

    def _chunk_terms(self, node_id: str, node: BaseNode) -> ChunkTerms:
        """A chunk's terms, made once per tuner: a chunk sits in dozens of pools."""
        cached = self._terms.get(node_id)
        if cached is None:
            title = str(node.metadata.get("title") or "")
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            cached = self._terms[node_id] = chunk_terms(title, text, node_language(node))
        return cached

    def _ranked_articles(self, chunks: Sequence[tuple[str, float]]) -> list[str]:
        """``group_chunks``' article order (best chunk score, ties by first appearance), kb_ids only."""
        best: dict[str, float] = {}
        for node_id, score in chunks:
            kb_id = self._kb_ids.get(node_id)
            if kb_id is not None and (kb_id not in best or score > best[kb_id]):
                best[kb_id] = score
        first_seen = {kb_id: i for i, kb_id in enumerate(best)}
        return sorted(best, key=lambda k: (-best[k], first_seen[k]))[:RANKED_ARTICLES]

    def _reranker(self, name: str) -> BaseNodePostprocessor | None:
        if name not in self._rerankers:
            self._rerankers[name] = build_chunk_reranker(self.settings.model_copy(update={"reranker": name}))
        return self._rerankers[name]


def pick(
    scores: Sequence[CandidateScore], untuned: RetrievalConfig, *, min_gain: float = 0.0, z: float = 0.0
) -> CandidateScore:
    """The best-scoring configuration among those that beat the untuned one convincingly, else the untuned.

    A candidate qualifies when its mean nDCG@10 gain over the untuned configuration, minus ``z`` standard
    errors of the per-query gains (paired, same queries), exceeds ``min_gain``. ``z=0`` and
    ``min_gain=0`` take the plain best. Ties go to the earlier candidate (the untuned one comes first in
    ``candidate_configs``).
    """
    if not scores:
        raise ValueError("no candidates were scored")
    current = next((s for s in scores if s.config == untuned), None)
    if current is None:
        return max(scores, key=lambda s: s.ndcg)  # max keeps the first of equal scores
    best = current
    for s in scores:
        if s.ndcg > best.ndcg and _lower_bound(s, current, z) > min_gain:
            best = s
    return best


def _lower_bound(candidate: CandidateScore, base: CandidateScore, z: float) -> float:
    """Mean per-query gain of ``candidate`` over ``base`` minus ``z`` standard errors."""
    diffs = [candidate.per_query[q] - base.per_query.get(q, 0.0) for q in candidate.per_query]
    if not diffs:
        return candidate.ndcg - base.ndcg
    mean = sum(diffs) / len(diffs)
    if z <= 0.0 or len(diffs) < 2:
        return mean
    var = sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)
    return mean - z * (var / len(diffs)) ** 0.5


def _with_scores(result: Any) -> list[NodeWithScore]:
    nodes = result.nodes or []
    scores = result.similarities or [0.0] * len(nodes)
    return [NodeWithScore(node=n, score=float(s)) for n, s in zip(nodes, scores, strict=False)]


def _fused(
    dense: list[tuple[str, float]], keyword: list[tuple[str, float]], alpha: float, fusion: str, depth: int
) -> list[tuple[str, float]]:
    """What a hybrid store query with ``similarity_top_k=sparse_top_k=depth`` returns (see the stores):
    keyword hits alone at alpha 0, else the fusion of the two lists' top ``depth``, cut to ``depth``."""
    if alpha <= 0.0:
        return keyword[:depth]
    return fuse(dict(dense[:depth]), dict(keyword[:depth]), alpha=alpha, method=fusion)[:depth]


def _bar(total: int, enabled: bool, desc: str) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="query", desc=desc)
