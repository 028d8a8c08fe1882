"""Retrieval on PDF and DOCX twins of the LibreOffice sample against the original: one JSON line.

    python benchmarks/document_twins.py [--articles 80] [--formats jsonl,html,pdf,docx]

The articles the answer questions (``ragidx/evaluation/data/answers_libreoffice_en.jsonl``) cite, plus the
first other articles of the bundled sample as distractors up to ``--articles``, are rendered to HTML and
converted to PDF and DOCX by LibreOffice (``benchmarks/twins.py``). Each variant is ingested into its own
fresh store with the default settings (``ragidx ingest`` on a folder of one file per article; ``jsonl``: the
original articles as JSON lines), and every answerable question is searched (``Engine.retrieve``, the full
chain, top 10). Result ids are mapped back to the original article ids, so all variants are scored on the same
gold ids: nDCG@10, hit@1 and hit@10, with ingest seconds and articles (and PDF pages) per second.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from twins import load_articles, make_twins  # noqa: E402

from ragidx.config import Settings  # noqa: E402
from ragidx.engine import Engine  # noqa: E402
from ragidx.evaluation.retrieval import ndcg_at_k  # noqa: E402

KB = ROOT / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"
QUESTIONS = ROOT / "ragidx" / "evaluation" / "data" / "answers_libreoffice_en.jsonl"


def pick_articles(limit: int) -> tuple[list[dict[str, str]], list[dict[str, object]]]:
    questions = [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    questions = [q for q in questions if q.get("answerable") and q.get("gold_kb_ids")]
    gold = {str(k) for q in questions for k in q["gold_kb_ids"]}  # type: ignore[attr-defined]
    rows = load_articles(KB)
    chosen = [r for r in rows if r["id"] in gold]
    chosen += [r for r in rows if r["id"] not in gold][: max(0, limit - len(chosen))]
    return chosen, questions


def pdf_pages(folder: Path) -> int:
    import pypdfium2 as pdfium

    total = 0
    for f in folder.glob("*.pdf"):
        pdf = pdfium.PdfDocument(str(f))
        total += len(pdf)
        pdf.close()
    return total


def run_variant(
    fmt: str, path: Path, twin_map: dict[str, str], questions: list[dict[str, object]], data_dir: Path
) -> dict[str, object]:
    with Engine(Settings(data_dir=data_dir)) as engine:
        engine.embed_model.get_text_embedding("warm up")  # model load is not ingestion throughput
        t0 = time.perf_counter()
        report = engine.ingest(path)
        seconds = time.perf_counter() - t0
        scores: dict[str, list[float]] = {"ndcg@10": [], "hit@1": [], "hit@10": []}
        for q in questions:
            ranked = [
                a.kb_id if fmt == "jsonl" else twin_map.get(f"{fmt}/{a.kb_id}", a.kb_id)
                for a in engine.retrieve(str(q["question"]), top_k=10)
            ]
            gold = {str(k): 1 for k in q["gold_kb_ids"]}  # type: ignore[attr-defined]
            scores["ndcg@10"].append(ndcg_at_k(ranked, gold, 10))
            scores["hit@1"].append(float(bool(ranked[:1]) and ranked[0] in gold))
            scores["hit@10"].append(float(any(k in gold for k in ranked[:10])))
    row: dict[str, object] = {
        "format": fmt,
        "articles": report.seen,
        "errors": len(report.errors),
        "chunks": report.chunks_written,
        "ingest_s": round(seconds, 1),
        "read_s": round(seconds - report.embed_seconds, 1),
        "articles_per_s": round(report.seen / seconds, 2) if seconds else 0.0,
        **{k: round(sum(v) / len(v), 4) for k, v in scores.items()},
    }
    if fmt == "pdf":
        row["pages_per_s"] = round(pdf_pages(path) / seconds, 2) if seconds else 0.0
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--articles", type=int, default=80)
    p.add_argument("--formats", default="jsonl,html,pdf,docx")
    args = p.parse_args()
    articles, questions = pick_articles(args.articles)
    formats = args.formats.split(",")
    with tempfile.TemporaryDirectory(prefix="ragidx-twins-") as tmp:
        out = Path(tmp)
        t0 = time.perf_counter()
        twin_map = make_twins(articles, out / "kb", [f for f in formats if f != "jsonl"] or ["html"])
        convert_s = time.perf_counter() - t0
        original = out / "kb" / "original.jsonl"
        original.write_text("\n".join(json.dumps(a, ensure_ascii=False) for a in articles) + "\n", encoding="utf-8")
        rows = []
        for fmt in formats:
            path = original if fmt == "jsonl" else out / "kb" / fmt
            rows.append(run_variant(fmt, path, twin_map, questions, out / f"data-{fmt}"))
    base = next((r for r in rows if r["format"] == "jsonl"), rows[0])
    for r in rows:
        r["ndcg@10_vs_original"] = round(float(r["ndcg@10"]) - float(base["ndcg@10"]), 4)  # type: ignore[arg-type]
    print(
        json.dumps(
            {
                "benchmark": "document_twins",
                "articles": len(articles),
                "questions": len(questions),
                "soffice_convert_s": round(convert_s, 1),
                "results": rows,
                "machine": f"{platform.machine()}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}",
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
