"""A website's sitemap: its pages and their ``<lastmod>``, through sitemap indexes and gzip.

A sitemap that cannot be read (an error status, a timeout, a file that is not a sitemap) makes the whole source
unavailable for this sync (:class:`SourceUnavailable`): its pages would otherwise look gone and be deleted.

Example:
    >>> xml = b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>https://x.org/a</loc>'
    >>> xml += b'<lastmod>2026-11-01</lastmod></url></urlset>'
    >>> parse_sitemap(xml, "https://x.org/sitemap.xml")
    ([SitemapEntry(loc='https://x.org/a', lastmod='2026-11-01')], [])
"""

from __future__ import annotations

import gzip
import io
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass

from ingestion.sync.base import SourceUnavailable

__all__ = ["MAX_SITEMAPS", "SitemapEntry", "parse_sitemap", "read_sitemaps"]

MAX_SITEMAPS = 1000
"""The most sitemap files one sync reads (an index of indexes included)."""
MAX_SITEMAP_BYTES = 100 * 2**20
"""The most a sitemap may be, uncompressed (the protocol allows 50 MB)."""


@dataclass(frozen=True)
class SitemapEntry:
    """One page a sitemap lists, with its ``<lastmod>`` as written (None when it has none)."""

    loc: str
    lastmod: str | None = None


def parse_sitemap(raw: bytes, url: str) -> tuple[list[SitemapEntry], list[str]]:
    """(pages, child sitemaps) of one sitemap file: a ``<urlset>`` lists pages, a ``<sitemapindex>`` sitemaps.
    Gzip content (by its magic bytes, whatever the URL or Content-Type says) is decompressed first.

    Raises:
        SourceUnavailable: it is neither a urlset nor a sitemap index, or not XML.
    """
    if raw[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as unzipped:
                raw = unzipped.read(MAX_SITEMAP_BYTES + 1)
        except (OSError, EOFError) as exc:
            raise SourceUnavailable(f"the sitemap {url} is not valid gzip ({exc}): check the file") from None
        if len(raw) > MAX_SITEMAP_BYTES:
            raise SourceUnavailable(f"the sitemap {url} is over {MAX_SITEMAP_BYTES // 2**20} MB: split it")
    try:
        root = ET.fromstring(raw)
    except ET.ParseError as exc:
        raise SourceUnavailable(f"the sitemap {url} is not XML ({exc}): check its address and content") from None
    kind = _local(root.tag)
    if kind not in ("urlset", "sitemapindex"):
        raise SourceUnavailable(f"{url} is not a sitemap (its root element is <{kind}>): check its address")
    pages: list[SitemapEntry] = []
    children: list[str] = []
    for item in root:
        fields = {_local(child.tag): (child.text or "").strip() for child in item}
        loc = fields.get("loc")
        if not loc:
            continue
        if kind == "sitemapindex":
            children.append(loc)
        else:
            pages.append(SitemapEntry(loc, fields.get("lastmod") or None))
    return pages, children


def read_sitemaps(url: str, fetch: Callable[[str], bytes]) -> list[SitemapEntry]:
    """Every page of the sitemap at ``url`` and of the sitemaps its indexes name (each read once, at most
    :data:`MAX_SITEMAPS`), in order, each page once.

    Args:
        url: The sitemap (or sitemap index) URL.
        fetch: Returns a URL's body, or raises :class:`SourceUnavailable` saying why it could not.
    """
    pages: dict[str, SitemapEntry] = {}
    queue, seen = [url], {url}
    while queue:
        current = queue.pop(0)
        entries, children = parse_sitemap(fetch(current), current)
        for entry in entries:
            pages.setdefault(entry.loc, entry)
        for child in children:
            if child in seen:
                continue
            if len(seen) >= MAX_SITEMAPS:
                raise SourceUnavailable(f"{url} names more than {MAX_SITEMAPS} sitemaps: list fewer, larger ones")
            seen.add(child)
            queue.append(child)
    return list(pages.values())


def _local(tag: str) -> str:
    """An XML tag without its namespace."""
    return tag.rsplit("}", 1)[-1]
