"""A real documentation site kept in sync, on loopback: crawl, extraction, and what a second sync costs. One JSON line.

    nice python benchmarks/sync_site.py [--html /usr/share/doc/postgresql-doc-15/html] [--include 'sql-*']
                                        [--sample-every 3] [--mkdocs DIR] [--skip-extractors] [--skip-sync]

The site is Debian's PostgreSQL 15 HTML manual (``apt-get install postgresql-doc-15``: ~1,170 DocBook pages),
copied to a temporary folder and served by a stock static server (``python -m http.server``, which answers
``If-Modified-Since`` with 304 and sends no ETag).

``extractors``: the two main-content extractors of ``ingestion.sync.extract`` on every ``--sample-every``-th page
(and on every page of ``--mkdocs``, a built MkDocs Material site such as ``mkdocs build -d DIR`` of these docs):

- ``nav_chunks``: share of chunks (a section's paragraphs up to 1,000 characters) holding navigation or footer
  text: a line (or table cell; not a heading) that is one of the site's boilerplate lines (a line of four letters
  or more of the pages' whole text found on more than 30 % of the pages, that is no heading or paragraph line of
  any page, nor the page's own title) or a navigation word (Prev, Up, Home, Next);
- ``headings_kept`` / ``anchors_kept``: sections with a heading / with an anchor, per heading element of the page;
- ``words_kept``: share of the words of the page's text outside boilerplate lines found in the extraction;
- ``ms_per_page``.

``sync`` (the sync runner, ``ingestion.sync.runner``, into a fresh data folder with the default embedding model,
``embed_batch_size`` 16; the pages whose file name matches ``--include``, a glob, when given, with the crawl
starting at the first of them in the manual's order):

1. ``first``: pages, chunks embedded, seconds, pages/s, the shares of the sync spent scanning (fetching and
   extracting) and embedding (ingesting), and ``nav_chunks`` of the stored chunks (as above);
2. ``unchanged``: the same again with nothing changed (``chunks_embedded`` 0, ``time_share`` of the first);
3. ``changes``: 3 pages changed (a paragraph added), 2 deleted, 1 added (linked from a changed page): the
   counts must be exactly 3 / 2 / 1;
4. ``errors``: the server replaced by one that answers 20 % of requests with 500 (seeded; robots.txt exempt,
   since a failed robots.txt stops a sync before it reads anything): nothing may be deleted, failures listed;
5. ``recovered``: the stock server again: the sync completes (0 failed, 0 deleted).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

NAV_WORDS = {"Prev", "Up", "Home", "Next"}
BOILERPLATE_SHARE = 0.3
CHUNK_CHARS = 1000
_MARKS = re.compile(r"^[\s#>*`|_:-]+|[\s*`|_:]+$")
_WORD = re.compile(r"\w{3,}")


# --- boilerplate detection ----------------------------------------------------------------------------------------
def page_lines(raw: bytes) -> tuple[str, list[str], list[str]]:
    """(title, the page's whole text as lines, the lines of its headings and paragraphs) of a raw page."""
    from ingestion.sync.extract import parse_html

    soup = parse_html(raw)
    title = " ".join(soup.title.get_text().split()) if soup.title else ""
    headings = [" ".join(h.get_text().split()) for h in soup.find_all(re.compile(r"^h[1-6]$"))]
    prose = [" ".join(line.split()) for p in soup.find_all("p") for line in p.get_text("\n").split("\n")]
    body = soup.body or soup
    for tag in body.find_all(["script", "style"]):
        tag.decompose()
    lines = [" ".join(line.split()) for line in body.get_text("\n").split("\n")]
    return title, [line for line in lines if line], headings + [line for line in prose if line]


def boilerplate(pages: list[tuple[str, list[str], list[str]]]) -> set[str]:
    """The navigation words, and the lines of four letters or more found on more than :data:`BOILERPLATE_SHARE`
    of the pages that are no page's heading or paragraph line ("Description" is a section of many pages,
    "PostgreSQL" a word of many paragraphs, neither is chrome)."""
    counts = Counter(line for _, lines, _ in pages for line in set(lines))
    content = {line for _, _, page_content in pages for line in page_content}
    repeated = {line for line, n in counts.items() if n > BOILERPLATE_SHARE * len(pages)}
    return {line for line in repeated - content if sum(c.isalpha() for c in line) >= 4} | NAV_WORDS


def holds_nav(text: str, nav: set[str], title: str) -> bool:
    for line in text.split("\n"):
        if line.startswith("#"):
            continue  # a Markdown heading is the article's own structure ("## Next steps"), not a link bar
        for cell in line.split("|") if "|" in line else [line]:
            cell = " ".join(_MARKS.sub("", cell).split())
            if cell and cell != title and cell in nav:
                return True
    return False


def chunks_of(sections: list[str]) -> list[str]:
    """A section's paragraphs grouped up to :data:`CHUNK_CHARS` characters (the unit nav text is counted in)."""
    out: list[str] = []
    for text in sections:
        current = ""
        for para in text.split("\n\n"):
            if current and len(current) + len(para) > CHUNK_CHARS:
                out.append(current)
                current = ""
            current = f"{current}\n\n{para}" if current else para
        if current:
            out.append(current)
    return out


# --- extractors -----------------------------------------------------------------------------------------------
def compare_extractors(files: list[Path]) -> dict[str, Any]:
    from ingestion.sync.extract import extract_sections, parse_html

    raws = [f.read_bytes() for f in files]
    parsed = [page_lines(raw) for raw in raws]
    nav = boilerplate(parsed)
    heading_counts = [len(parse_html(raw).find_all(re.compile(r"^h[1-6]$"))) for raw in raws]
    out: dict[str, Any] = {"pages": len(files), "boilerplate_lines": len(nav)}
    for extractor in ("theme", "trafilatura"):
        chunks = nav_chunks = nav_pages = headings = with_heading = with_anchor = words = kept = 0
        started = time.perf_counter()
        for raw, (_title, lines, _content), n_headings in zip(raws, parsed, heading_counts, strict=True):
            page_title, sections = extract_sections(raw, extractor)
            texts = [s.text for s in sections]
            page_chunks = chunks_of(texts)
            flagged = sum(holds_nav(c, nav, page_title) for c in page_chunks)
            chunks += len(page_chunks)
            nav_chunks += flagged
            nav_pages += flagged > 0
            headings += n_headings
            with_heading += sum(1 for s in sections if s.heading_path)
            with_anchor += sum(1 for s in sections if s.heading_path and s.anchor)
            source_words = set(_WORD.findall(" ".join(line for line in lines if line not in nav).lower()))
            found = set(_WORD.findall(" ".join(texts).lower()))
            words += len(source_words)
            kept += len(source_words & found)
        seconds = time.perf_counter() - started
        out[extractor] = {
            "chunks": chunks,
            "nav_chunks": round(nav_chunks / max(chunks, 1), 4),
            "nav_pages": round(nav_pages / max(len(files), 1), 4),
            "headings_kept": round(with_heading / max(headings, 1), 3),
            "anchors_kept": round(with_anchor / max(headings, 1), 3),
            "words_kept": round(kept / max(words, 1), 3),
            "ms_per_page": round(1000 * seconds / max(len(files), 1), 1),
        }
    return out


# --- the site -------------------------------------------------------------------------------------------------
@contextmanager
def stock_server(folder: Path, port: int = 0) -> Iterator[int]:
    """``python -m http.server`` over ``folder`` on 127.0.0.1; yields its port."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "Serving HTTP on 127.0.0.1 port 41234 (http://127.0.0.1:41234/) ..."
        match = re.search(r"port (\d+)", line)
        if match is None:
            raise RuntimeError(f"http.server did not start: {line!r}")
        yield int(match.group(1))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class FlakyHandler(SimpleHTTPRequestHandler):
    """The stock handler, answering a seeded 20 % of requests (robots.txt exempt) with 500."""

    failures: list[str] = []
    rng = random.Random(58)
    lock = threading.Lock()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:
        with self.lock:
            fail = self.path != "/robots.txt" and self.rng.random() < 0.2
        if fail:
            self.failures.append(self.path)
            self.send_error(500)
            return
        super().do_GET()


@contextmanager
def flaky_server(folder: Path, port: int) -> Iterator[list[str]]:
    handler = partial(FlakyHandler, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True)
    thread.start()
    try:
        yield FlakyHandler.failures
    finally:
        server.shutdown()
        server.server_close()


def stored_chunks(data_dir: Path) -> list[tuple[str, str]]:
    """(kb_id, text) of every chunk in the index."""
    import lancedb

    db = lancedb.connect(str(data_dir / "lancedb"))
    names = db.table_names()  # list_tables() in newer lancedb
    rows: list[tuple[str, str]] = []
    for name in names:
        table = db.open_table(name)
        if "text" in table.schema.names and "kb_id" in table.schema.names:
            rows += [(r["kb_id"], r["text"]) for r in table.to_lance().to_table(columns=["kb_id", "text"]).to_pylist()]
    return rows


def summary(report: Any) -> dict[str, Any]:
    """A sync report's counts, time, pages/s and the shares of its time spent scanning and embedding."""
    d = report.as_dict(items=False)
    keep = ("status", "new", "changed", "unchanged", "deleted", "failed", "skipped", "chunks_embedded", "seconds")
    out = {k: d[k] for k in keep}
    out["pages_per_second"] = d["pages_per_second"]
    if report.seconds:
        out["scan_share"] = round(report.scan_seconds / report.seconds, 3)
        out["embed_share"] = round(report.embed_seconds / report.seconds, 3)
    return out


def bump(path: Path) -> None:
    later = time.time() + 5  # Last-Modified has whole seconds: never the second the page was fetched in
    os.utime(path, (later, later))


def run_sync(html: Path, include: str | None, work: Path) -> dict[str, Any]:
    from ingestion.sync.config import SourceConfig, WebsiteOptions
    from ingestion.sync.runner import SyncRunner
    from ragidx.config import Settings
    from ragidx.engine import Engine

    site = work / "site"
    shutil.copytree(html, site)
    order = [p.name for p in sorted(site.glob("*.html"))]
    pages = [n for n in order if include is None or fnmatch.fnmatch(n, include)]
    start = "index.html" if include is None else pages[0]
    out: dict[str, Any] = {"site_pages": len(pages)}
    with stock_server(site) as port:
        base = f"http://127.0.0.1:{port}/"
        source = SourceConfig(
            name="pgdocs",
            kind="website",
            url=base + start,
            include=[base + (include or "")] if include else [base],
            website=WebsiteOptions(concurrency=4),
        )
        settings = Settings(data_dir=work / "data", sources=[source], embed_batch_size=16)
        with Engine(settings) as engine:
            runner = SyncRunner(engine)

            first = runner.sync(source)
            out["first"] = summary(first)
            stored_pages = sorted(i.key for i in first.items if i.what == "new")
            chunks = stored_chunks(work / "data")
            nav = boilerplate([page_lines((site / n).read_bytes()) for n in pages])
            titles = {a.kb_id: a.title for a in engine.article_store.get(stored_pages).values()}
            flagged = [kb for kb, text in chunks if holds_nav(text, nav, titles.get(kb, ""))]
            out["first"]["chunks_stored"] = len(chunks)
            out["first"]["nav_chunks"] = round(len(flagged) / max(len(chunks), 1), 4)
            out["first"]["nav_chunk_examples"] = [t[:120] for kb, t in chunks if kb in set(flagged[:3])][:3]

            second = runner.sync(source)
            out["unchanged"] = summary(second)
            out["unchanged"]["time_share"] = round(second.seconds / max(first.seconds, 1e-9), 4)

            names = [k.removeprefix(base) for k in stored_pages if k != base + start]
            new_name = (include or "").split("*")[0] + "sync-benchmark-new.html"  # inside --include
            changed, deleted = names[10:13], names[20:22]
            for i, name in enumerate(changed):
                page = site / name
                text = page.read_text(encoding="utf-8")
                link = f'<a href="{new_name}">the new page</a>' if i == 0 else ""
                addition = f"<p>Sync benchmark edit {i}: this paragraph is new. {link}</p>"
                footer = '</div><div class="navfooter">'
                page.write_text(text.replace(footer, addition + footer, 1), encoding="utf-8")
                bump(page)
            new_page = site / new_name
            new_page.write_text(
                "<html><head><title>Sync benchmark page</title><meta name='generator' content='DocBook XSL'></head>"
                "<body><div class='sect1' id='NEW'>"
                "<h2>Sync benchmark page</h2><p>A page added between two syncs.</p></div></body></html>"
            )
            for name in deleted:
                (site / name).unlink()
            third = runner.sync(source)
            out["changes"] = summary(third)
            out["changes"]["expected"] = {"changed": 3, "deleted": 2, "new": 1}
            out["changes"]["exact"] = (third.count("changed"), third.count("deleted"), third.count("new")) == (3, 2, 1)

    # the stock server stopped; a flaky one takes its port (the pages' URLs, so their keys, stay the same)
    with flaky_server(site, port) as failures, Engine(settings) as engine:
        fourth = SyncRunner(engine).sync(source)
        out["errors"] = summary(fourth)
        out["errors"]["requests_failed_by_server"] = len(failures)
        out["errors"]["failures_listed"] = sum(1 for i in fourth.items if i.what == "failed" and i.status == 500)
        out["errors"]["nothing_deleted"] = fourth.count("deleted") == 0
    with stock_server(site, port), Engine(settings) as engine:
        fifth = SyncRunner(engine).sync(source)
        out["recovered"] = summary(fifth)
        out["recovered"]["complete"] = fifth.count("failed") == 0 and fifth.count("deleted") == 0
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--html", type=Path, default=Path("/usr/share/doc/postgresql-doc-15/html"))
    p.add_argument("--include", default=None, help="only pages whose file name matches this glob (e.g. 'sql-*')")
    p.add_argument("--sample-every", type=int, default=3, help="extractor comparison: every n-th page")
    p.add_argument("--mkdocs", type=Path, default=None, help="a built MkDocs site to compare the extractors on too")
    p.add_argument("--skip-extractors", action="store_true")
    p.add_argument("--skip-sync", action="store_true")
    args = p.parse_args()
    if not (args.html / "index.html").is_file():
        sys.exit(f"{args.html} holds no index.html: apt-get install postgresql-doc-15, or pass --html")
    result: dict[str, Any] = {
        "site": "postgresql-doc-15",
        "server": "python -m http.server",
        "cpus": os.cpu_count(),
        "load": round(os.getloadavg()[0], 2),
    }
    if not args.skip_extractors:
        files = sorted(args.html.glob("*.html"))[:: args.sample_every]
        result["extractors"] = {"postgresql": compare_extractors(files)}
        if args.mkdocs is not None:
            result["extractors"]["mkdocs"] = compare_extractors(sorted(args.mkdocs.rglob("*.html")))
    if not args.skip_sync:
        with tempfile.TemporaryDirectory(prefix="ragidx-sync-site-") as work:
            result["sync"] = run_sync(args.html, args.include, Path(work))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
