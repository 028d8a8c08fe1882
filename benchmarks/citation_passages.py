"""Citations that open at the passage: how often a citation quotes its article verbatim, and how often its
text-fragment link finds and highlights that passage on the real page. No model runs.

Right answers (``--answers``: strong-style replies with ``[n]`` markers over named articles, as
``benchmarks/guard_replay.py`` reads them) are resolved into citations over the whole articles of ``--kb`` files.
For each citation: whether it carries a quote, whether the quote is found verbatim in the cited article's text,
and whether its link carries a text fragment. With ``--pages PREFIX=DIR`` (repeatable) the links whose URL starts
with PREFIX are opened from DIR's HTML files (the pages the knowledge base was made from, e.g. Debian's
``postgresql-doc-15``) in headless Chromium: a page that paints the fragment's highlight counts as found.

    python benchmarks/citation_passages.py --answers ragidx/evaluation/data/strong_answers.jsonl \\
        --kb ../shared/data/kb/postgresql15.jsonl --kb ../shared/data/kb/libreoffice_en.jsonl \\
        --kb ../shared/data/kb/libreoffice_ru.jsonl \\
        --pages https://www.postgresql.org/docs/15/=/usr/share/doc/postgresql-doc-15/html

Prints ONE JSON line: per knowledge base (``kb`` of each answer) and for all, ``citations``, ``quoted``,
``verbatim`` (share of quotes found verbatim in the article), ``fragment_links``, and with ``--pages``
``opened`` and ``highlighted`` (share of opened links whose passage the browser highlighted).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ragidx.agent.citations import resolve_citations  # noqa: E402
from ragidx.agent.text_fragments import DIRECTIVE  # noqa: E402
from ragidx.article import Article  # noqa: E402
from ragidx.evaluation.answers import machine_line  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
HIGHLIGHT_CSS = "::target-text { background: rgb(255, 0, 255) !important; color: rgb(0, 0, 0) !important; }"
INIT_SCRIPT = (
    "document.addEventListener('DOMContentLoaded', () => {"
    f" const s = document.createElement('style'); s.textContent = {json.dumps(HIGHLIGHT_CSS)};"
    " document.head.appendChild(s); });"
)


def load_kb(paths: Sequence[Path]) -> dict[str, Article]:
    articles: dict[str, Article] = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                articles[str(row["id"])] = Article(
                    str(row["id"]), str(row.get("title", "")), str(row.get("url", "")), str(row["text"])
                )
    return articles


def local_page(url: str, pages: Sequence[tuple[str, Path]]) -> str | None:
    """``url`` (with its fragment) as a ``file://`` URL of a local copy, or None."""
    for prefix, folder in pages:
        if url.startswith(prefix):
            path, _, fragment = url[len(prefix) :].partition("#")
            file = folder / path
            if file.is_file():
                return f"{file.resolve().as_uri()}#{fragment}" if fragment else file.resolve().as_uri()
    return None


def highlighted(urls: Sequence[str]) -> list[bool]:
    """For each URL: whether Chromium, opening it, painted a text fragment's highlight."""
    from PIL import Image
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox", "--disable-gpu"], headless=True
        )
        try:
            for url in urls:
                page = browser.new_page(viewport={"width": 1000, "height": 900})
                page.add_init_script(INIT_SCRIPT)
                page.goto(url)
                page.wait_for_timeout(600)
                shot = Path("/tmp/citation_passages.png")
                page.screenshot(path=str(shot))
                page.close()
                img = Image.open(shot).convert("RGB")
                painted = sum(
                    1
                    for y in range(0, img.height, 3)
                    for x in range(0, img.width, 3)
                    if img.getpixel((x, y)) == (255, 0, 255)
                )
                out.append(painted > 20)
        finally:
            browser.close()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--answers", type=Path, required=True)
    parser.add_argument("--kb", type=Path, action="append", required=True)
    parser.add_argument("--pages", action="append", default=[], help="URL_PREFIX=DIR of the pages' HTML files")
    args = parser.parse_args(argv)
    kb = load_kb(args.kb)
    pages = [(p.split("=", 1)[0], Path(p.split("=", 1)[1])) for p in args.pages]
    counts: dict[str, dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    to_open: list[tuple[str, str]] = []
    for line in args.answers.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        sources = [kb[s["kb_id"]] for s in row["sources"]]
        _, citations, _ = resolve_citations(row["reply"], sources, question=row["question"])
        for c in citations:
            for key in (row["kb"], "all"):
                n = counts[key]
                n["citations"] += 1
                n["quoted"] += bool(c.quote)
                n["verbatim"] += bool(c.quote) and c.quote in kb[c.kb_id].content
                n["fragment_links"] += DIRECTIVE in c.url
            local = local_page(c.url, pages) if DIRECTIVE in c.url else None
            if local is not None:
                to_open.append((row["kb"], local))
    if to_open and CHROMIUM.is_file():
        for (name, _), found in zip(to_open, highlighted([u for _, u in to_open]), strict=True):
            for key in (name, "all"):
                counts[key]["opened"] += 1
                counts[key]["highlighted"] += found
    result: dict[str, Any] = {"benchmark": "citation_passages"}
    for key, n in counts.items():
        entry = dict(n)
        entry["verbatim_share"] = round(n["verbatim"] / n["quoted"], 4) if n["quoted"] else None
        entry["quoted_share"] = round(n["quoted"] / n["citations"], 4) if n["citations"] else None
        if n.get("opened"):
            entry["highlighted_share"] = round(n["highlighted"] / n["opened"], 4)
        result[key] = entry
    result["machine"] = machine_line()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
