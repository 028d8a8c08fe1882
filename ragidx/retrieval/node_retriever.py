"""ArticleNodeRetriever: the article chain as a LlamaIndex ``BaseRetriever``.

Wraps :class:`~ragidx.retrieval.retriever.ArticleRetriever` (hybrid chunk search → chunk rerank → whole
articles) so the chain goes wherever LlamaIndex takes a retriever: a ``RetrieverQueryEngine``, a
``CondensePlusContextChatEngine``, a ``RetrieverTool`` ... One ``NodeWithScore`` per whole article, best
first, scored by its ``rerank_score``; ``kb_id``, ``title``, ``url``, ``rerank_score``,
``normalized_rank`` and ``article_rank`` are in the node's metadata (only the title reaches an LLM's
prompt). The same chain and results as ``Engine.retrieve``.

Example:
    >>> retriever = engine.as_retriever(top_k=3)                                   # doctest: +SKIP
    >>> RetrieverQueryEngine.from_args(retriever, llm=llm).query("insert a table")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle

from ragidx.retrieval.retriever import article_nodes

__all__ = ["ArticleNodeRetriever"]


class ArticleNodeRetriever(BaseRetriever):
    """Whole ranked articles as nodes, through an ``ArticleRetriever``.

    Args:
        retriever: the article chain (``Engine.retriever``), anything with ``retrieve(query, top_k)`` and
            ``aretrieve(query, top_k)`` returning ``Article`` lists.
        top_k: articles per query; None uses the chain's own ``top_k``.

    Example:
        >>> nodes = ArticleNodeRetriever(engine.retriever, top_k=3).retrieve("print labels")  # doctest: +SKIP
        >>> nodes[0].node.metadata["article_rank"]                                            # doctest: +SKIP
        0
    """

    def __init__(
        self, retriever: Any, top_k: int | None = None, callback_manager: CallbackManager | None = None
    ) -> None:
        if top_k is not None and top_k < 1:
            raise ValueError(f"top_k must be at least 1 (got {top_k}); None uses the configured top_k")
        super().__init__(callback_manager=callback_manager)
        self._articles = retriever
        self.top_k = top_k

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return article_nodes(self._articles.retrieve(query_bundle.query_str, top_k=self.top_k))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return article_nodes(await self._articles.aretrieve(query_bundle.query_str, top_k=self.top_k))
