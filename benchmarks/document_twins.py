"""Retrieval and answers on PDF and DOCX twins of the LibreOffice sample against the original: one JSON line.

    python benchmarks/document_twins.py [--articles 80] [--formats jsonl,html,pdf,docx]
    python benchmarks/document_twins.py --answers [--out-dir rows/]   # + ragidx eval answers on each (local model)

The articles the answer questions (``ragidx/evaluation/data/answers_libreoffice_en.jsonl``) cite, plus the
first other articles of the bundled sample as distractors up to ``--articles``, are rendered to HTML and
converted to PDF and DOCX by LibreOffice (``benchmarks/twins.py``). Each variant is ingested into its own
fresh store with the default settings (``ragidx ingest`` on a folder of one file per article; ``jsonl``: the
original articles as JSON lines), and every answerable question is searched (``Engine.retrieve``, the full
chain, top 10). Result ids are mapped back to the original article ids, so all variants are scored on the same
gold ids: nDCG@10, hit@1 and hit@10, with ingest seconds and articles (and PDF pages) per second.

``--answers`` asks every question of the file (the unanswerable ones too) through the answer path
(:func:`ragidx.evaluation.answers.evaluate_answers`, what ``ragidx eval answers`` runs, with the configured model:
the local one by default), one variant after the other. Each question's gold ids are rewritten to the twin's ids
(``0007.pdf``), so citation precision and recall are judged as on the original; the rows written to
``--out-dir`` carry the cited and shown ids mapped back to the original ids, for comparing variants question by
question (``answers-FMT-twin-ids.jsonl`` is written as each question is scored, with the twins' ids).
Containment, citation precision and "not found" are reported per variant, with their difference to the original.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from twins import load_articles, make_twins  # noqa: E402

from ragidx.config import Settings  # noqa: E402
from ragidx.engine import Engine  # noqa: E402
from ragidx.evaluation.answers import Question, evaluate_answers, load_questions  # noqa: E402
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


def twin_ids(fmt: str, twin_map: dict[str, str]) -> dict[str, str]:
    """Original id -> the id of its ``fmt`` twin (its path in the twin folder: ``0007.pdf``)."""
    prefix = f"{fmt}/"
    return {orig: key[len(prefix) :] for key, orig in twin_map.items() if key.startswith(prefix)}


def to_twin(question: Question, ids: dict[str, str]) -> Question:
    """``question`` with its gold ids those of the twins (unchanged for the original)."""
    return replace(question, gold_kb_ids=tuple(ids.get(k, k) for k in question.gold_kb_ids))


def to_original(row: dict[str, Any], back: dict[str, str]) -> dict[str, Any]:
    """A scored row with its ids mapped back to the original ids (for comparing variants question by question)."""
    out = dict(row)
    out["cited"] = [back.get(k, k) for k in row.get("cited") or []]
    out["gold_kb_ids"] = [back.get(k, k) for k in row.get("gold_kb_ids") or []]
    out["gold_shown"] = [back.get(k, k) for k in row.get("gold_shown") or []]
    out["shown"] = [{**a, "kb_id": back.get(str(a.get("kb_id")), a.get("kb_id"))} for a in row.get("shown") or []]
    return out


ANSWER_FIGURES = ("containment", "f1", "citation_precision", "citation_recall", "false_not_found", "abstention")


def answer_variant(
    fmt: str, path: Path, twin_map: dict[str, str], questions: list[Question], data_dir: Path, out_dir: Path | None
) -> dict[str, Any]:
    ids = {} if fmt == "jsonl" else twin_ids(fmt, twin_map)
    back = {v: k for k, v in ids.items()}
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    live = out_dir / f"answers-{fmt}-twin-ids.jsonl" if out_dir is not None else None  # each row as it is scored
    with Engine(Settings(data_dir=data_dir)) as engine:
        report = engine.ingest(path)
        summary, rows = evaluate_answers(engine, [to_twin(q, ids) for q in questions], out=live)
    if out_dir is not None:
        lines = [json.dumps(to_original(r, back), ensure_ascii=False) for r in rows]
        (out_dir / f"answers-{fmt}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {
        "format": fmt,
        "articles": report.seen,
        "errors": len(report.errors),
        "chunks": report.chunks_written,
        **{k: summary.get(k) for k in ANSWER_FIGURES},
        "contained": sorted(str(r["id"]) for r in rows if r["contained"]),
        "p50_s": summary.get("p50_s"),
        "prompt_tokens_mean": summary.get("prompt_tokens_mean"),
        "model": summary.get("model"),
        "machine": summary.get("machine"),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--articles", type=int, default=80)
    p.add_argument("--formats", default="jsonl,html,pdf,docx")
    p.add_argument("--answers", action="store_true", help="answer containment and citations (the local model)")
    p.add_argument("--out-dir", type=Path, default=None, help="with --answers: one rows JSONL per format here")
    args = p.parse_args()
    articles, questions = pick_articles(args.articles)
    asked = load_questions(QUESTIONS)  # all of them, the unanswerable ones too
    formats = args.formats.split(",")
    with tempfile.TemporaryDirectory(prefix="ragidx-twins-") as tmp:
        out = Path(tmp)
        t0 = time.perf_counter()
        twin_map = make_twins(articles, out / "kb", [f for f in formats if f != "jsonl"] or ["html"])
        convert_s = time.perf_counter() - t0
        original = out / "kb" / "original.jsonl"
        original.write_text("\n".join(json.dumps(a, ensure_ascii=False) for a in articles) + "\n", encoding="utf-8")
        rows: list[dict[str, Any]] = []
        for fmt in formats:
            path = original if fmt == "jsonl" else out / "kb" / fmt
            if args.answers:
                rows.append(answer_variant(fmt, path, twin_map, asked, out / f"data-{fmt}", args.out_dir))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            else:
                rows.append(run_variant(fmt, path, twin_map, questions, out / f"data-{fmt}"))
    base = next((r for r in rows if r["format"] == "jsonl"), rows[0])
    for r in rows:
        for key in ("containment", "citation_precision") if args.answers else ("ndcg@10",):
            if r.get(key) is not None and base.get(key) is not None:
                r[f"{key}_vs_original"] = round(float(r[key]) - float(base[key]), 4)
    print(
        json.dumps(
            {
                "benchmark": "document_twins_answers" if args.answers else "document_twins",
                "articles": len(articles),
                "questions": len(asked) if args.answers else len(questions),
                "soffice_convert_s": round(convert_s, 1),
                "results": rows,
                "machine": f"{platform.machine()}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}",
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
