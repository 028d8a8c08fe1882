"""MkDocs hook: the document formats ingestion reads, written from ``ingestion.formats`` at build time.

A page says ``<!-- ragidx:formats -->`` where the list goes (``JSONL, <!-- ragidx:formats --> files``); the build
writes the formats the readers' registry holds (``PDF, Word .docx, HTML, Markdown, text``), so a reader added to
``ingestion/formats.py`` is named on every such page without editing it.

Usage (what ``mkdocs.yml`` does)::

    hooks:
      - docs/hooks/formats.py

The test suite calls :func:`fill_formats` directly (``tests/docs/test_formats.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# The checkout's ingestion package, even where another copy is installed.
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MARKER = "<!-- ragidx:formats -->"


def fill_formats(markdown: str) -> str:
    """``markdown`` with every marker replaced by the formats read now, as help text names them."""
    if MARKER not in markdown:
        return markdown
    from ingestion.formats import document_formats

    return markdown.replace(MARKER, document_formats())


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Fill the markers of every page."""
    return fill_formats(markdown)
