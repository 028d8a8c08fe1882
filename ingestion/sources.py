"""Article sources: JSONL files, documents (PDF, Word, HTML, Markdown, text) and folders of them.

Every reader yields ``Article`` objects and ``SourceError`` records, never raises on bad input: a
malformed or too deeply nested line, a missing id or text, an empty article, bytes that are not UTF-8, an
encrypted or scanned PDF, a corrupt Word file, a binary file with a text extension, a file over the size
limit or one that disappears while the folder is read, and any exception a reader raises on one item, each
become one ``SourceError`` naming the file (and line) and what to do; the rest is still read.

JSONL lines look like ``{"id", "title", "url", "text", "lang"?}`` (``kb_id``, ``content`` and
``language`` are accepted as aliases). Any other top-level key, and the keys of a ``metadata`` object, are
the article's metadata (``product``, ``version``, ``allowed``: the principals who may read it ...), kept
with it and filterable; a top-level key wins over the same key in ``metadata``.

A document is one article whose id is its path relative to the folder ingested (the file name for a single
file), so ids are stable across runs and ``--prune`` finds deleted files. A file the store already holds keeps
the id it was first recorded with (``read_source``'s ``ids``): ingesting ``docs`` and then ``docs/a/b.md`` alone
(or the other way round) leaves one article for that file, not two. A link in a folder to a file outside it is
not read (reported, ``SourceError.refused``): ingesting a folder never publishes what lies outside it.

A document is read by the LlamaIndex reader of its suffix (``ingestion.readers``; ``file_extractor()`` gives them to
a ``SimpleDirectoryReader``): one ``Document`` per section, joined into the article's content. The article's
metadata keeps ``format``, ``folder`` (its folder path, '' at the top) and ``sections``: for each section its
``start`` offset in the content, ``heading_path``, ``section``, and ``page`` (PDF) or ``anchor`` (HTML, Markdown),
from which ingestion gives every chunk its section and page and a link to its place (``file.pdf#page=12``).

Example:
    >>> from pathlib import Path
    >>> items = list(read_source(Path("data/sample/docker_en.jsonl")))  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ingestion.readers import (
    SECTION_KEYS,
    DocumentReadError,
    document_suffixes,
    first_line,
    reader_entry,
    reader_for,
)
from ragidx.article import SECTIONS, Article

logger = logging.getLogger(__name__)

JSONL_SUFFIXES = frozenset({".jsonl", ".ndjson"})


class _DocumentSuffixes(AbstractSet[str]):
    """The suffixes read as documents at the moment it is asked (``ingestion.readers.document_suffixes``): a set
    that follows ``register_reader`` rather than a copy taken at import."""

    def __contains__(self, suffix: object) -> bool:
        return isinstance(suffix, str) and suffix in document_suffixes()

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(document_suffixes()))

    def __len__(self) -> int:
        return len(document_suffixes())

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> frozenset[Any]:
        return frozenset(it)  # ``DOCUMENT_SUFFIXES | JSONL_SUFFIXES`` is a plain set of that moment

    def __repr__(self) -> str:
        return f"DOCUMENT_SUFFIXES({sorted(document_suffixes())})"


DOCUMENT_SUFFIXES: AbstractSet[str] = _DocumentSuffixes()
"""Suffixes read as one article per file (PDF, DOCX, HTML, Markdown, text, and any reader registered since): a
live view of ``ingestion.readers``' registry."""
MAX_ARTICLE_CHARS = 5_000_000
DEFAULT_MAX_FILE_BYTES = 100 * 1024 * 1024
"""Documents larger than this are refused (``max_file_mb`` in the settings); JSONL files have no limit."""


@dataclass(frozen=True)
class SourceError:
    """One input item that could not be read; the rest of the source is unaffected.

    ``kb_id`` is the id the item would have had, where it is known (a document's path): ingestion keeps
    the stored copy of such an article rather than pruning it.
    """

    path: str
    line: int | None
    reason: str
    kb_id: str | None = None
    refused: bool = False
    """Left out on purpose (a link out of the folder), not a failure to read: it keeps no stored copy and does not
    stop ``--prune``."""

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else self.path
        return f"{where}: {self.reason}"


SourceItem = Article | SourceError
KnownArticle = Callable[[str], Article | None]
"""The stored article of an id, or ``None`` (see ``read_source``'s ``known``)."""
KnownId = Callable[[Path], str | None]
"""The id the store already holds a file under (its resolved path), or ``None`` (see ``read_source``'s ``ids``)."""
FILE_STAMP = "file_stamp"
"""Article metadata: ``"size:mtime_ns:sha256"`` of the file a document was read from (:func:`file_stamp`)."""
FILE_PATH = "file_path"
"""Article metadata on its way into ingestion: the resolved path of the file a document was read from. Ingestion
records it with the article (the store's ``origin``) and keeps it out of the stored metadata and the chunks."""


def file_stamp(stat: os.stat_result, digest: str) -> str:
    """The :data:`FILE_STAMP` of a file with this ``stat`` and content ``digest`` (:func:`file_digest`).

    Size and modification time tell ingestion cheaply that a file is unchanged (it is then not read again); the
    digest lets whoever serves the file check that its bytes are the ones ingested, which a forged modification
    time cannot fake."""
    return f"{stat.st_size}:{stat.st_mtime_ns}:{digest}"


def file_digest(path: Path) -> str:
    """The SHA-256 of the file's content, in hex."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def stamp_matches(stamp: object, path: Path, stat: os.stat_result) -> bool:
    """Whether ``path`` (with this ``stat``) holds exactly what was ingested under ``stamp``: the same size and
    modification time and the same content digest. A stamp without a digest (written before digests were) never
    matches: such a file is read, and served, only once it is ingested again."""
    if not isinstance(stamp, str) or not _same_size_and_time(stamp, stat):
        return False
    return stamp.rsplit(":", 1)[1] == file_digest(path)


def _same_size_and_time(stamp: str, stat: os.stat_result) -> bool:
    parts = stamp.split(":")
    return len(parts) == 3 and parts[:2] == [str(stat.st_size), str(stat.st_mtime_ns)]


def read_source(
    path: Path,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    base_url: str | None = None,
    known: KnownArticle | None = None,
    ids: KnownId | None = None,
) -> Iterator[SourceItem]:
    """Read a JSONL file, a document, or a folder of them (recursively).

    ``base_url``: where the documents are published (``https://docs.example.org/``): a document's url is then
    ``base_url`` + its id instead of its ``file://`` path, so a citation opens the published page.
    ``known``: the stored article of an id (the engine's article store): a document whose file has the size and
    modification time recorded on it (``file_stamp``) is not read again; its stored article is handed on.
    ``ids``: the id the store holds a file under (by its resolved path): that file keeps it, whichever folder (or
    the file alone) is ingested now; a file it does not know gets its path relative to the folder ingested.
    """
    if not path.exists():
        raise FileNotFoundError(f"no such file or folder: {path}")
    if path.is_dir():
        yield from read_folder(path, max_file_bytes=max_file_bytes, base_url=base_url, known=known, ids=ids)
    elif path.suffix.lower() in JSONL_SUFFIXES:
        yield from read_jsonl(path)
    elif path.suffix.lower() in DOCUMENT_SUFFIXES:
        kb_id = ids(path.resolve()) if ids is not None else None
        yield read_document(
            path, path.parent, max_file_bytes=max_file_bytes, base_url=base_url, known=known, kb_id=kb_id
        )
    else:
        raise ValueError(
            f"{path}: unsupported file type {path.suffix!r}; give a .jsonl file, a document "
            f"({', '.join(sorted(DOCUMENT_SUFFIXES))}) or a folder"
        )


def read_jsonl(path: Path) -> Iterator[SourceItem]:
    try:
        fh = path.open("rb")
    except OSError as exc:
        yield SourceError(str(path), None, _os_reason(exc))
        return
    with fh:
        if _looks_binary(fh.read(8192)):
            yield SourceError(
                str(path), None, "binary content, not JSON lines: is it really a .jsonl file? Nothing read from it"
            )
            return
        fh.seek(0)
        for line_no, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                yield _read_line(raw, str(path), line_no)
            except Exception as exc:  # one item's failure, whatever it is, never stops the file
                yield SourceError(str(path), line_no, f"could not read this line ({type(exc).__name__}: {exc})")


def _read_line(raw: bytes, path: str, line_no: int) -> SourceItem:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return SourceError(path, line_no, f"not UTF-8 (byte {exc.start}): re-encode the file as UTF-8")
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        return SourceError(path, line_no, f"invalid JSON: {exc.msg} at column {exc.colno}")
    except RecursionError:
        return SourceError(path, line_no, "JSON nested too deeply to read: flatten this line's object")
    return _article_from_record(data, path, line_no)


def _article_from_record(data: object, path: str, line_no: int) -> SourceItem:
    if not isinstance(data, dict):
        return SourceError(path, line_no, f"expected a JSON object, got {type(data).__name__}")
    kb_id = data.get("id", data.get("kb_id"))
    text = data.get("text", data.get("content"))
    if kb_id is None or str(kb_id).strip() == "":
        return SourceError(path, line_no, "missing 'id'")
    if text is None:
        return SourceError(path, line_no, f"article {kb_id!r}: missing 'text'")
    if not isinstance(text, str):
        return SourceError(path, line_no, f"article {kb_id!r}: 'text' must be a string")
    if not text.strip():
        return SourceError(path, line_no, f"article {kb_id!r}: empty text, nothing to index")
    if len(text) > MAX_ARTICLE_CHARS:
        return SourceError(
            path,
            line_no,
            f"article {kb_id!r}: {len(text):,} characters exceeds {MAX_ARTICLE_CHARS:,}; split it",
        )
    title = str(data.get("title") or "").strip() or first_line(text)
    language = data.get("lang", data.get("language"))
    nested = data.get("metadata")
    if nested is not None and not isinstance(nested, dict):
        return SourceError(path, line_no, f"article {kb_id!r}: 'metadata' must be a JSON object")
    extra = {**(nested or {}), **{k: v for k, v in data.items() if k not in _RECORD_FIELDS}}
    extra.pop(FILE_STAMP, None)  # ingestion's own: it says a file was read from disk (the dashboard then serves it)
    extra.pop(FILE_PATH, None)
    return Article(
        kb_id=str(kb_id).strip(),
        title=title,
        url=str(data.get("url") or ""),
        content=text,
        language=str(language) if language else None,
        metadata=extra,
    )


_RECORD_FIELDS = frozenset({"id", "kb_id", "title", "url", "text", "content", "lang", "language", "metadata"})
"""JSONL keys that are the article itself; every other key is its metadata."""


def language_sample(path: Path) -> Iterator[SourceItem] | None:
    """A second, cheap pass over a source for ``embed_model="auto"`` to draw its languages from, or None.

    A JSONL file is read again whole. For a folder, its JSONL files are (in the order :func:`read_folder` reads
    them, so a folder of ``en.jsonl`` and ``ru.jsonl`` counts both); its documents are left out, since reading a
    PDF twice costs what ingesting it does. None for a single document or a folder without JSONL files: the
    caller then reads the languages of the first articles it ingests.
    """
    if path.is_file():
        return read_jsonl(path) if path.suffix.lower() in JSONL_SUFFIXES else None
    if not path.is_dir():
        return None
    files = [p for p in _folder_files(path) if p.suffix.lower() in JSONL_SUFFIXES]
    if not files:
        return None
    return (item for f in files for item in read_jsonl(f))


def _folder_files(folder: Path) -> list[Path]:
    """The files under ``folder`` in path order, hidden files and folders left out."""
    return [
        p
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    ]


def read_folder(
    folder: Path,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    base_url: str | None = None,
    known: KnownArticle | None = None,
    ids: KnownId | None = None,
) -> Iterator[SourceItem]:
    """Every document and JSONL file under ``folder`` (hidden files and folders left out), in path order.

    The files are listed first and read one at a time: a file deleted meanwhile is that file's error. A link to
    a file outside ``folder`` is not read: it is reported (``SourceError.refused``), since ingesting it would
    publish a file the folder only points at.
    """
    files, others = [], Counter[str]()
    root = folder.resolve()
    outside: list[SourceError] = []
    for p in _folder_files(folder):
        suffix = p.suffix.lower()
        if p.is_symlink() and not p.resolve().is_relative_to(root):
            outside.append(
                SourceError(
                    str(p),
                    None,
                    "a link to a file outside the folder ingested: not read (ingesting it would publish that file); "
                    "copy the file into the folder if it belongs to the knowledge base",
                    refused=True,
                )
            )
            continue
        if suffix in DOCUMENT_SUFFIXES or suffix in JSONL_SUFFIXES:
            files.append(p)
        else:
            others[suffix or "(none)"] += 1
    if others:
        logger.warning(
            "%s: left out %d files of types ragidx does not read (%s)",
            folder,
            sum(others.values()),
            ", ".join(f"{k}: {v}" for k, v in others.most_common()),
        )
    yield from outside
    for path in files:
        if path.suffix.lower() in JSONL_SUFFIXES:
            yield from read_jsonl(path)
        else:
            kb_id = ids(path.resolve()) if ids is not None else None
            yield read_document(
                path, folder, max_file_bytes=max_file_bytes, base_url=base_url, known=known, kb_id=kb_id
            )


def read_document(
    path: Path,
    root: Path,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    base_url: str | None = None,
    known: KnownArticle | None = None,
    kb_id: str | None = None,
) -> SourceItem:
    """One document as an ``Article`` (id: ``kb_id`` when given, the id the store holds the file under; else its
    path relative to ``root``), or the ``SourceError`` saying why not. The article carries its file's
    :data:`FILE_STAMP` and :data:`FILE_PATH`."""
    kb_id = kb_id or path.relative_to(root).as_posix()
    resolved = str(path.resolve())

    def error(reason: str) -> SourceError:
        return SourceError(str(path), None, reason, kb_id=kb_id)

    try:
        stat = path.stat()
        size = stat.st_size
        if size == 0:
            return error("empty file (0 bytes), nothing to index")
        if size > max_file_bytes:
            return error(
                f"{size / 2**20:,.0f} MB is over the {max_file_bytes / 2**20:,.0f} MB limit for one document: "
                "split it, or raise max_file_mb (RAGIDX_MAX_FILE_MB)"
            )
        url = f"{base_url.rstrip('/')}/{quote(kb_id)}" if base_url else path.resolve().as_uri()
        stored = known(kb_id) if known is not None else None
        stored_stamp = stored.metadata.get(FILE_STAMP) if stored is not None else None
        if (
            stored is not None
            and isinstance(stored_stamp, str)
            and _same_size_and_time(stored_stamp, stat)
            and (stored.url == url)
        ):
            return stored.with_metadata(**{FILE_PATH: resolved})  # the same file as ingested: not read again
        with path.open("rb") as fh:
            head = fh.read(8192)
        stamp = file_stamp(stat, file_digest(path))
        suffix = path.suffix.lower()
        entry = reader_entry(suffix)
        if entry is None:  # its reader was unregistered since the folder was listed
            return error(f"no reader for {suffix} files any more: nothing read from it")
        if entry.magic is not None and not head.lstrip().startswith(entry.magic):
            return error(f"not {entry.kind} (its content starts {head[:8]!r}): check the file's type")
        if entry.text and _looks_binary(head):
            return error(f"binary content, not text: is it really a {suffix} file?")
        documents = reader_for(suffix, max_file_bytes=max_file_bytes).load_data(path)
    except FileNotFoundError:
        return error("disappeared while ingesting: run again (with --prune to drop it from the index)")
    except Exception as cause:  # a reader's failure on this file is this file's error
        if isinstance(cause, DocumentReadError):
            return error(str(cause))
        if isinstance(cause, FileNotFoundError):
            return error("disappeared while ingesting: run again (with --prune to drop it from the index)")
        if isinstance(cause, OSError):
            return error(_os_reason(cause))
        return error(f"could not be read ({type(cause).__name__}: {cause}): check that it opens in its application")
    article = _article_from_documents(documents, path, kb_id, url)
    if isinstance(article, str):
        return error(article)
    return article.with_metadata(**{FILE_STAMP: stamp, FILE_PATH: resolved})


def _article_from_documents(documents: list[Any], path: Path, kb_id: str, url: str) -> Article | str:
    """The article the sections make, or why there is none."""
    parts: list[str] = []
    sections: list[dict[str, Any]] = []
    offset = 0
    for doc in documents:
        text = doc.text.strip()
        if not text:
            continue
        if parts:
            offset += 2  # the "\n\n" between sections
        sections.append({"start": offset, **{k: doc.metadata[k] for k in SECTION_KEYS if k in doc.metadata}})
        parts.append(text)
        offset += len(text)
    content = "\n\n".join(parts)
    if not content.strip():
        return "no text in it, nothing to index"
    if len(content) > MAX_ARTICLE_CHARS:
        return f"{len(content):,} characters of text exceeds {MAX_ARTICLE_CHARS:,} for one article: split it"
    title = str(documents[0].metadata.get("title") or path.stem)
    folder = Path(kb_id).parent.as_posix()
    metadata: dict[str, Any] = {
        "format": entry.format if (entry := reader_entry(path.suffix)) else path.suffix.lower().lstrip("."),
        "folder": "" if folder == "." else folder,
        SECTIONS: sections,
    }
    if any(doc.metadata.get("ocr") for doc in documents):
        metadata["ocr"] = True  # its text was read from images of its pages
    return Article(kb_id=kb_id, title=title, url=url, content=content, metadata=metadata)


def _looks_binary(head: bytes) -> bool:
    """NUL bytes, or mostly control bytes, in the first bytes of a file that should be text."""
    if not head:
        return False
    if b"\x00" in head:
        return True
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13))
    return controls > len(head) * 0.1


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "cannot be read (permission denied): give ragidx read access to it"
    return f"cannot be read ({exc.strerror or exc}): check the file and run again"
