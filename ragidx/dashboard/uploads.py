"""Uploaded files into the knowledge base: checked first, ingested with progress, reported plainly.

A bad upload never reaches the engine silently: an empty file, an unsupported type or a file in
which not one article could be read each get a message saying what to upload instead.

An uploaded document (PDF, Word, HTML, Markdown, text) is kept in ``<data_dir>/uploads/``, where it was
ingested from, so that the dashboard can serve it when an answer cites it (:mod:`ragidx.dashboard.documents`):
a citation opens the PDF at its page. A JSONL upload is read from a temporary copy (its articles carry their own
urls). A document that cannot be read is not kept, and a failed upload of a name uploaded before leaves the
earlier file as it was.

Example:
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

from ingestion.sources import DOCUMENT_SUFFIXES, JSONL_SUFFIXES, SourceItem, language_sample, read_source

__all__ = ["ACCEPTED_SUFFIXES", "UploadResult", "check_upload", "count_items", "ingest_upload"]

ACCEPTED_SUFFIXES = sorted(JSONL_SUFFIXES | DOCUMENT_SUFFIXES)
WHAT_TO_UPLOAD = (
    "Upload a .jsonl file (one JSON article per line: id, title, url, text), "
    "a PDF, a Word .docx file, an HTML page, a Markdown (.md) or text (.txt) file."
)
ProgressFn = Callable[[int, int | None], None]


def _safe_name(name: str) -> str:
    base = Path(name.replace("\\", "/")).name
    return re.sub(r"[^\w.\-]+", "_", base) or "upload"


def check_upload(name: str, data: bytes) -> str | None:
    """Why this upload cannot be ingested, or ``None`` when it may be."""
    suffix = Path(name).suffix.lower()
    if suffix not in ACCEPTED_SUFFIXES:
        shown = repr(suffix) if suffix else "(no extension)"
        return f"{name}: unsupported file type {shown}. {WHAT_TO_UPLOAD}"
    if not data.strip():
        return f"{name} is empty: there is nothing to ingest. {WHAT_TO_UPLOAD}"
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
            f"{self.name}: {r.get('seen', 0)} articles read — {r.get('new', 0)} new, {r.get('changed', 0)} changed, "
            f"{r.get('unchanged', 0)} unchanged; {r.get('chunks_written', 0)} chunks written"
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


def _ingest(engine: Any, path: Path, name: str, on_progress: ProgressFn | None, batch_articles: int) -> Any:
    total = count_items(path)
    # the language sample is a second pass over JSONL only: a document read twice would cost a second ingest
    items = engine.choose_embedding(_counted(read_source(path), total, on_progress), sample=language_sample(path))
    ingestor = engine.ingestor()
    ingestor.batch_articles = batch_articles
    return ingestor.ingest(items, source=name)


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
    """Check and ingest one uploaded file into ``engine``'s knowledge base.

    Args:
        engine: an :class:`ragidx.engine.Engine` (its ``ingestor()`` is used, in small batches so the
            progress callback moves while embedding).
        name: the file name as uploaded; it decides the format and names the source.
        data: the file's bytes.
        on_progress: called with ``(articles read, articles expected)``.
        batch_articles: articles embedded per batch.
    """
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
    if report.seen == 0:
        first = "; ".join(skipped[:3]) or "no article found"
        return UploadResult(
            name,
            error=f"{name}: no article could be read ({first}). {WHAT_TO_UPLOAD}",
            report=report.as_dict(),
            skipped=skipped,
        )
    return UploadResult(name, report=report.as_dict(), skipped=skipped)
