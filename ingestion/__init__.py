"""Ingestion: article sources -> chunks -> embeddings -> vector store + article store.

``register_reader`` (from :mod:`ingestion.formats`) adds a document format: ingestion reads files of it from
then on.

Example:
    >>> from ingestion import register_reader
    >>> callable(register_reader)
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["document_formats", "document_suffixes", "register_reader", "unregister_reader"]

if TYPE_CHECKING:
    from ingestion.formats import document_formats, document_suffixes, register_reader, unregister_reader


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ingestion import formats

        return getattr(formats, name)
    raise AttributeError(f"module 'ingestion' has no attribute {name!r}")
