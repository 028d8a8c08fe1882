"""The same questions answered from a synced website and from the JSONL knowledge base of the same manual.

    nice python benchmarks/sync_answers.py [--html /usr/share/doc/postgresql-doc-15/html]
        [--kb ../shared/data/kb/postgresql15.jsonl] [--questions ragidx/evaluation/data/answers_postgresql15.jsonl]
        [--work-dir /tmp/ragidx-sync-answers] [--only site|kb]

Both knowledge bases come from Debian's ``postgresql-doc-15`` HTML: the JSONL file was made from it by hand
(one article a page, ``postgresql-15:<page>.html``), the website is the same folder served by a stock static
server (``python -m http.server``) on loopback and synced by a ``website`` source (``ingestion.sync``: crawl from
``index.html``, main content by the page's theme, one article a page whose id is its URL). Each is indexed with
the default settings and asked every question of the set through ``ragidx.evaluation.answers`` (the model of the
``RAGIDX_LLM__*`` settings, else the local one), the gold ids mapped to the page URLs for the site.

``--work-dir`` keeps both indexes and the site's port, so a second run re-syncs (nothing to embed) and re-asks.
Prints one JSON line: the sync's counts, each side's summary (containment, false "not found", abstention, citation
precision, p50), and the questions whose outcome differs between the two.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from benchmarks.sync_site import stock_server, summary  # noqa: E402

PREFIX = "postgresql-15:"


def site_questions(questions: list[Any], base: str) -> list[Any]:
    """The questions with their gold ids as the synced site's page URLs."""
    return [
        dataclasses.replace(q, gold_kb_ids=tuple(base + g.removeprefix(PREFIX) for g in q.gold_kb_ids))
        for q in questions
    ]


def ask_site(html: Path, work: Path, questions: list[Any]) -> dict[str, Any]:
    from ingestion.sync.config import SourceConfig, WebsiteOptions
    from ingestion.sync.runner import SyncRunner
    from ragidx.config import Settings
    from ragidx.engine import Engine
    from ragidx.evaluation.answers import evaluate_answers

    site = work / "site"
    if not site.exists():
        shutil.copytree(html, site)
    port_file = work / "site.port"
    port = int(port_file.read_text()) if port_file.exists() else 0
    with stock_server(site, port) as port:
        port_file.write_text(str(port))
        base = f"http://127.0.0.1:{port}/"
        source = SourceConfig(
            name="pgdocs",
            kind="website",
            url=base + "index.html",
            include=[base],
            website=WebsiteOptions(concurrency=4),
        )
        settings = Settings(data_dir=work / "site-data", sources=[source])
        with Engine(settings) as engine:
            report = SyncRunner(engine).sync(source)
            synced = summary(report)
    with Engine(settings) as engine:
        articles = engine.article_store.count()
        result, _ = evaluate_answers(
            engine, site_questions(questions, base), out=work / "site-rows.jsonl", dataset="postgresql15 (synced site)"
        )
    return {"sync": synced, "articles": articles, **result}


def ask_kb(kb: Path, work: Path, questions: list[Any]) -> dict[str, Any]:
    from ragidx.config import Settings
    from ragidx.engine import Engine
    from ragidx.evaluation.answers import evaluate_answers, prepare_kb

    with Engine(Settings(data_dir=work / "kb-data")) as engine:
        started = time.perf_counter()
        ingested = prepare_kb(engine, [kb], names=[kb.name])
        ingest_s = round(time.perf_counter() - started, 1)
        result, _ = evaluate_answers(engine, questions, out=work / "kb-rows.jsonl", dataset="postgresql15 (JSONL)")
    return {"ingest_s": ingest_s, "articles": ingested["articles"], **result}


def outcomes(path: Path) -> dict[str, str]:
    """Each question's outcome in a rows file: ``right``, ``not found``, ``wrong`` (or ``abstained`` / ``answered``
    for an unanswerable one)."""
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["answerable"]:
            out[row["id"]] = "right" if row["contained"] else "not found" if row["not_found"] else "wrong"
        else:
            out[row["id"]] = "abstained" if row["not_found"] else "answered"
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--html", type=Path, default=Path("/usr/share/doc/postgresql-doc-15/html"))
    p.add_argument("--kb", type=Path, default=ROOT.parent / "shared" / "data" / "kb" / "postgresql15.jsonl")
    p.add_argument("--questions", type=Path, default=ROOT / "ragidx/evaluation/data/answers_postgresql15.jsonl")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/ragidx-sync-answers"))
    p.add_argument("--only", choices=("site", "kb"), default=None, help="one side only (the other's rows are kept)")
    args = p.parse_args()

    from ragidx.evaluation.answers import load_questions

    questions = load_questions(args.questions)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"questions": len(questions), "load": os.getloadavg()[0]}
    if args.only in (None, "kb"):
        out["kb"] = ask_kb(args.kb, args.work_dir, questions)
    if args.only in (None, "site"):
        out["site"] = ask_site(args.html, args.work_dir, questions)
    site_rows, kb_rows = args.work_dir / "site-rows.jsonl", args.work_dir / "kb-rows.jsonl"
    if site_rows.exists() and kb_rows.exists():
        site, kb = outcomes(site_rows), outcomes(kb_rows)
        out["differ"] = {q: {"kb": kb[q], "site": site[q]} for q in kb if site.get(q) != kb[q]}
    print(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    main()
