"""ArticleGrouper: ranked chunks in, ranked whole articles out.

Chunks are grouped by article: a chunk's ``kb_id`` metadata, else its source document (``ref_doc_id``, what
a stock ``VectorStoreIndex``'s chunks carry). An article's score is the MAX score of its chunks (after a
reranker that is the rerank score). The complete articles are read from where whole articles are: ragidx's
article store, any ``ArticleSource`` (an object with ``get(kb_ids, *, principal=None)``), or a LlamaIndex
docstore (``docstore=index.docstore``; see ``ragidx.retrieval.docstore_articles``). They are sorted best
first and returned as new article nodes (``id_`` = kb_id, text = the full article) carrying
(``ragidx.retrieval.ranks``, the rule every reordering stage follows):

- ``rerank_score``: the article's best chunk score;
- ``normalized_rank``: 0.0 for the best returned article … 1.0 for the worst (a lone article: 0.0);
- ``article_rank``: 0-based position;
- ``matched_chunk_ids``: ids of its chunks that matched, best first;
- ``matched_spans``: where the best of those chunks (at most ``MAX_SPANS``) sit in the article's content,
  ``[start, end)`` character offsets, best first: the passages search found, for a compressor to keep
  first (a chunk that cannot be located in the article is left out);
- ``location`` (documents only: PDF, Word, HTML, Markdown): the best chunk's ``section``, ``heading_path``,
  ``page`` (PDF) and ``url``, a link to that place (``manual.pdf#page=12``, ``page.html#anchor``), for a
  citation to point at. The article's ``sections`` (where each section starts) stay on it, for a citation to
  name the section of the sentence it cites; the JSON a model reads leaves them out (``ragidx.article``).

Equal scores keep the order in which the articles' best chunks arrived. An optional
``score_threshold`` drops articles below it before ranks are assigned; scores are only comparable
for one reranker on one store, so set it per configuration, never as a universal constant.

It serializes like any LlamaIndex component: ``to_dict()`` holds its settings (``top_n``,
``score_threshold``); where the articles come from is not serializable and is given again to ``from_dict``
(``ArticleGrouper.from_dict(data, docstore=index.docstore)`` or ``articles=store``).

Example:
    >>> from ragidx.stores.article_store import ArticleStore
    >>> grouper = ArticleGrouper(ArticleStore(":memory:"), top_n=5)
    >>> grouper.top_n
    5
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.base import BaseEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.storage.docstore.types import BaseDocumentStore

from ragidx.article import (
    LOCATION,
    MATCHED_CHUNKS,
    MATCHED_SPANS,
    Article,
)
from ragidx.retrieval.docstore_articles import DocstoreArticles
from ragidx.retrieval.ranks import assign_ranks
from ragidx.safety.injection import REMOVED
from ragidx.stores.access import PUBLIC_PRINCIPAL, Principal

__all__ = [
    "ARTICLE_FIELDS",
    "DocstoreArticles",
    "ArticleGroup",
    "ArticleGrouper",
    "ArticleSource",
    "ArticlesGroupedEvent",
    "article_from_node",
    "article_to_node",
    "group_chunks",
]

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

ARTICLE_FIELDS = ("kb_id", "title", "url", "language")
"""Article attributes an article node carries in its metadata (``article_from_node`` strips them)."""


@runtime_checkable
class ArticleSource(Protocol):
    """Where whole articles come from: ``get`` returns, by kb_id, the articles among ``kb_ids`` that ``principal``
    (None: the public) may read; an id it does not hold is left out. ``ArticleStore`` is one; ``DocstoreArticles``
    makes one of a LlamaIndex docstore; any object with this method will do.

    Example:
        >>> class Articles:
        ...     def get(self, kb_ids, *, principal=None):
        ...         return {k: Article(k, k.title(), "", f"All about {k}.") for k in kb_ids if k == "tables"}
        >>> isinstance(Articles(), ArticleSource), Articles().get(["tables", "x"])["tables"].content
        (True, 'All about tables.')
    """

    def get(self, kb_ids: Sequence[str], *, principal: Principal | None = None) -> Mapping[str, Article]: ...


class ArticlesGroupedEvent(BaseEvent):
    """Emitted after grouping: how many chunks came in and which articles went out, with scores."""

    query: str | None = None
    chunk_count: int
    kb_ids: list[str]
    scores: list[float]
    missing_kb_ids: list[str] = []
    """Kept for compatibility, always empty: an article missing for a reader may be one it may not read."""

    @classmethod
    def class_name(cls) -> str:
        return "ArticlesGroupedEvent"


@dataclass
class ArticleGroup:
    """One article's matched chunks (best first) and its score (the best chunk's)."""

    kb_id: str
    score: float
    chunk_ids: list[str] = field(default_factory=list)
    chunk_texts: list[str] = field(default_factory=list)
    location: dict[str, Any] = field(default_factory=dict)
    """Where the best chunk is in a document: ``section``, ``page``, ``url`` (empty for JSONL articles)."""


def chunk_kb_id(node: NodeWithScore) -> str | None:
    """The article a chunk belongs to: ``metadata["kb_id"]``, else its source document id."""
    kb_id = node.node.metadata.get("kb_id") or node.node.ref_doc_id
    return str(kb_id) if kb_id else None


def group_chunks(nodes: Sequence[NodeWithScore]) -> list[ArticleGroup]:
    """Group chunks by kb_id keeping the MAX score; best first, ties in arrival order.

    A chunk without a score counts as 0.0; a chunk without a kb_id is skipped (and logged).
    """
    groups: dict[str, ArticleGroup] = {}
    scored: dict[str, list[tuple[float, int, str]]] = {}
    texts: dict[str, str] = {}
    locations: dict[str, dict[str, Any]] = {}
    for position, node in enumerate(nodes):
        kb_id = chunk_kb_id(node)
        if kb_id is None:
            logger.warning("chunk %s has no kb_id: skipped", node.node.node_id)
            continue
        score = 0.0 if node.score is None else float(node.score)
        group = groups.get(kb_id)
        if group is None:
            groups[kb_id] = ArticleGroup(kb_id, score)
        elif score > group.score:
            group.score = score
        scored.setdefault(kb_id, []).append((score, position, node.node.node_id))
        texts[node.node.node_id] = node.node.get_content()
        locations[node.node.node_id] = chunk_location(node.node.metadata)
    for kb_id, group in groups.items():
        chunks = sorted(scored[kb_id], key=lambda c: (-c[0], c[1]))
        group.chunk_ids = list(dict.fromkeys(c[2] for c in chunks))
        group.chunk_texts = [texts[c] for c in group.chunk_ids]
        group.location = locations[group.chunk_ids[0]]
    first_seen = {kb_id: i for i, kb_id in enumerate(groups)}
    return sorted(groups.values(), key=lambda g: (-g.score, first_seen[g.kb_id]))


def chunk_location(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A document chunk's place (``section``, ``heading_path``, ``page``, ``url``; see
    ``ingestion.pipeline.SectionTagger``); empty for a chunk that has none."""
    location = {k: metadata[k] for k in ("section", "heading_path", "page") if metadata.get(k) not in (None, "")}
    if metadata.get("location_url"):
        location["url"] = metadata["location_url"]
    return location


MAX_SPANS = 3
"""Matched chunks located per article (the best ones; more would cover most of a short article)."""
_ANCHOR_CHARS = 48


def matched_spans(content: str, chunks: Sequence[str]) -> list[list[int]]:
    """``[start, end)`` of each chunk text in ``content``, in order; chunks not found are left out.

    A chunk is found whole, else by its first and last ``_ANCHOR_CHARS`` characters (a splitter may
    change the whitespace between them). A chunk of an article with instruction-like text holds
    :data:`~ragidx.safety.injection.REMOVED` where the article holds that text: it is found by the text
    before its first and after its last marker (of the words that are not markers).

    Example:
        >>> matched_spans("Intro. The default is 128MB. End.", ["The default is 128MB.", "missing"])
        [[7, 28]]
    """
    spans: list[list[int]] = []
    for chunk in chunks:
        text = chunk.strip()
        if not text:
            continue
        start = content.find(text)
        if start >= 0:
            spans.append([start, start + len(text)])
            continue
        pieces = [piece.strip() for piece in text.split(REMOVED) if piece.strip()]
        if not pieces:
            continue
        head, tail = pieces[0][:_ANCHOR_CHARS], pieces[-1][-_ANCHOR_CHARS:]
        start = content.find(head)
        end = content.find(tail, start + 1) if start >= 0 else -1
        if start >= 0 and end >= 0:
            spans.append([start, end + len(tail)])
    return spans


def article_to_node(article: Article, score: float) -> NodeWithScore:
    """An article as a LlamaIndex node: full text, article fields and ranks in metadata."""
    meta: dict[str, Any] = dict(article.metadata)
    meta.update({"kb_id": article.kb_id, "title": article.title, "url": article.url})
    if article.language is not None:
        meta["language"] = article.language
    hidden = [k for k in meta if k != "title"]
    node = TextNode(
        id_=article.kb_id,
        text=article.content,
        metadata=meta,
        excluded_embed_metadata_keys=hidden,
        excluded_llm_metadata_keys=hidden,
    )
    return NodeWithScore(node=node, score=score)


def article_from_node(node: NodeWithScore) -> Article:
    """The ``Article`` an article node stands for, ranks and other metadata included."""
    meta = dict(node.node.metadata)
    kb_id = str(meta.pop("kb_id", None) or node.node.node_id)
    title = str(meta.pop("title", None) or kb_id)
    url = str(meta.pop("url", None) or "")
    language = meta.pop("language", None)
    return Article(
        kb_id=kb_id,
        title=title,
        url=url,
        content=node.node.get_content(),
        language=str(language) if language else None,
        metadata=meta,
    )


class ArticleGrouper(BaseNodePostprocessor):
    """Turns ranked chunk nodes into ranked whole-article nodes (see the module docstring).

    Args:
        articles: where whole articles come from: an ``ArticleSource`` (ragidx's ``ArticleStore``), or a
            LlamaIndex docstore.
        docstore: a LlamaIndex docstore to read whole articles from (``index.docstore``), instead of ``articles``.
        top_n: articles kept (None: every matched article).
        score_threshold: drop articles whose best chunk scores below this.

    Example:
        >>> from ragidx.stores.article_store import ArticleStore
        >>> store = ArticleStore(":memory:")
        >>> store.save_pending([Article("a", "A", "u", "full text")])
        >>> chunk = NodeWithScore(node=TextNode(text="full", metadata={"kb_id": "a"}), score=0.7)
        >>> [n.node.metadata["normalized_rank"] for n in ArticleGrouper(store).postprocess_nodes([chunk])]
        [0.0]
    """

    top_n: int | None = Field(default=None, ge=1, description="Articles kept; None keeps every matched article.")
    score_threshold: float | None = Field(
        default=None, description="Drop articles whose best chunk scores below this (per reranker)."
    )

    _articles: ArticleSource = PrivateAttr()

    def __init__(
        self,
        articles: ArticleSource | BaseDocumentStore | None = None,
        *,
        docstore: BaseDocumentStore | None = None,
        **kwargs: Any,
    ) -> None:
        source = _source(articles, docstore)
        super().__init__(**kwargs)
        self._articles = source

    @property
    def articles(self) -> ArticleSource:
        """Where this grouper reads whole articles."""
        return self._articles

    @classmethod
    def class_name(cls) -> str:
        return "ArticleGrouper"

    def _of_this_tenant(self, nodes: Sequence[NodeWithScore]) -> Sequence[NodeWithScore]:
        """The chunks of the article store's tenant (none: the chunks of no tenant). A store that cannot scope
        its search to chunks of no tenant (Weaviate keeps no null index) hands over others' chunks too: they
        are left out here, counted in a debug line that names no id, so no log or answer shows them."""
        tenant = getattr(self._articles, "tenant", None) or ""
        kept = [n for n in nodes if (n.node.metadata.get("tenant") or "") == tenant]
        if len(kept) < len(nodes):
            logger.debug("left out %d chunks of other tenants", len(nodes) - len(kept))
        return kept

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        return self.group(nodes, top_n=self.top_n, query=query_bundle.query_str if query_bundle else None)

    def group(
        self,
        nodes: Sequence[NodeWithScore],
        top_n: int | None = None,
        query: str | None = None,
        principal: Principal | None = None,
    ) -> list[NodeWithScore]:
        """Group, load, rank. ``top_n`` overrides the configured article count for this call.

        Articles are read as ``principal`` (None: the public): one it may not read is not loaded, whatever the
        chunks said (the chunk search applies the same rule; this read is the second lock).
        """
        nodes = self._of_this_tenant(nodes)
        groups = group_chunks(nodes)
        if self.score_threshold is not None:
            groups = [g for g in groups if g.score >= self.score_threshold]
        # Load a few spares so an article missing from the store does not shorten the answer.
        wanted = groups if top_n is None else groups[: top_n + 5]
        who = principal or PUBLIC_PRINCIPAL
        loaded = self._articles.get([g.kb_id for g in wanted], principal=who) if wanted else {}
        missing = [g.kb_id for g in wanted if g.kb_id not in loaded]
        if missing:
            # Counted, not named: an article the chunk index still had for this principal (its permissions
            # changed between the two stores' writes) must not reach a log line either.
            logger.warning("%d matched articles are not in the article store for this reader", len(missing))
        kept = [g for g in wanted if g.kb_id in loaded]
        if top_n is not None:
            kept = kept[:top_n]
        out = []
        for g in kept:
            stored = loaded[g.kb_id]  # a document's ``sections`` stay: a citation finds its sentence's section by them
            article = stored.with_metadata(
                **({LOCATION: g.location} if g.location else {}),
                **{
                    MATCHED_CHUNKS: list(g.chunk_ids),
                    MATCHED_SPANS: matched_spans(stored.content, g.chunk_texts[:MAX_SPANS]),
                },
            )
            out.append(article_to_node(article, g.score))
        out = assign_ranks(out)  # rerank_score: the best chunk's score; ranks by this order
        dispatcher.event(
            ArticlesGroupedEvent(
                query=query,
                chunk_count=len(nodes),
                kb_ids=[g.kb_id for g in kept],
                scores=[g.score for g in kept],
                missing_kb_ids=[],  # not named (see the warning above): what a reader may not see stays unsaid
            )
        )
        logger.debug("grouped %d chunks into %d articles", len(nodes), len(out))
        return out


def _source(articles: ArticleSource | BaseDocumentStore | None, docstore: BaseDocumentStore | None) -> ArticleSource:
    """Where a grouper reads whole articles, from what its caller gave."""
    if articles is not None and docstore is not None:
        raise ValueError("ArticleGrouper reads whole articles from one place: pass articles= or docstore=, not both")
    given = docstore if docstore is not None else articles
    if given is None:
        raise TypeError(
            "ArticleGrouper needs where whole articles come from: ArticleGrouper(docstore=index.docstore), "
            "ArticleGrouper(article_store) or any object with get(kb_ids, *, principal=None); when rebuilding "
            "one from to_dict(), pass it again: ArticleGrouper.from_dict(data, docstore=index.docstore)"
        )
    if isinstance(given, BaseDocumentStore):
        return DocstoreArticles(given)
    if not callable(getattr(type(given), "get", None)):  # the type, not the object: a remote store is not asked
        raise TypeError(
            f"ArticleGrouper cannot read whole articles from a {type(given).__name__}: give it a LlamaIndex "
            "docstore (docstore=index.docstore) or an object with get(kb_ids, *, principal=None)"
        )
    return given
