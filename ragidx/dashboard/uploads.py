"""Uploaded files into the knowledge base: authorised, checked first, ingested with progress, reported plainly.

Uploads are a write by whoever reaches the dashboard, which has no sign-in: they are refused unless the dashboard
is configured to take them (``[dashboard] uploads = true``, ``RAGIDX_DASHBOARD__UPLOADS=true``). When they are on,
an upload adds and updates only its own articles: each upload is its own source (``upload:<file name>``), so an
article whose id the knowledge base already holds from another source (``ragidx ingest``, another file) is left
as it is by the ingestor's ownership rule (``IngestReport.conflicts``), and one whose stored copy the dashboard's
reader (the public) may not read is refused here, even from the same file. Each is listed as skipped, with one
message for both (it does not tell a restricted article from another source's). Without this a JSONL line
carrying the id of a restricted article would replace it, drop its restriction and publish its text.

A bad upload never reaches the engine silently: an empty file, an unsupported type or a file in
which not one article could be read each get a message saying what to upload instead.

An uploaded document (PDF, Word, HTML, Markdown, text) is kept in ``<data_dir>/uploads/``, where it was
ingested from, so that the dashboard can serve it when an answer cites it (:mod:`ragidx.dashboard.documents`):
a citation opens the PDF at its page. A JSONL upload is read from a temporary copy (its articles carry their own
urls). A document that cannot be read is not kept, and a failed upload of a name uploaded before leaves the
earlier file as it was.

Example:
    >>> upload_source("kb.jsonl")
    'upload:kb.jsonl'
    >>> check_upload("notes.csv", b"a,b").split(". ")[0]
    "notes.csv: unsupported file type '.csv'"
    >>> check_upload("kb.jsonl", b"") is not None
    True
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingestion.formats import document_formats
from ingestion.sources import (
    DOCUMENT_SUFFIXES,
    JSONL_SUFFIXES,
    SourceError,
    SourceItem,
    language_sample,
    read_source,
)
from ragidx.article import Article
from ragidx.stores.access import Principal
from ragidx.wording import counted

__all__ = [
    "UPLOADS_OFF",
    "UploadResult",
    "accepted_suffixes",
    "check_upload",
    "count_items",
    "ingest_upload",
    "upload_source",
    "uploads_enabled",
    "what_to_upload",
]


def accepted_suffixes() -> list[str]:
    """The file suffixes an upload may have now: JSON lines and every document format read (a reader registered
    with ``ingestion.register_reader`` included)."""
    return sorted(JSONL_SUFFIXES | DOCUMENT_SUFFIXES)


def what_to_upload() -> str:
    """What an upload may be, for the messages that refuse one (the formats as they are now)."""
    return (  # the formats as they are now: a reader registered since is named
        "Upload a .jsonl file (one JSON article per line: id, title, url, text) or a document: "
        f"{document_formats()} ({', '.join(sorted(DOCUMENT_SUFFIXES))})."
    )


ProgressFn = Callable[[int, int | None], None]
UPLOADS_OFF = (
    "Uploads are turned off on this dashboard: it has no sign-in, so an upload would let anyone who can open it "
    "change the knowledge base. Ingest from the command line (`ragidx ingest FILE`), or have the operator turn "
    "uploads on with `[dashboard] uploads = true` in ragidx.toml (or RAGIDX_DASHBOARD__UPLOADS=true) where only "
    "trusted people can reach the dashboard."
)
NOT_REPLACED = (
    "article {kb_id!r} is already in the knowledge base from another source, or is not public: an upload does "
    "not replace it. Give this article another id, or update the original where it was ingested from"
)
UPLOAD_PREFIX = "upload:"
"""Source names of dashboard uploads: an upload owns the articles of its own file name only."""


def uploads_enabled(settings: Any) -> bool:
    """Whether the dashboard may write uploads into the knowledge base (``Settings.dashboard.uploads``)."""
    return bool(settings.dashboard.uploads)


def upload_source(name: str) -> str:
    """The source an uploaded file's articles are stored under: its file name, without any folder."""
    return UPLOAD_PREFIX + Path(name.replace("\\", "/")).name


def _safe_name(name: str) -> str:
    base = Path(name.replace("\\", "/")).name
    return re.sub(r"[^\w.\-]+", "_", base) or "upload"


def check_upload(name: str, data: bytes) -> str | None:
    """Why this upload cannot be ingested, or ``None`` when it may be."""
    suffix = Path(name).suffix.lower()
    if suffix not in accepted_suffixes():
        shown = repr(suffix) if suffix else "(no extension)"
        return f"{name}: unsupported file type {shown}. {what_to_upload()}"
    if not data.strip():
        return f"{name} is empty: there is nothing to ingest. {what_to_upload()}"
    return None


@dataclass
class UploadResult:
    """One upload's outcome: ``error`` when nothing was ingested, else the ingest report's numbers."""

    name: str
    error: str | None = None
    report: dict[str, Any] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None

    def summary(self) -> str:
        if self.error:
            return self.error
        r = self.report
        text = (
            f"{self.name}: {counted(r.get('seen', 0), 'article')} read — {r.get('new', 0)} new, "
            f"{r.get('changed', 0)} changed, {r.get('unchanged', 0)} unchanged; "
            f"{counted(r.get('chunks_written', 0), 'chunk')} written"
        )
        if self.skipped:
            text += f"; {len(self.skipped)} skipped (see below)"
        return text


def count_items(path: Path) -> int:
    """Articles expected in ``path``: non-blank lines of JSONL, 1 for a document."""
    if path.suffix.lower() in JSONL_SUFFIXES:
        with path.open("rb") as fh:
            return sum(1 for line in fh if line.strip())
    return 1


def _counted(items: Iterable[SourceItem], total: int, on_progress: ProgressFn | None) -> Iterator[SourceItem]:
    for done, item in enumerate(items, start=1):
        yield item
        if on_progress is not None:
            on_progress(done, total)


UPLOADS_DIR = "uploads"
"""Where uploaded documents are kept, under the data dir."""


def _public_only(items: Iterable[SourceItem], store: Any, where: str, batch: int) -> Iterator[SourceItem]:
    """``items`` with every article whose stored copy the public may not read (the dashboard's reader) turned into
    a :class:`SourceError` saying so: an upload never replaces it, even from its own source. Ids of other sources
    are the ingestor's to refuse (``IngestReport.conflicts``)."""
    pending: list[SourceItem] = []

    def checked(chunk: list[SourceItem]) -> Iterator[SourceItem]:
        ids = [i.kb_id for i in chunk if isinstance(i, Article)]
        stored = set(store.states(ids)) if ids else set()
        refused = stored - set(store.get(list(stored), principal=Principal())) if stored else set()
        for item in chunk:
            if isinstance(item, Article) and item.kb_id in refused:
                yield SourceError(where, None, NOT_REPLACED.format(kb_id=item.kb_id), kb_id=item.kb_id)
            else:
                yield item

    for item in items:
        pending.append(item)
        if len(pending) >= batch:
            yield from checked(pending)
            pending = []
    yield from checked(pending)


def _ingest(engine: Any, path: Path, name: str, on_progress: ProgressFn | None, batch_articles: int) -> Any:
    total = count_items(path)
    source = upload_source(name)
    counted = _counted(read_source(path), total, on_progress)
    read = _public_only(counted, engine.article_store, str(path), batch_articles)
    # the language sample is a second pass over JSONL only: a document read twice would cost a second ingest
    items = engine.choose_embedding(read, sample=language_sample(path))
    ingestor = engine.ingestor()
    ingestor.batch_articles = batch_articles
    return ingestor.ingest(items, source=source, replace=False)  # another source's ids: conflicts, kept


@contextmanager
def _kept(path: Path, data: bytes) -> Iterator[Callable[[bool], None]]:
    """``path`` written with ``data`` for the block; the block says whether to keep it (else, and on an error, the
    file that was there before comes back, or none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    previous = path.with_name(f".{path.name}.previous")
    had = path.exists()
    if had:
        path.replace(previous)
    keep = [False]
    try:
        path.write_bytes(data)
        yield lambda ok: keep.__setitem__(0, ok)
    finally:
        if keep[0]:
            previous.unlink(missing_ok=True)
        elif had:
            previous.replace(path)
        else:
            path.unlink(missing_ok=True)


def ingest_upload(
    engine: Any,
    name: str,
    data: bytes,
    *,
    on_progress: ProgressFn | None = None,
    batch_articles: int = 16,
) -> UploadResult:
    """Check and ingest one uploaded file into ``engine``'s knowledge base, when its settings allow uploads.

    Articles of another source, or that the public may not read, are skipped (listed in ``skipped``), never
    replaced.

    Args:
        engine: an :class:`ragidx.engine.Engine` (its ``ingestor()`` is used, in small batches so the
            progress callback moves while embedding).
        name: the file name as uploaded; it decides the format and names the source.
        data: the file's bytes.
        on_progress: called with ``(articles read, articles expected)``.
        batch_articles: articles embedded per batch.
    """
    if not uploads_enabled(engine.settings):
        return UploadResult(name, error=UPLOADS_OFF)
    problem = check_upload(name, data)
    if problem:
        return UploadResult(name, error=problem)
    if Path(name).suffix.lower() in DOCUMENT_SUFFIXES:
        path = Path(engine.settings.data_dir) / UPLOADS_DIR / _safe_name(name)
        with _kept(path, data) as keep:
            report = _ingest(engine, path, name, on_progress, batch_articles)
            keep(report.seen > 0)
    else:
        with tempfile.TemporaryDirectory(prefix="ragidx-upload-") as tmp:
            path = Path(tmp) / _safe_name(name)
            path.write_bytes(data)
            report = _ingest(engine, path, name, on_progress, batch_articles)
    skipped = [e.replace(str(path), name) for e in report.errors]
    skipped += [f"{name}: {NOT_REPLACED.format(kb_id=kb_id)}" for kb_id, _owner in report.conflicts]
    if report.seen == 0:
        first = "; ".join(skipped[:3]) or "no article found"
        return UploadResult(
            name,
            error=f"{name}: no article could be read ({first}). {what_to_upload()}",
            report=report.as_dict(),
            skipped=skipped,
        )
    return UploadResult(name, report=report.as_dict(), skipped=skipped)
