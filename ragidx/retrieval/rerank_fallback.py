"""FallbackReranker: a reranker that may fail (a service) with the stage before it as the answer when it does.

A question is never lost to a rerank service that is down, slow or answering nonsense: any error of the wrapped
reranker is logged, and the chunks come back in the order of ``fallback`` (ragidx's offline reranker, or None for
the search's own order), each carrying why under ``metadata["rerank_fallback"]``
(:data:`ragidx.article.RERANK_FALLBACK`; hidden from the embedding and the model). The article retriever puts that
reason on every article of the search (:func:`with_fallback_reason`), so an ``Answer``'s articles and the server's
``ragidx.rerank_fallback`` field say the answer was ranked without the service.

After a failure the service is left alone for ``cooldown_s``: the questions meanwhile get the fallback order at
once instead of each waiting out another timeout; the first question after it asks the service again.

Example:
    >>> from llama_index.core.schema import TextNode
    >>> class Down(BaseNodePostprocessor):
    ...     def _postprocess_nodes(self, nodes, query_bundle=None):
    ...         raise ConnectionError("refused")
    >>> nodes = [NodeWithScore(node=TextNode(text="a"), score=0.2), NodeWithScore(node=TextNode(text="b"), score=0.9)]
    >>> out = FallbackReranker(Down()).postprocess_nodes(nodes, query_str="q")
    >>> [n.node.text for n in out], out[0].node.metadata["rerank_fallback"]
    (['a', 'b'], 'the reranker Down failed (ConnectionError: refused); the search order is used')
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from ragidx.article import RERANK_FALLBACK, Article

__all__ = ["FallbackReranker", "fallback_of", "fallback_reason", "with_fallback_reason"]

logger = logging.getLogger(__name__)


class FallbackReranker(BaseNodePostprocessor):
    """Runs ``primary``; when it raises, ``fallback`` (None: the incoming order), with the reason on each chunk.

    Args:
        primary: the reranker that may fail (``EndpointChunkReranker``, or any LlamaIndex postprocessor such as
            ``CohereRerank`` or ``JinaRerank``).
        fallback: the reranker used instead (``OfflineChunkReranker``); None keeps the search order.
        cooldown_s: seconds after a failure during which ``primary`` is not asked (0: asked every time).
        clock: seconds on a monotonic clock (tests give their own).

    Example:
        >>> from ragidx.retrieval.offline_reranker import OfflineChunkReranker
        >>> FallbackReranker(OfflineChunkReranker(top_n=5), cooldown_s=0).cooldown_s
        0.0
    """

    cooldown_s: float = Field(default=30.0, ge=0, description="Seconds the primary is not asked after it failed.")

    _primary: BaseNodePostprocessor = PrivateAttr()
    _fallback: BaseNodePostprocessor | None = PrivateAttr(default=None)
    _clock: Callable[[], float] = PrivateAttr(default=time.monotonic)
    _down_until: float = PrivateAttr(default=float("-inf"))
    _down_reason: str = PrivateAttr(default="")
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(
        self,
        primary: BaseNodePostprocessor,
        *,
        fallback: BaseNodePostprocessor | None = None,
        clock: Callable[[], float] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._primary = primary
        self._fallback = fallback
        if clock is not None:
            self._clock = clock

    @classmethod
    def class_name(cls) -> str:
        return "FallbackReranker"

    @property
    def primary(self) -> BaseNodePostprocessor:
        return self._primary

    @property
    def fallback(self) -> BaseNodePostprocessor | None:
        return self._fallback

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        skipped = self._skipped()
        if skipped is None:
            try:
                return self._primary.postprocess_nodes(nodes, query_bundle=query_bundle)
            except Exception as exc:  # any failure of the service: the question is still answered
                skipped = self._failed(exc)
        order = self._fallback.postprocess_nodes(nodes, query_bundle=query_bundle) if self._fallback else nodes
        return self._marked(order, skipped)

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        skipped = self._skipped()
        if skipped is None:
            try:
                return await self._primary.apostprocess_nodes(nodes, query_bundle=query_bundle)
            except Exception as exc:  # any failure of the service: the question is still answered
                skipped = self._failed(exc)
        if self._fallback is None:
            return self._marked(nodes, skipped)
        return self._marked(await self._fallback.apostprocess_nodes(nodes, query_bundle=query_bundle), skipped)

    # --- steps ---------------------------------------------------------------------------------------
    def _skipped(self) -> str | None:
        """Why the primary is not asked now (it failed less than ``cooldown_s`` ago), or None."""
        with self._lock:
            left = self._down_until - self._clock()
            if left <= 0:
                return None
            return f"{self._down_reason} (not asked again for {self.cooldown_s:g} s after a failure)"

    def _failed(self, exc: Exception) -> str:
        from ragidx.retrieval.endpoint_reranker import RerankUnavailable

        what = str(exc) if isinstance(exc, RerankUnavailable) else (
            f"the reranker {type(self._primary).__name__} failed ({type(exc).__name__}: {exc})"
        )  # fmt: skip
        logger.warning("%s; using %s", what, self._instead())
        with self._lock:
            self._down_reason = what
            self._down_until = self._clock() + self.cooldown_s
        return what

    def _instead(self) -> str:
        if self._fallback is None:
            return "the search order"
        from ragidx.retrieval.offline_reranker import OfflineChunkReranker

        name = (
            "the offline reranker"
            if isinstance(self._fallback, OfflineChunkReranker)
            else type(self._fallback).__name__
        )
        return f"{name}'s order"

    def _marked(self, nodes: Sequence[NodeWithScore], what: str) -> list[NodeWithScore]:
        reason = f"{what}; {self._instead()} is used"
        return [_with_reason(n, reason) for n in nodes]


def _with_reason(node: NodeWithScore, reason: str) -> NodeWithScore:
    """A copy of ``node`` whose metadata says why the rerank fell back (hidden from the embedding and the model)."""
    inner = node.node
    hidden = lambda keys: [*keys, RERANK_FALLBACK] if RERANK_FALLBACK not in keys else list(keys)  # noqa: E731
    copy = inner.model_copy(
        update={
            "metadata": {**inner.metadata, RERANK_FALLBACK: reason},
            "excluded_llm_metadata_keys": hidden(inner.excluded_llm_metadata_keys),
            "excluded_embed_metadata_keys": hidden(inner.excluded_embed_metadata_keys),
        }
    )
    return NodeWithScore(node=copy, score=node.score)


def fallback_reason(chunks: Sequence[NodeWithScore]) -> str | None:
    """Why these reranked chunks are in a fallback order (None: the reranker answered, or there was none)."""
    return next((str(c.node.metadata[RERANK_FALLBACK]) for c in chunks if c.node.metadata.get(RERANK_FALLBACK)), None)


def fallback_of(articles: Sequence[Article | Mapping[str, Any]]) -> str | None:
    """Why an answer's articles were ranked without the rerank service (None: it answered, or none was used);
    ``articles`` as ``Article`` objects or in their JSON shape (``Answer.articles``).

    Example:
        >>> fallback_of([{"kb_id": "a", "metadata": {"rerank_fallback": "it timed out"}}])
        'it timed out'
    """
    for article in articles:
        meta = article.metadata if isinstance(article, Article) else article.get("metadata") or {}
        if meta.get(RERANK_FALLBACK):
            return str(meta[RERANK_FALLBACK])
    return None


def with_fallback_reason(chunks: Sequence[NodeWithScore], articles: list[Article]) -> list[Article]:
    """``articles`` (grouped from ``chunks``), each carrying the chunks' fallback reason when they have one.

    Example:
        >>> with_fallback_reason([], [Article("a", "A", "", "")])[0].metadata
        {}
    """
    reason = fallback_reason(chunks)
    if reason is None:
        return articles
    return [a.with_metadata(**{RERANK_FALLBACK: reason}) for a in articles]
