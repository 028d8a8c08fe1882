"""DocstoreArticles: whole articles read from a LlamaIndex docstore, for the ``ArticleGrouper``.

A stock ``VectorStoreIndex`` keeps its chunks in ``index.docstore`` and, for each source document, a
``RefDocInfo`` (the chunk ids and the document's metadata); it does not keep the document itself. So an
article is read, for the id a chunk names (its ``ref_doc_id``, or its ``kb_id`` metadata):

1. the document itself, when the docstore holds it (``docstore.add_documents(documents)``);
2. else its chunks, put back together by their character offsets (``start_char_idx``/``end_char_idx``,
   which LlamaIndex's node parsers set): overlaps are written once, and a gap the splitter left (whitespace
   it dropped between two chunks) is filled with a blank line (or a space, for a one-character gap); chunks
   without offsets are joined in their stored order, an overlap with the text before written once;
3. else the document whose metadata says ``kb_id`` is that id (documents made from ragidx articles).

A ``VectorStoreIndex`` over a vector store that keeps the text itself (Chroma, Qdrant, ...) leaves its docstore
empty unless built with ``store_nodes_override=True``; an empty docstore is reported in a warning.

The article takes the document's metadata: ``title`` (else ``file_name``, else the id), ``url`` (else
``file_path``), ``language``; the rest stays in its metadata. A document whose metadata has ``allowed``
(``ragidx.stores.access``) is read only by a principal it allows, as in ragidx's own article store; one
without is public.

Example:
    >>> from llama_index.core import Document
    >>> from llama_index.core.storage.docstore import SimpleDocumentStore
    >>> docstore = SimpleDocumentStore()
    >>> docstore.add_documents([Document(id_="d1", text="Full text.", metadata={"file_name": "a.md"})])
    >>> article = DocstoreArticles(docstore).get(["d1"])["d1"]
    >>> article.title, article.content
    ('a.md', 'Full text.')
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore

from ragidx.article import Article
from ragidx.stores.access import PUBLIC_PRINCIPAL, InvalidPermissions, Principal, allowed_of

__all__ = ["DocstoreArticles", "article_from_document", "join_chunks"]

logger = logging.getLogger(__name__)

_FIELDS = ("kb_id", "title", "url", "language")
_MAX_OVERLAP = 4000
"""Most characters compared when joining chunks without offsets (a chunk overlap is far shorter)."""


class DocstoreArticles:
    """An ``ArticleSource`` over a LlamaIndex ``BaseDocumentStore`` (see the module docstring).

    Args:
        docstore: the docstore, e.g. ``index.docstore`` of a ``VectorStoreIndex``.
    """

    def __init__(self, docstore: BaseDocumentStore) -> None:
        if not isinstance(docstore, BaseDocumentStore):
            raise TypeError(
                f"DocstoreArticles reads a LlamaIndex docstore (e.g. index.docstore), got {type(docstore).__name__}"
            )
        self.docstore = docstore

    def get(self, kb_ids: Sequence[str], *, principal: Principal | None = None) -> dict[str, Article]:
        """The articles among ``kb_ids`` that the docstore holds and ``principal`` (None: the public) may read."""
        who = principal or PUBLIC_PRINCIPAL
        out: dict[str, Article] = {}
        by_kb_id: dict[str, str] | None = None
        for kb_id in dict.fromkeys(kb_ids):
            article = self._read(kb_id, kb_id)
            if article is None:
                if by_kb_id is None:  # built once per call, only when some id is not a document id
                    by_kb_id = self._kb_id_index()
                doc_id = by_kb_id.get(kb_id)
                article = self._read(doc_id, kb_id) if doc_id is not None else None
            if article is not None and _may_read(who, article):
                out[kb_id] = article
        if kb_ids and not out and not self.docstore.get_all_ref_doc_info() and not self.docstore.docs:
            logger.warning(
                "the docstore holds no documents or chunks to read whole articles from: an index over a vector "
                "store that keeps the text fills it only with VectorStoreIndex(..., store_nodes_override=True)"
            )
        return out

    def _read(self, doc_id: str, kb_id: str) -> Article | None:
        """The article ``doc_id`` stands for (filed under ``kb_id``), or None when the docstore has no trace of it."""
        doc = self.docstore.get_document(doc_id, raise_error=False)
        if doc is not None and doc.ref_doc_id in (None, doc_id):  # the document itself, not a chunk of one
            return article_from_document(kb_id, doc.get_content(), doc.metadata)
        info = self.docstore.get_ref_doc_info(doc_id)
        if info is None:
            return None
        chunks = self.docstore.get_nodes(list(info.node_ids), raise_error=False)
        if not chunks:
            return None
        return article_from_document(kb_id, join_chunks(chunks), info.metadata or chunks[0].metadata)

    def _kb_id_index(self) -> dict[str, str]:
        """Document id by the ``kb_id`` in its metadata, over the documents the docstore knows."""
        index: dict[str, str] = {}
        for doc_id, info in (self.docstore.get_all_ref_doc_info() or {}).items():
            kb_id = (info.metadata or {}).get("kb_id")
            if kb_id:
                index.setdefault(str(kb_id), doc_id)
        for doc_id, node in self.docstore.docs.items():
            kb_id = node.metadata.get("kb_id")
            if kb_id and node.ref_doc_id in (None, doc_id):
                index.setdefault(str(kb_id), doc_id)
        return index


def article_from_document(kb_id: str, text: str, metadata: Mapping[str, Any]) -> Article:
    """An ``Article`` from a document's text and metadata (title, url and language as the module docstring says).

    Example:
        >>> article_from_document("d1", "Text.", {"file_name": "a.pdf", "file_path": "/kb/a.pdf", "page": 2}).url
        '/kb/a.pdf'
    """
    meta = dict(metadata)
    title = str(meta.get("title") or meta.get("file_name") or kb_id)
    url = str(meta.get("url") or meta.get("file_path") or "")
    language = meta.get("language")
    rest = {k: v for k, v in meta.items() if k not in _FIELDS}
    return Article(
        kb_id=kb_id, title=title, url=url, content=text, language=str(language) if language else None, metadata=rest
    )


def join_chunks(chunks: Sequence[BaseNode]) -> str:
    """A document's text from its chunks (see the module docstring, step 2).

    Example:
        >>> from llama_index.core.schema import TextNode
        >>> parts = [TextNode(text="One two.", start_char_idx=0, end_char_idx=8),
        ...          TextNode(text="two. Three.", start_char_idx=4, end_char_idx=15),
        ...          TextNode(text="Four.", start_char_idx=17, end_char_idx=22)]
        >>> join_chunks(parts)
        'One two. Three.\\n\\nFour.'
    """
    starts = [_start(c) for c in chunks]
    if all(start is not None for start in starts):
        return _join_by_offsets([(start or 0, c.get_content()) for start, c in zip(starts, chunks, strict=True)])
    text = ""
    for chunk in chunks:
        part = chunk.get_content()
        overlap = next((k for k in range(min(len(text), len(part), _MAX_OVERLAP), 0, -1) if text.endswith(part[:k])), 0)
        text = f"{text}\n\n{part}" if text and not overlap else text + part[overlap:]
    return text


def _start(chunk: BaseNode) -> int | None:
    """Where a chunk starts in its document (a ``TextNode``'s ``start_char_idx``), None when unknown."""
    start = getattr(chunk, "start_char_idx", None)
    return start if isinstance(start, int) else None


def _join_by_offsets(parts: Sequence[tuple[int, str]]) -> str:
    pieces: list[str] = []
    covered = 0  # the document's characters written so far, by its own offsets
    for start, part in sorted(parts, key=lambda p: (p[0], len(p[1]))):
        if pieces and start > covered:
            pieces.append(" " if start - covered == 1 else "\n\n")
        if start + len(part) > covered:
            pieces.append(part[max(0, covered - start) :])
            covered = start + len(part)
    return "".join(pieces)


def _may_read(principal: Principal, article: Article) -> bool:
    try:
        return principal.may_read(allowed_of(article.metadata))
    except InvalidPermissions:
        # A document whose permissions cannot be read is shown to no one (ragidx's ingestion refuses such).
        logger.warning("an article's permissions could not be read: it is left out")
        return False
