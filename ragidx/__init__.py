"""ragidx: a LlamaIndex query engine over knowledge bases.

Example:
    >>> from ragidx import Engine, Settings
    >>> Engine(Settings(data_dir="/tmp/kb")).settings.top_k
    5
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

# lancedb's Rust core logs a deprecation warning on every query; keep a user-set level, else errors only.
os.environ.setdefault("LANCEDB_LOG", "error")

__version__ = "0.1.0"
__all__ = ["Article", "Engine", "Settings", "__version__", "register_reader"]

if TYPE_CHECKING:
    from ingestion.formats import register_reader
    from ragidx.article import Article
    from ragidx.config import Settings
    from ragidx.engine import Engine


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
    raise AttributeError(f"module 'ragidx' has no attribute {name!r}")
