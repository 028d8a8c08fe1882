"""The shared contract of every chunk reranker: score, map back by index, keep both scores.

A subclass only says how to score: ``_score(query, texts)`` returns ``(index, score)`` pairs, where
``index`` points into the list of candidates it was given (an API may return fewer results, in its
own order). This base class then builds *new* nodes, best first, each with the retrieval score under
``metadata["retrieval_score"]`` and the rerank score under ``metadata["rerank_score"]`` (and as
``NodeWithScore.score``) and their ranks by the new order (``article_rank``, ``normalized_rank``: see
``ragidx.retrieval.ranks``, the rule every reordering stage follows), emits LlamaIndex
``ReRankStartEvent``/``ReRankEndEvent``, and never touches the input nodes.

Example:
    >>> class LengthReranker(ChunkReranker):
    ...     def _score(self, query, nodes):
    ...         return [(i, float(len(n.node.get_content()))) for i, n in enumerate(nodes)]
    >>> from llama_index.core.schema import TextNode
    >>> nodes = [NodeWithScore(node=TextNode(text="a"), score=0.9),
    ...          NodeWithScore(node=TextNode(text="abc"), score=0.1)]
    >>> out = LengthReranker(top_n=1).postprocess_nodes(nodes, query_str="q")
    >>> out[0].node.text, out[0].node.metadata["retrieval_score"]
    ('abc', 0.1)
"""

from __future__ import annotations

import asyncio
import logging
import math
from abc import abstractmethod
from collections.abc import Sequence

from llama_index.core.bridge.pydantic import Field
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from ragidx.article import RERANK_SCORE
from ragidx.retrieval.ranks import assign_ranks

__all__ = ["RETRIEVAL_SCORE", "RERANK_KEYS", "ChunkReranker", "chunk_text", "with_scores"]

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

RETRIEVAL_SCORE = "retrieval_score"
RERANK_KEYS = (RETRIEVAL_SCORE, RERANK_SCORE)


def chunk_text(node: NodeWithScore) -> str:
    """What a reranker reads of a chunk: its article title (when stored), a blank line, its text.

    Only the title is added: stores return chunks without their exclusion lists, so LlamaIndex's
    metadata modes would put ids and URLs into the text.
    """
    text = node.node.get_content(metadata_mode=MetadataMode.NONE)
    title = str(node.node.metadata.get("title") or "").strip()
    return f"{title}\n\n{text}" if title else text


def with_scores(node: NodeWithScore, rerank_score: float) -> NodeWithScore:
    """A new node carrying the rerank score beside the retrieval score; ``node`` is left as it was.

    The first rerank keeps the score the node came with as ``retrieval_score``; a later rerank (a
    second reranker in the chain) keeps that original retrieval score and replaces the rerank score.
    """
    inner = node.node
    meta = dict(inner.metadata)
    meta.setdefault(RETRIEVAL_SCORE, node.score)
    meta[RERANK_SCORE] = rerank_score
    copy = inner.model_copy(
        update={
            "metadata": meta,
            "excluded_llm_metadata_keys": _with_keys(inner.excluded_llm_metadata_keys),
            "excluded_embed_metadata_keys": _with_keys(inner.excluded_embed_metadata_keys),
        }
    )
    return NodeWithScore(node=copy, score=rerank_score)


def _with_keys(keys: Sequence[str]) -> list[str]:
    return [*keys, *(k for k in RERANK_KEYS if k not in keys)]


class ChunkReranker(BaseNodePostprocessor):
    """Base class of chunk rerankers; subclasses implement ``_score`` (and ``_ascore`` for I/O).

    Example:
        >>> from ragidx.retrieval.offline_reranker import OfflineChunkReranker
        >>> isinstance(OfflineChunkReranker(top_n=5), ChunkReranker)
        True
    """

    top_n: int | None = Field(default=None, ge=1, description="Chunks kept after reranking; None keeps all.")

    @classmethod
    def class_name(cls) -> str:
        return "ChunkReranker"

    @property
    def model_name(self) -> str:
        """Name reported in rerank events."""
        return self.class_name()

    @abstractmethod
    def _score(self, query: str, nodes: Sequence[NodeWithScore]) -> list[tuple[int, float]]:
        """``(index into nodes, score)`` pairs; higher is better; any order, may omit nodes."""

    async def _ascore(self, query: str, nodes: Sequence[NodeWithScore]) -> list[tuple[int, float]]:
        """Async scoring; the default runs ``_score`` in a worker thread."""
        return await asyncio.to_thread(self._score, query, nodes)

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        query = self._start(nodes, query_bundle)
        scored = self._score(query, nodes) if nodes else []
        return self._finish(nodes, scored)

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        query = self._start(nodes, query_bundle)
        scored = await self._ascore(query, nodes) if nodes else []
        return self._finish(nodes, scored)

    # --- shared steps ------------------------------------------------------------------------------
    def _start(self, nodes: Sequence[NodeWithScore], query_bundle: QueryBundle | None) -> str:
        if query_bundle is None:
            raise ValueError(
                f"{self.class_name()} needs the query: call postprocess_nodes(nodes, query_str=...) "
                "or pass a QueryBundle"
            )
        dispatcher.event(
            ReRankStartEvent(
                query=query_bundle,
                nodes=list(nodes),
                top_n=self.top_n or len(nodes),
                model_name=self.model_name,
            )
        )
        return query_bundle.query_str

    def _finish(self, nodes: Sequence[NodeWithScore], scored: list[tuple[int, float]]) -> list[NodeWithScore]:
        best: dict[int, float] = {}
        for index, score in scored:
            if not 0 <= index < len(nodes):
                logger.warning("%s returned index %d for %d candidates: ignored", self.class_name(), index, len(nodes))
                continue
            value = float(score)
            if math.isnan(value):
                value = -math.inf
            if index not in best or value > best[index]:
                best[index] = value
        # Stable: equal scores keep the candidates' incoming order.
        order = sorted(best, key=lambda i: (-best[i], i))
        if self.top_n is not None:
            order = order[: self.top_n]
        out = assign_ranks([with_scores(nodes[i], best[i]) for i in order])
        dispatcher.event(ReRankEndEvent(nodes=out))
        logger.debug("%s kept %d of %d chunks", self.class_name(), len(out), len(nodes))
        return out
