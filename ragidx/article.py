"""The article: the unit ragidx stores, returns, budgets and cites; and a search's answer, ``SearchResult``.

Its JSON form (``Article.to_dict``) is the contract between retrieval and the context budget:
``{"kb_id", "title", "url", "content", "metadata": {...}}`` with ranks under ``metadata``. A
``retrieve_context`` answer travels as a ``SearchResult`` (articles as objects); its ``to_json`` is what
the model reads, and ``SearchResult.from_json`` reads one that another party wrote.

Example:
    >>> a = Article(kb_id="lo-42", title="Tables", url="https://x/42", content="Insert a table.")
    >>> Article.from_dict(a.to_dict()) == a
    True
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

RERANK_SCORE = "rerank_score"
NORMALIZED_RANK = "normalized_rank"
ARTICLE_RANK = "article_rank"
MATCHED_CHUNKS = "matched_chunk_ids"
MATCHED_SPANS = "matched_spans"
"""Metadata key of the ``[start, end)`` character spans of the article's matched chunks in its content, best first."""
SECTIONS = "sections"
"""Metadata key of a document's sections (``ingestion.sources``): ``[{"start", "heading_path", "section",
"page"?, "anchor"?}]`` in content order. Ingestion reads it to place chunks; a retrieved article keeps it, for a
citation to name the section and page of the sentence it cites; the JSON a model reads (``SearchResult.to_json``)
leaves it out."""
LOCATION = "location"
"""Metadata key of where in its article a result's best chunk is: ``{"section"?, "page"?, "url"}`` with ``url``
the article's link to that place (``file.pdf#page=12``, ``page.html#anchor``)."""
RERANK_FALLBACK = "rerank_fallback"
"""Metadata key of why a search's chunks were ranked without its rerank service (it timed out, refused, failed)
and which order was used instead (``ragidx.retrieval.rerank_fallback``); left out of the JSON a model reads."""
COMPRESSED_VERBATIM = "compressed_verbatim"
"""Metadata of an article the context budget compressed: True when its shown text is made of the article's own
sentences (extracted or cut), False when a model rewrote it (an LLM summary); a citation quotes only the article's
own words."""
UNSHOWN_KEYS = (SECTIONS, RERANK_FALLBACK, COMPRESSED_VERBATIM)
"""Metadata kept on an article for citations and the answer's report, left out of the JSON a model reads."""
SEE_ABOVE = "see_above"
"""An article repeated in a later search result is written as ``{"kb_id", "title", "url", "see_above": true}``
(its full copy is shown earlier); in a ``SearchResult`` it is an article whose metadata has this key."""
INJECTION_FLAGS = "injection_flags"
"""Metadata of an article holding instruction-like text: the kinds found (``ragidx.safety.injection``)."""


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
        """Hash of everything that, when changed, must re-index the article: its text, and whether it holds
        instruction-like text (``injection_flags``: its chunks are then indexed with that text replaced)."""
        h = hashlib.sha256()
        for part in (self.title, self.url, self.language or "", self.content):
            h.update(part.encode("utf-8"))
            h.update(b"\x00")
        if self.metadata.get(INJECTION_FLAGS):
            h.update(b"chunks neutralized\x00")
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


@dataclass(frozen=True)
class SearchResult:
    """One ``retrieve_context`` answer as objects: its articles in rank order, the tool's metadata, an error.

    ``to_json`` (and ``str``, which LlamaIndex's ``FunctionTool`` writes as the tool message) is the
    compact JSON the model reads: ``{"articles": [...], "metadata": {...}}``, with ``"error"`` first on a
    failure. An article with ``see_above`` in its metadata is written as a reference.

    Example:
        >>> r = SearchResult((Article("a", "A", "u", "Text."),), {"query": "q"})
        >>> r.to_json()
        '{"articles":[{"kb_id":"a","title":"A","url":"u","content":"Text.","metadata":{}}],"metadata":{"query":"q"}}'
        >>> SearchResult.from_json(r.to_json()) == r
        True
    """

    articles: tuple[Article, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {} if self.error is None else {"error": self.error}
        payload["articles"] = [_article_json(a) for a in self.articles]
        payload["metadata"] = self.metadata
        return payload

    def to_json(self) -> str:
        return json.dumps(self.to_payload(), ensure_ascii=False, separators=(",", ":"), default=_jsonable)

    def __str__(self) -> str:
        return self.to_json()

    @classmethod
    def from_json(cls, text: str) -> SearchResult | None:
        """A search result written by another party (a tool, a stored conversation), or ``None`` if ``text``
        is not one: a JSON object with an ``articles`` list of objects whose ``content`` is a string."""
        text = text.strip()
        if not text.startswith("{"):
            return None
        try:
            data = json.loads(text)
        except ValueError:
            return None
        articles = data.get("articles") if isinstance(data, dict) else None
        if not isinstance(articles, list) or not all(
            isinstance(a, dict) and isinstance(a.get("content", ""), str) for a in articles
        ):
            return None
        meta = data.get("metadata")
        error = data.get("error")
        return cls(
            tuple(_article_of(a) for a in articles),
            meta if isinstance(meta, dict) else {},
            None if error is None else str(error),
        )

    @classmethod
    def of(cls, articles: Sequence[Article], query: str, top_k: Any, error: str | None = None) -> SearchResult:
        """The tool's answer: ``articles`` with the tool's metadata (query, top_k_requested, count)."""
        n = len(articles)
        meta = {"query": query, "top_k_requested": top_k, "articles_count": n, "has_results": n > 0}
        return cls(tuple(articles), meta, error)


def location_url(url: str, page: int | None = None, anchor: str | None = None) -> str:
    """A link to a place in a document: ``#page=N`` for a PDF page, ``#anchor`` for a section.

    Example:
        >>> location_url("file:///kb/manual.pdf", page=12)
        'file:///kb/manual.pdf#page=12'
        >>> location_url("https://x/print.html#top", anchor="options")
        'https://x/print.html#options'
    """
    if not url or (page is None and not anchor):
        return url
    base = url.split("#", 1)[0]
    return f"{base}#page={page}" if page is not None else f"{base}#{anchor}"


def describe_location(location: dict[str, Any] | None) -> str:
    """``'p. 12, Tables > Merging cells'`` for a result's ``location`` ('' when it has neither).

    Example:
        >>> describe_location({"page": 3, "section": "Options"})
        'p. 3, Options'
    """
    if not location:
        return ""
    parts = []
    if location.get("page") is not None:
        parts.append(f"p. {location['page']}")
    if location.get("section"):
        parts.append(str(location["section"]))
    return ", ".join(parts)


def as_articles(items: Iterable[Article | Mapping[str, Any]]) -> list[Article]:
    """``items`` as ``Article`` objects: the guards and citations take articles; a mapping in the tool's JSON shape
    (``Article.to_dict``) is still read, with a ``DeprecationWarning``, for one release.

    Example:
        >>> [a.kb_id for a in as_articles([Article("a", "A", "", "text")])]
        ['a']
    """
    out: list[Article] = []
    for item in items:
        if isinstance(item, Article):
            out.append(item)
            continue
        warnings.warn(
            "articles as dicts are deprecated: pass ragidx.Article objects (Article.from_dict reads a dict)",
            DeprecationWarning,
            stacklevel=3,
        )
        out.append(_article_of(dict(item)))
    return out


def _article_json(article: Article) -> dict[str, Any]:
    if article.metadata.get(SEE_ABOVE):
        return {"kb_id": article.kb_id, "title": article.title, "url": article.url, SEE_ABOVE: True}
    data = article.to_dict()
    if any(k in data["metadata"] for k in UNSHOWN_KEYS):  # for citations and the answer's report: tokens for
        # nothing in a prompt
        data["metadata"] = {k: v for k, v in data["metadata"].items() if k not in UNSHOWN_KEYS}
    return data


def _article_of(data: dict[str, Any]) -> Article:
    meta = data.get("metadata")
    meta = dict(meta) if isinstance(meta, dict) else {}
    if data.get(SEE_ABOVE):
        meta[SEE_ABOVE] = True
    return Article.from_dict({**data, "kb_id": data.get("kb_id") or "", "metadata": meta})


def _jsonable(value: Any) -> Any:
    # numpy scalars and the like in metadata: their Python value, else their text
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)
