"""ArticleRetriever: hybrid chunk search → chunk rerank → whole ranked articles.

The chain, each step a LlamaIndex component:

1. ``VectorIndexRetriever`` over the chunk store, hybrid mode by default (dense + full text fused
   with ``alpha``), ``candidate_chunks`` chunks;
2. a chunk reranker (``BaseNodePostprocessor``; offline, Cohere, cross-encoder or none) keeps
   ``rerank_top_n`` chunks;
3. ``ArticleGrouper`` groups by kb_id (MAX score), loads the complete articles and ranks them;
4. optionally an article reranker (``FlashReranker``: an LLM reads the ``article_candidates`` best
   articles and picks the best ``top_k``), after which the ranks are recomputed in its order.

Every call runs as a principal (``principal=``; the public when none is given) with optional metadata
``filters``: both go into the chunk store's query as one predicate (``ragidx.stores.access.scoped_filters``),
applied before its top-k on the dense and the keyword side, and the principal goes into the article store's
read. The rerankers (chunk, flash) see only what that search returned.

It returns ``Article`` objects, uncompressed, with ``rerank_score``, ``normalized_rank``,
``article_rank`` and ``matched_chunk_ids`` in their metadata. Nothing here counts tokens: the
context budget downstream decides what fits.

Example:
    >>> retriever = ArticleRetriever(chunk_store, article_store, embed_model)  # doctest: +SKIP
    >>> [a.kb_id for a in retriever.retrieve("insert a table", top_k=3)]     # doctest: +SKIP
    ['lo-42', 'lo-7', 'lo-13']
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import replace
from typing import Any, Literal

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    MetadataFilters,
    VectorStoreQueryMode,
)

from ragidx.article import ARTICLE_RANK, MATCHED_SPANS, RERANK_SCORE, Article
from ragidx.retrieval.article_grouper import ArticleGrouper, ArticleSource, article_from_node, article_to_node
from ragidx.retrieval.flash.excerpts import EXCERPT_OF_CHARS
from ragidx.retrieval.flash.reranker import FLASH_EXCERPT
from ragidx.retrieval.ranks import assign_ranks, ranks_of
from ragidx.retrieval.rerank_fallback import with_fallback_reason
from ragidx.stores.access import PUBLIC_PRINCIPAL, Principal, scoped_filters
from ragidx.stores.fusion import FUSIONS, Fusion

__all__ = ["ArticleRetriever", "ScopedRetriever", "SearchMode", "article_nodes"]

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

SearchMode = Literal["hybrid", "dense", "text"]
_MODES = {
    "hybrid": VectorStoreQueryMode.HYBRID,
    "dense": VectorStoreQueryMode.DEFAULT,
    "text": VectorStoreQueryMode.TEXT_SEARCH,
}


class ArticleRetriever:
    """Retrieves whole articles, best first, through the chunk search → rerank → group chain.

    Args:
        chunk_store: a LlamaIndex vector store holding the chunks (``stores_text=True``).
        article_store: where complete articles come from (``ArticleStore``).
        embed_model: the embedding model the chunks were indexed with.
        reranker: chunk reranker, or None to rank by the search score alone.
        mode: ``"hybrid"`` (default), ``"dense"`` or ``"text"`` search.
        alpha: hybrid weight, 1.0 = vector only, 0.0 = keyword only.
        fusion: how hybrid search fuses the two lists: ``"relative_score"`` or ``"rrf"`` (reciprocal rank).
        candidate_chunks: chunks fetched by search.
        rerank_top_n: chunks kept after reranking (raised to ``top_k`` when a call asks for more).
        top_k: articles returned when a call does not say.
        score_threshold: drop articles whose best chunk scores below this.
        filters: metadata filters applied to every search (e.g. a tenant).
        article_reranker: a postprocessor over whole-article nodes (``FlashReranker``) run last; it may
            return fewer articles, or none ("nothing relevant").
        article_candidates: articles handed to ``article_reranker`` (at least ``top_k``).

    Example:
        >>> r = ArticleRetriever(store, articles, embed, reranker=OfflineChunkReranker())  # doctest: +SKIP
        >>> r.retrieve("how do I insert a table?")[0].metadata["normalized_rank"]          # doctest: +SKIP
        0.0
    """

    def __init__(
        self,
        chunk_store: BasePydanticVectorStore,
        article_store: ArticleSource,
        embed_model: Any,
        *,
        reranker: BaseNodePostprocessor | None = None,
        mode: SearchMode = "hybrid",
        alpha: float = 0.5,
        fusion: Fusion = "relative_score",
        candidate_chunks: int = 50,
        rerank_top_n: int = 30,
        top_k: int = 5,
        score_threshold: float | None = None,
        filters: MetadataFilters | None = None,
        article_reranker: BaseNodePostprocessor | None = None,
        article_candidates: int = 20,
    ) -> None:
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}, got {mode!r}")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1] (1.0 = vector only), got {alpha}")
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {', '.join(FUSIONS)}, got {fusion!r}")
        for name, value in (
            ("candidate_chunks", candidate_chunks),
            ("rerank_top_n", rerank_top_n),
            ("top_k", top_k),
            ("article_candidates", article_candidates),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.chunk_store = chunk_store
        self.article_store = article_store
        self.embed_model = embed_model
        self.reranker = reranker
        self.mode: SearchMode = mode
        self.alpha = alpha
        self.fusion: Fusion = fusion
        self.candidate_chunks = candidate_chunks
        self.rerank_top_n = rerank_top_n
        self.top_k = top_k
        self.filters = filters
        self.article_reranker = article_reranker
        self.article_candidates = article_candidates
        self.grouper = ArticleGrouper(article_store, top_n=top_k, score_threshold=score_threshold)
        self._index: Any | None = None
        self._lock = threading.Lock()

    # --- the chain, step by step -------------------------------------------------------------------
    def chunk_retriever(
        self, filters: MetadataFilters | None = None, principal: Principal | None = None
    ) -> BaseRetriever:
        """The LlamaIndex ``VectorIndexRetriever`` for the search step, as ``principal`` (None: the public), with
        the configured ``filters`` AND these ``filters`` (one per call: cheap, the index is built once)."""
        if self._index is None:
            with self._lock:
                if self._index is None:
                    from llama_index.core import VectorStoreIndex

                    self._index = VectorStoreIndex.from_vector_store(self.chunk_store, embed_model=self.embed_model)
        return self._index.as_retriever(
            similarity_top_k=self.candidate_chunks,
            sparse_top_k=self.candidate_chunks,
            vector_store_query_mode=_MODES[self.mode],
            alpha=self.alpha if self.mode == "hybrid" else None,
            filters=scoped_filters(_both(self.filters, filters), principal),
            # only stores that know the argument are told; relative score is every store's default
            vector_store_kwargs={"fusion": self.fusion} if self.fusion != "relative_score" else {},
        )

    @dispatcher.span  # each step a span: ragidx.telemetry traces them
    def search(
        self, query: str, *, filters: MetadataFilters | None = None, principal: Principal | None = None
    ) -> list[NodeWithScore]:
        """Step 1: candidate chunks ``principal`` may read that match ``filters``, best first by the search score."""
        return self.chunk_retriever(filters, principal).retrieve(_bundle(query))

    async def asearch(
        self, query: str, *, filters: MetadataFilters | None = None, principal: Principal | None = None
    ) -> list[NodeWithScore]:
        # Stores without native async (LanceDB) would block the event loop: run in a thread.
        return await asyncio.to_thread(self.search, query, filters=filters, principal=principal)

    @dispatcher.span
    def rerank(self, query: str, chunks: list[NodeWithScore], top_k: int | None = None) -> list[NodeWithScore]:
        """Step 2: rerank the candidates and keep ``rerank_top_n`` (at least ``top_k``)."""
        if self.reranker is None:
            return chunks[: self._rerank_keep(top_k)]
        return self.reranker.postprocess_nodes(chunks, query_bundle=_bundle(query))[: self._rerank_keep(top_k)]

    @dispatcher.span
    async def arerank(self, query: str, chunks: list[NodeWithScore], top_k: int | None = None) -> list[NodeWithScore]:
        if self.reranker is None:
            return chunks[: self._rerank_keep(top_k)]
        out = await self.reranker.apostprocess_nodes(chunks, query_bundle=_bundle(query))
        return out[: self._rerank_keep(top_k)]

    @dispatcher.span
    def group(
        self, query: str, chunks: list[NodeWithScore], top_k: int | None = None, principal: Principal | None = None
    ) -> list[Article]:
        """Step 3: whole articles ``principal`` may read, ranked, with their rank metadata (the candidates, with
        an article reranker)."""
        nodes = self.grouper.group(chunks, top_n=self._group_keep(top_k), query=query, principal=principal)
        return with_fallback_reason(chunks, [article_from_node(n) for n in nodes])  # a rerank service that failed

    def rerank_articles(self, query: str, articles: list[Article], top_k: int | None = None) -> list[Article]:
        """Step 4 (with an ``article_reranker``): its choice, at most ``top_k``, ranks recomputed."""
        if self.article_reranker is None:
            return articles[: top_k or self.top_k]
        nodes = self.article_reranker.postprocess_nodes(article_nodes(articles), query_bundle=_bundle(query))
        return _reranked(articles, nodes, top_k or self.top_k)

    async def arerank_articles(self, query: str, articles: list[Article], top_k: int | None = None) -> list[Article]:
        if self.article_reranker is None:
            return articles[: top_k or self.top_k]
        nodes = await self.article_reranker.apostprocess_nodes(article_nodes(articles), query_bundle=_bundle(query))
        return _reranked(articles, nodes, top_k or self.top_k)

    # --- the whole chain -----------------------------------------------------------------------------
    @dispatcher.span
    def retrieve(
        self,
        query: str,
        top_k: int | None = None,
        *,
        filters: MetadataFilters | None = None,
        principal: Principal | None = None,
    ) -> list[Article]:
        """Articles for ``query``, best first, uncompressed, with ranks in their metadata.

        Args:
            query: the search text.
            top_k: articles to return; None uses the configured ``top_k``.
            filters: LlamaIndex metadata filters (``product == "writer"``, ``version >= 7``), applied in the
                store's search before its top-k.
            principal: who asks; only articles it may read are searched and read (None: the public).
        """
        self._check(query, top_k)
        who = principal or PUBLIC_PRINCIPAL
        chunks = self.search(query, filters=filters, principal=who)
        reranked = self.rerank(query, chunks, top_k)
        articles = self.group(query, reranked, top_k, principal=who)
        if self.article_reranker is not None:
            articles = self.rerank_articles(query, articles, top_k)
        logger.info("retrieved %d articles from %d chunks", len(articles), len(chunks))
        return articles

    @dispatcher.span
    async def aretrieve(
        self,
        query: str,
        top_k: int | None = None,
        *,
        filters: MetadataFilters | None = None,
        principal: Principal | None = None,
    ) -> list[Article]:
        """Async ``retrieve``: the same chain; blocking store calls run in worker threads."""
        self._check(query, top_k)
        who = principal or PUBLIC_PRINCIPAL
        chunks = await self.asearch(query, filters=filters, principal=who)
        reranked = await self.arerank(query, chunks, top_k)
        articles = await asyncio.to_thread(self.group, query, reranked, top_k, who)
        if self.article_reranker is not None:
            articles = await self.arerank_articles(query, articles, top_k)
        logger.info("retrieved %d articles from %d chunks", len(articles), len(chunks))
        return articles

    def scoped(self, filters: MetadataFilters | None = None, principal: Principal | None = None) -> ScopedRetriever:
        """This chain bound to ``filters`` and ``principal``: what a tool, an agent or a LlamaIndex engine holds,
        so every search it makes runs with them."""
        return ScopedRetriever(self, filters, principal or PUBLIC_PRINCIPAL)

    def _rerank_keep(self, top_k: int | None) -> int:
        return max(self.rerank_top_n, self._group_keep(top_k))

    def _group_keep(self, top_k: int | None) -> int:
        wanted = top_k or self.top_k
        return max(wanted, self.article_candidates) if self.article_reranker is not None else wanted

    @staticmethod
    def _check(query: str, top_k: int | None) -> None:
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        if top_k is not None and top_k < 1:
            raise ValueError(f"top_k must be >= 1 (or None for the configured default), got {top_k}")


class ScopedRetriever:
    """An ``ArticleRetriever`` whose every call runs with one set of filters and one principal.

    Example:
        >>> view = retriever.scoped(principal=Principal(user="ann"))  # doctest: +SKIP
        >>> view.retrieve("vacation policy", top_k=3)                  # doctest: +SKIP
    """

    def __init__(self, chain: ArticleRetriever, filters: MetadataFilters | None, principal: Principal) -> None:
        self.chain = chain
        self.filters = filters
        self.principal = principal

    @property
    def top_k(self) -> int:
        return self.chain.top_k

    def retrieve(self, query: str, top_k: int | None = None) -> list[Article]:
        return self.chain.retrieve(query, top_k, filters=self.filters, principal=self.principal)

    async def aretrieve(self, query: str, top_k: int | None = None) -> list[Article]:
        return await self.chain.aretrieve(query, top_k, filters=self.filters, principal=self.principal)

    def __getattr__(self, name: str) -> Any:  # the chain's settings (mode, alpha, reranker ...) read through
        return getattr(self.chain, name)


def _both(a: MetadataFilters | None, b: MetadataFilters | None) -> MetadataFilters | None:
    """``a`` AND ``b`` (either may be None)."""
    if a is None or not a.filters:
        return b
    if b is None or not b.filters:
        return a
    return MetadataFilters(filters=[a, b], condition=FilterCondition.AND)


def _bundle(query: str) -> QueryBundle:
    return QueryBundle(query_str=query)


def article_nodes(articles: list[Article]) -> list[NodeWithScore]:
    """Articles as whole-article nodes for an article reranker, scored by their ``rerank_score``."""
    return [article_to_node(a, float(a.metadata.get(RERANK_SCORE, 0.0))) for a in articles]


CHAIN_RANK = "chain_rank"
"""Metadata key of an article's 0-based rank in the chunk chain, kept when an article reranker reorders."""
CHAIN_SCORE = "chain_score"
"""Metadata key of the chunk chain's score of an article, kept when an article reranker rescores it."""


def _reranked(articles: list[Article], nodes: list[NodeWithScore], top_k: int) -> list[Article]:
    """The article reranker's order as articles: its score as ``rerank_score``, ranks recomputed.

    The chunk chain's rank and score stay beside it (``chain_rank``/``chain_score``); kb_ids the reranker
    returns that were not among the candidates are dropped. An article the reranker gave an excerpt for as its
    text (``flash_excerpt_of_chars``: see ``FlashReranker.excerpt_replaces_text``) gets that text as its content.
    """
    by_id = {a.kb_id: a for a in articles}
    picked: list[tuple[Article, NodeWithScore]] = []
    for node in nodes:
        kb_id = str(node.node.metadata.get("kb_id") or node.node.node_id)
        if kb_id in by_id and all(a.kb_id != kb_id for a, _ in picked):
            picked.append((by_id[kb_id], node))
    picked = picked[:top_k]
    ranked = assign_ranks([node for _, node in picked])  # the one rank rule (ragidx.retrieval.ranks)
    out = []
    for (article, _), node in zip(picked, ranked, strict=True):
        reranked = article_from_node(node)
        extra = {k: v for k, v in reranked.metadata.items() if k not in article.metadata}
        if EXCERPT_OF_CHARS in extra:  # flash's excerpt is what the answer reads; its spans were the article's
            article = _as_excerpt(article, reranked.content)
            extra.pop(FLASH_EXCERPT, None)
        out.append(
            article.with_metadata(
                **extra,
                **{
                    CHAIN_RANK: article.metadata.get(ARTICLE_RANK),
                    CHAIN_SCORE: article.metadata.get(RERANK_SCORE),
                    **ranks_of(node.node.metadata),
                },
            )
        )
    return out


def _as_excerpt(article: Article, text: str) -> Article:
    """``article`` with ``text`` (a marked excerpt) as its content; matched spans (offsets into the whole) dropped."""
    meta = {k: v for k, v in article.metadata.items() if k != MATCHED_SPANS}
    return replace(article, content=text, metadata=meta)
