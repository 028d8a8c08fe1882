"""Benchmark Engine.ask end to end: latency by stage, tokens sent with and without dedup + compression.

Prints ONE JSON line. Uses the evaluation set of multi-part questions about the sample knowledge base
(``ragidx/evaluation/data/libreoffice_multipart.jsonl``) unless ``--questions`` names another file.

    python benchmarks/ask.py --data-dir /tmp/kb --kb ragidx/data/kb/ [--model qwen2.5-1.5b] [--limit 5]

"without" counts what the very same LLM calls would have sent had the hook neither deduplicated nor
compressed (the raw tool results), so both figures come from one run with the same model decisions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ragidx.config import LLMEndpoint, Settings  # noqa: E402
from ragidx.engine import Engine  # noqa: E402

DEFAULT_QUESTIONS = ROOT / "ragidx" / "evaluation" / "data" / "libreoffice_multipart.jsonl"


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--kb", default=str(ROOT / "ragidx" / "data" / "kb"), help="ingested first (idempotent)")
    p.add_argument("--questions", default=str(DEFAULT_QUESTIONS))
    p.add_argument("--model", default=LLMEndpoint().model, help="default: the shipped default model")
    p.add_argument("--context-window", type=int, default=8192)
    p.add_argument("--max-output-tokens", type=int, default=384)
    p.add_argument("--limit", type=int, default=None)
    args = p.parse_args()

    settings = Settings(
        data_dir=Path(args.data_dir),
        llm=LLMEndpoint(
            model=args.model, context_window=args.context_window, max_output_tokens=args.max_output_tokens,
            temperature=0.0,
        ),
    )  # fmt: skip
    with open(args.questions, encoding="utf-8") as fh:
        questions = [json.loads(line) for line in fh if line.strip()]
    questions = questions[: args.limit] if args.limit else questions
    rows = []
    with Engine(settings) as engine:
        engine.ingest(args.kb)
        t0 = time.perf_counter()
        engine.agent()  # starts the local model server: reported apart from per-question latency
        startup = time.perf_counter() - t0
        for q in questions:
            answer = engine.ask(q["question"])
            relevant = set(q.get("relevant_kb_ids", []))
            shown = {a["kb_id"] for a in answer.articles}
            cited = {c.kb_id for c in answer.citations}
            rows.append(
                {
                    "id": q["id"],
                    "timings": answer.timings,
                    "sent": answer.tokens["prompt_total"],
                    "raw": answer.tokens["prompt_raw_total"],
                    "prompt_max": answer.tokens["prompt_max"],
                    "llm_calls": len(answer.tokens["prompt_per_call"]),
                    "searches": len(answer.queries),
                    "not_found": answer.not_found,
                    "relevant_shown": len(relevant & shown) / len(relevant) if relevant else None,
                    "cited_relevant": bool(relevant & cited),
                    "citation_method": answer.citation_method,
                    "overflow": answer.tokens["prompt_max"] > args.context_window - args.max_output_tokens,
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    sent = [r["sent"] for r in rows]
    raw = [r["raw"] for r in rows]
    timing = {k: [r["timings"].get(k, 0.0) for r in rows] for k in ("retrieval", "hook", "llm", "total")}
    print(
        json.dumps(
            {
                "benchmark": "ask",
                "model": args.model,
                "context_window": args.context_window,
                "questions": len(rows),
                "server_start_s": round(startup, 2),
                **{f"{k}_p50_s": pct(v, 0.5) for k, v in timing.items()},
                **{f"{k}_p95_s": pct(v, 0.95) for k, v in timing.items()},
                "tokens_sent_mean": round(statistics.mean(sent), 1) if sent else 0,
                "tokens_without_dedup_compression_mean": round(statistics.mean(raw), 1) if raw else 0,
                "tokens_saved_pct": round(100 * (1 - sum(sent) / sum(raw)), 1) if sum(raw) else 0.0,
                "llm_calls_mean": round(statistics.mean(r["llm_calls"] for r in rows), 2) if rows else 0,
                "searches_mean": round(statistics.mean(r["searches"] for r in rows), 2) if rows else 0,
                "relevant_shown_mean": round(statistics.mean(r["relevant_shown"] or 0 for r in rows), 3) if rows else 0,
                "cited_relevant_share": round(sum(r["cited_relevant"] for r in rows) / len(rows), 3) if rows else 0,
                "not_found": sum(r["not_found"] for r in rows),
                "overflows": sum(r["overflow"] for r in rows),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "machine": f"{platform.machine()}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}",
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
