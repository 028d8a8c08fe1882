"""The article: the unit ragidx stores, returns, budgets and cites.

Its JSON form (``Article.to_dict``) is the contract between retrieval and the context budget:
``{"kb_id", "title", "url", "content", "metadata": {...}}`` with ranks under ``metadata``.

Example:
    >>> a = Article(kb_id="lo-42", title="Tables", url="https://x/42", content="Insert a table.")
    >>> Article.from_dict(a.to_dict()) == a
    True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

RERANK_SCORE = "rerank_score"
NORMALIZED_RANK = "normalized_rank"
ARTICLE_RANK = "article_rank"
MATCHED_CHUNKS = "matched_chunk_ids"
MATCHED_SPANS = "matched_spans"
"""Metadata key of the ``[start, end)`` character spans of the article's matched chunks in its content, best first."""


@dataclass(frozen=True)
class Article:
    """A whole knowledge-base article. Immutable: use ``with_metadata`` / ``dataclasses.replace``."""

    kb_id: str
    title: str
    url: str
    content: str
    language: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        """Hash of everything that, when changed, must re-index the article."""
        h = hashlib.sha256()
        for part in (self.title, self.url, self.language or "", self.content):
            h.update(part.encode("utf-8"))
            h.update(b"\x00")
        return h.hexdigest()

    def with_metadata(self, **updates: Any) -> Article:
        return replace(self, metadata={**self.metadata, **updates})

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kb_id": self.kb_id,
            "title": self.title,
            "url": self.url,
            "content": self.content,
            "metadata": dict(self.metadata),
        }
        if self.language is not None:
            data["metadata"].setdefault("language", self.language)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Article:
        metadata = dict(data.get("metadata") or {})
        return cls(
            kb_id=str(data["kb_id"]),
            title=str(data.get("title") or data["kb_id"]),
            url=str(data.get("url") or ""),
            content=str(data.get("content") or ""),
            language=metadata.get("language"),
            metadata=metadata,
        )
