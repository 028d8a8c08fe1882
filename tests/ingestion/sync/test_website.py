"""The website source against a real HTTP server on loopback: sitemaps, crawling, robots.txt, conditional requests,
redirects and canonical URLs, main content only, linked PDFs, and what a failure may never do (delete)."""

from __future__ import annotations

import gzip
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingestion.sync.base import Failed, Fetched, Gone, ItemState, ScanEvent, Skipped, SourceUnavailable, Unchanged
from ingestion.sync.config import SourceConfig, WebsiteOptions
from ingestion.sync.website import WebsiteReader
from ragidx.article import SECTIONS
from tests.ingestion.sync.site_server import Site, serve_site

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "docs"
AGENT = "ragidx-test"


def page(title: str, body: str, *, head: str = "") -> str:
    """A help-site page: navigation, header, sidebar, cookie banner and footer around the article."""
    return f"""<!doctype html><html><head><title>{title} | Example Help</title>{head}</head><body>
<header class="site-header"><a href="/">Example Help</a> <form><input name=q></form></header>
<nav class="menu"><a href="/docs/index.html">Docs home</a> <a href="/">Site home</a></nav>
<div class="cookie-banner">We use cookies to improve your experience. <button>Accept</button></div>
<main><article><h1 id="top">{title}</h1>{body}
<div class="article-votes">Was this article helpful? <button>Yes</button> <button>No</button></div>
<a class="edit-this-page" href="https://git.example/edit">Edit this page</a></article></main>
<aside class="sidebar">Related articles: Something else entirely</aside>
<footer>Copyright 2026 Example Corp. All rights reserved.</footer></body></html>"""


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with serve_site(tmp_path / "site") as served:
        served.root.mkdir()
        served.write("/robots.txt", f"User-agent: {AGENT}\nDisallow: /docs/private/\n")
        yield served


def reader(site: Site, **fields: Any) -> WebsiteReader:
    options = fields.pop("website", {})
    fields.setdefault("url", site.url("/docs/index.html"))
    config = SourceConfig(name="site", kind="website", website=WebsiteOptions(user_agent=AGENT, **options), **fields)
    return WebsiteReader(config)


def scan(site: Site, previous: dict[str, ItemState] | None = None, **fields: Any) -> dict[str, ScanEvent]:
    events = list(reader(site, **fields).scan(previous or {}))
    keys = [e.key for e in events]
    assert len(keys) == len(set(keys)), "one event per URL"
    return {e.key: e for e in events}


def states(events: dict[str, ScanEvent]) -> dict[str, ItemState]:
    return {k: e.state for k, e in events.items() if isinstance(e, Fetched | Unchanged)}


def kinds(events: dict[str, ScanEvent], site: Site) -> dict[str, str]:
    return {k.removeprefix(site.base): type(e).__name__ for k, e in events.items()}


# --- where the pages are ----------------------------------------------------------------------------------------
def test_a_sitemap_index_with_a_gzipped_sitemap_lists_the_pages_and_only_they_are_fetched(site: Site) -> None:
    for name in "abc":
        site.write(f"/docs/{name}.html", page(f"Page {name}", f"<p>Text of {name}.</p>"))
    site.write("/docs/unlisted.html", page("Unlisted", "<p>Not in the sitemap.</p>"))
    urlset = '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{}</urlset>'
    entry = "<url><loc>{}</loc><lastmod>2026-11-01</lastmod></url>"
    site.write("/sitemap-1.xml", urlset.format(entry.format(site.url("/docs/a.html"))))
    gz = urlset.format("".join(entry.format(site.url(f"/docs/{n}.html")) for n in "bc"))
    site.write("/sitemap-2.xml.gz", gzip.compress(gz.encode()))
    index = '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{}</sitemapindex>'
    children = "".join(f"<sitemap><loc>{site.url(p)}</loc></sitemap>" for p in ("/sitemap-1.xml", "/sitemap-2.xml.gz"))
    site.write("/sitemap.xml", index.format(children))

    events = scan(site, url=None, sitemap=site.url("/sitemap.xml"), include=[site.url("/docs/")])

    assert kinds(events, site) == {"/docs/a.html": "Fetched", "/docs/b.html": "Fetched", "/docs/c.html": "Fetched"}
    assert "/docs/unlisted.html" not in site.paths()
    assert {e.state.lastmod for e in events.values() if isinstance(e, Fetched)} == {"2026-11-01"}

    site.requests.clear()
    again = scan(site, states(events), url=None, sitemap=site.url("/sitemap.xml"), include=[site.url("/docs/")])
    assert set(kinds(again, site).values()) == {"Unchanged"}  # the same <lastmod>: not fetched at all
    assert not [p for p in site.paths() if p.startswith("/docs/")]


def test_a_crawl_follows_links_inside_the_include_prefix_only(site: Site) -> None:
    site.write(
        "/docs/index.html",
        page(
            "Docs",
            '<p><a href="a.html#part">A</a> <a href="sub/b.html">B</a> <a href="/blog/post.html">Blog</a>'
            ' <a href="http://example.invalid/x.html">Elsewhere</a> <a href="mailto:x@y">Mail</a></p>',
        ),
    )
    site.write("/docs/a.html", page("A", '<p>Page A links back <a href="index.html">home</a>.</p>'))
    site.write("/docs/sub/b.html", page("B", "<p>Page B.</p>"))
    site.write("/blog/post.html", page("Post", "<p>Not documentation.</p>"))

    events = scan(site)

    assert kinds(events, site) == {
        "/docs/index.html": "Fetched",
        "/docs/a.html": "Fetched",
        "/docs/sub/b.html": "Fetched",
    }
    assert "/blog/post.html" not in site.paths()
    assert site.paths().count("/docs/a.html") == 1  # the link with a fragment is the same page


def test_exclude_patterns_and_robots_txt_skip_pages_without_fetching_them(site: Site) -> None:
    site.write(
        "/docs/index.html",
        page("Docs", '<a href="private/secret.html">S</a> <a href="print/a.html">P</a> <a href="ok.html">OK</a>'),
    )
    for path in ("/docs/private/secret.html", "/docs/print/a.html", "/docs/ok.html"):
        site.write(path, page("X", "<p>Text.</p>"))

    events = scan(site, exclude=["*/print/*"])

    assert kinds(events, site) == {
        "/docs/index.html": "Fetched",
        "/docs/ok.html": "Fetched",
        "/docs/private/secret.html": "Skipped",
        "/docs/print/a.html": "Skipped",
    }
    assert events[site.url("/docs/private/secret.html")] == Skipped(site.url("/docs/private/secret.html"), "robots.txt")
    assert events[site.url("/docs/print/a.html")] == Skipped(site.url("/docs/print/a.html"), "exclude pattern")
    assert "/docs/private/secret.html" not in site.paths() and "/docs/print/a.html" not in site.paths()
    assert site.headers_of("/docs/index.html")["user-agent"] == AGENT


def test_robots_txt_rules_for_other_agents_do_not_apply_and_a_missing_one_allows_all(site: Site) -> None:
    site.write("/robots.txt", "User-agent: otherbot\nDisallow: /\n")
    site.write("/docs/index.html", page("Docs", "<p>Welcome.</p>"))
    assert kinds(scan(site), site) == {"/docs/index.html": "Fetched"}
    (site.root / "robots.txt").unlink()  # 404: everything allowed
    assert kinds(scan(site), site) == {"/docs/index.html": "Fetched"}


# --- only what changed ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("etags", [True, False], ids=["etag", "last-modified"])
def test_a_second_scan_sends_the_validators_and_a_304_is_unchanged(site: Site, etags: bool) -> None:
    site.etags = etags
    site.write("/docs/index.html", page("Docs", '<a href="a.html">A</a>'))
    site.write("/docs/a.html", page("A", "<p>Text A.</p>"))
    first = scan(site)
    assert set(kinds(first, site).values()) == {"Fetched"}

    site.requests.clear()
    second = scan(site, states(first))

    assert kinds(second, site) == {"/docs/index.html": "Unchanged", "/docs/a.html": "Unchanged"}
    sent = site.headers_of("/docs/a.html")
    assert ("if-none-match" in sent) if etags else ("if-modified-since" in sent)
    assert second[site.url("/docs/a.html")].state.kb_id == first[site.url("/docs/a.html")].state.kb_id


def test_a_changed_page_is_fetched_again_with_a_new_hash(site: Site) -> None:
    site.etags = True
    site.write("/docs/index.html", page("Docs", "<p>Version one.</p>"))
    first = scan(site)
    site.write("/docs/index.html", page("Docs", "<p>Version two.</p>"))
    second = scan(site, states(first))
    event = second[site.url("/docs/index.html")]
    assert isinstance(event, Fetched)
    assert event.state.content_hash != first[site.url("/docs/index.html")].state.content_hash
    assert "Version two." in event.article.content


# --- one page, one key ------------------------------------------------------------------------------------------
def test_redirects_are_followed_and_the_canonical_url_is_the_one_key(site: Site) -> None:
    site.write(
        "/docs/index.html",
        page("Docs", '<a href="old.html">Old</a> <a href="alias.html">Alias</a> <a href="new.html">New</a>'),
    )
    site.redirects["/docs/old.html"] = "/docs/new.html"
    site.write("/docs/new.html", page("New", "<p>The page.</p>"))
    canonical = f'<link rel="canonical" href="{site.url("/docs/new.html")}">'
    site.write("/docs/alias.html", page("New", "<p>The page.</p>", head=canonical))

    events = scan(site)

    assert kinds(events, site) == {"/docs/index.html": "Fetched", "/docs/new.html": "Fetched"}
    fetched = events[site.url("/docs/new.html")]
    assert isinstance(fetched, Fetched)
    assert fetched.article.kb_id == fetched.article.url == site.url("/docs/new.html")


def test_a_redirect_loop_is_a_failure_that_names_the_loop(site: Site) -> None:
    site.write("/docs/index.html", page("Docs", '<a href="loop-a.html">Loop</a>'))
    site.redirects["/docs/loop-a.html"] = "/docs/loop-b.html"
    site.redirects["/docs/loop-b.html"] = "/docs/loop-a.html"

    event = scan(site)[site.url("/docs/loop-a.html")]

    assert isinstance(event, Failed)
    assert "redirect loop" in event.reason and "loop-b.html" in event.reason and "fix the redirects" in event.reason
    assert site.paths().count("/docs/loop-a.html") == 1


def test_a_redirect_out_of_the_source_is_skipped(site: Site) -> None:
    site.write("/docs/index.html", page("Docs", '<a href="moved.html">Moved</a>'))
    site.redirects["/docs/moved.html"] = "/blog/moved.html"
    event = scan(site)[site.url("/docs/moved.html")]
    assert isinstance(event, Skipped) and "redirects outside the source" in event.reason


# --- main content only ------------------------------------------------------------------------------------------
def test_the_article_is_the_main_content_with_its_sections_anchors(site: Site) -> None:
    site.write(
        "/docs/index.html",
        page("Printing", '<p>Open the print dialog.</p><h2 id="options">Options</h2><p>Pick the pages.</p>'),
    )

    event = scan(site)[site.url("/docs/index.html")]

    assert isinstance(event, Fetched)
    article = event.article
    assert article.title == "Printing"
    for chrome in (
        "Docs home",
        "cookies",
        "Was this article helpful",
        "Edit this page",
        "Related articles",
        "Copyright",
    ):
        assert chrome not in article.content
    assert "Open the print dialog." in article.content and "Pick the pages." in article.content
    anchors = [s.get("anchor") for s in article.metadata[SECTIONS]]
    assert anchors == ["top", "options"]
    assert article.metadata["format"] == "html"


def test_linked_pdf_and_word_files_are_read_by_their_readers_and_other_files_skipped(site: Site) -> None:
    site.write("/docs/guide.pdf", (FIXTURES / "guide.pdf").read_bytes())
    site.write("/docs/guide.docx", (FIXTURES / "guide.docx").read_bytes())
    site.write("/docs/archive", b"PK\x03\x04 not a page")  # no suffix: its Content-Type decides
    links = '<a href="guide.pdf">PDF</a> <a href="guide.docx">Word</a> <a href="logo.png">Logo</a>'
    links += ' <a href="archive">Zip</a>'
    site.write("/docs/index.html", page("Docs", links))

    events = scan(site)

    pdf = events[site.url("/docs/guide.pdf")]
    assert isinstance(pdf, Fetched)
    assert pdf.article.metadata["format"] == "pdf"
    assert pdf.article.url == site.url("/docs/guide.pdf")
    assert any(s.get("page") for s in pdf.article.metadata[SECTIONS])
    docx = events[site.url("/docs/guide.docx")]
    assert isinstance(docx, Fetched) and docx.article.metadata["format"] == "docx"
    assert any(s.get("heading_path") for s in docx.article.metadata[SECTIONS])
    assert events[site.url("/docs/logo.png")] == Skipped(
        site.url("/docs/logo.png"), "not a page or a document (.png file)"
    )
    assert "/docs/logo.png" not in site.paths()
    assert events[site.url("/docs/archive")] == Skipped(
        site.url("/docs/archive"), "content type application/octet-stream"
    )


# --- failures never delete --------------------------------------------------------------------------------------
def test_a_404_is_gone_a_500_is_failed_and_a_failed_page_does_not_hide_what_it_links_to(site: Site) -> None:
    site.write("/docs/index.html", page("Docs", '<a href="a.html">A</a> <a href="b.html">B</a>'))
    site.write("/docs/a.html", page("A", "<p>A.</p>"))
    site.write("/docs/b.html", page("B", "<p>B.</p>"))
    first = states(scan(site))

    (site.root / "docs" / "b.html").unlink()
    site.status["/docs/index.html"] = 500  # the only page linking to a.html

    events = scan(site, first)

    assert kinds(events, site) == {"/docs/index.html": "Failed", "/docs/a.html": "Unchanged", "/docs/b.html": "Gone"}
    failed = events[site.url("/docs/index.html")]
    assert isinstance(failed, Failed) and failed.status == 500 and "retried at the next sync" in failed.reason
    assert events[site.url("/docs/b.html")] == Gone(site.url("/docs/b.html"), 404)


def test_an_unreachable_robots_txt_makes_the_source_unavailable(site: Site) -> None:
    site.write("/docs/index.html", page("Docs", "<p>Text.</p>"))
    site.status["/robots.txt"] = 503
    with pytest.raises(SourceUnavailable, match="robots.txt answered 503"):
        scan(site)
    assert "/docs/index.html" not in site.paths()


def test_a_site_that_is_down_makes_the_source_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed when the block ends: nothing listens there
    config = SourceConfig(name="down", kind="website", url=f"http://127.0.0.1:{port}/docs/")
    with pytest.raises(SourceUnavailable, match="could not be fetched"):
        list(WebsiteReader(config).scan({}))


def test_a_failed_sitemap_makes_the_source_unavailable(site: Site) -> None:
    site.status["/sitemap.xml"] = 502
    with pytest.raises(SourceUnavailable, match="sitemap .* answered 502"):
        scan(site, url=None, sitemap=site.url("/sitemap.xml"))


# --- limits -----------------------------------------------------------------------------------------------------
def test_pages_over_the_size_limit_or_the_page_limit_are_skipped(site: Site) -> None:
    site.write("/docs/index.html", page("Docs", '<a href="big.html">Big</a> <a href="c.html">C</a>'))
    site.write("/docs/big.html", page("Big", "<p>" + "word " * 2000 + "</p>"))
    site.write("/docs/c.html", page("C", "<p>C.</p>"))

    events = scan(site, website={"max_bytes": 4096, "max_pages": 2})

    assert kinds(events, site) == {
        "/docs/index.html": "Fetched",
        "/docs/big.html": "Skipped",
        "/docs/c.html": "Skipped",
    }
    big, c = events[site.url("/docs/big.html")], events[site.url("/docs/c.html")]
    assert isinstance(big, Skipped) and "over max size" in big.reason
    assert isinstance(c, Skipped) and "max_pages" in c.reason


def test_a_page_linked_only_from_unchanged_pages_is_still_found(site: Site) -> None:
    # a first sync killed after the hub was stored and before what it links to was: the hub now answers 304, so its
    # links come from its stored state
    site.etags = True
    site.write("/docs/index.html", page("Docs", '<a href="a.html">A</a> <a href="b.html">B</a>'))
    site.write("/docs/a.html", page("A", "<p>Text A.</p>"))
    site.write("/docs/b.html", page("B", "<p>Text B.</p>"))
    first = states(scan(site))
    hub = site.url("/docs/index.html")
    assert {site.url("/docs/a.html"), site.url("/docs/b.html")} <= set(first[hub].links)

    site.requests.clear()
    second = scan(site, {hub: first[hub]})  # only the hub was stored

    assert kinds(second, site) == {
        "/docs/index.html": "Unchanged",
        "/docs/a.html": "Fetched",
        "/docs/b.html": "Fetched",
    }
    assert second[hub].state.links == first[hub].links  # kept for the next 304
