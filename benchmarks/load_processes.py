"""Load across processes: 1 and then 3 ``ragidx serve`` processes over one PostgreSQL, the clients spread over them.

What issue 59 asks of several engines over one database, measured: the same questions asked by ``--clients``
client threads at once (each ``--per-client`` questions in turn, client i asking process i mod N) through the
OpenAI chat API of N real ``ragidx serve`` processes (``--processes 1,3``), all over one throwaway PostgreSQL
(``tests/postgres_server.py``, pgvector) that holds the chunks, the articles and the ledger, the sample knowledge
base ingested into it once (``ragidx ingest``, one process). Every answer is compared with the one the single
process gave to the same question asked alone (its text, whether it declined and why, the articles it cites, and
the sources with their rerank scores to 5 digits).

The models are the slim-install tests' loopback services (``tests/slim/services.py``, in a process of their own):
an OpenAI-compatible chat model that searches once with the question and answers citing source [1], and
hashed-word embeddings; no local model runs (the figures are ragidx's and PostgreSQL's own cost, not a model's).
No reranker model either (``RAGIDX_RERANKER=none``).

While the largest run answers, another process ingests the same knowledge base for another tenant (tenants are
apart: the answers must not change) and is killed with SIGKILL once a third of its chunks are written; the same
ingest is run again. Reported: the chunks at the kill, then every article with as many chunks as the first ingest
gave it (nothing lost, nothing doubled), no article left pending, and the BM25 statistics equal to the chunks.

Prints ONE JSON line: per process count, the answers, errors, the answers equal to the single process's, p50/p95
latency of a whole request, throughput, the answers each process gave, and the killed ingest's check.

    nice python benchmarks/load_processes.py --processes 1,3 --clients 6 --per-client 6
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.serve_process import ragidx_serve  # noqa: E402

DEFAULT_KB = ROOT / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"
DEFAULT_QUESTIONS = ROOT / "ragidx" / "evaluation" / "data" / "answers_libreoffice_en.jsonl"


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def _services(queue: Any) -> None:
    """The loopback model services, in a child process: its URL to ``queue``, then serve until killed."""
    from tests.slim.services import ModelServices

    with ModelServices() as services:
        queue.put(services.url)
        threading.Event().wait()


@contextmanager
def model_services() -> Iterator[str]:
    """The chat and embedding services (a process of their own, so clients and services share no interpreter)."""
    queue: Any = multiprocessing.get_context("spawn").Queue()
    process = multiprocessing.get_context("spawn").Process(target=_services, args=(queue,), daemon=True)
    process.start()
    try:
        yield str(queue.get(timeout=120))
    finally:
        process.terminate()
        process.join(timeout=10)


def ask(client: httpx.Client, url: str, question: str) -> dict[str, Any]:
    """One question through the chat API; what the comparison reads of the answer."""
    reply = client.post(
        f"{url}/v1/chat/completions",
        json={"model": "ragidx", "messages": [{"role": "user", "content": question}]},
        timeout=600,
    )
    if reply.status_code != 200:
        raise RuntimeError(f"http_{reply.status_code}: {reply.text[:160]}")
    extra = reply.json()["ragidx"]
    return {
        "text": extra["text"],
        "not_found": extra["not_found"],
        "reason": extra["reason"],
        "cited": [c["kb_id"] for c in extra["citations"]],
        "sources": [(s["kb_id"], None if s["rerank_score"] is None else round(s["rerank_score"], 5))
                    for s in extra["sources"]],
    }  # fmt: skip


def run(urls: list[str], questions: list[str], clients: int, per_client: int, alone: dict[str, Any]) -> dict[str, Any]:
    """``clients`` threads, client i asking ``urls[i % len(urls)]`` its ``per_client`` questions in turn."""
    rows: list[dict[str, Any]] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        url = urls[n % len(urls)]
        with httpx.Client() as http:
            for j in range(per_client):
                question = questions[(n * per_client + j) % len(questions)]
                row: dict[str, Any] = {"process": n % len(urls), "question": question}
                start = time.perf_counter()
                try:
                    row["answer"] = ask(http, url, question)
                except Exception as exc:
                    row["error"] = str(exc)[:200]
                row["latency"] = time.perf_counter() - start
                with lock:
                    rows.append(row)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(client, range(clients)))
    elapsed = time.perf_counter() - t0
    answered = [r for r in rows if "answer" in r]
    same = [r for r in answered if r["answer"] == alone[r["question"]]]
    return {
        "processes": len(urls),
        "clients": clients,
        "asked": len(rows),
        "answered": len(answered),
        "errors": len(rows) - len(answered),
        "error_examples": sorted({r["error"] for r in rows if "error" in r})[:3],
        "same_as_single_process": len(same),
        "differ": sorted({r["question"][:60] for r in answered if r not in same}),
        "answers_per_process": [Counter(r["process"] for r in answered)[i] for i in range(len(urls))],
        "latency_p50_s": pct([r["latency"] for r in rows], 0.5),
        "latency_p95_s": pct([r["latency"] for r in rows], 0.95),
        "seconds": round(elapsed, 2),
        "answers_per_s": round(len(answered) / elapsed, 2) if elapsed else None,
    }


def chunks_per_article(url: str, tenant: str) -> Counter[str]:
    from ragidx.stores.postgres_store import PostgresChunkStore

    store = PostgresChunkStore(url=url, tenant=tenant)
    try:
        return Counter(n.metadata["kb_id"] for n in store.get_nodes())
    finally:
        store.close()


def statistics_exact(url: str) -> bool:
    """The BM25 totals and every term's document frequency equal what the chunks hold (every writer's share)."""
    from ragidx.stores.postgres_store import INDEXES_TABLE, PostgresChunkStore

    store = PostgresChunkStore(url=url)
    t = store.table
    with store._connection() as conn:
        totals = conn.execute(f"SELECT docs, length FROM {INDEXES_TABLE} WHERE name = %s", (t,)).fetchone()
        real = conn.execute(f"SELECT count(*), sum(terms_len) FROM {t}").fetchone()
        wrong = conn.execute(
            f"SELECT count(*) FROM (SELECT term, count(*) AS n FROM {t}, unnest(lexemes) AS term GROUP BY term) r "
            f"FULL JOIN (SELECT * FROM {t}_terms WHERE df > 0) k ON k.term = r.term WHERE r.n IS DISTINCT FROM k.df"
        ).fetchone()
    store.close()
    return totals == real and wrong == (0,)


def killed_ingest(env: dict[str, str], url: str, kb: str, data_dir: Path, expected: Counter[str]) -> dict[str, Any]:
    """``ragidx ingest`` of ``kb`` for tenant ``other``, SIGKILLed at a third of its chunks, then run again."""
    from ragidx.config import Settings
    from ragidx.stores.factory import build_article_store
    from ragidx.stores.postgres_store import PostgresChunkStore

    other = {**env, "RAGIDX_TENANT": "other"}
    command = [sys.executable, "-m", "ragidx.cli", "--data-dir", str(data_dir), "ingest", kb]
    process = subprocess.Popen(command, cwd=ROOT, env=other, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = sum(expected.values()) // 3
    at_kill = 0
    counter = PostgresChunkStore(url=url, tenant="other")
    while process.poll() is None:
        at_kill = counter.count()
        if at_kill >= target:
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.2)
    process.wait()
    counter.close()
    t0 = time.perf_counter()
    again = subprocess.run(command, cwd=ROOT, env=other, capture_output=True, text=True, timeout=1800)
    found = chunks_per_article(url, "other")
    articles = build_article_store(Settings(store="postgres", article_store_url=url, tenant="other"))
    try:
        pending, indexed = len(articles.pending_ids()), len(articles.indexed_ids())
    finally:
        articles.close()
    return {
        "killed": process.returncode == -signal.SIGKILL,
        "chunks_at_kill": at_kill,
        "rerun_rc": again.returncode,
        "rerun_s": round(time.perf_counter() - t0, 1),
        "chunks": sum(found.values()),
        "expected_chunks": sum(expected.values()),
        "every_article_exact": found == expected,
        "articles_indexed": indexed,
        "articles_pending": pending,
        "statistics_exact": statistics_exact(url),
    }


def main() -> int:
    from tests.postgres_server import PostgresServer

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kb", default=str(DEFAULT_KB), help="ingested once, by one process")
    p.add_argument("--questions", default=str(DEFAULT_QUESTIONS))
    p.add_argument("--processes", default="1,3", help="ragidx serve process counts, one run each (default 1,3)")
    p.add_argument("--clients", type=int, default=6, help="client threads asking at once (default 6)")
    p.add_argument("--per-client", type=int, default=6, help="questions each client asks in turn (default 6)")
    p.add_argument("--no-kill", action="store_true", help="no ingest killed beside the largest run")
    args = p.parse_args()

    load_before = os.getloadavg()
    counts = [int(c) for c in args.processes.split(",")]
    rows = [json.loads(line) for line in Path(args.questions).read_text().splitlines() if line.strip()]
    questions = [r["question"] for r in rows][: args.clients * args.per_client]
    out: dict[str, Any] = {
        "benchmark": "load_processes",
        "store": "postgres (pgvector), one throwaway server (fsync on)",
        "models": "loopback chat and hashed-word embedding services (tests/slim/services.py); reranker none",
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "load_before": [round(x, 2) for x in load_before],
        "questions": len(questions),
        "clients": args.clients,
        "per_client": args.per_client,
    }
    server = PostgresServer.start(fsync=True)
    try:
        url = server.create_database("load")
        server.execute("CREATE EXTENSION IF NOT EXISTS vector", database="load")
        with model_services() as services, ExitStack() as stack:
            work = Path(stack.enter_context(_tempdir()))
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith("RAGIDX_")},
                "PYTHONPATH": str(ROOT),
                "RAGIDX_STORE": "postgres",
                "RAGIDX_ARTICLE_STORE_URL": url,
                "RAGIDX_LLM__API_BASE": services,
                "RAGIDX_LLM__MODEL": "scripted",
                "RAGIDX_EMBEDDING__API_BASE": services,
                "RAGIDX_EMBEDDING__MODEL": "hashed-words",
                "RAGIDX_RERANKER": "none",
            }
            t0 = time.perf_counter()
            ingest = subprocess.run(
                [sys.executable, "-m", "ragidx.cli", "--data-dir", str(work / "ingest"), "ingest", args.kb],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=1800,
            )
            if ingest.returncode != 0:
                raise RuntimeError("ingest failed: " + ingest.stderr[-3000:])
            out["ingest_s"] = round(time.perf_counter() - t0, 1)
            expected = chunks_per_article(url, "")
            out["kb_articles"], out["kb_chunks"] = len(expected), sum(expected.values())
            with ragidx_serve(env, work / "alone") as alone_url, httpx.Client() as http:
                alone = {q: ask(http, alone_url, q) for q in questions}  # one at a time, one process
            out["alone_cited"] = sum(1 for a in alone.values() if a["cited"])
            runs = []
            for n in counts:
                with ExitStack() as servers:
                    urls = [servers.enter_context(ragidx_serve(env, work / f"p{n}-{i}")) for i in range(n)]
                    with httpx.Client() as http:  # each process answers once before the clock starts
                        for u in urls:
                            ask(http, u, questions[0])
                    beside: dict[str, Any] = {}
                    ingester = None
                    if n == max(counts) and not args.no_kill:
                        ingester = threading.Thread(
                            target=lambda done: done.update(killed_ingest(env, url, args.kb, work / "other", expected)),
                            args=(beside,),
                        )
                        ingester.start()
                    result = run(urls, questions, args.clients, args.per_client, alone)
                    if ingester is not None:
                        ingester.join()
                        result["ingest_killed_beside"] = beside
                    runs.append({**result, "load_after": [round(x, 2) for x in os.getloadavg()]})
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
            out["runs"] = runs
    finally:
        server.stop()
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out))
    return 0


@contextmanager
def _tempdir() -> Iterator[str]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ragidx-load-") as folder:
        yield folder


if __name__ == "__main__":
    raise SystemExit(main())
