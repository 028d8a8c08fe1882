"""Build the retrieval chain from Settings: the only retrieval code that reads configuration.

Example:
    >>> from ragidx.config import Settings
    >>> build_chunk_reranker(Settings(reranker="none")) is None
    True
"""

from __future__ import annotations

from typing import Any

from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilter, MetadataFilters

from ragidx.config import Settings
from ragidx.retrieval.chunk_reranker import ChunkReranker
from ragidx.retrieval.retriever import ArticleRetriever

__all__ = ["build_chunk_reranker", "build_retriever"]


def build_chunk_reranker(settings: Settings) -> ChunkReranker | None:
    """The configured chunk reranker (``settings.reranker``), keeping ``rerank_top_n`` chunks."""
    if settings.reranker == "none":
        return None
    if settings.reranker == "offline":
        from ragidx.retrieval.offline_reranker import OfflineChunkReranker

        return OfflineChunkReranker(top_n=settings.rerank_top_n)
    if settings.reranker == "cohere":
        from ragidx.retrieval.cohere_reranker import CohereChunkReranker

        return CohereChunkReranker(
            api_key=settings.cohere_api_key, model=settings.cohere_model, top_n=settings.rerank_top_n
        )
    if settings.reranker == "cross-encoder":
        from ragidx.retrieval.cross_encoder_reranker import CrossEncoderChunkReranker

        if not settings.cross_encoder_path:
            raise ValueError("reranker='cross-encoder' needs cross_encoder_path (a local model folder)")
        return CrossEncoderChunkReranker(settings.cross_encoder_path, top_n=settings.rerank_top_n)
    raise ValueError(f"unknown reranker {settings.reranker!r}: use offline, cohere, cross-encoder or none")


def build_retriever(
    settings: Settings,
    chunk_store: BasePydanticVectorStore,
    article_store: Any,
    embed_model: Any,
) -> ArticleRetriever:
    """The ``ArticleRetriever`` the settings describe (hybrid search, reranker, counts, tenant).

    Example:
        >>> retriever = build_retriever(Settings(), chunk_store, article_store, embed)  # doctest: +SKIP
    """
    filters = None
    if settings.tenant:
        filters = MetadataFilters(filters=[MetadataFilter(key="tenant", value=settings.tenant)])
    return ArticleRetriever(
        chunk_store,
        article_store,
        embed_model,
        reranker=build_chunk_reranker(settings),
        mode="hybrid",
        alpha=settings.hybrid_alpha,
        candidate_chunks=settings.candidate_chunks,
        rerank_top_n=settings.rerank_top_n,
        top_k=settings.top_k,
        score_threshold=settings.article_score_threshold,
        filters=filters,
    )
