"""The registry of source kinds: ``kind`` of a ``[[sources]]`` table → what builds its reader.

Read when a sync starts (a program's :func:`register_source_kind` works everywhere from then on). The built-in
kinds import their module only when a source of that kind is synced, so a missing optional package (trafilatura
for websites, a LlamaHub reader) only matters to the sources that need it.

Example:
    >>> "folder" in source_kinds()
    True
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ingestion.sync.base import SourceReader
from ingestion.sync.config import SourceConfig

if TYPE_CHECKING:
    from ragidx.config import Settings
    from ragidx.stores.article_store import ArticleStore

__all__ = ["ReaderContext", "ReaderFactory", "reader_for", "register_source_kind", "source_kinds"]


@dataclass(frozen=True)
class ReaderContext:
    """What a reader may need besides its source's settings: the engine's settings and its article store (the
    id a file is already stored under)."""

    settings: Settings
    article_store: ArticleStore


ReaderFactory = Callable[[SourceConfig, ReaderContext], SourceReader]


def _folder(config: SourceConfig, context: ReaderContext) -> SourceReader:
    from ingestion.sync.folder import FolderReader

    return FolderReader(
        config,
        max_file_bytes=int(context.settings.max_file_mb * 2**20),
        ids=lambda path: context.article_store.id_of_origin(str(path)),
    )


def _website(config: SourceConfig, context: ReaderContext) -> SourceReader:
    try:
        module = importlib.import_module("ingestion.sync.website")
    except ModuleNotFoundError as exc:
        if exc.name != "ingestion.sync.website":
            raise RuntimeError(
                f"source {config.name!r}: website sources need the package {exc.name!r}: pip install 'ragidx[sync]'"
            ) from exc
        raise RuntimeError(f"source {config.name!r}: this ragidx has no website sources yet") from exc
    reader: SourceReader = module.WebsiteReader(config)
    return reader


def _llamaindex(config: SourceConfig, context: ReaderContext) -> SourceReader:
    from ingestion.sync.llamaindex_source import LlamaIndexSource

    return LlamaIndexSource(config)


_KINDS: dict[str, ReaderFactory] = {"folder": _folder, "website": _website, "llamaindex": _llamaindex}


def register_source_kind(kind: str, factory: ReaderFactory) -> None:
    """Build sources of ``kind`` with ``factory`` from now on (replacing a built-in one of that name)."""
    _KINDS[kind] = factory


def source_kinds() -> list[str]:
    """The kinds a source may have now."""
    return sorted(_KINDS)


def reader_for(config: SourceConfig, context: ReaderContext) -> SourceReader:
    """The reader of this source.

    Raises:
        ValueError: its kind is not registered.
    """
    factory = _KINDS.get(config.kind)
    if factory is None:
        kinds = ", ".join(source_kinds())
        raise ValueError(f"source {config.name!r}: unknown kind {config.kind!r}; use one of {kinds}")
    return factory(config, context)
