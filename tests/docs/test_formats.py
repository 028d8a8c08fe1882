"""The pages that name the input formats name every one the readers take: the README's ingest line, the home page,
the flow diagram of "How an answer is made" and getting started. Each lists them on the first line that says
"JSONL" (a page of the site may say ``<!-- ragidx:formats -->`` there, which ``docs/hooks/formats.py`` fills from the
readers' registry); a reader added to ``ingestion.readers.READERS`` fails this test until it has a name here."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from ingestion.readers import READERS, DocxReader, HtmlReader, MarkdownReader, PdfReader, TextReader

ROOT = Path(__file__).resolve().parents[2]
NAMES = {PdfReader: "PDF", DocxReader: "Word", HtmlReader: "HTML", MarkdownReader: "Markdown", TextReader: "text"}
"""How the pages name the files each reader reads."""
_HOOK = importlib.util.spec_from_file_location("formats_hook", ROOT / "docs" / "hooks" / "formats.py")
assert _HOOK is not None and _HOOK.loader is not None
hook = importlib.util.module_from_spec(_HOOK)
_HOOK.loader.exec_module(hook)
PAGES = ["README.md", "docs/index.md", "docs/how-it-works.md", "docs/getting-started.md"]


def test_every_reader_has_a_name() -> None:
    assert set(READERS.values()) <= set(NAMES), "name the new reader's format in NAMES and on the pages below"


@pytest.mark.parametrize("page", PAGES)
def test_the_page_names_every_format_the_readers_take(page: str) -> None:
    lines = hook.fill_formats((ROOT / page).read_text(encoding="utf-8")).splitlines()  # as the site is built
    at = next(i for i, line in enumerate(lines) if "JSONL" in line)
    listed = lines[at]
    missing = [name for name in ["JSONL", *NAMES.values()] if not re.search(rf"\b{name}\b", listed)]
    assert not missing, f"{page}:{at + 1} lists the input formats without {', '.join(missing)}: {listed.strip()}"


def test_a_registered_reader_is_named_where_a_page_has_the_marker() -> None:
    from ingestion.formats import register_reader, unregister_reader
    from ingestion.readers import TextReader as Reader

    assert (
        hook.fill_formats("JSONL, <!-- ragidx:formats --> files")
        == "JSONL, PDF, Word .docx, HTML, Markdown, text files"
    )
    register_reader(".rst", Reader, name="reStructuredText", text=True)
    try:
        assert (
            hook.fill_formats("of <!-- ragidx:formats -->.")
            == "of PDF, Word .docx, HTML, Markdown, text, reStructuredText."
        )
    finally:
        unregister_reader(".rst")
