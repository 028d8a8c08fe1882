"""Benchmark the article store's two backends, SQLite and PostgreSQL. One JSON line.

    python benchmarks/article_store.py --kb ../shared/data/kb/libreoffice_en.jsonl
        [--modes fetch,ingest,concurrent] [--pg-url URL] [--fetches 2000]

Without ``--pg-url`` it starts a scratch PostgreSQL server on loopback from Debian's binaries
(``tests/postgres_server.py``, durable settings: fsync on) and removes it afterwards.

- ``fetch``: both stores hold the KB's articles; time ``get()`` of 5 random articles (what one retrieval
  of top_k=5 asks for) ``--fetches`` times per backend: p50/p95 in ms.
- ``ingest``: a full first ingest of the KB with the shipped defaults (LanceDB + the bundled MiniLM),
  once with the SQLite article store, once with PostgreSQL, alternating ``--repeats`` times so a shared
  machine's slow spells fall on both: wall seconds, chunks/s, this process's CPU seconds, and for
  PostgreSQL the server's CPU seconds too. ``pg_vs_sqlite_wall`` is the ratio of the medians.
- ``concurrent``: two processes started at the same moment ingest the same file into one LanceDB folder
  and one PostgreSQL database; then it checks what should hold: one ledger row per article, all
  indexed, no chunk id twice, each article's chunks in LanceDB as many as its ledger row says, and every
  article embedded by one process only (chunks written by both = chunks stored).

Load averages are recorded before and after: figures from a shared machine are inflated by whatever else runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ingestion.sources import read_source  # noqa: E402
from ragidx.article import Article  # noqa: E402
from ragidx.config import Settings  # noqa: E402
from ragidx.engine import Engine  # noqa: E402
from ragidx.stores.article_store import INDEXED, ArticleStore  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3) if ordered else 0.0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def server_cpu_seconds(server: Any) -> float | None:
    """CPU of the scratch server: the postmaster and every backend it has reaped (ended connections)."""
    if server is None:
        return None
    pid = (server.data / "postmaster.pid").read_text().split()[0]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    live = 0
    for child in Path("/proc").glob("[0-9]*"):
        try:
            stat = (child / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat[1] == pid:  # a live backend or helper process
            live += int(stat[11]) + int(stat[12])
    return (ticks + live) / os.sysconf("SC_CLK_TCK")


def articles(kb: Path) -> list[Article]:
    return [a for a in read_source(kb) if isinstance(a, Article)]


def bench_fetch(kb: Path, pg_url: str, fetches: int, scratch: Path) -> dict[str, Any]:
    items = articles(kb)
    ids = [a.kb_id for a in items]
    out: dict[str, Any] = {}
    for name, location in (("sqlite", str(scratch / "fetch.sqlite")), ("postgres", pg_url)):
        store = ArticleStore(location, tenant="fetch-bench")
        store.save_pending(items, source="bench")
        store.mark_indexed(dict.fromkeys(ids, 1))
        rng = random.Random(7)
        for _ in range(50):
            store.get(rng.sample(ids, 5))  # warm: connections, statement caches
        times = []
        for _ in range(fetches):
            pick = rng.sample(ids, 5)
            t = time.perf_counter()
            got = store.get(pick)
            times.append((time.perf_counter() - t) * 1000)
            assert len(got) == 5
        out[name] = {"p50_ms": pct(times, 0.5), "p95_ms": pct(times, 0.95), "mean_ms": round(statistics.mean(times), 3)}
        store.delete(ids)
        store.close()
    return out


def ingest_once(kb: Path, data_dir: Path, pg_url: str | None, server: Any) -> dict[str, Any]:
    settings = Settings(data_dir=data_dir, article_store_url=pg_url)
    with Engine(settings) as engine:
        engine.embed_model.get_text_embedding("warm up")  # model load is not ingestion throughput
        engine.article_store.count()  # nor is opening the store
        c0, s0, t0 = cpu_seconds(), server_cpu_seconds(server), time.perf_counter()
        report = engine.ingest(kb)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        s1 = server_cpu_seconds(server)
        stored = engine.chunk_store.count()
    row = {
        "ingest_s": round(wall, 1),
        "chunks": report.chunks_written,
        "stored_chunks": stored,
        "chunks_per_s": round(report.chunks_written / wall, 1),
        "cpu_s": round(cpu, 1),
        "embed_share": round(report.embed_seconds / wall, 3),
        "load": round(os.getloadavg()[0], 2),
    }
    if s0 is not None and s1 is not None:
        row["server_cpu_s"] = round(s1 - s0, 2)
    return row


def bench_ingest(kb: Path, pg_url: str, server: Any, repeats: int, scratch: Path) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"sqlite": [], "postgres": []}
    for i in range(repeats):
        order = ("sqlite", "postgres") if i % 2 == 0 else ("postgres", "sqlite")
        for name in order:
            data = scratch / f"ingest-{name}-{i}"
            url = None
            if name == "postgres":
                url = pg_url.rsplit("/", 1)[0] + f"/ingest{i}"
                server_exec(server, pg_url, f"CREATE DATABASE ingest{i}")
            runs[name].append(ingest_once(kb, data, url, server if name == "postgres" else None))
    wall = {name: statistics.median(r["ingest_s"] for r in rows) for name, rows in runs.items()}
    return {
        "runs": runs,
        "pg_vs_sqlite_wall": round(wall["postgres"] / wall["sqlite"], 3),
        "same_chunks": len({r["chunks"] for rows in runs.values() for r in rows}) == 1,
    }


def server_exec(server: Any, pg_url: str, sql: str) -> None:
    if server is not None:
        server.execute(sql)
        return
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(pg_url)
    with psycopg.connect(
        host=url.host, port=url.port, user=url.username, password=url.password, dbname=url.database, autocommit=True
    ) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def worker(kb: Path, data_dir: Path, pg_url: str, go: Path) -> None:
    """One of the concurrent ingests: loads everything, says ready, starts when ``go`` exists."""
    settings = Settings(data_dir=data_dir, article_store_url=pg_url)
    with Engine(settings) as engine:
        engine.embed_model.get_text_embedding("warm up")
        engine.article_store.count()
        print("ready", flush=True)
        while not go.exists():
            time.sleep(0.01)
        t0 = time.perf_counter()
        report = engine.ingest(kb)
        row = {**report.as_dict(), "wall_s": round(time.perf_counter() - t0, 1)}
    print(json.dumps(row), flush=True)


def bench_concurrent(kb: Path, pg_url: str, server: Any, scratch: Path) -> dict[str, Any]:
    url = pg_url.rsplit("/", 1)[0] + "/concurrent"
    server_exec(server, pg_url, "CREATE DATABASE concurrent")
    data, go = scratch / "concurrent", scratch / "go"
    command = [sys.executable, __file__, "--kb", str(kb), "--worker", str(data), "--pg-url", url, "--go", str(go)]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    t0 = time.perf_counter()
    go.touch()
    reports = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"a concurrent ingest failed ({proc.returncode})")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.perf_counter() - t0

    from ragidx.stores.lancedb_store import LanceDBChunkStore

    table = LanceDBChunkStore(uri=data / "lancedb")._open()
    rows = table.to_lance().to_table(columns=["id", "kb_id"]).to_pylist()
    ids = Counter(r["id"] for r in rows)
    per_article = Counter(r["kb_id"] for r in rows)
    ledger = ArticleStore(url)
    kb_ids = [a.kb_id for a in articles(kb)]
    states = ledger.states(kb_ids)
    from sqlalchemy import select

    t = ledger.table
    with ledger.engine.connect() as conn:
        counts = dict(conn.execute(select(t.c.kb_id, t.c.chunk_count)).all())
    ledger.close()
    written = sum(r["chunks_written"] for r in reports)
    return {
        "wall_s": round(wall, 1),
        "reports": [{k: r[k] for k in ("new", "unchanged", "recovered", "chunks_written", "wall_s")} for r in reports],
        "ledger_rows": len(counts),
        "articles_in_file": len(set(kb_ids)),
        "indexed": sum(1 for _, state in states.values() if state == INDEXED),
        "stored_chunks": len(rows),
        "chunk_ids_twice": sum(1 for n in ids.values() if n > 1),
        "articles_with_wrong_chunk_count": sum(1 for k, n in counts.items() if per_article.get(k, 0) != n),
        "chunks_written_by_both": written,
        "each_article_embedded_once": written == len(rows),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kb", required=True, type=Path, help="a JSONL file of articles")
    p.add_argument("--modes", default="fetch,ingest,concurrent")
    p.add_argument(
        "--pg-url", default=None, help="a PostgreSQL server's URL (database 'postgres'); default: a scratch one"
    )
    p.add_argument("--fetches", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=1, help="ingests per backend (alternating)")
    p.add_argument("--scratch", type=Path, default=None, help="folder for the stores (default: a new temporary one)")
    p.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--go", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:
        worker(args.kb, args.worker, args.pg_url, args.go)
        return 0
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="ragidx-bench-articles-"))
    server = None
    pg_url = args.pg_url
    if pg_url is None:
        from tests.postgres_server import PostgresServer

        server = PostgresServer.start(fsync=True)
        pg_url = server.url()
    modes = args.modes.split(",")
    result: dict[str, Any] = {"benchmark": "article_store", "kb": str(args.kb), "load_before": os.getloadavg()[:3]}
    try:
        if "fetch" in modes:
            result["fetch_5_articles"] = bench_fetch(args.kb, pg_url, args.fetches, scratch)
        if "ingest" in modes:
            result["ingest"] = bench_ingest(args.kb, pg_url, server, args.repeats, scratch)
        if "concurrent" in modes:
            result["concurrent_ingests"] = bench_concurrent(args.kb, pg_url, server, scratch)
    finally:
        if server is not None:
            server.stop()
    result["load_after"] = [round(x, 2) for x in os.getloadavg()[:3]]
    result["load_before"] = [round(x, 2) for x in result["load_before"]]
    result["machine"] = f"{platform.machine()}, {os.cpu_count()} cpus, PostgreSQL on loopback"
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
