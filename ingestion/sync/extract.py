"""A web page's main content as sections: the theme's main region, or trafilatura's guess.

Two extractors, chosen by a website source's ``extractor`` option:

- ``"theme"``: the main region of the documentation theme that made the page (Sphinx ``div[role=main]`` /
  ``.body``, MkDocs ``.md-content``, Docusaurus ``.theme-doc-markdown``, DocBook's page without its
  ``.navheader`` / ``.navfooter`` as the PostgreSQL manual has it, help-centre ``article``), without the theme's
  own widgets ("edit this page", heading permalinks, previous/next links, feedback); a page of no known theme
  gives its ``<main>``, ``role=main`` or ``<article>``, and one with none of these trafilatura's guess.
- ``"trafilatura"``: trafilatura's main text (as HTML, tables and formatting kept) for every page.

``"auto"`` is ``"theme"``: on the PostgreSQL 15 manual (``benchmarks/sync_site.py``) both keep navigation out
of every page, but trafilatura turns headings into paragraphs or code (1 % of the headings and none of their
anchors survive against 100 %), so its sections cannot be cited at ``url#anchor``.

Either way the region is read by :func:`ingestion.readers.html_sections`, as a ``.html`` file is: one section
per heading with the heading's ``id`` as ``anchor``, tables as Markdown rows, navigation, footers, sidebars,
cookie banners and "Was this helpful?" dropped.

Example:
    >>> page = '<html><title>Install</title><nav>Home</nav><main><h1 id="i">Install</h1><p>Run it.</p></main>'
    >>> title, sections = extract_sections(page)
    >>> title, sections[0].anchor, sections[0].text
    ('Install', 'i', '# Install\\n\\nRun it.')
"""

from __future__ import annotations

import html as html_escape
import importlib.util
import re
from dataclasses import dataclass
from typing import Any, Literal

from ingestion.readers import Section, html_sections

__all__ = ["EXTRACTORS", "THEMES", "Extractor", "Theme", "extract_sections", "parse_html", "theme_of"]

Extractor = Literal["auto", "theme", "trafilatura"]
EXTRACTORS: tuple[str, ...] = ("auto", "theme", "trafilatura")
"""The values of a website source's ``extractor`` option."""


@dataclass(frozen=True)
class Theme:
    """A documentation or help-centre theme: how to recognise its pages, where its main content is, and the
    widgets inside that region that are no part of the article."""

    name: str
    detect: str
    """A CSS selector that matches only this theme's pages."""
    main: tuple[str, ...]
    """CSS selectors of the main region, the first that matches wins (empty: the body)."""
    drop: tuple[str, ...] = ()
    """CSS selectors of what to remove from the region."""


THEMES: tuple[Theme, ...] = (
    Theme(
        "docusaurus",
        ".theme-doc-markdown, [class*=docusaurus], meta[name=generator][content*=Docusaurus]",
        (".theme-doc-markdown", "article", "main"),
        (
            ".theme-edit-this-page",
            ".theme-doc-footer",
            ".pagination-nav",
            ".theme-doc-breadcrumbs",
            ".theme-doc-toc-mobile",
        ),
    ),
    Theme(
        "mkdocs",
        ".md-content, meta[name=generator][content*=mkdocs]",
        ("article.md-content__inner", ".md-content", "div[role=main]", "main"),
        (".md-content__button", ".md-source-file", ".md-feedback", ".md-footer", ".md-sidebar"),
    ),
    Theme(
        "sphinx",
        "div[role=main], div.sphinxsidebar, .wy-nav-content, script#documentation_options",
        ("div[role=main]", "div.body", "div.document", "main"),
        (".related", ".sphinxsidebar", ".rst-footer-buttons", ".wy-breadcrumbs", "footer", ".footer"),
    ),
    Theme(
        "docbook",
        "div.navheader, div.navfooter, meta[name=generator][content*=DocBook]",
        ("#docContent", "body"),
        (".navheader", ".navfooter", "a.indexterm"),
    ),
    Theme(
        "helpcentre",
        "article.article, .article-body, .article__body",
        ("article.article", "article", ".article-body", "main"),
        (".article-votes", ".article-more-questions", ".article-relatives", ".article-subscribe", ".article-share"),
    ),
)
"""The known themes, in the order they are tried; a program may pass its own to :func:`extract_sections`."""

_ALWAYS_DROP = ("a.headerlink", "a.hash-link", "a.anchor-link", "a.anchorjs-link", ".headerlink")
"""Heading permalinks ("¶", "#") of every theme: they would end up in the heading's text."""
_GENERIC_MAIN = ("main", "[role=main]", "article")
_HEADING = re.compile(r"^h[1-6]$")
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_LIFT_DEPTH = 4
_INLINE_MARKS = ["code", "tt", "kbd", "samp", "var", "em", "i", "strong", "b"]


def parse_html(raw: bytes | str) -> Any:
    """The page as a BeautifulSoup tree (lxml's parser, as :func:`ingestion.readers.html_sections` uses)."""
    import warnings

    from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)  # XHTML pages (DocBook's) start with <?xml?>
        return BeautifulSoup(raw, "lxml")


def theme_of(soup: Any, themes: tuple[Theme, ...] = THEMES) -> Theme | None:
    """The first theme whose ``detect`` selector matches the page, or None."""
    return next((theme for theme in themes if soup.select_one(theme.detect) is not None), None)


def extract_sections(
    raw: bytes | str | Any, extractor: str = "auto", themes: tuple[Theme, ...] = THEMES
) -> tuple[str, list[Section]]:
    """(title, sections) of a page's main content.

    Args:
        raw: The page's HTML (bytes, text, or a tree from :func:`parse_html`, which is changed).
        extractor: ``"auto"``, ``"theme"`` or ``"trafilatura"`` (see the module's docstring).
        themes: The themes recognised, in order.

    Raises:
        ValueError: an unknown extractor (the message lists the known ones).
    """
    if extractor not in EXTRACTORS:
        raise ValueError(f"unknown extractor {extractor!r}: use one of {', '.join(EXTRACTORS)}")
    soup: Any = raw if hasattr(raw, "select_one") else parse_html(raw)
    page_title = " ".join(soup.title.get_text().split()) if soup.title else ""
    if extractor == "trafilatura":
        return _trafilatura_sections(soup, page_title)
    region = _theme_region(soup, themes)
    if region is None:
        if importlib.util.find_spec("trafilatura") is None:  # without the 'sync' extra: the HTML reader's guess
            return html_sections(str(soup))
        return _trafilatura_sections(soup, page_title)
    return html_sections(_page(page_title, str(region)))


def _theme_region(soup: Any, themes: tuple[Theme, ...]) -> Any:
    """The page's main region with its theme's widgets removed, or None when neither a theme nor a generic main
    element (``<main>``, ``role=main``, ``<article>``) is found."""
    theme = theme_of(soup, themes)
    selectors = theme.main if theme is not None else _GENERIC_MAIN
    region = next((found for s in selectors if (found := _select(soup, s)) is not None), None)
    if region is None:
        return None
    for selector in (*(theme.drop if theme is not None else ()), *_ALWAYS_DROP):
        for tag in region.select(selector):
            if tag is not region:
                tag.decompose()
    _lift_anchors(region)
    return region


def _lift_anchors(region: Any) -> None:
    """Give a heading without an ``id`` the ``id`` of the nearest enclosing element it is the first heading of
    (DocBook's ``<div class="sect1" id="TUTORIAL-JOIN"><div class="titlepage"><div><h2>``), so its section can be
    linked to (the HTML reader looks only at a heading's own and its parent's ``id``); then drop the ids of the
    elements that hold headings, which the HTML reader would otherwise match against the names of page widgets
    (a section "PLPYTHON-SHARING" is no share button)."""
    for heading in region.find_all(_HEADING):
        for text in heading.find_all(string=re.compile("\u00a0")):
            text.replace_with(text.replace("\u00a0", " "))  # "2.6.&nbsp;Joins": the reader matches anchors by text
        for mark in heading.find_all(_INLINE_MARKS):
            mark.unwrap()  # "`WITH` Clause" in Markdown would no longer match the heading's text "WITH Clause"
        if heading.get("id") or heading.find(attrs={"id": True}) is not None:
            continue
        for depth, parent in enumerate(heading.parents):
            if depth >= _LIFT_DEPTH or parent is region.parent:
                break
            if parent.get("id"):
                if parent.find(_HEADING) is heading:
                    heading["id"] = parent["id"]
                break
    for section in region.find_all(id=True):
        if section.name not in _HEADINGS and section.find(_HEADING) is not None:
            del section["id"]  # lifted to its heading; an id like "PLPYTHON-SHARING" reads as a share widget


def _select(soup: Any, selector: str) -> Any:
    return soup.body if selector == "body" else soup.select_one(selector)


def _trafilatura_sections(soup: Any, page_title: str) -> tuple[str, list[Section]]:
    """trafilatura's main content of the page (its own boilerplate rules), read as HTML.

    Raises:
        RuntimeError: trafilatura is not installed (the message says how to install it).
    """
    try:
        import trafilatura
    except ImportError:
        raise RuntimeError("the trafilatura extractor needs trafilatura: pip install 'ragidx[sync]'") from None

    main = trafilatura.extract(
        str(soup), output_format="html", include_tables=True, include_formatting=True, favor_recall=True
    )
    if not main:
        return page_title, []
    return html_sections(_page(page_title, main))


def _page(title: str, body: str) -> str:
    """A page of ``body`` (a region's HTML) under ``title``, for the HTML reader to read as a whole page."""
    return f"<html><head><title>{html_escape.escape(title)}</title></head><body><main>{body}</main></body></html>"
