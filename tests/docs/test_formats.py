"""The pages that name the input formats name every one the readers take: the README's ingest line, the home page,
the flow diagram of "How an answer is made" and getting started. Each lists them on the first line that says
"JSONL"; a reader added to ``ingestion.readers.READERS`` fails this test until it has a name here and there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ingestion.readers import READERS, DocxReader, HtmlReader, MarkdownReader, PdfReader, TextReader

ROOT = Path(__file__).resolve().parents[2]
NAMES = {PdfReader: "PDF", DocxReader: "Word", HtmlReader: "HTML", MarkdownReader: "Markdown", TextReader: "text"}
"""How the pages name the files each reader reads."""
PAGES = ["README.md", "docs/index.md", "docs/how-it-works.md", "docs/getting-started.md"]


def test_every_reader_has_a_name() -> None:
    assert set(READERS.values()) <= set(NAMES), "name the new reader's format in NAMES and on the pages below"


@pytest.mark.parametrize("page", PAGES)
def test_the_page_names_every_format_the_readers_take(page: str) -> None:
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if "JSONL" in line)
    listed = lines[at]
    missing = [name for name in ["JSONL", *NAMES.values()] if not re.search(rf"\b{name}\b", listed)]
    assert not missing, f"{page}:{at + 1} lists the input formats without {', '.join(missing)}: {listed.strip()}"
