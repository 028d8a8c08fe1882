"""Build the retrieval chain from Settings: the only retrieval code that reads configuration.

Example:
    >>> from ragidx.config import Settings
    >>> build_chunk_reranker(Settings(reranker="none")) is None
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilter, MetadataFilters

from ragidx.config import Settings
from ragidx.retrieval.chunk_reranker import ChunkReranker
from ragidx.retrieval.retriever import ArticleRetriever

if TYPE_CHECKING:
    from llama_index.core.postprocessor.types import BaseNodePostprocessor

    from ragidx.retrieval.flash import FlashMetrics, FlashReranker

__all__ = ["build_chunk_reranker", "build_flash_reranker", "build_retriever"]


def build_chunk_reranker(settings: Settings) -> ChunkReranker | None:
    """The configured chunk reranker (``settings.reranker``), keeping ``rerank_top_n`` chunks."""
    if settings.reranker == "none":
        return None
    if settings.reranker == "offline":
        from ragidx.retrieval.offline_reranker import OfflineChunkReranker

        return OfflineChunkReranker(
            top_n=settings.rerank_top_n,
            retrieval_weight=settings.rerank_retrieval_weight,
            lexical_weight=settings.rerank_lexical_weight,
            title_weight=settings.rerank_title_weight,
            phrase_weight=settings.rerank_phrase_weight,
        )
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


def build_flash_reranker(
    settings: Settings,
    llm: Any,
    *,
    token_counter: Any | None = None,
    metrics: FlashMetrics | None = None,
) -> FlashReranker:
    """The ``FlashReranker`` that ``settings.flash`` describes, on ``llm`` (its endpoint's model).

    Weak local models get the protocol they follow (forced named tool call, tool traffic as text,
    ``json_object``); endpoints get ``auto``. ``top_n`` (``flash.max_topics``) defaults to the retrieval ``top_k``. With
    ``flash.contextualize`` the same model rewrites follow-ups into standalone queries (``QueryContextualizer``).
    """
    from ragidx.retrieval.flash import FlashReranker, QueryContextualizer

    f = settings.flash
    endpoint = f.endpoint(settings.llm)
    timeout = f.effective_contextualize_timeout_s(settings.llm)
    return FlashReranker(
        llm,
        token_counter=token_counter,
        metrics=metrics,
        contextualizer=QueryContextualizer(llm, timeout_s=timeout) if f.contextualize else None,
        max_candidates=f.effective_candidates(settings.top_k),
        top_n=f.max_topics or settings.top_k,
        max_tool_calls=f.max_tool_calls,
        timeout_s=f.effective_timeout_s(settings.llm),
        excerpt_threshold_chars=f.excerpt_threshold_chars,
        excerpt_replaces_text=f.excerpt_replaces_text,
        tool_mode=endpoint.effective_tool_mode,
        inline_tool_results=endpoint.effective_inline_tool_results,
        response_format=f.effective_response_format(settings.llm),
        input_price_per_million=f.input_price_per_million,
        output_price_per_million=f.output_price_per_million,
        trace_dir=str(f.trace_dir) if f.trace_dir is not None else None,
        context_window=endpoint.context_window,
        max_output_tokens=endpoint.max_output_tokens,
    )


def build_retriever(
    settings: Settings,
    chunk_store: BasePydanticVectorStore,
    article_store: Any,
    embed_model: Any,
    *,
    article_reranker: Any | None = None,
    reranker: BaseNodePostprocessor | None = None,
) -> ArticleRetriever:
    """The ``ArticleRetriever`` the settings describe (hybrid search, reranker, counts, tenant), with
    ``article_reranker`` (``build_flash_reranker``) as its last step when given, and ``reranker`` (any LlamaIndex
    postprocessor) for the chunks instead of the configured one when given.

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
        reranker=reranker if reranker is not None else build_chunk_reranker(settings),
        mode="hybrid",
        alpha=settings.hybrid_alpha,
        fusion=settings.hybrid_fusion,
        candidate_chunks=settings.candidate_chunks,
        rerank_top_n=settings.rerank_top_n,
        top_k=settings.top_k,
        score_threshold=settings.article_score_threshold,
        filters=filters,
        article_reranker=article_reranker,
        article_candidates=settings.flash.effective_candidates(settings.top_k),
    )
