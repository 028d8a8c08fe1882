"""Benchmark ingestion and search on the embedded default (LanceDB + the bundled MiniLM). One JSON line.

    python benchmarks/ingest.py --kb ../shared/data/kb/libreoffice_en.jsonl [--data-dir DIR] [--queries N]

Reports: first ingest (articles, chunks, seconds, chunks/s, embedding share), a second ingest of the same
file (seconds, chunks re-embedded: should be 0), peak RSS, CPU seconds (so figures from a loaded machine
can be read as per-core throughput), and retrieval latency (p50/p95) of the full chain over titles used as
queries.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragidx.config import Settings  # noqa: E402
from ragidx.engine import Engine  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2) if ordered else 0.0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kb", required=True, help="a JSONL file or folder of articles")
    p.add_argument("--data-dir", default=None, help="scratch store (default: a new temporary folder)")
    p.add_argument("--queries", type=int, default=50, help="search queries to time (article titles)")
    args = p.parse_args()
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="ragidx-bench-"))
    settings = Settings(data_dir=data_dir)
    with Engine(settings) as engine:
        engine.embed_model.get_text_embedding("warm up")  # model load is not ingestion throughput
        c0, t0 = cpu_seconds(), time.perf_counter()
        first = engine.ingest(args.kb)
        first_s, first_cpu = time.perf_counter() - t0, cpu_seconds() - c0
        t1 = time.perf_counter()
        second = engine.ingest(args.kb)
        second_s = time.perf_counter() - t1
        titles = []
        with open(args.kb, encoding="utf-8") as fh:
            for line in fh:
                if len(titles) >= args.queries:
                    break
                titles.append(json.loads(line).get("title") or "")
        engine.retrieve(titles[0])  # warm
        latencies = []
        for title in titles:
            t = time.perf_counter()
            engine.retrieve(title)
            latencies.append((time.perf_counter() - t) * 1000)
        stats = engine.stats()
    print(
        json.dumps(
            {
                "benchmark": "ingest",
                "kb": args.kb,
                "articles": first.seen,
                "chunks": first.chunks_written,
                "errors": len(first.errors),
                "ingest_s": round(first_s, 1),
                "chunks_per_s": round(first.chunks_written / first_s, 1) if first_s else 0.0,
                "chunks_per_cpu_s": round(first.chunks_written / first_cpu, 1) if first_cpu else 0.0,
                "embed_share": round(first.embed_seconds / first_s, 2) if first_s else 0.0,
                "reingest_s": round(second_s, 1),
                "reingest_chunks_embedded": second.chunks_written,
                "reingest_unchanged": second.unchanged,
                "search_p50_ms": pct(latencies, 0.5),
                "search_p95_ms": pct(latencies, 0.95),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "stored_chunks": stats["chunks"],
                "embed_backend": getattr(engine.embed_model, "backend", "torch"),
                "machine": f"{platform.machine()}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}",
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
