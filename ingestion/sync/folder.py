"""A folder kept in sync: every document and JSONL file under it, read as ``ragidx ingest`` reads them.

Each document is one item, keyed by its path relative to the folder (``guide/tables.md``) and stored under the same
id as ``ragidx ingest FOLDER`` gives it (its relative path; a file the store already holds keeps its id), so a
folder ingested by hand can become a source without being ingested again. A JSONL file's lines are items keyed
``FILE:ID`` (``faq.jsonl:42``).

A file whose size and modification time equal the last sync's is :class:`~ingestion.sync.base.Unchanged` without
being read; any other is read (``ingestion.sources.read_document``) and compared by content. A file that cannot
be read is :class:`~ingestion.sync.base.Failed` (kept as stored); one that vanished while the folder was read is
:class:`~ingestion.sync.base.Gone`. Files whose path matches none of ``include`` (when given) or one of
``exclude``, files of a type ragidx does not read, hidden files and links out of the folder are
:class:`~ingestion.sync.base.Skipped`. A folder that does not exist stops the sync
(:class:`~ingestion.sync.base.SourceUnavailable`): nothing is deleted because a disk is not mounted.

Patterns are globs over the relative path: ``*`` and ``?`` stay within a folder, ``**`` crosses folders
(``guide/**/*.md``, ``drafts/**``); a pattern without ``/`` matches a file's name at any depth (``*.tmp``).

Example:
    >>> matches("guide/a/b.md", "guide/**/*.md"), matches("x/notes.tmp", "*.tmp"), matches("a/b.md", "*.md")
    (True, True, True)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePosixPath

from ingestion.sources import (
    DEFAULT_MAX_FILE_BYTES,
    DOCUMENT_SUFFIXES,
    JSONL_SUFFIXES,
    SourceError,
    read_document,
    read_jsonl,
)
from ingestion.sync.base import Failed, Fetched, Gone, ItemState, ScanEvent, Skipped, SourceUnavailable, Unchanged
from ingestion.sync.config import SourceConfig

__all__ = ["FolderReader", "matches"]

KnownId = Callable[[Path], str | None]


@functools.lru_cache(maxsize=256)
def _pattern(glob: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def matches(path: str, glob: str) -> bool:
    """Whether the relative posix ``path`` matches ``glob`` (see the module docstring)."""
    glob = glob.strip().lstrip("/")
    if glob.endswith("/"):
        glob += "**"
    if "/" not in glob:
        return bool(_pattern(glob).match(PurePosixPath(path).name))
    return bool(_pattern(glob).match(path))


def _stamp(size: int, mtime_ns: int) -> str:
    return f"{size}:{mtime_ns}"


class FolderReader:
    """Scans a folder source (see the module docstring).

    Args:
        config: the source (``path``, ``include``, ``exclude``, ``base_url``).
        max_file_bytes: larger documents are skipped (``max_file_mb``).
        ids: the id the store already holds a file under (by its resolved path), or None: that file keeps it.
    """

    def __init__(
        self,
        config: SourceConfig,
        *,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        ids: KnownId | None = None,
    ) -> None:
        if config.path is None:
            raise ValueError(f"source {config.name!r}: a folder source needs path")
        self.config = config
        self.root = Path(config.path).expanduser()
        self.max_file_bytes = max_file_bytes
        self.ids = ids

    def wanted(self, relative: str) -> str | None:
        """Why a file is left out by the source's patterns, or None when it is read."""
        if self.config.include and not any(matches(relative, g) for g in self.config.include):
            return "not matched by include"
        if any(matches(relative, g) for g in self.config.exclude):
            return "exclude pattern"
        return None

    def scan(self, previous: Mapping[str, ItemState]) -> Iterator[ScanEvent]:
        """One event per file (per line of a JSONL file) under the folder.

        Raises:
            SourceUnavailable: the folder does not exist or cannot be listed.
        """
        if not self.root.is_dir():
            raise SourceUnavailable(
                f"source {self.config.name!r}: the folder {self.root} does not exist or is not a folder (not "
                "mounted?); nothing was deleted. Fix path, or mount it, and sync again"
            )
        try:
            files = sorted(p for p in self.root.rglob("*") if p.is_file() or p.is_symlink())
        except OSError as exc:
            raise SourceUnavailable(
                f"source {self.config.name!r}: the folder {self.root} cannot be listed ({exc.strerror or exc}); "
                "nothing was deleted. Give ragidx read access and sync again"
            ) from exc
        resolved_root = self.root.resolve()
        for path in files:
            relative = path.relative_to(self.root).as_posix()
            if any(part.startswith(".") for part in PurePosixPath(relative).parts):
                continue  # hidden files and folders (.git, .DS_Store) are no part of the knowledge base
            suffix = path.suffix.lower()
            if suffix not in DOCUMENT_SUFFIXES and suffix not in JSONL_SUFFIXES:
                yield Skipped(relative, f"file type {suffix or '(none)'} is not read")
                continue
            excluded = self.wanted(relative)
            if excluded is not None:
                yield Skipped(relative, excluded)
                continue
            if path.is_symlink() and not path.resolve().is_relative_to(resolved_root):
                yield Skipped(relative, "a link to a file outside the folder (not published); copy the file in")
                continue
            if suffix in JSONL_SUFFIXES:
                yield from self._jsonl(path, relative, previous)
            else:
                yield self._document(path, relative, previous.get(relative))

    def _document(self, path: Path, relative: str, prev: ItemState | None) -> ScanEvent:
        try:
            stat = path.stat()
        except FileNotFoundError:
            return Gone(relative)
        except OSError as exc:
            return Failed(relative, f"cannot be read ({exc.strerror or exc}): check the file's permissions")
        stamp = _stamp(stat.st_size, stat.st_mtime_ns)
        if prev is not None and prev.lastmod == stamp:
            return Unchanged(relative, prev)
        kb_id = (prev.kb_id if prev is not None else None) or (self.ids(path.resolve()) if self.ids else None)
        item = read_document(
            path, self.root, max_file_bytes=self.max_file_bytes, base_url=self.config.base_url, kb_id=kb_id
        )
        if isinstance(item, SourceError):
            if "disappeared" in item.reason:
                return Gone(relative)
            if "over the" in item.reason and "limit" in item.reason:
                return Skipped(relative, f"over max size: {item.reason}")
            return Failed(relative, item.reason)
        return Fetched(relative, item, ItemState(key=relative, kb_id=item.kb_id, content_hash="", lastmod=stamp))

    def _jsonl(self, path: Path, relative: str, previous: Mapping[str, ItemState]) -> Iterator[ScanEvent]:
        prefix = f"{relative}:"
        try:
            stat = path.stat()
        except OSError:
            return  # gone meanwhile: its lines are no longer listed
        stamp = _stamp(stat.st_size, stat.st_mtime_ns)
        known = {k: s for k, s in previous.items() if k.startswith(prefix)}
        if known and all(s.lastmod == stamp for s in known.values()):
            for key, state in known.items():
                yield Unchanged(key, state)
            return
        listed: set[str] = set()
        unknown = None  # a line that could not be read: its id is unknown, so no line of the file may look deleted
        for item in read_jsonl(path):
            if isinstance(item, SourceError):
                if item.line is None:  # the whole file: keep its lines as stored
                    for key in known:
                        yield Failed(key, item.reason)
                    return
                unknown = item.line
                yield Failed(f"{relative}#line={item.line}", item.reason)
                continue
            key = prefix + item.kb_id
            listed.add(key)
            yield Fetched(key, item, ItemState(key=key, kb_id=item.kb_id, content_hash="", lastmod=stamp))
        if unknown is not None:
            for key in known.keys() - listed:
                yield Failed(key, f"line {unknown} of the file could not be read and may be this one: kept as stored")
