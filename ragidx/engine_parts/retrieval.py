"""The engine's retrieval: the article chain over the stores, the stored tuning it runs with, the flash reranker.

Separate from ``Engine`` because the chain has its own life: built once on first use, under the engine's lock, and
forgotten (:meth:`EngineRetrieval.forget`) when the index or the tuning changes, while questions under way keep the
chain they started with. It reads the stores (:class:`~ragidx.engine_parts.stores.EngineStores`) and writes nothing
but ``tuning.json``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ragidx.config import Settings
from ragidx.engine_parts.stores import EngineStores
from ragidx.providers.llms import LLMProvider

if TYPE_CHECKING:
    from llama_index.core.postprocessor.types import BaseNodePostprocessor

    from ragidx.retrieval.flash import FlashMetrics, FlashReranker
    from ragidx.retrieval.retriever import ArticleRetriever
    from ragidx.tuning.stored import TuningResult


class EngineRetrieval:
    """The retrieval chain of one engine, built on first use with the stored tuning applied.

    Args:
        settings: the engine's settings.
        lock: the engine's re-entrant lock, under which the chain is built once.
        stores: the engine's stores, which the chain searches.
        llm_provider: the engine's model factory (for flash and ``tune(method="llm")``), asked for when needed.
        reranker: a chunk reranker passed to ``Engine`` (None: the configured one).
        build: makes the chain (``Engine._build_retriever``, which calls :meth:`build`).
        on_change: called when a new tuning is saved (the engine forgets the chain and the agents holding it).
    """

    def __init__(
        self,
        settings: Settings,
        lock: threading.RLock,
        stores: EngineStores,
        *,
        llm_provider: Callable[[], LLMProvider],
        reranker: BaseNodePostprocessor | None,
        build: Callable[[], ArticleRetriever],
        on_change: Callable[[], None],
    ) -> None:
        self.settings = settings
        self._lock = lock
        self._stores = stores
        self._llm_provider = llm_provider
        self._reranker = reranker
        self._build = build
        self._on_change = on_change
        self._retriever: ArticleRetriever | None = None
        self._flash_metrics: FlashMetrics | None = None

    @property
    def retriever(self) -> ArticleRetriever:
        """The retrieval chain, built on first use with :attr:`retrieval_settings` (the stored tuning applied); a
        chain over a table ``ragidx reindex`` switched away from is built again first."""
        self._stores.notice_switch()
        retriever = self._retriever
        if retriever is None:
            with self._lock:
                if self._retriever is None:
                    self._retriever = self._build()
                retriever = self._retriever
        return retriever

    def build(self) -> ArticleRetriever:
        """A new chain: the index's model checked first, flash when enabled, the chunk reranker given or configured."""
        from ragidx.retrieval.factory import build_retriever

        self._stores.check_index_model()
        flash = self.build_flash() if self.settings.flash.enabled else None
        return build_retriever(
            self.retrieval_settings,
            self._stores.chunk_store,
            self._stores.article_store,
            self._stores.embed_model,
            article_reranker=flash,
            reranker=self._reranker,
        )

    def forget(self) -> None:
        """Drop the chain (the caller holds the lock): the next use builds it again and reads the tuning again."""
        self._retriever = None

    @property
    def tuning(self) -> TuningResult | None:
        """The stored ``ragidx tune`` result if it was made on this index as it is now, else None."""
        from ragidx.tuning.stored import load_tuning

        return load_tuning(self.settings, self._stores.article_store)

    @property
    def retrieval_settings(self) -> Settings:
        """The settings retrieval runs with: the stored tuning (when valid) under the explicitly set fields."""
        from ragidx.tuning.stored import apply_tuning

        tuning = self.tuning
        return apply_tuning(self.settings, tuning.settings) if tuning is not None else self.settings

    def tune(
        self,
        *,
        queries: int | None = None,
        method: str | None = None,
        seed: int = 0,
        save: bool = True,
        progress: bool = False,
    ) -> TuningResult:
        """``Engine.tune``: calibrate retrieval on this KB without labels; with ``save`` store it and rebuild."""
        from ragidx.tuning.calibrate import DEFAULT_QUERIES, calibrate
        from ragidx.tuning.pseudo_queries import DEFAULT_METHOD
        from ragidx.tuning.stored import save_tuning, tuning_path

        chosen = method or DEFAULT_METHOD
        llm = self._llm_provider().get(self.settings.llm) if chosen == "llm" else None
        result = calibrate(
            self.settings,
            self._stores.chunk_store,
            self._stores.article_store,
            self._stores.embed_model,
            queries=queries or DEFAULT_QUERIES,
            method=chosen,  # type: ignore[arg-type]
            seed=seed,
            llm=llm,
            progress=progress,
        )
        if save:
            save_tuning(result, tuning_path(self.settings))
            self._on_change()
        return result

    @property
    def flash_metrics(self) -> FlashMetrics:
        """The flash reranker's Prometheus metrics (``FlashMetrics``; serve ``.registry``), made on first use."""
        if self._flash_metrics is None:
            from ragidx.retrieval.flash import FlashMetrics

            with self._lock:
                if self._flash_metrics is None:
                    self._flash_metrics = FlashMetrics()
        return self._flash_metrics

    def build_flash(self) -> FlashReranker:
        """The flash article reranker on its endpoint (the answering model unless ``[flash]`` names another)."""
        from ragidx.retrieval.factory import build_flash_reranker

        provider = self._llm_provider()
        endpoint = self.settings.flash.endpoint(self.settings.llm)
        return build_flash_reranker(
            self.settings,
            provider.get(endpoint),
            token_counter=provider.token_counter(endpoint),
            metrics=self.flash_metrics,
        )
