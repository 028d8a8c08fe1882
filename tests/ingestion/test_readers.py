"""Document readers on real files (made by LibreOffice: tests/fixtures/docs/make.py): sections, pages, anchors,
tables as rows of cells; and through LlamaIndex's SimpleDirectoryReader as its file_extractor."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import docx
import pytest
from docx.enum.style import WD_STYLE_TYPE
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from llama_index.core import SimpleDirectoryReader
from llama_index.core.readers.base import BaseReader
from llama_index.core.schema import Document

from ingestion.readers import (
    DocumentReadError,
    DocxReader,
    HtmlReader,
    MarkdownReader,
    PdfReader,
    TextReader,
    check_uncompressed_size,
    document_formats,
    document_suffixes,
    file_extractor,
    html_sections,
    reader_for,
    register_reader,
    table_rows,
    unregister_reader,
)
from ingestion.sources import SourceError, read_document, read_folder
from tests.ingestion.simple_pdf import pdf, ruled_table, text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "docs"

ROLES = [["Role", "View", "Export", "Import"], ["Agent", "yes", "no", "no"], ["Admin", "yes", "yes", "yes"]]
ROLE_ROWS = ["| Role | View | Export | Import |", "| --- | --- | --- | --- |", "| Agent | yes | no | no |"]
"""A table whose rows repeat a cell's text in the next cell: each must stay a cell of its own."""


def test_pdf_sections_follow_the_outline_with_their_pages() -> None:
    docs = PdfReader().load_data(FIXTURES / "guide.pdf")
    first = {d.metadata["section"]: d.metadata for d in reversed(docs)}
    assert first["19xx/20xx Years"]["page"] == 1
    assert first["Recognizing Names as Addressing"]["page"] == 2
    assert first["Naming Cells"]["heading_path"] == ["Recognizing Names as Addressing", "Naming Cells"]
    assert {d.metadata["title"] for d in docs} == {"Calc and Writer guide"}  # the PDF's own title
    table = next(d for d in docs if d.metadata["section"] == "Shortcut keys")
    assert table.text.splitlines()[1:4] == ["| Keys | Effect |", "| --- | --- |", "| Ctrl+F12 | Insert table |"]


def test_pdf_without_tables_option_keeps_the_rows_as_lines() -> None:
    docs = PdfReader(tables=False).load_data(FIXTURES / "guide.pdf")
    text = "\n".join(d.text for d in docs)
    assert "Ctrl+F12 Insert table" in text.splitlines() and "| Ctrl+F12" not in text


def test_simple_directory_reader_reads_every_format_with_ragidx_readers(tmp_path: Path) -> None:
    for name in ("guide.pdf", "guide.docx", "guide.html", "notes.md", "readme.txt"):
        (tmp_path / name).write_bytes((FIXTURES / name).read_bytes())
    docs = SimpleDirectoryReader(str(tmp_path), file_extractor=file_extractor()).load_data()
    by_file: dict[str, list[str]] = {}
    for d in docs:
        by_file.setdefault(d.metadata["file_name"], []).append(d.metadata["section"])
    assert set(by_file) == {"guide.pdf", "guide.docx", "guide.html", "notes.md", "readme.txt"}
    for name in ("guide.pdf", "guide.docx", "guide.html"):
        assert "Naming Cells" in by_file[name] and "Shortcut keys" in by_file[name], name
    assert by_file["notes.md"] == ["Printing", "Paper sizes", "Duplex"]


def test_markdown_front_matter_title_sections_and_slugs() -> None:
    docs = MarkdownReader().load_data(FIXTURES / "notes.md")
    assert docs[0].metadata["title"] == "Team notes on printing"
    assert [(d.metadata["heading_path"], d.metadata["anchor"]) for d in docs] == [
        (["Printing"], "printing"),
        (["Printing", "Paper sizes"], "paper-sizes"),
        (["Printing", "Duplex"], "duplex"),
    ]
    assert "| A4 | 210 x 297 |" in docs[1].text


def test_markdown_heading_inside_a_code_fence_is_not_a_section(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    path.write_text("# Shell\n\n```sh\n# not a heading\nls\n```\n\n## Next\n\nText.\n")
    assert [d.metadata["section"] for d in MarkdownReader().load_data(path)] == ["Shell", "Next"]


def test_html_keeps_the_main_content_its_anchors_and_tables_and_drops_navigation() -> None:
    page = (
        "<html><head><title>Print options</title><script>track()</script></head><body>"
        "<nav><a href='/'>Home</a> | <a href='/x'>Site map</a></nav>"
        "<main><h1 id='print'>Printing</h1><p>Choose <b>File &gt; Print</b>.</p>"
        "<section id='paper'><h2>Paper</h2><table><tr><th>Size</th><th>mm</th></tr>"
        "<tr><td>A4</td><td>210 x 297</td></tr></table></section>"
        "<h2><a id='duplex'></a>Duplex</h2><ul><li>Long edge</li><li>Short edge</li></ul></main>"
        "<footer>© Example</footer></body></html>"
    )
    title, sections = html_sections(page)
    assert title == "Print options"
    assert [(s.heading_path, s.anchor) for s in sections] == [
        (["Printing"], "print"),
        (["Printing", "Paper"], "paper"),
        (["Printing", "Duplex"], "duplex"),
    ]
    text = "\n".join(s.text for s in sections)
    assert "Choose **File > Print**." in text and "| A4 | 210 x 297 |" in text and "- Long edge" in text
    assert "Site map" not in text and "track()" not in text and "Example" not in text


def test_html_line_breaks_in_the_source_are_spaces_as_on_the_page() -> None:
    """A browser shows a line break inside a paragraph of the HTML source as a space (DocBook breaks its paragraphs
    anywhere). Kept, it split sentences: "The server can\n    reply with an error" read as an instruction to reply,
    and a quote across the break would not match the page. <br> and <pre> keep their lines."""
    page = (
        "<html><body><main><h1>Streaming</h1><p>The server can\n    reply with an error, for example if the\n"
        "requested WAL was recycled.</p><p>First line<br>second line</p><pre>a\n  b</pre></main></body></html>"
    )
    _, [section] = html_sections(page)
    assert "The server can reply with an error, for example if the requested WAL was recycled." in section.text
    assert "First line" in section.text and "\nsecond line" in section.text
    assert "a\n  b" in section.text


def test_html_reader_uses_the_file_name_when_a_page_has_no_title(tmp_path: Path) -> None:
    path = tmp_path / "faq.html"
    path.write_text("<p>Just text.</p>")
    [doc] = HtmlReader().load_data(path)
    assert (doc.metadata["title"], doc.text) == ("faq", "Just text.")


def test_unreadable_pdfs_raise_what_to_do() -> None:
    with pytest.raises(DocumentReadError, match="encrypted PDF"):
        PdfReader().load_data(FIXTURES / "encrypted.pdf")
    with pytest.raises(DocumentReadError, match=r"no text layer in its 1 page\(s\) \(a scanned PDF\?\) and no OCR"):
        PdfReader(ocr=False).load_data(FIXTURES / "scanned.pdf")


def test_a_scanned_pdf_is_read_by_ocr_with_its_page() -> None:
    # RapidOCR's bundled recognition model often drops the spaces between English words: match without them
    [doc] = PdfReader().load_data(FIXTURES / "scanned.pdf")
    assert doc.metadata["page"] == 1 and doc.metadata["ocr"] is True
    assert "Ctrl+F12" in doc.text and "insert" in doc.text and "memo" in doc.text.lower()


# --- tables: every cell in its column, in the section that holds the table ------------------------------------
def test_table_rows_keep_equal_neighbours_and_empty_cells_in_their_columns() -> None:
    assert table_rows([*ROLES[:2], ["Note", "Exports need approval", None, ""]]).splitlines() == [
        *ROLE_ROWS,
        "| Note | Exports need approval |  |  |",
    ]


def _word_file(path: Path, *, padding: int = 0) -> Path:
    """A Word file: a heading, a four-column table with equal neighbouring cells and a merged cell, a heading
    after it; ``padding`` spaces (highly compressible, as in a ZIP bomb) inside its document part."""
    document = docx.Document()
    document.add_heading("Access", 1)
    document.add_paragraph("Who can do what.")
    document.add_heading("Permissions", 2)
    table = document.add_table(rows=4, cols=4)
    for r, row in enumerate([*ROLES, ["Note", "", "", ""]]):
        for c, cell in enumerate(row):
            table.cell(r, c).text = cell
    table.cell(3, 1).merge(table.cell(3, 3)).text = "Exports need approval"
    document.add_heading("Audit", 2)
    document.add_paragraph("Every export is logged.")
    document.save(str(path))
    if padding:
        with zipfile.ZipFile(path) as archive:
            parts = {name: archive.read(name) for name in archive.namelist()}
        parts["word/document.xml"] = parts["word/document.xml"].replace(b"</w:body>", b" " * padding + b"</w:body>")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in parts.items():
                archive.writestr(name, data)
    return path


def test_word_table_keeps_every_cell_in_its_column_under_its_own_heading(tmp_path: Path) -> None:
    docs = DocxReader().load_data(_word_file(tmp_path / "access.docx"))
    [table] = [d for d in docs if "| Role |" in d.text]
    assert table.metadata["heading_path"] == ["Access", "Permissions"]
    assert table.text.splitlines()[2:] == [
        *ROLE_ROWS,
        "| Admin | yes | yes | yes |",
        "| Note | Exports need approval |  |  |",  # one merged cell over three columns: written once
    ]
    assert [d.metadata["section"] for d in docs] == ["Access", "Permissions", "Audit"]


def test_word_table_under_a_house_heading_style_is_filed_under_that_heading(tmp_path: Path) -> None:
    document = docx.Document()
    document.add_heading("Access", 1)
    house = document.styles.add_style("Policy Heading", WD_STYLE_TYPE.PARAGRAPH)
    house.base_style = document.styles["Heading 2"]  # a heading by inheritance, not by its name
    document.add_paragraph("Permissions", style="Policy Heading")
    table = document.add_table(rows=2, cols=2)
    for c, (head, cell) in enumerate(zip(ROLES[0][:2], ROLES[1][:2], strict=True)):
        table.cell(0, c).text, table.cell(1, c).text = head, cell
    audit = document.add_paragraph("Audit")  # a heading by its own outline level (level 2)
    level = OxmlElement("w:outlineLvl")
    level.set(qn("w:val"), "1")
    audit._p.get_or_add_pPr().append(level)
    document.add_paragraph("Every export is logged.")
    document.add_paragraph("Contents", style="TOC Heading")  # based on Heading 1, but body text (level 9)
    document.save(str(tmp_path / "access.docx"))
    docs = DocxReader().load_data(tmp_path / "access.docx")
    assert [(d.metadata["heading_path"], d.text.splitlines()[-1]) for d in docs] == [
        (["Access"], "# Access"),
        (["Access", "Permissions"], "| Agent | yes |"),
        (["Access", "Audit"], "Contents"),
    ]


def test_pdf_ruled_table_keeps_every_cell_in_its_column_under_its_own_heading(tmp_path: Path) -> None:
    rows = [*ROLES, ["Note", "Exports need approval", None, None]]
    page = [
        text(72, 740, "Access", 16),
        text(72, 715, "Who can do what."),
        text(72, 680, "Permissions", 16),
        *ruled_table(72, 670, rows, widths=[100, 100, 100, 100]),
        text(72, 560, "Audit", 16),
        text(72, 535, "Every export is logged."),
    ]
    path = tmp_path / "access.pdf"
    path.write_bytes(pdf([page], [("Access", 0, 760), ("Permissions", 0, 700), ("Audit", 0, 580)], "Access guide"))
    docs = PdfReader().load_data(path)
    assert [d.metadata["section"] for d in docs] == ["Access", "Permissions", "Audit"]
    assert docs[1].text.splitlines()[1:] == [
        *ROLE_ROWS,
        "| Admin | yes | yes | yes |",
        "| Note | Exports need approval |  |  |",
    ]


def test_pdf_table_is_filed_under_its_numbered_heading_when_the_outline_has_no_numbers(tmp_path: Path) -> None:
    page = [
        text(72, 740, "1 Access", 16),
        text(72, 715, "Who can do what."),
        *ruled_table(72, 700, ROLES, widths=[100, 100, 100, 100]),
        text(72, 600, "2 AUDIT", 16),
        text(72, 575, "Every export is logged."),
    ]
    path = tmp_path / "access.pdf"
    path.write_bytes(pdf([page], [("Access", 0, 760), ("Audit", 0, 620)], "Access guide"))
    docs = PdfReader().load_data(path)
    sections = [(d.metadata["section"], d.text.splitlines()[0]) for d in docs]
    assert sections == [("Access", "1 Access"), ("Audit", "2 AUDIT")]
    assert docs[0].text.splitlines()[2:5] == ROLE_ROWS


def test_html_table_keeps_every_cell_in_its_column_with_spans_under_its_own_heading() -> None:
    page = (
        "<html><body><main><h1>Access</h1><p>Who can do what.</p><h2 id='perm'>Permissions</h2>"
        "<table><thead><tr><th>Role</th><th>View</th><th>Export</th><th>Import</th></tr></thead><tbody>"
        "<tr><td>Agent</td><td>yes</td><td>no</td><td>no</td></tr>"
        "<tr><td rowspan='2'>Admin</td><td>yes</td><td>yes</td><td>yes</td></tr>"
        "<tr><td>no</td><td>no</td><td>a | b</td></tr>"
        "<tr><td>Note</td><td colspan='3'>Exports need approval</td></tr></tbody></table>"
        "<h2 id='audit'>Audit</h2><p>Every export is logged.</p></main></body></html>"
    )
    _, sections = html_sections(page)
    assert [(s.heading_path, s.anchor) for s in sections] == [
        (["Access"], None),
        (["Access", "Permissions"], "perm"),
        (["Access", "Audit"], "audit"),
    ]
    assert sections[1].text.splitlines()[2:] == [
        *ROLE_ROWS,
        "| Admin | yes | yes | yes |",
        "| Admin | no | no | a \\| b |",  # the cell spanning two rows is in both; a bar in a cell is escaped
        "| Note | Exports need approval | | |",
    ]


def test_html_table_without_header_cells_takes_its_first_row_as_the_header() -> None:
    _, [section] = html_sections("<table><tr><td>Role</td><td>Export</td></tr><tr><td>Agent</td><td>no</td></tr>")
    assert section.text.splitlines() == ["| Role | Export |", "| --- | --- |", "| Agent | no |"]


def test_markdown_table_is_filed_under_its_setext_heading(tmp_path: Path) -> None:
    path = tmp_path / "access.md"
    path.write_text(
        "Access\n======\n\nWho can do what.\n\nPermissions\n-----------\n\n"
        + "\n".join(table_rows(ROLES).splitlines())
        + "\n\n## Audit\n\nEvery export is logged.\n\n- a list item\n---\n\nA paragraph.\n\n---\n"
    )
    docs = MarkdownReader().load_data(path)
    assert [(d.metadata["heading_path"], d.metadata["anchor"]) for d in docs] == [
        (["Access"], "access"),
        (["Access", "Permissions"], "permissions"),
        (["Access", "Audit"], "audit"),  # a rule under a list item or after a blank line is no heading
    ]
    assert docs[0].metadata["title"] == "Access"
    assert docs[1].text.splitlines()[3:6] == ROLE_ROWS


# --- HTML: the article, not the help centre around it -------------------------------------------------------
HELP_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Single sign-on (SAML) | Northwind Help Center</title>
<script>window.analytics = {};</script></head>
<body>
<div id="onetrust-banner-sdk" class="cookie-banner"><p>We use cookies to improve your experience.</p>
<button>Accept all</button></div>
<header class="site-header"><a class="logo" href="/">Northwind Help Center</a>
<form role="search"><input name="q"></form></header>
<div class="container">
<aside class="article-sidebar"><h3>Articles in this section</h3><ul><li>Passwords</li></ul></aside>
<article class="article">
<header class="article-header"><h1>Single sign-on (SAML)</h1></header>
<ol class="breadcrumbs"><li><a href="/">Northwind</a></li><li><a href="/admin">Administration</a></li></ol>
<section class="article-info"><div class="article-body">
<p>Administrators can let people sign in with their company identity provider.</p>
<h2 id="h_roles">Which roles can export reports</h2>
<table><tr><th>Role</th><th>Export</th></tr><tr><td>Agent</td><td>no</td></tr><tr><td>Admin</td><td>yes</td></tr>
</table>
<h2 id="h_setup">Set up SAML</h2><ol><li>Open <strong>Admin &gt; Security</strong>.</li><li>Choose SAML.</li></ol>
</div>
<div class="article-votes"><span class="article-votes-question">Was this article helpful?</span>
<div class="article-votes-controls"><button class="article-vote-up">Yes</button><button>No</button></div>
<small class="article-votes-count">3 out of 5 found this helpful</small></div>
<div class="article-more-questions">Have more questions? <a href="/requests/new">Submit a request</a></div>
<div><p>Did this page help you?</p><p><a href="/vote?y">Yes</a> <a href="/vote?n">No</a></p></div>
<div><p>Signing in again applies the change.</p><p><a href="#top">Back to top</a></p></div>
<p><a href="https://github.com/northwind/help/edit/main/sso.md">Edit this page</a></p>
</section>
</article>
</div>
<footer class="site-footer"><p>Northwind Inc.</p></footer>
</body></html>"""


def test_help_centre_page_is_read_as_its_article_titled_without_the_site_name() -> None:
    title, sections = html_sections(HELP_PAGE)
    assert title == "Single sign-on (SAML)"
    assert [(s.heading_path[-1], s.anchor) for s in sections] == [
        ("Single sign-on (SAML)", None),
        ("Which roles can export reports", "h_roles"),
        ("Set up SAML", "h_setup"),
    ]
    text = "\n".join(s.text for s in sections)
    assert "identity provider" in text and "| Agent | no |" in text and "2. Choose SAML." in text
    assert text.rstrip().endswith("Signing in again applies the change."), text  # and not "Back to top" beside it
    for boilerplate in ("helpful", "Yes", "Submit a request", "help you", "Edit this page", "Administration"):
        assert boilerplate not in text, boilerplate


def test_page_without_main_or_article_drops_its_header_landmarks_and_cookie_banner() -> None:
    page = (
        "<html><head><title>Reports — Northwind Docs</title></head><body>"
        "<header><h1>Northwind Docs</h1><p>Docs home</p></header>"
        "<div role='navigation'><a href='/'>All topics</a></div>"
        "<div id='cookie-consent'><h2>We value your privacy</h2><p>Accept cookies?</p></div>"
        "<div class='content'><h2 id='export'>Exporting a report</h2><p>Choose Export.</p>"
        "<p class='edit-link'><a href='/edit'>Suggest changes</a></p></div>"
        "<div role='contentinfo'>Northwind Inc.</div></body></html>"
    )
    title, [section] = html_sections(page)
    assert title == "Reports"  # the <title> without the site's name after a dash
    assert section.text == "## Exporting a report\n\nChoose Export."


@pytest.mark.parametrize(
    ("title", "h1", "expected"),
    [
        ("Single sign-on (SAML) | Northwind Help Center", "Single sign-on (SAML)", "Single sign-on (SAML)"),
        ("Single Sign-On - Northwind", "Single sign-on", "Single sign-on"),
        ("Northwind Help: Exporting reports", "Exporting reports", "Exporting reports"),
        ("Reports · Northwind Docs", "", "Reports"),
        ("Sign-in - troubleshooting", "", "Sign-in - troubleshooting"),  # a hyphen alone is no site separator
        ("Print options", "Printing", "Print options"),  # a heading that is not the title's
        ("", "Exporting reports", "Exporting reports"),
    ],
)
def test_html_title_is_the_articles_not_the_sites(title: str, h1: str, expected: str) -> None:
    head = f"<title>{title}</title>" if title else ""
    page = f"<html><head>{head}</head><body><main><h1>{h1}</h1><p>Text.</p></main></body></html>"
    assert html_sections(page)[0] == expected


# --- Word: a ZIP archive that expands too far is refused before it is expanded --------------------------------
def test_word_file_that_expands_past_the_limit_is_refused(tmp_path: Path) -> None:
    bomb = _word_file(tmp_path / "bomb.docx", padding=3 * 2**20)
    assert bomb.stat().st_size < 100_000  # 3 MB of XML in a few KB
    message = r"expands to more than 1 MB uncompressed \(\d MB from 0.\d\d MB on disk; .*max_file_mb.*\): if it is"
    with pytest.raises(DocumentReadError, match=message):
        DocxReader(max_uncompressed_bytes=2**20).load_data(bomb)
    with pytest.raises(DocumentReadError, match=message):
        reader_for(".docx", max_file_bytes=2**20).load_data(bomb)
    assert DocxReader(max_uncompressed_bytes=4 * 2**20).load_data(bomb)[0].metadata["section"] == "Access"


def test_ingesting_a_folder_applies_the_file_size_limit_to_a_word_files_expanded_size(tmp_path: Path) -> None:
    bomb = _word_file(tmp_path / "bomb.docx", padding=3 * 2**20)
    error = read_document(bomb, tmp_path, max_file_bytes=2**20)
    assert isinstance(error, SourceError) and re.match(r"expands to more than 1 MB uncompressed", error.reason)
    assert not isinstance(read_document(bomb, tmp_path, max_file_bytes=4 * 2**20), SourceError)


# --- readers registered from a program (ingestion.formats) ----------------------------------------------------
ODF_OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
ODF_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"


def _write_odt(path: Path, blocks: list[tuple[int, str]]) -> Path:
    """A minimal OpenDocument text file: a ZIP with ``mimetype`` first (stored) and ``content.xml``; ``blocks`` are
    (heading level, text), level 0 for a paragraph."""
    body = "".join(
        f'<text:h text:outline-level="{level}">{text}</text:h>' if level else f"<text:p>{text}</text:p>"
        for level, text in blocks
    )
    content = (
        f'<?xml version="1.0" encoding="UTF-8"?><office:document-content xmlns:office="{ODF_OFFICE}" '
        f'xmlns:text="{ODF_TEXT}" office:version="1.3"><office:body><office:text>{body}</office:text></office:body>'
        "</office:document-content>"
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(zipfile.ZipInfo("mimetype"), "application/vnd.oasis.opendocument.text")
        archive.writestr("content.xml", content, compress_type=zipfile.ZIP_DEFLATED)
    return path


class OdtReader(BaseReader):
    """What a user writes to read .odt files: content.xml's headings and paragraphs, one section per heading."""

    def __init__(self, max_file_bytes: int) -> None:
        super().__init__()
        self.max_file_bytes = max_file_bytes

    def load_data(self, file: Path, extra_info: dict[str, Any] | None = None, **kwargs: Any) -> list[Document]:
        check_uncompressed_size(Path(file), self.max_file_bytes)
        with zipfile.ZipFile(file) as archive:
            root = ElementTree.fromstring(archive.read("content.xml"))
        sections: list[tuple[list[str], list[str]]] = [([], [])]
        for element in root.iter():
            text = "".join(element.itertext()).strip()
            if element.tag == f"{{{ODF_TEXT}}}h" and text:
                sections.append(([text], [f"# {text}"]))
            elif element.tag == f"{{{ODF_TEXT}}}p" and text:
                sections[-1][1].append(text)
        title = next((path[0] for path, _ in sections if path), Path(file).stem)
        return [
            Document(text="\n\n".join(lines), metadata={"title": title, "heading_path": path})
            for path, lines in sections
            if lines
        ]


@pytest.fixture()
def odt_registered() -> Iterator[None]:
    register_reader(
        ".odt", OdtReader, name="OpenDocument .odt", magic=b"PK\x03\x04", kind="an OpenDocument file (a ZIP archive)"
    )
    yield
    unregister_reader(".odt")


def test_a_registered_reader_is_read_by_ingest_and_named_by_the_help(
    odt_registered: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 56.4's target: .odt support from user code is one register_reader call, end to end."""
    from ragidx import Engine, Settings
    from ragidx.cli import build_parser, main

    folder = tmp_path / "kb"
    (folder / "guides").mkdir(parents=True)
    _write_odt(folder / "guides" / "labels.odt", [(1, "Printing labels"), (0, "Choose File - New - Labels.")])
    _write_odt(folder / "fake.odt", [])
    (folder / "fake.odt").write_bytes(b"not a zip at all")  # the registered magic bytes are checked
    (folder / "notes.md").write_text("# Notes\n\nShipping is free.\n", encoding="utf-8")
    data = tmp_path / "data"

    assert main(["--data-dir", str(data), "ingest", str(folder), "--quiet"]) != 0  # fake.odt is reported
    err = capsys.readouterr().err
    assert "fake.odt: not an OpenDocument file (a ZIP archive) (its content starts b'not a zi')" in err

    stored = Engine(Settings(data_dir=data)).article_store.get(["guides/labels.odt", "notes.md"])
    labels = stored["guides/labels.odt"]
    assert labels.title == "Printing labels" and "Choose File - New - Labels." in labels.content
    assert labels.metadata["format"] == "odt" and labels.metadata["folder"] == "guides"
    assert "notes.md" in stored

    help_text = build_parser().format_help()
    assert "OpenDocument .odt" in help_text
    with pytest.raises(SystemExit):
        main(["ingest", "--help"])
    assert ".odt" in capsys.readouterr().out


def test_the_registry_is_read_at_call_time_not_copied(odt_registered: None) -> None:
    from ingestion.sources import DOCUMENT_SUFFIXES, JSONL_SUFFIXES
    from ragidx.dashboard.uploads import accepted_suffixes, check_upload

    assert ".odt" in DOCUMENT_SUFFIXES and ".odt" in (JSONL_SUFFIXES | DOCUMENT_SUFFIXES)
    assert ".odt" in document_suffixes() and ".odt" in file_extractor()
    assert document_formats() == "PDF, Word .docx, HTML, Markdown, text, OpenDocument .odt"
    assert ".odt" in accepted_suffixes() and check_upload("a.odt", b"PK") is None
    unregister_reader(".odt")
    assert ".odt" not in DOCUMENT_SUFFIXES and ".odt" not in accepted_suffixes()
    assert "unsupported file type '.odt'" in str(check_upload("a.odt", b"PK"))
    with pytest.raises(ValueError, match=r"no reader for '\.odt' files; the documents read are \.docx, "):
        reader_for(".odt")


def test_a_reader_is_a_shared_object_a_class_or_a_function(tmp_path: Path) -> None:
    class Upper(BaseReader):
        def load_data(self, file: Path, extra_info: dict[str, Any] | None = None, **kwargs: Any) -> list[Document]:
            return [Document(text=Path(file).read_text().upper(), metadata={"title": "T"})]

    shared = Upper()
    (tmp_path / "a.up").write_text("hello")
    try:
        register_reader(".UP", shared, text=True)
        assert reader_for(".up") is shared and reader_for(".UP") is shared
        register_reader(".up", lambda: Upper())  # replaces the earlier one
        assert reader_for(".up") is not shared
        assert document_formats().endswith(", .up")  # no name given: the suffix names it
        article = read_document(tmp_path / "a.up", tmp_path)
        assert not isinstance(article, SourceError) and article.content == "HELLO"
        assert article.metadata["format"] == "up"
    finally:
        unregister_reader(".up")


@pytest.mark.parametrize(
    ("suffix", "reader", "error", "message"),
    [
        ("odt", MarkdownReader, ValueError, "'odt' is not a file suffix: give it with its dot, like '.odt'"),
        (".a b", MarkdownReader, ValueError, "is not a file suffix"),
        (".jsonl", MarkdownReader, ValueError, "read as JSON lines of articles"),
        (".odt", "MarkdownReader", TypeError, "a reader is a BaseReader, its class or a function that makes one"),
    ],
)
def test_bad_registrations_say_what_to_give(suffix: str, reader: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        register_reader(suffix, reader)
    assert ".odt" not in document_suffixes()


def test_a_built_in_format_can_be_turned_off_and_back(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Hello there.\n")
    unregister_reader(".txt")
    try:
        assert ".txt" not in document_suffixes() and list(read_folder(tmp_path)) == []
    finally:
        register_reader(".txt", TextReader, name="text", format="txt", text=True)
    assert [a.kb_id for a in read_folder(tmp_path) if not isinstance(a, SourceError)] == ["a.txt"]
    assert document_formats() == "PDF, Word .docx, HTML, Markdown, text"


def test_a_registered_reader_gets_the_size_limits(odt_registered: None, tmp_path: Path) -> None:
    big = _write_odt(tmp_path / "big.odt", [(1, "Labels"), (0, "x" * 50_000)])  # deflates to well under 50 kB
    over = read_document(big, tmp_path, max_file_bytes=big.stat().st_size - 1)
    assert isinstance(over, SourceError) and "MB limit for one document: split it, or raise max_file_mb" in over.reason
    bomb = read_document(big, tmp_path, max_file_bytes=big.stat().st_size + 1)  # its factory got the limit
    assert isinstance(bomb, SourceError) and "MB uncompressed" in bomb.reason and "ZIP bomb" in bomb.reason
    read = read_document(big, tmp_path, max_file_bytes=1_000_000)
    assert not isinstance(read, SourceError) and read.content.endswith("x" * 100)
