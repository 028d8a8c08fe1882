"""The contract between a source's reader and the sync runner: the events a scan yields, and what a sync remembers.

A :class:`SourceReader` lists its source and yields one :data:`ScanEvent` per item. The runner
(:mod:`ingestion.sync.runner`) decides from them: a :class:`Fetched` item is new, changed or unchanged by its
``content_hash``; an :class:`Unchanged` one is kept without being read; a :class:`Failed` one is kept and retried;
a :class:`Skipped` or :class:`Gone` one, or one the scan no longer lists, is deleted. A scan that raises
(:class:`SourceUnavailable` or anything else) deletes nothing.

Example:
    >>> state = ItemState(key="guide/a.md", kb_id="docs:guide/a.md", content_hash="ab12")
    >>> Unchanged(key=state.key, state=state).state.kb_id
    'docs:guide/a.md'
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from ragidx.article import Article

__all__ = [
    "Failed",
    "Fetched",
    "Gone",
    "ItemState",
    "ScanEvent",
    "Skipped",
    "SourceReader",
    "SourceUnavailable",
    "Unchanged",
]


@dataclass(frozen=True)
class ItemState:
    """What the last sync remembered of one item of a source (stored by the runner, per source).

    Attributes:
        key: The item's stable key in its source: a canonical URL, a relative file path, a document id.
        kb_id: The article id it was stored under.
        content_hash: sha256 of the article's text, title and the metadata that matters.
        etag: The HTTP ``ETag`` as received, for ``If-None-Match``.
        last_modified: The HTTP ``Last-Modified`` as received, for ``If-Modified-Since``.
        lastmod: The sitemap ``<lastmod>``, or a file's ``mtime_ns`` as a string.
        links: The URLs a crawled page links to: a crawl follows them when the page answers 304 (unchanged, no
            body to read them from), so a page it links to that was never stored (a first sync killed half-way, a
            page that failed) is still found.
    """

    key: str
    kb_id: str
    content_hash: str
    etag: str | None = None
    last_modified: str | None = None
    lastmod: str | None = None
    links: tuple[str, ...] = ()


@dataclass(frozen=True)
class Fetched:
    """The item exists now and was read: the runner compares ``state.content_hash`` (new, changed, unchanged).

    ``article.kb_id`` is stable across syncs (the canonical URL, the relative path, the document id).
    """

    key: str
    article: Article
    state: ItemState


@dataclass(frozen=True)
class Unchanged:
    """The item is known unchanged without reading it (HTTP 304, same lastmod or mtime): kept, not embedded again.

    ``state`` carries the updated validators, or the previous state.
    """

    key: str
    state: ItemState


@dataclass(frozen=True)
class Failed:
    """The item could not be read this time (timeout, 5xx, refused, parse error): never deleted, retried next sync.

    ``reason`` says what happened and what to do, naming no internals.
    """

    key: str
    reason: str
    status: int | None = None


@dataclass(frozen=True)
class Skipped:
    """The item was deliberately not read (robots.txt, a pattern, its content type or size, not content).

    ``reason`` is short: ``"robots.txt"``, ``"exclude pattern"``, ``"content type image/png"``, ``"over max size"``.
    An item stored before and skipped now is deleted (it is excluded now).
    """

    key: str
    reason: str


@dataclass(frozen=True)
class Gone:
    """The item is known deleted (HTTP 404/410, the file removed): the runner deletes its article."""

    key: str
    status: int | None = None


ScanEvent = Fetched | Unchanged | Failed | Skipped | Gone
"""One item's outcome in a scan."""


class SourceUnavailable(RuntimeError):
    """The source as a whole could not be listed (site down, robots.txt unreachable, sitemap failed, folder missing).

    The sync stops, nothing is deleted, the run is reported failed and retried next time.
    """


class SourceReader(Protocol):
    """Reads one source: yields one event per item it lists, given what the last sync remembered."""

    def scan(self, previous: Mapping[str, ItemState]) -> Iterator[ScanEvent]:
        """Yield an event per item of the source.

        Args:
            previous: The last sync's state of each key, for conditional reads (ETag, lastmod, mtime).

        Raises:
            SourceUnavailable: The source as a whole could not be listed; nothing will be deleted.
        """
        ...
