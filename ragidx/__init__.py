"""ragidx: a LlamaIndex query engine over knowledge bases.

Example:
    >>> from ragidx import Engine, Settings
    >>> Engine(Settings(data_dir="/tmp/kb")).settings.top_k
    5
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

# lancedb's Rust core logs a deprecation warning on every query; keep a user-set level, else errors only.
os.environ.setdefault("LANCEDB_LOG", "error")

__version__ = "0.1.0"
__all__ = [
    "Article",
    "ArticleGrouper",
    "ArticleSource",
    "ContextBudgetPostprocessor",
    "DocstoreArticles",
    "Engine",
    "FlashReranker",
    "OfflineChunkReranker",
    "Settings",
    "__version__",
    "assign_ranks",
    "register_reader",
    "register_reranker",
]

# LlamaIndex node postprocessors and what they read, importable from the top (lazily, like the rest).
_RETRIEVAL = {
    "ArticleGrouper": "ragidx.retrieval.article_grouper",
    "ArticleSource": "ragidx.retrieval.article_grouper",
    "ContextBudgetPostprocessor": "ragidx.budget.postprocessor",
    "DocstoreArticles": "ragidx.retrieval.docstore_articles",
    "FlashReranker": "ragidx.retrieval.flash.reranker",
    "OfflineChunkReranker": "ragidx.retrieval.offline_reranker",
    "assign_ranks": "ragidx.retrieval.ranks",
    "register_reranker": "ragidx.retrieval.rerankers",  # a name Settings.reranker may take
}

if TYPE_CHECKING:
    from ingestion.formats import register_reader
    from ragidx.article import Article
    from ragidx.budget.postprocessor import ContextBudgetPostprocessor
    from ragidx.config import Settings
    from ragidx.engine import Engine
    from ragidx.retrieval.article_grouper import ArticleGrouper, ArticleSource
    from ragidx.retrieval.docstore_articles import DocstoreArticles
    from ragidx.retrieval.flash.reranker import FlashReranker
    from ragidx.retrieval.offline_reranker import OfflineChunkReranker
    from ragidx.retrieval.ranks import assign_ranks
    from ragidx.retrieval.rerankers import register_reranker


def __getattr__(name: str) -> Any:
    # Lazy: `import ragidx` stays cheap; the engine's heavy imports happen on first use.
    if name == "Engine":
        from ragidx.engine import Engine

        return Engine
    if name == "Settings":
        from ragidx.config import Settings

        return Settings
    if name == "Article":
        from ragidx.article import Article

        return Article
    if name == "register_reader":  # a document format ingestion reads from then on (ingestion.formats)
        from ingestion.formats import register_reader

        return register_reader
    if name in _RETRIEVAL:
        return getattr(importlib.import_module(_RETRIEVAL[name]), name)
    raise AttributeError(f"module 'ragidx' has no attribute {name!r}")
