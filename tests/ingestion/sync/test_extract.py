"""Main content of pages made by documentation themes: the theme's chrome dropped, headings and anchors kept."""

from __future__ import annotations

import sys

import pytest

from ingestion.readers import Section
from ingestion.sync.extract import extract_sections, parse_html, theme_of


def text_of(sections: list[Section]) -> str:
    return "\n".join(s.text for s in sections)


def anchors(sections: list[Section]) -> list[tuple[str, str | None]]:
    return [(s.heading_path[-1], s.anchor) for s in sections if s.heading_path]


DOCBOOK = """<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>2.6. Joins Between Tables</title>
<meta name="generator" content="DocBook XSL Stylesheets Vsnapshot" /></head>
<body id="docContent" class="container-fluid col-10"><div class="navheader"><table summary="Navigation header">
<tr><th colspan="5">2.6. Joins Between Tables</th></tr><tr><td><a accesskey="p" href="p.html">Prev</a></td>
<td><a accesskey="u" href="u.html">Up</a></td><th>Chapter 2. The SQL Language</th>
<td><a accesskey="h" href="index.html">Home</a></td><td><a accesskey="n" href="n.html">Next</a></td></tr></table>
<hr/></div>
<div class="sect1" id="TUTORIAL-JOIN"><div class="titlepage"><div><div>
<h2 class="title">2.6.&#160;Joins Between Tables</h2></div></div></div>
<a id="id-1.4.4.7.2" class="indexterm"></a><p>Queries can access multiple tables at once.</p>
<div class="refsect2" id="SQL-WHERE"><h3><code class="literal">WHERE</code> Clause</h3><p>Filters rows.</p></div>
</div><div class="navfooter"><hr/><table summary="Navigation footer"><tr><td><a href="p.html">Prev</a></td>
<td><a href="u.html">Up</a></td><td><a href="n.html">Next</a></td></tr></table></div></body></html>"""


def test_docbook_pages_lose_their_navigation_and_keep_the_section_ids_as_anchors() -> None:
    title, sections = extract_sections(DOCBOOK)

    assert title == "2.6. Joins Between Tables"
    assert "Prev" not in text_of(sections) and "Home" not in text_of(sections)
    assert "Queries can access multiple tables at once." in text_of(sections)
    assert anchors(sections) == [("2.6. Joins Between Tables", "TUTORIAL-JOIN"), ("WHERE Clause", "SQL-WHERE")]


SPHINX = """<html><head><title>Install &#8212; Tool 1.0 documentation</title>
<script id="documentation_options" src="_static/documentation_options.js"></script></head><body>
<div class="related" role="navigation"><ul><li><a href="index.html">Tool 1.0 documentation</a> &#187;</li></ul></div>
<div class="document"><div class="documentwrapper"><div class="bodywrapper"><div class="body" role="main">
<section id="install"><h1>Install<a class="headerlink" href="#install" title="Link to this heading">¶</a></h1>
<p>Run pip install tool.</p><section id="upgrade"><h2>Upgrade<a class="headerlink" href="#upgrade">¶</a></h2>
<p>Run pip install -U tool.</p></section></section></div></div></div>
<div class="sphinxsidebar" role="navigation"><h3>Navigation</h3><ul><li><a href="usage.html">Usage</a></li></ul>
</div></div><div class="footer">&#169;Copyright 2026, The Authors. Created using Sphinx.</div></body></html>"""


def test_sphinx_pages_keep_the_body_without_permalinks_sidebar_or_footer() -> None:
    title, sections = extract_sections(SPHINX)

    assert title == "Install"
    assert anchors(sections) == [("Install", "install"), ("Upgrade", "upgrade")]
    text = text_of(sections)
    assert "¶" not in text and "Navigation" not in text and "Created using Sphinx" not in text
    assert "Run pip install -U tool." in text


MKDOCS = """<html><head><title>Sources - ragidx</title><meta name="generator" content="mkdocs-1.6.1, mkdocs-material">
</head><body><header class="md-header"><nav>ragidx <a href="/">Home</a></nav></header>
<div class="md-container"><main class="md-main"><div class="md-main__inner">
<div class="md-sidebar md-sidebar--primary"><nav class="md-nav">Guide Sources Folders</nav></div>
<div class="md-content" data-md-component="content"><article class="md-content__inner md-typeset">
<a href="https://git.example/edit/docs/sources.md" title="Edit this page" class="md-content__button md-icon">E</a>
<h1 id="sources">Sources</h1><p>Declare them once.</p>
<h2 id="websites">Websites<a class="headerlink" href="#websites">¶</a></h2><p>A sitemap or a start URL.</p>
<aside class="md-source-file">Last update: 2026-11-28</aside></article></div>
</div></main><footer class="md-footer"><a class="md-footer__link" href="next/">Next Folders</a></footer></div>
</body></html>"""


def test_mkdocs_material_pages_keep_the_article_without_edit_button_sidebar_or_footer() -> None:
    title, sections = extract_sections(MKDOCS)

    assert title == "Sources"
    assert anchors(sections) == [("Sources", "sources"), ("Websites", "websites")]
    text = text_of(sections)
    for chrome in ("Edit this page", "Guide Sources Folders", "Last update", "Next Folders", "¶"):
        assert chrome not in text
    assert "A sitemap or a start URL." in text


DOCUSAURUS = """<html><head><title>Intro | My Site</title><meta name="generator" content="Docusaurus v3.5.2"></head>
<body><nav class="navbar">My Site Docs Blog</nav><div class="main-wrapper"><aside class="theme-doc-sidebar-container">
Tutorial Intro</aside><main><div class="container"><article><nav class="theme-doc-breadcrumbs">Home / Intro</nav>
<div class="theme-doc-markdown markdown"><header><h1>Intro</h1></header><p>Let's discover the site.</p>
<h2 class="anchor" id="getting-started">Getting Started<a href="#getting-started" class="hash-link">#</a></h2>
<p>Get started in five minutes.</p></div><footer class="theme-doc-footer"><a class="theme-edit-this-page"
href="https://git.example/edit">Edit this page</a></footer></article><nav class="pagination-nav">Next Tutorial</nav>
</div></main></div><footer class="footer">Copyright © 2026 My Project</footer></body></html>"""


def test_docusaurus_pages_keep_the_markdown_without_edit_link_or_pagination() -> None:
    title, sections = extract_sections(DOCUSAURUS)

    assert title == "Intro"
    assert anchors(sections)[-1] == ("Getting Started", "getting-started")
    text = text_of(sections)
    for chrome in ("Edit this page", "Next Tutorial", "Home / Intro", "Copyright", "Tutorial Intro", "#\n"):
        assert chrome not in text
    assert "Get started in five minutes." in text


HELP_CENTRE = """<html><head><title>Reset your password – Example Help Center</title></head><body>
<header class="header"><a href="/hc">Example Help Center</a><a href="/hc/requests/new">Submit a request</a></header>
<div class="container"><nav class="sub-nav"><ol class="breadcrumbs"><li>Example</li><li>Account</li></ol></nav>
<div class="article-container"><article class="article"><header class="article-header"><h1 title="Reset">Reset your
password</h1></header><section class="article-info"><div class="article-body"><p>Click Forgot password.</p>
<h2 id="h_01">No email arrived</h2><p>Check the spam folder.</p></div><div class="article-votes">
<span class="article-votes-question">Was this article helpful?</span><button>Yes</button><button>No</button>
<small class="article-votes-count">3 out of 4 found this helpful</small></div></section>
<section class="article-relatives"><h3>Related articles</h3><a href="/hc/2">Change your email</a></section>
</article></div></div><footer class="footer">Powered by Example</footer></body></html>"""


def test_help_centre_articles_lose_votes_related_articles_and_breadcrumbs() -> None:
    title, sections = extract_sections(HELP_CENTRE)

    assert title == "Reset your password"
    assert anchors(sections)[-1] == ("No email arrived", "h_01")
    text = text_of(sections)
    for chrome in ("helpful", "Related articles", "Submit a request", "Powered by", "Account"):
        assert chrome not in text
    assert "Check the spam folder." in text


def test_themes_are_recognised_by_their_markup() -> None:
    found = [theme_of(parse_html(page)) for page in (DOCBOOK, SPHINX, MKDOCS, DOCUSAURUS, HELP_CENTRE)]
    assert [t.name if t else None for t in found] == ["docbook", "sphinx", "mkdocs", "docusaurus", "helpcentre"]
    assert theme_of(parse_html("<html><body><p>Plain.</p></body></html>")) is None


BLOG = """<html><head><title>Release notes</title></head><body><div id="top-bar"><a href="/">Home</a> ·
<a href="/about">About us</a> · <a href="/contact">Contact</a></div><div class="post"><p>Version 2 is out. It
reads websites, keeps them in sync and deletes what was deleted, and a failed fetch never deletes anything.
We have been working on this release for a long time, and we hope it serves you well for years to come.</p>
<p>Upgrade with pip install -U tool, then run tool sync to read every source you declared once.</p></div>
<div class="widget-footer">© 2026 Example. Imprint. Privacy.</div></body></html>"""


def test_a_page_of_no_known_theme_and_no_main_element_is_read_by_trafilatura() -> None:
    _, sections = extract_sections(BLOG)
    text = text_of(sections)
    assert "Version 2 is out." in text and "tool sync" in text
    assert "About us" not in text and "Imprint" not in text


def test_the_trafilatura_extractor_can_be_chosen_for_every_page() -> None:
    _, sections = extract_sections(SPHINX, "trafilatura")
    text = text_of(sections)
    assert "Run pip install -U tool." in text and "Created using Sphinx" not in text


def test_an_unknown_extractor_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown extractor 'readability': use one of auto, theme, trafilatura"):
        extract_sections(SPHINX, "readability")


def test_a_section_whose_id_reads_like_a_widget_name_is_kept() -> None:
    page = DOCBOOK.replace('id="TUTORIAL-JOIN"', 'id="PLPYTHON-SHARING"')  # the manual's "46.3. Sharing Data"

    _, sections = extract_sections(page)

    assert "Queries can access multiple tables at once." in text_of(sections)
    assert anchors(sections)[0] == ("2.6. Joins Between Tables", "PLPYTHON-SHARING")


def test_without_trafilatura_a_page_of_no_theme_is_read_by_the_html_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "trafilatura", None)  # not installed (the 'sync' extra)

    _, sections = extract_sections(BLOG)

    assert "Version 2 is out." in text_of(sections)
    with pytest.raises(RuntimeError, match=r"needs trafilatura: pip install 'ragidx\[sync\]'"):
        extract_sections(BLOG, "trafilatura")
