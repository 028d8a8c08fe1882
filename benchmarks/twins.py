"""PDF and DOCX twins of knowledge-base articles, made with LibreOffice (Debian's ``soffice``).

Each JSONL article becomes one HTML page (its first line the ``<h1>``, short lines without a full stop
``<h2>`` sections with ids, the rest paragraphs), and ``soffice --headless --convert-to pdf|docx`` turns a
folder of those pages into their twins: real files, made by a real office suite, with the same text. The twin
of article ``ID`` is ``NNNN.pdf``; ``twin_map`` maps each file's path back to ``ID``.

Used by ``benchmarks/document_twins.py`` and ``benchmarks/readers.py`` (and ``tests/fixtures/docs/make.py``).

    python benchmarks/twins.py --kb ragidx/data/kb/libreoffice_en_sample.jsonl --out /tmp/twins --limit 20
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

FORMATS = ("html", "pdf", "docx")
_FILTERS = {"pdf": "pdf:writer_pdf_Export", "docx": 'docx:"MS Word 2007 XML"'}


def slug(text: str) -> str:
    """A heading's anchor, the way Markdown renderers make one (``Table keys`` -> ``table-keys``)."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def is_heading(line: str) -> bool:
    line = line.strip()
    return 0 < len(line) <= 60 and not line.endswith((".", ":", ";", "!", "?", ",")) and "\n" not in line


def render_html(title: str, text: str) -> str:
    """One article as an HTML page: title, ``<h2 id>`` sections, paragraphs (``|`` rows become a table)."""
    blocks = [b.strip() for b in re.split(r"\n\s*\n", text) if b.strip()]
    if blocks and blocks[0].strip() == title.strip():
        blocks = blocks[1:]
    body = [f'<h1 id="{slug(title)}">{html.escape(title)}</h1>']
    for block in blocks:
        lines = block.splitlines()
        if all(line.strip().startswith("|") for line in lines) and len(lines) > 1:
            rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines if "---" not in line]
            cells = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
            body.append(f'<table border="1">{cells}</table>')
        elif is_heading(block):
            body.append(f'<h2 id="{slug(block)}">{html.escape(block)}</h2>')
        else:
            body.append("<p>" + "<br/>".join(html.escape(line) for line in lines) + "</p>")
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>'
        + html.escape(title)
        + "</title></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def soffice() -> str:
    found = shutil.which("soffice") or shutil.which("libreoffice")
    if not found:
        raise RuntimeError("LibreOffice is not installed: apt-get install -y libreoffice-writer-nogui")
    return found


def convert(pages: Sequence[Path], fmt: str, out_dir: Path) -> list[Path]:
    """Convert HTML pages to ``fmt`` (pdf or docx) with one headless LibreOffice run; the converted paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ragidx-soffice-") as profile:
        subprocess.run(
            [
                soffice(),
                f"-env:UserInstallation=file://{profile}",
                "--headless",
                "--infilter=HTML (StarWriter)",
                "--convert-to",
                _FILTERS[fmt].replace('"', ""),
                "--outdir",
                str(out_dir),
                *map(str, pages),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60 + 5 * len(pages),
        )
    return [out_dir / f"{p.stem}.{fmt}" for p in pages]


def load_articles(kb: Path, ids: Sequence[str] | None = None, limit: int | None = None) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in kb.read_text(encoding="utf-8").splitlines() if line.strip()]
    if ids is not None:
        wanted = set(ids)
        rows = [r for r in rows if r["id"] in wanted]
    return rows[:limit] if limit else rows


def make_twins(articles: Sequence[dict[str, str]], out: Path, formats: Sequence[str] = FORMATS) -> dict[str, str]:
    """Write ``out/html/NNNN.html`` for each article and its twins ``out/pdf``, ``out/docx``; returns
    ``{"html/0001.html": original id, "pdf/0001.pdf": ..., ...}`` (paths relative to ``out``)."""
    twin_map: dict[str, str] = {}
    pages = []
    (out / "html").mkdir(parents=True, exist_ok=True)
    for n, article in enumerate(articles, start=1):
        page = out / "html" / f"{n:04d}.html"
        page.write_text(render_html(article["title"], article["text"]), encoding="utf-8")
        pages.append(page)
        for fmt in formats:
            twin_map[f"{fmt}/{n:04d}.{fmt}"] = article["id"]
    for fmt in formats:
        if fmt != "html":
            convert(pages, fmt, out / fmt)
    (out / "twin_map.json").write_text(json.dumps(twin_map, indent=1), encoding="utf-8")
    return twin_map


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kb", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--limit", type=int, default=None)
    args = p.parse_args()
    twin_map = make_twins(load_articles(args.kb, limit=args.limit), args.out)
    print(json.dumps({"twins": len(twin_map), "out": str(args.out)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
