"""Document readers on real files (made by LibreOffice: tests/fixtures/docs/make.py): sections, pages, anchors,
tables as rows of cells; and through LlamaIndex's SimpleDirectoryReader as its file_extractor."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core import SimpleDirectoryReader

from ingestion.readers import DocumentReadError, HtmlReader, MarkdownReader, PdfReader, file_extractor, html_sections

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "docs"


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
