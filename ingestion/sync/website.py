"""A website kept in sync: its pages (from a sitemap or by crawling) and the PDF and Word files they link to.

``WebsiteReader(config).scan(previous)`` yields one event per URL (:mod:`ingestion.sync.base`):

- where the pages are: the sitemap's (``sitemap``, sitemap indexes and gzip too), or those reached by following
  links from ``url`` inside the URL prefixes of ``include`` (empty: the start URL's folder), never one matching
  ``exclude`` (a prefix, or a glob pattern such as ``*/print/*``). A crawl also visits every URL the last sync
  stored, so a page that failed today cannot make the pages it links to look gone;
- politely: robots.txt honoured for ``website.user_agent`` (a missing one allows all; one that cannot be fetched
  stops the sync, :class:`SourceUnavailable`), ``website.concurrency`` requests at once, ``website.delay_s``
  between two requests to a host (robots.txt's ``Crawl-delay`` when longer);
- only what changed: ``If-None-Match`` / ``If-Modified-Since`` from the last sync (a 304 is :class:`Unchanged`),
  and a sitemap page whose ``<lastmod>`` is the stored one is not fetched at all;
- once: redirects followed (at most :data:`MAX_REDIRECTS`, a loop is a failure), a page's ``<link
  rel=canonical>`` is its key, ``kb_id`` and ``url``, so a page reached under two URLs is stored once;
- its main content (:mod:`ingestion.sync.extract`): sections with their headings' anchors, so a citation opens
  ``url#anchor``; a linked PDF or Word file (or any registered format) under the same prefixes is read by the
  reader of its suffix (:func:`ingestion.readers.reader_for`).

Each article's metadata holds its ``format`` (``html``, ``pdf`` ...) and its ``sections``; the sync runner adds
the source's ``metadata`` and ``allowed``.

Example:
    >>> from ingestion.sync.config import SourceConfig
    >>> source = SourceConfig(name="docs", kind="website", url="https://docs.example.org/guide/index.html")
    >>> WebsiteReader(source).scope.includes
    ('https://docs.example.org/guide/',)
"""

from __future__ import annotations

import fnmatch
import importlib.util
import logging
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from ingestion.formats import document_suffixes, reader_entry
from ingestion.readers import DocumentReadError, Section, reader_for
from ingestion.sync.base import (
    Failed,
    Fetched,
    Gone,
    ItemState,
    ScanEvent,
    Skipped,
    SourceUnavailable,
    Unchanged,
)
from ingestion.sync.extract import extract_sections, parse_html
from ingestion.sync.robots import RobotsCache
from ingestion.sync.runner import sync_hash
from ingestion.sync.sitemap import SitemapEntry, read_sitemaps
from ragidx.article import SECTIONS, Article

if TYPE_CHECKING:
    import httpx

    from ingestion.sync.config import SourceConfig

__all__ = ["MAX_REDIRECTS", "Scope", "WebsiteReader", "normalise_url"]

logger = logging.getLogger(__name__)

MAX_REDIRECTS = 5
"""The most redirects followed from one URL."""
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
PAGE_SUFFIXES = frozenset({"", ".html", ".htm", ".xhtml", ".shtml", ".php", ".asp", ".aspx", ".jsp"})
"""Suffixes of a URL's path that name a web page (no suffix: ``/guide/``, ``/guide/install``)."""
CONTENT_TYPE_SUFFIXES = {
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "text/markdown": ".md",
    "text/plain": ".txt",
}
"""The document suffix of a Content-Type, for a linked file whose URL has no suffix."""


def normalise_url(url: str) -> str:
    """``url`` without its fragment, with its scheme and host in lower case, without a default port, and ``/``
    for an empty path: the form URLs are compared and stored in.

    Example:
        >>> normalise_url("HTTPS://Docs.Example.org:443/guide/a.html#install")
        'https://docs.example.org/guide/a.html'
    """
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    port = parts.port
    netloc = host if port is None or (scheme, port) in (("http", 80), ("https", 443)) else f"{host}:{port}"
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


@dataclass(frozen=True)
class Scope:
    """Which URLs belong to a website source: under one of ``includes`` (URL prefixes or glob patterns) and
    matching none of ``excludes``."""

    includes: tuple[str, ...]
    excludes: tuple[str, ...] = ()

    def why_not(self, url: str) -> str | None:
        """Why ``url`` is no part of the source (``"outside the include prefixes"``, ``"exclude pattern"``), or
        None when it is."""
        if not any(_matches(url, rule) for rule in self.includes):
            return "outside the include prefixes"
        if any(_matches(url, rule) for rule in self.excludes):
            return "exclude pattern"
        return None

    def __contains__(self, url: object) -> bool:
        return isinstance(url, str) and self.why_not(url) is None


def _matches(url: str, rule: str) -> bool:
    if any(c in rule for c in "*?["):
        return fnmatch.fnmatchcase(url, rule)
    return url.startswith(normalise_url(rule) if "://" in rule else rule)


@dataclass(frozen=True)
class _Task:
    """A URL to visit, with its sitemap ``<lastmod>`` when it came from one."""

    url: str
    lastmod: str | None = None


@dataclass
class _Visit:
    """What visiting one URL gave: its events, the URLs it is also known by, and the links found on it."""

    events: list[ScanEvent] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)


class _HostGate:
    """Spaces the requests to each host by a delay, across threads."""

    def __init__(self) -> None:
        self._next: dict[str, float] = {}
        self._lock = threading.Lock()

    def wait(self, host: str, delay: float) -> None:
        if delay <= 0:
            return
        with self._lock:
            now = time.monotonic()
            slot = max(now, self._next.get(host, now))
            self._next[host] = slot + delay
        if slot > now:
            time.sleep(slot - now)


class WebsiteReader:
    """Reads a website source (``kind = "website"``); see the module's docstring.

    Args:
        config: The source's settings (``url`` and/or ``sitemap``, ``include``, ``exclude``, ``metadata``,
            ``allowed`` and ``website``'s options).
        client: An HTTP client to fetch with (tests, a proxy); by default one is made per scan with the
            source's user agent and timeout.
    """

    def __init__(self, config: SourceConfig, *, client: httpx.Client | None = None) -> None:
        from ingestion.sync.extract import EXTRACTORS

        self.config = config
        self.options = config.website
        if self.options.extractor not in EXTRACTORS:
            raise ValueError(
                f"source {config.name!r}: unknown extractor {self.options.extractor!r}; use one of "
                f"{', '.join(EXTRACTORS)}"
            )
        if self.options.extractor == "trafilatura" and importlib.util.find_spec("trafilatura") is None:
            raise ValueError(f"source {config.name!r}: the trafilatura extractor needs pip install 'ragidx[sync]'")
        self.scope = Scope(tuple(config.include) or _default_includes(config), tuple(config.exclude))
        self._client = client
        self._gate = _HostGate()

    def scan(self, previous: Mapping[str, ItemState]) -> Iterator[ScanEvent]:
        """One event per URL of the site (see the module's docstring).

        Raises:
            SourceUnavailable: robots.txt or the sitemap could not be read; nothing is to be deleted.
        """
        import httpx

        client = self._client or httpx.Client(
            timeout=httpx.Timeout(self.options.timeout_s),
            headers={"User-Agent": self.options.user_agent},
            follow_redirects=False,
        )
        try:
            yield from self._scan(client, previous)
        finally:
            if self._client is None:
                client.close()

    # --- the crawl ----------------------------------------------------------------------------------------------
    def _scan(self, client: httpx.Client, previous: Mapping[str, ItemState]) -> Iterator[ScanEvent]:
        robots = RobotsCache(client, self.options.user_agent)
        for start in (self.config.sitemap, self.config.url):
            if start:
                robots.rules(start)  # the site's robots.txt first: unreachable, nothing is read or deleted
        emitted: set[str] = set()
        seen: set[str] = set()
        queue: deque[_Task] = deque()

        def emit(event: ScanEvent) -> Iterator[ScanEvent]:
            if event.key not in emitted:
                emitted.add(event.key)
                yield event

        def enqueue(task: _Task) -> None:
            if task.url not in seen:
                seen.add(task.url)
                queue.append(task)

        crawl = not self.config.sitemap
        if self.config.sitemap:
            for entry in read_sitemaps(self.config.sitemap, lambda url: self._fetch_sitemap(client, url)):
                for event in self._sitemap_entry(entry, previous, seen, enqueue):
                    yield from emit(event)
        if self.config.url:
            enqueue(_Task(normalise_url(self.config.url)))
        for key in sorted(previous):
            if crawl or _document_suffix(key) is not None:
                enqueue(_Task(key))  # a crawl revisits what it stored; a sitemap site its linked files

        pool = ThreadPoolExecutor(max_workers=self.options.concurrency, thread_name_prefix="ragidx-sync-web")
        pending: set[Future[_Visit]] = set()
        visited = 0
        try:
            while queue or pending:
                while queue and len(pending) < 2 * self.options.concurrency:
                    task = queue.popleft()
                    if visited >= self.options.max_pages:
                        yield from emit(Skipped(task.url, f"over the max_pages limit ({self.options.max_pages})"))
                        continue
                    visited += 1
                    pending.add(pool.submit(self._visit, client, robots, task, previous))
                if not pending:
                    continue
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    visit = future.result()  # SourceUnavailable (another host's robots.txt) ends the scan
                    seen.update(visit.aliases)
                    for event in visit.events:
                        yield from emit(event)
                    for link in visit.links:
                        if crawl or _document_suffix(link) is not None:
                            enqueue(_Task(link))
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _sitemap_entry(
        self,
        entry: SitemapEntry,
        previous: Mapping[str, ItemState],
        seen: set[str],
        enqueue: Callable[[_Task], None],
    ) -> Iterator[ScanEvent]:
        url = normalise_url(entry.loc)
        why_not = self.scope.why_not(url)
        if why_not is not None:
            seen.add(url)
            yield Skipped(url, why_not)
            return
        stored = previous.get(url)
        if stored is not None and entry.lastmod is not None and stored.lastmod == entry.lastmod:
            seen.add(url)
            yield Unchanged(url, stored)  # the sitemap says it has not changed: not fetched
            return
        enqueue(_Task(url, entry.lastmod))

    def _fetch_sitemap(self, client: httpx.Client, url: str) -> bytes:
        import httpx

        try:
            response = client.get(url, follow_redirects=True)
        except httpx.HTTPError as exc:
            raise SourceUnavailable(
                f"the sitemap {url} could not be fetched ({_error_name(exc)}): nothing was changed; check that the "
                "site is up, the next sync tries again"
            ) from None
        if response.status_code != 200:
            raise SourceUnavailable(
                f"the sitemap {url} answered {response.status_code}: nothing was changed; check its address (the "
                "next sync tries again)"
            )
        return response.content

    # --- one URL ------------------------------------------------------------------------------------------------
    def _visit(
        self, client: httpx.Client, robots: RobotsCache, task: _Task, previous: Mapping[str, ItemState]
    ) -> _Visit:
        """Fetch one URL, following its redirects: its event, aliases and links."""
        import httpx

        visit = _Visit()
        url, chain = task.url, [task.url]
        while True:
            why_not = self.scope.why_not(url)
            if why_not is not None:
                reason = why_not if url == task.url else f"redirects outside the source, to {url}"
                visit.events.append(Skipped(task.url, reason))
                return visit
            rules = robots.rules(url)
            if not rules.allows(url):
                visit.events.append(Skipped(url, "robots.txt"))
                return visit
            suffix = PurePosixPath(urlsplit(url).path).suffix.lower()
            if suffix not in PAGE_SUFFIXES and _document_suffix(url) is None:
                visit.events.append(Skipped(url, f"not a page or a document ({suffix} file)"))
                return visit
            stored = previous.get(url)
            self._gate.wait(urlsplit(url).netloc, max(self.options.delay_s, rules.crawl_delay))
            try:
                with client.stream("GET", url, headers=_conditional(stored)) as response:
                    location = response.headers.get("location")
                    if response.status_code in (301, 302, 303, 307, 308) and location:
                        target = normalise_url(urljoin(url, location))
                        if target in chain:
                            loop = " -> ".join([*chain, target])
                            visit.events.append(
                                Failed(task.url, f"redirect loop ({loop}): fix the redirects on the site", None)
                            )
                            return visit
                        if len(chain) > MAX_REDIRECTS:
                            visit.events.append(
                                Failed(task.url, f"more than {MAX_REDIRECTS} redirects: link to the final page")
                            )
                            return visit
                        chain.append(target)
                        visit.aliases.append(target)
                        url = target
                        continue
                    visit.events.extend(self._answer(response, url, task, stored, visit))
                    return visit
            except httpx.TimeoutException:
                reason = (
                    f"no answer within {self.options.timeout_s:g} s: retried at the next sync; raise the source's "
                    "website.timeout_s if the site is slow"
                )
                visit.events.append(Failed(task.url, reason))
                return visit
            except httpx.HTTPError as exc:
                reason = (
                    f"could not be fetched ({_error_name(exc)}): retried at the next sync; check that the site is up"
                )
                visit.events.append(Failed(task.url, reason))
                return visit

    def _answer(
        self, response: httpx.Response, url: str, task: _Task, stored: ItemState | None, visit: _Visit
    ) -> list[ScanEvent]:
        """The event of a final (not redirecting) answer to ``url``."""
        status = response.status_code
        if status == 304 and stored is not None:
            visit.links.extend(stored.links)  # no body to read them from: the links it had when last read
            return [
                Unchanged(
                    url,
                    replace(
                        stored,
                        etag=response.headers.get("etag") or stored.etag,
                        last_modified=response.headers.get("last-modified") or stored.last_modified,
                        lastmod=task.lastmod or stored.lastmod,
                    ),
                )
            ]
        if status in (404, 410):
            return [Gone(url, status)]
        if status == 429 or status >= 500:
            return [Failed(url, f"the server answered {status}: retried at the next sync", status)]
        if 400 <= status < 500:
            reason = (
                f"the server refused it ({status}): check that the site lets {self.options.user_agent!r} read it, "
                "or exclude the URL"
            )
            return [Failed(url, reason, status)]
        if status != 200:
            return [Failed(url, f"unexpected answer {status}: retried at the next sync", status)]
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.options.max_bytes:
            return [Skipped(url, f"over max size ({_size(int(declared))} > {_size(self.options.max_bytes)})")]
        is_page = content_type in HTML_TYPES or (not content_type and _document_suffix(url) is None)
        suffix = None if is_page else (_document_suffix(url) or CONTENT_TYPE_SUFFIXES.get(content_type))
        if not is_page and suffix is None:
            return [Skipped(url, f"content type {content_type or 'unknown'}")]
        body = bytearray()
        for chunk in response.iter_bytes():
            body.extend(chunk)
            if len(body) > self.options.max_bytes:
                return [Skipped(url, f"over max size (more than {_size(self.options.max_bytes)})")]
        state = ItemState(
            key=url,
            kb_id=url,
            content_hash="",
            etag=response.headers.get("etag"),
            last_modified=response.headers.get("last-modified"),
            lastmod=task.lastmod,
        )
        if is_page:
            return self._page(bytes(body), url, state, visit)
        assert suffix is not None
        return [self._document(bytes(body), url, suffix, state)]

    def _page(self, body: bytes, url: str, state: ItemState, visit: _Visit) -> list[ScanEvent]:
        soup = parse_html(body)
        robots_meta = " ".join(str(m.get("content", "")) for m in soup.select("meta[name=robots]")).lower()
        if "noindex" in robots_meta:
            return [Skipped(url, "the page asks not to be indexed (meta robots noindex)")]
        base_tag = soup.select_one("base[href]")
        base = urljoin(url, str(base_tag["href"])) if base_tag is not None else url
        if "nofollow" not in robots_meta:
            visit.links.extend(_links(soup, base, self.scope))
        key = url
        canonical_tag = soup.select_one("link[rel~=canonical][href]")
        if canonical_tag is not None:
            canonical = normalise_url(urljoin(base, str(canonical_tag["href"])))
            if canonical in self.scope:
                key = canonical
                visit.aliases.append(canonical)
        try:
            title, sections = extract_sections(soup, self.options.extractor)
        except Exception as exc:  # a page the extractor cannot read is this page's failure
            return [Failed(key, f"its HTML could not be read ({type(exc).__name__}): check the page")]
        article = self._article(key, title, sections, "html")
        if article is None:
            return [Skipped(key, "no text in its main content")]
        links = tuple(visit.links)  # kept with the page's state: a 304 later still leads the crawl to them
        return [Fetched(key, article, replace(state, key=key, kb_id=key, content_hash=sync_hash(article), links=links))]

    def _document(self, body: bytes, url: str, suffix: str, state: ItemState) -> ScanEvent:
        """A linked file read by the reader of its suffix, from a temporary copy."""
        entry = reader_entry(suffix)
        if entry is None:
            return Skipped(url, f"no reader for {suffix} files")
        if entry.magic is not None and not body.lstrip().startswith(entry.magic):
            return Failed(url, f"not {entry.kind} (it starts {body[:8]!r}): check the link")
        with tempfile.TemporaryDirectory(prefix="ragidx-sync-") as folder:
            path = Path(folder) / f"document{suffix}"
            path.write_bytes(body)
            try:
                documents = reader_for(suffix, max_file_bytes=self.options.max_bytes).load_data(path)
            except DocumentReadError as exc:
                return Failed(url, str(exc))
            except Exception as exc:  # a reader's failure on this file is this file's failure
                return Failed(url, f"could not be read ({type(exc).__name__}): check that it opens in its application")
        title = str(documents[0].metadata.get("title") or "") if documents else ""
        if not title or title == path.stem:
            title = PurePosixPath(urlsplit(url).path).stem or url
        sections = [
            Section(
                list(d.metadata.get("heading_path") or []), d.text, d.metadata.get("page"), d.metadata.get("anchor")
            )
            for d in documents
        ]
        article = self._article(url, title, sections, entry.format)
        if article is None:
            return Skipped(url, "no text in it")
        return Fetched(url, article, replace(state, content_hash=sync_hash(article)))

    def _article(self, key: str, title: str, sections: list[Section], fmt: str) -> Article | None:
        """The article of a page's or file's sections (None when they hold no text), with its format and where
        each section starts (``sections``) for citations."""
        parts: list[str] = []
        starts: list[dict[str, Any]] = []
        offset = 0
        for section in sections:
            text = section.text.strip()
            if not text:
                continue
            if parts:
                offset += 2
            start: dict[str, Any] = {
                "start": offset,
                "heading_path": list(section.heading_path),
                "section": section.heading_path[-1] if section.heading_path else "",
            }
            if section.page is not None:
                start["page"] = section.page
            if section.anchor:
                start["anchor"] = section.anchor
            starts.append(start)
            parts.append(text)
            offset += len(text)
        if not parts:
            return None
        metadata: dict[str, Any] = {"format": fmt, SECTIONS: starts}  # the runner adds the source's metadata
        title = title or PurePosixPath(urlsplit(key).path).stem or key
        return Article(kb_id=key, title=title, url=key, content="\n\n".join(parts), metadata=metadata)


def _default_includes(config: SourceConfig) -> tuple[str, ...]:
    """The start URL's folder (``https://x.org/docs/`` for ``https://x.org/docs/index.html``), else the
    sitemap's site."""
    if config.url:
        url = normalise_url(config.url)
        return (url[: url.rindex("/") + 1],)
    assert config.sitemap is not None
    parts = urlsplit(normalise_url(config.sitemap))
    return (f"{parts.scheme}://{parts.netloc}/",)


def _document_suffix(url: str) -> str | None:
    """The suffix of a document (not a web page) that a reader reads, named by ``url``'s path, or None."""
    suffix = PurePosixPath(urlsplit(url).path).suffix.lower()
    if not suffix or suffix in PAGE_SUFFIXES:
        return None
    return suffix if suffix in document_suffixes() else None


def _links(soup: Any, base: str, scope: Scope) -> list[str]:
    """The http(s) links of a page inside ``scope``, normalised, each once, in order."""
    links: dict[str, None] = {}
    for anchor in soup.find_all("a", href=True):
        href = str(anchor["href"]).strip()
        if not href or href.startswith(("#", "mailto:", "javascript:", "tel:")):
            continue
        url = normalise_url(urljoin(base, href))
        if url.startswith(("http://", "https://")) and scope.why_not(url) != "outside the include prefixes":
            links[url] = None
    return list(links)


def _conditional(stored: ItemState | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if stored is not None and stored.etag:
        headers["If-None-Match"] = stored.etag
    if stored is not None and stored.last_modified:
        headers["If-Modified-Since"] = stored.last_modified
    return headers


def _error_name(exc: Exception) -> str:
    import httpx

    if isinstance(exc, httpx.ConnectError):
        return "connection refused or host not found"
    return type(exc).__name__


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MB" if n >= 2**20 else f"{n / 1024:,.0f} KB"
