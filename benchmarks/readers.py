"""Which library reads each document format best: text recall and speed on LibreOffice twins. One JSON line.

    python benchmarks/readers.py [--kb ragidx/data/kb/libreoffice_en_sample.jsonl] [--articles 40]

The first ``--articles`` help articles are rendered to HTML and converted to PDF and DOCX by LibreOffice
(``benchmarks/twins.py``); every candidate reads every twin. Per candidate:

- ``recall``: share of the article's words (lower-cased, multiset) found in what the reader returned;
- ``precision``: share of the returned words that are the article's (markup and noise lower it);
- ``ms_per_file``: reading time per file (one process, warm);
- ``table``: how the shortcut-key table of ``tests/fixtures/docs/guide.*`` comes out: ``cells`` (a row per
  line, cells apart: ``| Ctrl+F12 | Insert table |``), ``row lines`` (a row per line, cells run together)
  or ``soup`` (cells on lines of their own, or lost).

Candidates: pypdf, pypdfium2, pdfplumber and ragidx's ``PdfReader`` (pypdfium2 + pdfplumber's ruled tables);
python-docx (ragidx's ``DocxReader``) and docx2txt; BeautifulSoup + markdownify (ragidx's ``HtmlReader``),
trafilatura and BeautifulSoup's ``get_text``. llama-index-readers-file is not a candidate: it needs pandas < 3
(the environment has 3.x), and its PDF and DOCX readers are pypdf and docx2txt, measured here directly.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from twins import load_articles, make_twins  # noqa: E402

Reader = Callable[[Path], str]


def _pypdf(path: Path) -> str:
    import pypdf

    return "\n".join(page.extract_text() or "" for page in pypdf.PdfReader(str(path)).pages)


def _pypdfium2(path: Path) -> str:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(path))
    try:
        return "\n".join(page.get_textpage().get_text_range() for page in pdf)
    finally:
        pdf.close()


def _pdfplumber(path: Path) -> str:
    import pdfplumber

    with pdfplumber.open(str(path)) as pdf:
        return "\n".join(page.extract_text() or "" for page in pdf.pages)


def _ragidx(suffix: str) -> Reader:
    from ingestion.readers import READERS

    def read(path: Path) -> str:
        return "\n\n".join(d.text for d in READERS[suffix]().load_data(path))

    return read


def _docx2txt(path: Path) -> str:
    import docx2txt

    return str(docx2txt.process(str(path)))


def _trafilatura(path: Path) -> str:
    import trafilatura

    return trafilatura.extract(path.read_text(encoding="utf-8"), include_tables=True, output_format="markdown") or ""


def _bs4_text(path: Path) -> str:
    from bs4 import BeautifulSoup

    return BeautifulSoup(path.read_bytes(), "lxml").get_text("\n")


CANDIDATES: dict[str, dict[str, Reader]] = {
    "pdf": {
        "pypdf": _pypdf,
        "pypdfium2": _pypdfium2,
        "pdfplumber": _pdfplumber,
        "ragidx PdfReader (pypdfium2 + pdfplumber tables)": _ragidx(".pdf"),
    },
    "docx": {"ragidx DocxReader (python-docx)": _ragidx(".docx"), "docx2txt": _docx2txt},
    "html": {
        "ragidx HtmlReader (bs4 + markdownify)": _ragidx(".html"),
        "trafilatura": _trafilatura,
        "bs4 get_text": _bs4_text,
    },
}


def words(text: str) -> Counter[str]:
    return Counter(re.findall(r"\w+", text.lower()))


def table_shape(text: str) -> str:
    lines = [line for line in text.splitlines() if "Ctrl+F12" in line]
    if any(re.search(r"Ctrl\+F12\s*[|\t]\s*Insert table", line) for line in lines):
        return "cells"
    if any("Insert table" in line for line in lines):
        return "row lines"
    return "soup"


def measure(fmt: str, name: str, read: Reader, files: list[Path], originals: list[str]) -> dict[str, object]:
    read(files[0])  # warm: imports, font caches
    hits = total = returned = 0
    started = time.perf_counter()
    texts = [read(f) for f in files]
    seconds = time.perf_counter() - started
    for text, original in zip(texts, originals, strict=True):
        want, got = words(original), words(text)
        hits += sum((want & got).values())
        total += sum(want.values())
        returned += sum(got.values())
    return {
        "format": fmt,
        "reader": name,
        "recall": round(hits / total, 4),
        "precision": round(hits / returned, 4) if returned else 0.0,
        "ms_per_file": round(1000 * seconds / len(files), 1),
        "table": table_shape(read(ROOT / "tests" / "fixtures" / "docs" / f"guide.{fmt}")),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kb", type=Path, default=ROOT / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl")
    p.add_argument("--articles", type=int, default=40)
    args = p.parse_args()
    articles = load_articles(args.kb, limit=args.articles)
    with tempfile.TemporaryDirectory(prefix="ragidx-readers-") as tmp:
        out = Path(tmp)
        t0 = time.perf_counter()
        twin_map = make_twins(articles, out)
        convert_s = time.perf_counter() - t0
        originals = {a["id"]: a["text"] for a in articles}
        rows = []
        for fmt, candidates in CANDIDATES.items():
            files = sorted((out / fmt).glob(f"*.{fmt}"))
            texts = [originals[twin_map[f"{fmt}/{f.name}"]] for f in files]
            rows.extend(measure(fmt, name, read, files, texts) for name, read in candidates.items())
    print(
        json.dumps(
            {
                "benchmark": "readers",
                "articles": len(articles),
                "soffice_convert_s": round(convert_s, 1),
                "results": rows,
                "machine": f"{platform.machine()}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}",
            },
            ensure_ascii=False,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
