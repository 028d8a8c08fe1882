"""Document readers: PDF, Word (DOCX), HTML, Markdown and plain text files as LlamaIndex ``Document`` sections.

Each reader is a LlamaIndex ``BaseReader`` (usable as a ``SimpleDirectoryReader`` ``file_extractor``) whose
``load_data`` returns one ``Document`` per section of the file, in order, with in its metadata:

- ``title``: the document's title (the same on every section);
- ``heading_path``: the headings above the section, outermost first (``["Tables", "Merging cells"]``);
- ``section``: the innermost of them ('' before the first heading);
- ``page``: the 1-based page the section starts on (PDF only);
- ``anchor``: the HTML ``id`` (or Markdown heading slug) a link to the section ends with.

Headings are Markdown (``## Heading``) in DOCX, HTML and Markdown text; tables are Markdown rows of cells
(``| Ctrl+F12 | Insert table |``), never the cells one per line, every cell in its column under the header, in the
section of the heading above the table. HTML keeps the article, not the site around it (navigation, header,
footer, cookie banner, "Was this article helpful?"). A file that cannot be read raises
``DocumentReadError`` whose message says what is wrong and what to do (an encrypted PDF, a PDF with no text
layer, a corrupt Word file).

Which reader reads a file is a registry read at each call (:mod:`ingestion.formats`, re-exported here): the
built-in formats above, and any a program adds with :func:`register_reader`
(``register_reader(".odt", OdtReader, name="OpenDocument .odt")``). Ingestion, its file checks, the CLI's and the
dashboard's help and the docs' list of formats all ask it when they run.

Libraries, chosen by ``benchmarks/readers.py`` (text recall against the source text, and speed, on LibreOffice
twins of the bundled help articles): pypdfium2 for PDF text and outline (as complete as pypdf and pdfplumber,
several times faster), pdfplumber only to find ruled tables on a page, python-docx for Word (docx2txt writes
each table cell as its own paragraph and drops the heading levels), BeautifulSoup + markdownify for HTML
(trafilatura drops the short pages of a help site as boilerplate). OCR of scanned PDFs: RapidOCR
(rapidocr-onnxruntime, the optional ``ocr`` extra), whose models ship inside its wheel.

Example:
    >>> from pathlib import Path
    >>> docs = MarkdownReader().load_data(Path("guide.md"))  # doctest: +SKIP
    >>> docs[1].metadata["heading_path"]  # doctest: +SKIP
    ['Guide', 'Install']
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index.core.readers.base import BaseReader
from llama_index.core.schema import Document

from ingestion.formats import (
    ReaderEntry,
    ReaderFactory,
    document_formats,
    document_suffixes,
    reader_entry,
    register_reader,
    registered_readers,
    unregister_reader,
)

logger = logging.getLogger(__name__)

__all__ = [
    "READERS",
    "SECTION_KEYS",
    "DocumentReadError",
    "DocxReader",
    "HtmlReader",
    "MarkdownReader",
    "PdfReader",
    "ReaderEntry",
    "ReaderFactory",
    "Section",
    "TextReader",
    "check_uncompressed_size",
    "decode_text",
    "document_formats",
    "document_suffixes",
    "file_extractor",
    "first_line",
    "html_sections",
    "ocr_available",
    "reader_entry",
    "reader_for",
    "register_reader",
    "registered_readers",
    "slug",
    "table_rows",
    "unregister_reader",
]

SECTION_KEYS = ("heading_path", "section", "page", "anchor")


class DocumentReadError(Exception):
    """A file that cannot be read; the message says what is wrong and what to do."""


@dataclass
class Section:
    """One section of a document: its headings, text, and where it starts."""

    heading_path: list[str]
    text: str
    page: int | None = None
    anchor: str | None = None

    def to_document(self, title: str, extra: dict[str, Any] | None = None) -> Document:
        meta: dict[str, Any] = {
            **(extra or {}),
            "title": title,
            "heading_path": list(self.heading_path),
            "section": self.heading_path[-1] if self.heading_path else "",
        }
        if self.page is not None:
            meta["page"] = self.page
        if self.anchor:
            meta["anchor"] = self.anchor
        return Document(text=self.text, metadata=meta)


@dataclass
class _Outline:
    """A heading stack: ``push(level, title)`` gives the path of a new heading."""

    stack: list[tuple[int, str]] = field(default_factory=list)

    def push(self, level: int, title: str) -> list[str]:
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.stack.append((level, title))
        return [t for _, t in self.stack]

    @property
    def path(self) -> list[str]:
        return [t for _, t in self.stack]


def slug(text: str) -> str:
    """The anchor Markdown renderers give a heading (``Table keys`` -> ``table-keys``)."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def _documents(sections: Iterable[Section], title: str, extra: dict[str, Any] | None) -> list[Document]:
    return [s.to_document(title, extra) for s in sections if s.text.strip()]


def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    text = re.sub(r"[ \t\u00a0]+", " ", text)
    text = re.sub(r" *\n *", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def table_rows(rows: Iterable[Iterable[str | None]]) -> str:
    """Rows of cells as a Markdown table (the first row is the header), every cell in its column: equal
    neighbours are two cells, and a cell the caller gives as '' or None (the rest of a merged cell) stays an
    empty cell, so the columns after it keep their place under the header. Rows with no text are left out.

    Example:
        >>> print(table_rows([["Role", "Export", "Import"], ["Agent", "no", "no"]]))
        | Role | Export | Import |
        | --- | --- | --- |
        | Agent | no | no |
    """
    out: list[str] = []
    for row in rows:
        cells = [" ".join((cell or "").split()).replace("|", "\\|") for cell in row]
        if not any(cells):
            continue
        out.append("| " + " | ".join(cells) + " |")
        if len(out) == 1:
            out.append("| " + " | ".join("---" for _ in cells) + " |")
    return "\n".join(out)


# --- PDF ------------------------------------------------------------------------------------------------------
class PdfReader(BaseReader):
    """Text PDFs, one section per outline heading and page: ``page`` is 1-based, ruled tables are Markdown rows.

    A PDF whose pages hold no text (a scan) is read by OCR when RapidOCR is installed (``ragidx[ocr]``; its
    sections then carry ``ocr: True``), else raises ``DocumentReadError`` saying so.

    Example:
        >>> docs = PdfReader().load_data(Path("manual.pdf"))  # doctest: +SKIP
        >>> docs[0].metadata["page"]  # doctest: +SKIP
        1
    """

    def __init__(self, *, tables: bool = True, ocr: bool = True) -> None:
        super().__init__()
        self.tables = tables
        self.ocr = ocr

    def load_data(self, file: Path, extra_info: dict[str, Any] | None = None, **kwargs: Any) -> list[Document]:
        import pypdfium2 as pdfium

        try:
            pdf = pdfium.PdfDocument(str(file))
        except pdfium.PdfiumError as exc:
            message = str(exc)
            if "password" in message.lower():
                raise DocumentReadError(
                    "encrypted PDF (it needs a password): save an unencrypted copy "
                    "(qpdf --decrypt --password=PASSWORD in.pdf out.pdf) and ingest that"
                ) from exc
            raise DocumentReadError(f"not a readable PDF ({message}): export it again from its source") from exc
        try:
            pages, ruled = [], []
            for index, page in enumerate(pdf):
                pages.append(_clean(page.get_textpage().get_text_range()))
                if self.tables and _has_rules(page):
                    ruled.append(index)
            toc = [(b.get_title().strip(), _dest_page(b), b.level) for b in pdf.get_toc()]
            meta_title = (pdf.get_metadata_dict().get("Title") or "").strip()
        finally:
            pdf.close()
        ocr = False
        if not any(pages):
            if not (self.ocr and ocr_available()):
                raise DocumentReadError(
                    f"no text layer in its {len(pages)} page(s) (a scanned PDF?) and no OCR here: "
                    "pip install 'ragidx[ocr]' (RapidOCR, offline) and ingest again, or make a searchable copy "
                    "(e.g. ocrmypdf in.pdf out.pdf) and ingest that"
                )
            pages, ocr = _ocr_pages(file), True
            if not any(pages):
                raise DocumentReadError(
                    f"no text layer in its {len(pages)} page(s), and OCR found no text in them: check the scan"
                )
        if ruled:
            pages = _with_tables(file, pages, ruled)
        title = meta_title or next((t for t, _, _ in toc if t), "") or first_line("\n".join(pages)) or file.stem
        return _documents(_pdf_sections(pages, toc), title, {**(extra_info or {}), **({"ocr": True} if ocr else {})})


def ocr_available() -> bool:
    """Whether RapidOCR (``pip install 'ragidx[ocr]'``: ONNX models inside the wheel, nothing downloaded) is here."""
    import importlib.util

    return importlib.util.find_spec("rapidocr_onnxruntime") is not None


_OCR_ENGINE: Any = None


def _ocr_pages(file: Path) -> list[str]:
    """Each page rendered at 200 dpi and read by RapidOCR, its lines top to bottom."""
    global _OCR_ENGINE
    import pypdfium2 as pdfium
    from rapidocr_onnxruntime import RapidOCR

    if _OCR_ENGINE is None:
        _OCR_ENGINE = RapidOCR()
    pages = []
    pdf = pdfium.PdfDocument(str(file))
    try:
        for page in pdf:
            found, _ = _OCR_ENGINE(page.render(scale=200 / 72).to_numpy())
            lines = sorted(found or [], key=lambda r: (r[0][0][1], r[0][0][0]))  # by top edge, then left
            pages.append(_clean("\n".join(str(r[1]) for r in lines)))
    finally:
        pdf.close()
    return pages


def _dest_page(bookmark: Any) -> int | None:
    dest = bookmark.get_dest()
    index = dest.get_index() if dest is not None else None
    return None if index is None else int(index)


def _pdf_sections(pages: list[str], toc: list[tuple[str, int | None, int]]) -> Iterator[Section]:
    """Split each page's text at the outline headings that start on it (found as a line of the page)."""
    outline = _Outline()
    by_page: dict[int, list[tuple[str, int]]] = {}
    for title, page, level in toc:
        if title and page is not None:
            by_page.setdefault(page, []).append((title, level))
    for index, text in enumerate(pages):
        if not text:
            continue
        lines = text.split("\n")
        start = 0
        for title, level in by_page.get(index, []):
            at = next((i for i in range(start, len(lines)) if _is_heading_line(lines[i], title)), None)
            if at is None:
                outline.push(level, title)  # the heading is on this page but not a line of its own
                continue
            if at > start:
                yield Section(outline.path, "\n".join(lines[start:at]), page=index + 1)
            outline.push(level, title)
            start = at
        yield Section(outline.path, "\n".join(lines[start:]), page=index + 1)


_NUMBERING = re.compile(r"^(\d+(\.\d+)*\.?|[A-Z]\.|[IVX]+\.)\s+")


def _is_heading_line(line: str, title: str) -> bool:
    """Whether a line of a page is the outline heading ``title``, the one or the other with its section number
    (``2.1 Permissions`` for the bookmark ``Permissions``) or in other capitals."""
    line, title = " ".join(line.split()).casefold(), " ".join(title.split()).casefold()
    return line == title or _NUMBERING.sub("", line, count=1) == _NUMBERING.sub("", title, count=1) != ""


def _has_rules(page: Any) -> bool:
    """Whether a page draws enough lines or boxes to hold a ruled table (counted by pdfium, which is cheap:
    pdfplumber's layout of a page costs some 30 times its text extraction, so only such pages get it)."""
    import pypdfium2.raw as pdfium_c

    paths = page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_PATH], max_depth=1)
    return sum(1 for _ in itertools.islice(paths, 4)) >= 4


def _with_tables(file: Path, pages: list[str], ruled: list[int]) -> list[str]:
    """The ruled tables of pages ``ruled`` (pdfplumber) written as Markdown rows in place of their lines."""
    import pdfplumber

    out = list(pages)
    try:
        with pdfplumber.open(str(file)) as pdf:
            for index in ruled:
                if not out[index]:
                    continue
                for table in pdf.pages[index].extract_tables():
                    out[index] = _replace_rows(out[index], table)
    except Exception as exc:  # tables are a refinement: the text is already read
        logger.debug("pdfplumber could not read the tables of %s: %s", file, exc)
    return out


def _replace_rows(text: str, table: list[list[str | None]]) -> str:
    rows = [[" ".join((c or "").split()) for c in row] for row in table]
    lines = text.split("\n")
    found: list[int] = []
    for row in rows:
        joined = " ".join(c for c in row if c)
        at = next((i for i in range(found[-1] + 1 if found else 0, len(lines)) if lines[i].strip() == joined), None)
        if at is None:
            return text  # the table's rows are not lines of the text as read: leave the text as it is
        found.append(at)
    markdown = table_rows(rows).split("\n")
    first, last = found[0], found[-1]
    if last - first + 1 != len(found):
        return text
    return "\n".join([*lines[:first], *markdown, *lines[last + 1 :]])


# --- DOCX -----------------------------------------------------------------------------------------------------
DEFAULT_MAX_UNCOMPRESSED_BYTES = 100 * 2**20
"""The most a Word file (a ZIP archive) may expand to; ingestion passes its ``max_file_mb`` instead."""


class DocxReader(BaseReader):
    """Word documents (.docx): headings (``Heading N`` and ``Title`` styles) as Markdown headings that start
    sections, list items as ``- item``, tables as Markdown rows, every cell in its column (a cell merged across
    columns is written once, in its first; one merged down rows is written in each of them).

    A .docx is a ZIP archive: one whose parts add up to more than ``max_uncompressed_bytes`` once expanded (a
    ZIP bomb: a few MB that expand to GBs of XML) raises ``DocumentReadError`` before anything is expanded.

    Example:
        >>> docs = DocxReader().load_data(Path("policy.docx"))  # doctest: +SKIP
    """

    def __init__(self, *, max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES) -> None:
        super().__init__()
        self.max_uncompressed_bytes = max_uncompressed_bytes

    def load_data(self, file: Path, extra_info: dict[str, Any] | None = None, **kwargs: Any) -> list[Document]:
        import docx
        from docx.table import Table
        from docx.text.paragraph import Paragraph

        check_uncompressed_size(Path(file), self.max_uncompressed_bytes)
        try:
            document = docx.Document(str(file))
        except Exception as exc:  # zipfile.BadZipFile, KeyError (a part missing), lxml errors
            raise DocumentReadError(
                f"not a readable Word .docx file ({type(exc).__name__}: damaged, truncated, or another format "
                "renamed .docx): open it in Word or LibreOffice, save it again as .docx and ingest that"
            ) from exc
        outline = _Outline()
        sections: list[Section] = []
        current: list[str] = []
        title = ""

        def close() -> None:
            if current:
                sections.append(Section(outline.path, "\n\n".join(current)))
                current.clear()

        for block in document.iter_inner_content():
            if isinstance(block, Table):
                current.append(table_rows(_docx_cells(row) for row in block.rows))
                continue
            if not isinstance(block, Paragraph):
                continue
            text = " ".join(block.text.split())
            if not text:
                continue
            level = _docx_heading_level(block)
            if level:
                close()
                title = title or text
                outline.push(level, text)
                current.append(f"{'#' * level} {text}")
            elif "List" in (block.style.name if block.style is not None else ""):
                current.append(f"- {text}")
            else:
                current.append(text)
        close()
        core = (document.core_properties.title or "").strip()
        title = title or core or first_line("\n".join(s.text for s in sections)) or file.stem
        return _documents(_merge_lists(sections), title, extra_info)


def check_uncompressed_size(file: Path, limit: int) -> None:
    """Refuse a ZIP-based document whose parts add up to more than ``limit`` bytes expanded, from its central
    directory alone (nothing is decompressed). A directory that understates a part's size cannot get past this:
    Python's ``zipfile`` (which python-docx reads with) stops each part at its stated size and then fails its
    checksum. A file that is not a ZIP archive is left to the reader, which says so."""
    import zipfile

    try:
        with zipfile.ZipFile(file) as archive:
            expanded = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError):
        return
    if expanded > limit:
        raise DocumentReadError(
            f"expands to more than {_mb(limit)} MB uncompressed ({_mb(expanded)} MB from {_mb(file.stat().st_size)} "
            "MB on disk; the limit for one document is max_file_mb, RAGIDX_MAX_FILE_MB): if it is a real document, "
            "split it or raise that limit; a file that expands this much may be a ZIP bomb"
        )


def _mb(size: int) -> str:
    return f"{size / 2**20:,.0f}" if size >= 2**20 else f"{size / 2**20:.2f}"


def _docx_cells(row: Any) -> list[str]:
    """A Word table row's text, one cell per grid column. python-docx gives a cell spanning columns once per
    column (the same cell element each time): its text goes in the first, the rest are empty. Equal text in
    two real cells is two cells."""
    cells = [""] * row.grid_cols_before
    previous = None
    for cell in row.cells:
        cells.append("" if cell._tc is previous else cell.text)
        previous = cell._tc
    return cells + [""] * row.grid_cols_after


def _docx_heading_level(paragraph: Any) -> int:
    """A Word paragraph's heading level (0: not a heading): its own outline level, else that of its style or
    the first style it is based on that has one (a house style "Policy Heading" based on "Heading 2" is a
    level-2 heading), else the level of a ``Heading N`` or ``Title`` style in that chain. Outline level 9 is body
    text (Word's "TOC Heading", based on "Heading 1", sets it)."""
    outline = _outline_level(paragraph._p.pPr)
    if outline is not None:
        return outline
    style, seen = paragraph.style, 0
    while style is not None and seen < 16:  # a chain of basedOn styles; a cycle in a damaged file stops here
        outline = _outline_level(style.element.pPr)
        if outline is not None:
            return outline
        level = _heading_level(style.name or "")
        if level:
            return level
        style, seen = style.base_style, seen + 1
    return 0


def _outline_level(ppr: Any) -> int | None:
    """The heading level of a ``w:outlineLvl`` (0-based, 9: body text) in paragraph properties, if there is one."""
    if ppr is None or ppr.outlineLvl is None:
        return None
    value = int(ppr.outlineLvl.val)
    return value + 1 if 0 <= value < 9 else 0


def _heading_level(style: str) -> int:
    if style == "Title":
        return 1
    match = re.fullmatch(r"Heading (\d)", style)
    return int(match.group(1)) if match else 0


def _merge_lists(sections: list[Section]) -> list[Section]:
    """Consecutive list items are one block (one newline apart, not a paragraph each)."""
    for s in sections:
        s.text = re.sub(r"(?m)^(- .*)\n\n(?=- )", r"\1\n", s.text)
        s.text = re.sub(r"(?m)^(- .*)\n\n(?=- )", r"\1\n", s.text)
    return sections


# --- HTML -----------------------------------------------------------------------------------------------------
_DROP = (
    "script", "style", "noscript", "template", "nav", "aside", "footer", "form", "button", "iframe", "svg", "dialog",
)  # fmt: skip
_DROP_ROLES = {"navigation", "banner", "contentinfo", "complementary", "search", "dialog", "alertdialog"}
_KEEP = {"main", "article", "section", "body", "h1", "h2", "h3", "h4", "h5", "h6", "table", "tr", "td", "th"}
_WIDGET = re.compile(
    r"cookie|consent|gdpr|feedback|helpful|breadcrumb|skip-?(link|nav|to)|back-?to-?top|return-to-top"
    r"|edit-?(this-?)?(page|link)|article-(relatives|more-questions|subscribe|share)"
    r"|(^|[-_])(votes?|voting|ratings?|share|sharing|social)([-_]|$)",
    re.IGNORECASE,
)
"""Class or id of a page widget that is no part of an article (cookie banner, "was this helpful?" votes,
breadcrumbs, "edit this page", share buttons), as help-centre and docs-site themes name them."""
_WIDGET_TEXT = re.compile(
    r"(was this (article|page|answer|information) helpful|did this (article|page|answer) help( you)?|"
    r"\d+ out of \d+ found this helpful|edit this page( on \w+)?|edit on (github|gitlab)|back to top|"
    r"have more questions\?( submit a request)?)\W*",
    re.IGNORECASE,
)
"""The whole text of a widget's line, when its class does not name it."""
_TITLE_SUFFIX = re.compile(r"(.+?)\s+[|\u00b7\u2013\u2014]\s+[^|\u00b7\u2013\u2014]+")
"""``Article | Site``: a site name after a bar, middle dot or dash (a hyphen is too often part of a title)."""
_SEPARATOR_AFTER = re.compile(r"(\s+[|\u00b7\u2013\u2014-]|:)\s+\S")
_SEPARATOR_BEFORE = re.compile(r"\S(\s+[|\u00b7\u2013\u2014-]|:)\s+$")


class HtmlReader(BaseReader):
    """HTML pages (single pages or a site's export): the main content (``<main>``, ``role=main``, ``<article>``
    or the body) as Markdown, without navigation, header, footer, sidebars, scripts, cookie banners and
    help-centre widgets ("Was this article helpful?", "Edit this page"); one section per heading with its ``id``
    as ``anchor``; tables as Markdown rows, every cell in its column. The title is the page's ``<h1>`` where the
    ``<title>`` is that heading plus the site's name, else the ``<title>`` without a ``| Site`` suffix.

    Example:
        >>> docs = HtmlReader().load_data(Path("site/print.html"))  # doctest: +SKIP
        >>> docs[1].metadata["anchor"]  # doctest: +SKIP
        'printing-a-document'
    """

    def load_data(self, file: Path, extra_info: dict[str, Any] | None = None, **kwargs: Any) -> list[Document]:
        title, sections = html_sections(Path(file).read_bytes())
        return _documents(sections, title or file.stem, extra_info)


def html_sections(raw: bytes | str) -> tuple[str, list[Section]]:
    """(title, sections) of an HTML page."""
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(raw, "lxml")
    page_title = " ".join(soup.title.get_text().split()) if soup.title else ""
    main: Any = soup.find("main") or soup.select_one('[role="main"]') or soup.find("article") or soup.body or soup
    _drop_page_parts(main)
    _fill_row_spans(soup, main)
    anchors: list[tuple[str, str]] = []
    for heading in main.find_all(re.compile(r"^h[1-6]$")):
        anchor = heading.get("id") or _inner_anchor(heading) or _parent_anchor(heading)
        anchors.append((" ".join(heading.get_text().split()), str(anchor or "")))
    converter = MarkdownConverter(
        heading_style="ATX",
        strip=["a", "img"],
        escape_asterisks=False,
        escape_underscores=False,
        escape_misc=False,
        bullets="-",
        table_infer_header=True,
        # A line break in the HTML source is a space on the page (DocBook and hand-written HTML break paragraphs
        # anywhere): kept, it splits sentences ("The server can\n    reply with an error" read as an instruction
        # to reply) and quotes. <br> and <pre> keep their lines; wrap_width None wraps nothing.
        wrap=True,
        wrap_width=None,
    )
    markdown = converter.convert_soup(main)
    h1 = main.find("h1")
    title = _html_title(page_title, " ".join(h1.get_text().split()) if h1 is not None else "")
    if not title:
        title = next((t for t, _ in anchors if t), "")
    return title, list(_markdown_sections(markdown, anchors))


def _drop_page_parts(main: Any) -> None:
    """Remove from ``main`` what is no part of the article: scripts, navigation, sidebars, footers, the page's
    (not an article's) header, landmarks other than the main one, and widgets named by class, id or text."""
    for tag in main.find_all(True):
        if tag.decomposed:
            continue
        if tag.name in _DROP or (tag.get("role") or "").lower() in _DROP_ROLES:
            tag.decompose()
        elif tag.name == "header" and not any(p.name in ("main", "article", "section") for p in tag.parents):
            tag.decompose()  # the site's header (logo, search, menu); an article's own header keeps its title
        elif tag.name not in _KEEP and _is_widget(tag):
            tag.decompose()
    for text in main.find_all(string=_WIDGET_TEXT):
        line = text.parent
        if line is None or line.decomposed or not _WIDGET_TEXT.fullmatch(" ".join(line.get_text().split())):
            continue
        while (
            line.parent is not None
            and line.parent is not main
            and line.parent.name not in _KEEP
            and len(_WIDGET_TEXT.sub(" ", line.parent.get_text(" ")).split()) <= 4
        ):
            line = line.parent  # the widget around the line: "Was this article helpful?" and its Yes / No
        line.decompose()


def _is_widget(tag: Any) -> bool:
    """A small element whose class or id names a page widget (a long one is content, whatever its name)."""
    names = [*(tag.get("class") or []), str(tag.get("id") or "")]
    if not any(_WIDGET.search(name) for name in names if name):
        return False
    return len(tag.get_text(" ", strip=True)) <= 2000


def _fill_row_spans(soup: Any, main: Any) -> None:
    """Give each row of a table with ``rowspan`` cells a copy of the spanning cell, so the cells after it keep
    their columns in Markdown (which has no spans: a cell spanning columns is written once, then empty cells);
    a ``|`` in a cell is escaped, as a Markdown table needs."""
    for bar in main.find_all(string=re.compile(r"\|")):
        if bar.find_parent(["td", "th"]) is not None:
            bar.replace_with(bar.replace("|", "\\|"))
    for table in main.find_all("table"):
        pending: dict[int, tuple[Any, int]] = {}  # column -> (cell, rows it still spans)
        for tr in table.find_all("tr"):
            if tr.find_parent("table") is not table:
                continue
            cells = tr.find_all(["td", "th"], recursive=False)
            column, index = 0, 0
            while index < len(cells) or any(c >= column for c in pending):
                if column in pending:
                    cell, left = pending.pop(column)
                    copy = soup.new_tag(cell.name, attrs={"colspan": cell.get("colspan", "1")})
                    copy.string = " ".join(cell.get_text().split())
                    if index < len(cells):
                        cells[index].insert_before(copy)
                    else:
                        tr.append(copy)
                    if left > 1:
                        pending[column] = (cell, left - 1)
                    column += _span(cell, "colspan")
                    continue
                if index >= len(cells):
                    tr.append(soup.new_tag("td"))  # a short row before a cell spanning down from above
                    column += 1
                    continue
                cell = cells[index]
                rows = _span(cell, "rowspan")
                if rows > 1:
                    pending[column] = (cell, rows - 1)
                    del cell["rowspan"]
                column += _span(cell, "colspan")
                index += 1


def _span(cell: Any, attribute: str) -> int:
    value = str(cell.get(attribute, "1")).strip()
    return max(1, min(1000, int(value))) if value.isdigit() else 1


def _html_title(page_title: str, h1: str) -> str:
    """The article's title: its ``<h1>`` when the ``<title>`` is that heading and the site's name around a
    separator (``Single sign-on | Help Center``, ``Help Center: Single sign-on``), else the ``<title>`` without
    a ``| Site`` suffix."""
    folded, heading = page_title.casefold(), h1.casefold()
    if h1 and (
        folded == heading
        or (folded.startswith(heading) and _SEPARATOR_AFTER.match(page_title[len(h1) :]))
        or (folded.endswith(heading) and _SEPARATOR_BEFORE.search(page_title[: -len(h1)]))
    ):
        return h1
    suffix = _TITLE_SUFFIX.fullmatch(page_title)
    return suffix.group(1) if suffix else page_title


def _inner_anchor(heading: Any) -> str | None:
    inner = heading.find(["a", "span"], attrs={"id": True}) or heading.find("a", attrs={"name": True})
    return (inner.get("id") or inner.get("name")) if inner is not None else None


def _parent_anchor(heading: Any) -> str | None:
    parent = heading.parent
    if parent is not None and parent.name in ("section", "div", "article") and parent.get("id"):
        first = parent.find(re.compile(r"^h[1-6]$"))
        if first is heading:
            return str(parent.get("id"))
    return None


# --- Markdown and text ----------------------------------------------------------------------------------------
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_SETEXT = re.compile(r"^ {0,3}(=|-)\1*\s*$")


def _markdown_sections(text: str, anchors: list[tuple[str, str]] | None = None) -> Iterator[Section]:
    """Split Markdown at its headings, ATX (``## Heading``) and setext (a line underlined with ``===`` or
    ``---``), not inside fenced code; ``anchors`` (heading text, id) in order give the anchors of an HTML page's
    headings, else each heading's slug."""
    outline = _Outline()
    pending = list(anchors) if anchors is not None else None
    lines: list[str] = []
    anchor: str | None = None
    in_fence = False
    text = re.sub(r"\n{3,}", "\n\n", text.replace("\r\n", "\n"))
    for line in text.split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
        level, heading, heading_lines = 0, "", [line]
        if not in_fence:
            match = _HEADING.match(line)
            underline = _SETEXT.match(line)
            if match is not None:
                level, heading = len(match.group(1)), match.group(2).strip()
            elif underline is not None and _setext_title(lines):
                level, heading = (1 if underline.group(1) == "=" else 2), lines[-1].strip()
                heading_lines = [lines.pop(), line]
        if not level:
            lines.append(line)
            continue
        if "\n".join(lines).strip():
            yield Section(outline.path, "\n".join(lines).strip(), anchor=anchor)
        outline.push(level, heading)
        lines = heading_lines
        anchor = _take_anchor(pending, heading) if pending is not None else slug(heading)
    if "\n".join(lines).strip():
        yield Section(outline.path, "\n".join(lines).strip(), anchor=anchor)


def _setext_title(lines: list[str]) -> bool:
    """Whether the last of ``lines`` is a paragraph of one line, which an ``===`` or ``---`` line under it
    makes a heading (a list item, quote, table row or heading above it is not)."""
    if not lines or not lines[-1].strip() or (len(lines) > 1 and lines[-2].strip()):
        return False
    return not re.match(r" {4}|\s*([-*+>|#]|\d+[.)])(\s|$)|\s*\|", lines[-1])


def _take_anchor(pending: list[tuple[str, str]], heading: str) -> str | None:
    for i, (text, anchor) in enumerate(pending):
        if text == heading:
            del pending[: i + 1]
            return anchor or None
    return None


class MarkdownReader(BaseReader):
    """Markdown files: YAML front matter's ``title`` (else the first ``#`` heading) as title, one section per
    heading with its slug as ``anchor``.

    Example:
        >>> docs = MarkdownReader().load_data(Path("README.md"))  # doctest: +SKIP
    """

    def load_data(self, file: Path, extra_info: dict[str, Any] | None = None, **kwargs: Any) -> list[Document]:
        text = decode_text(Path(file).read_bytes())
        title = ""
        front = re.match(r"\A---\n(.*?)\n---\n", text, flags=re.DOTALL)
        if front:
            text = text[front.end() :]
            found = re.search(r"(?m)^title:\s*['\"]?(.+?)['\"]?\s*$", front.group(1))
            title = found.group(1).strip() if found else ""
        first = re.search(r"(?m)^#\s+(.+?)\s*#*\s*$", text)
        title = title or (first.group(1).strip() if first else "") or first_line(text) or file.stem
        return _documents(_markdown_sections(text), title, extra_info)


class TextReader(BaseReader):
    """Plain text files: one section, the first line as title.

    Example:
        >>> TextReader().load_data(Path("notes.txt"))[0].metadata["title"]  # doctest: +SKIP
        'Release notes'
    """

    def load_data(self, file: Path, extra_info: dict[str, Any] | None = None, **kwargs: Any) -> list[Document]:
        text = _clean(decode_text(Path(file).read_bytes()))
        return _documents([Section([], text)], first_line(text) or file.stem, extra_info)


def decode_text(raw: bytes) -> str:
    """UTF-8 text (a BOM dropped); other bytes raise ``DocumentReadError`` saying to re-encode."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocumentReadError(f"not UTF-8 (byte {exc.start}): re-encode the file as UTF-8") from exc


def first_line(text: str) -> str:
    """The first non-empty line of ``text`` without Markdown heading marks, at most 200 characters: a title
    for text that has none."""
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line[:200]
    return ""


READERS: dict[str, type[BaseReader]] = {
    ".pdf": PdfReader,
    ".docx": DocxReader,
    ".html": HtmlReader,
    ".htm": HtmlReader,
    ".xhtml": HtmlReader,
    ".md": MarkdownReader,
    ".markdown": MarkdownReader,
    ".txt": TextReader,
    ".text": TextReader,
}
"""The built-in reader class of each file suffix (lower case). What ingestion reads is the registry of
:mod:`ingestion.formats` (:func:`register_reader`, :func:`document_suffixes`), which starts with these."""


def reader_for(suffix: str, *, max_file_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES) -> BaseReader:
    """The reader of a file suffix (one of :func:`document_suffixes`); ``max_file_bytes`` (the ``max_file_mb``
    setting) also caps what a ZIP-based document (.docx) may expand to.

    Raises:
        ValueError: no reader reads ``suffix`` (the message lists the formats that are read).

    Example:
        >>> reader_for(".docx", max_file_bytes=2**20).max_uncompressed_bytes
        1048576
    """
    entry = reader_entry(suffix)
    if entry is None:
        raise ValueError(
            f"no reader for {suffix!r} files; the documents read are {', '.join(sorted(document_suffixes()))} "
            "(ingestion.register_reader adds one)"
        )
    reader = entry.make(max_file_bytes)
    if not hasattr(reader, "load_data"):
        raise TypeError(f"the reader registered for {entry.suffix!r} made {type(reader).__name__}, not a BaseReader")
    return reader


def file_extractor(*, max_file_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES) -> dict[str, BaseReader]:
    """A ``SimpleDirectoryReader`` ``file_extractor`` with a reader for every suffix read now (built-in and
    registered).

    Example:
        >>> sorted(file_extractor())[:3]
        ['.docx', '.htm', '.html']
    """
    return {suffix: reader_for(suffix, max_file_bytes=max_file_bytes) for suffix in document_suffixes()}
