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
from ragidx.retrieval.retriever import ArticleRetriever

if TYPE_CHECKING:
    from llama_index.core.postprocessor.types import BaseNodePostprocessor

    from ragidx.retrieval.flash import FlashMetrics, FlashReranker

__all__ = ["build_chunk_reranker", "build_flash_reranker", "build_retriever"]


def build_chunk_reranker(settings: Settings) -> BaseNodePostprocessor | None:
    """The chunk reranker ``settings.reranker`` names, keeping ``rerank_top_n`` chunks: made by its factory in the
    registry (:mod:`ragidx.retrieval.rerankers`: offline, cohere, cross-encoder, none, and any a program
    registered), read now."""
    from ragidx.retrieval.rerankers import make_reranker

    return make_reranker(settings)


def build_flash_reranker(
    settings: Settings,
    llm: Any,
    *,
    token_counter: Any | None = None,
    metrics: FlashMetrics | None = None,
) -> FlashReranker:
    """The ``FlashReranker`` that ``settings.flash`` describes, on ``llm`` (its endpoint's model).

    Weak local models get the protocol they follow (forced named tool call, tool traffic as text,
    ``json_object``); endpoints get ``auto``. ``top_n`` (``flash.top_n``) defaults to the retrieval ``top_k``. With
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
        top_n=f.top_n or settings.top_k,
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
