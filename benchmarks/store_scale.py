"""The chunk stores at scale, LanceDB and PostgreSQL (pgvector) on the same chunks. One JSON line per run.

    python benchmarks/store_scale.py --store lancedb|postgres [--chunks 100000] [--real-chunks 3000]
        [--queries 100] [--m 32] [--ef-construction 128] [--ef-search 400] [--work-dir DIR] [--reuse]
        [--nprobes N]

Store level, as the retriever calls the store (``VectorStoreQuery`` in hybrid mode, ``candidate_chunks`` = 100 from
each side, the shipped fusion and alpha), no model in the timed part. The chunks: ``--real-chunks`` windows of
about 120 words of real articles (LibreOffice English and Russian help, Docker docs from ``../shared/data/kb``)
embedded with MiniLM (cached in ``--work-dir``); every further chunk is a synthetic copy of a random real one,
its words a random 70 % of the original's in a shuffled order and its vector the original's plus gaussian noise
(0.03 per dimension, renormalized), which keeps vectors clustered and postings realistic (the approach of
``benchmarks/retrieval_scale.py``). Five chunks per article; each article carries ``source`` and, for two thirds,
``allowed: ["group:gN"]`` (as in ``retrieval_scale.py``). Queries: real article titles, embedded with
MiniLM.

Figures: insert rate (chunks/s through ``add`` in batches of 2,000, terms computed as ingestion does), index
build (``finalize``), hybrid query p50/p95 as the public reader (who reads the public third) and filtered
(``source = libreoffice_en`` as a member of group g1), recall@10 of each (the store's fused top 10 against the
same fusion over an exact dense search, numpy brute force under the same predicate, and the store's exact
keyword list), disk, memory (this process's peak RSS; PostgreSQL's server processes' RSS), and the time to
delete 1 % of the articles and to write them back (what re-embedding 1 % costs the store, the model's time
excluded). PostgreSQL runs as a throwaway server (``tests/postgres_server.py``, fsync on).

``--reuse`` (LanceDB): keep the table in ``--work-dir`` between runs, and query the one a previous run built with the
same ``--chunks``, ``--real-chunks`` and ``--seed`` instead of inserting and indexing again (``finalize`` still
runs, so indexes a newer ragidx adds get built); the 1 % delete and rewrite are skipped so the table stays as built
(their figures and the insert's are null when it was reused).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from llama_index.core.schema import TextNode  # noqa: E402
from llama_index.core.vector_stores.types import (  # noqa: E402
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

from ragidx.config import Settings  # noqa: E402
from ragidx.stores.access import Principal, scoped_filters  # noqa: E402
from ragidx.stores.fusion import fuse  # noqa: E402

SHARED = ROOT.parent / "shared" / "data" / "kb"
SOURCES = [SHARED / "libreoffice_en.jsonl", SHARED / "docker.jsonl", SHARED / "libreoffice_ru.jsonl"]
CHUNKS_PER_ARTICLE = 5
WINDOW_WORDS = 120
BATCH = 2000
K = 10
GROUPS = 5


def scale_metadata(label: str, kb_id: str) -> dict[str, Any]:
    """Its source, and for two thirds of the articles a group that may read it (``retrieval_scale``'s rule)."""
    h = int.from_bytes(hashlib.blake2b(kb_id.encode(), digest_size=4).digest(), "big")
    meta: dict[str, Any] = {"source": label}
    if h % 3:
        meta["allowed"] = [f"group:g{h % GROUPS}"]
    return meta


def real_sample(n: int, seed: int) -> tuple[list[dict[str, Any]], list[str]]:
    """``n`` real chunk windows (text, title, language, source) and the titles of their articles (the queries)."""
    windows: list[dict[str, Any]] = []
    titles: list[str] = []
    for path in SOURCES:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                rec = json.loads(line)
                words = str(rec.get("text") or "").split()
                if len(words) < 30:
                    continue
                titles.append(str(rec.get("title") or ""))
                for start in range(0, len(words), WINDOW_WORDS):
                    piece = words[start : start + WINDOW_WORDS]
                    if len(piece) >= 30:
                        windows.append(
                            {"text": " ".join(piece), "title": rec.get("title") or "", "language": rec.get("lang")}
                            | {"source": path.stem}
                        )
    rng = random.Random(seed)
    rng.shuffle(windows)
    return windows[:n], [t for t in titles if len(t.split()) >= 2]


def embed_sample(work: Path, sample: list[dict[str, Any]], queries: list[str]) -> tuple[np.ndarray, np.ndarray]:
    cache = work / f"real-{len(sample)}-{len(queries)}.npz"
    if cache.exists():
        data = np.load(cache)
        return data["chunks"], data["queries"]
    try:
        from ragidx.providers.embedding_factory import build_embed_model
    except ImportError:  # before the embedding factory had its own module
        from ragidx.providers.embeddings import build_embed_model  # type: ignore[attr-defined,no-redef]

    model = build_embed_model(Settings(embed_model="minilm"))
    chunks = np.asarray(model.get_text_embedding_batch([f"{s['title']}\n{s['text']}" for s in sample]), "float32")
    asked = np.asarray([model.get_query_embedding(q) for q in queries], "float32")
    np.savez(cache, chunks=chunks, queries=asked)
    return chunks, asked


def synthetic(
    n: int, sample: list[dict[str, Any]], vectors: np.ndarray, seed: int
) -> tuple[list[dict[str, Any]], np.ndarray]:
    """``n`` chunks: the real sample first, then perturbed copies; (chunk records, float32 vectors)."""
    rng = np.random.default_rng(seed)
    shuffle = random.Random(seed)
    out_vectors = np.empty((n, vectors.shape[1]), "float32")
    records = []
    for i in range(n):
        j = i if i < len(sample) else int(rng.integers(len(sample)))
        source = sample[j]
        text = source["text"]
        vec = vectors[j]
        if i >= len(sample):
            words = text.split()
            words = shuffle.sample(words, max(5, int(len(words) * 0.7)))
            text = " ".join(words)
            vec = vec + rng.normal(0, 0.03, vec.shape).astype("float32")
            vec = vec / np.linalg.norm(vec)
        out_vectors[i] = vec
        kb_id = f"a{i // CHUNKS_PER_ARTICLE}"
        records.append(
            {
                "kb_id": kb_id,
                "chunk_no": i % CHUNKS_PER_ARTICLE,
                "title": source["title"],
                "text": text,
                "language": source["language"] or "en",
                **scale_metadata(source["source"], kb_id),
            }
        )
    return records, out_vectors


def nodes_of(records: list[dict[str, Any]], vectors: np.ndarray, start: int, stop: int) -> list[TextNode]:
    out = []
    for i in range(start, stop):
        r = records[i]
        meta = {k: v for k, v in r.items() if k != "text"} | {"url": ""}
        out.append(TextNode(id_=f"c{i}", text=r["text"], metadata=meta, embedding=vectors[i].tolist()))
    return out


def mask_of(records: list[dict[str, Any]], principal: Principal, source: str | None) -> np.ndarray:
    names = set(principal.principals)
    return np.array(
        [
            (not r.get("allowed") or bool(names & set(r["allowed"]))) and (source is None or r["source"] == source)
            for r in records
        ]
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def run_queries(
    store: Any,
    records: list[dict[str, Any]],
    vectors: np.ndarray,
    queries: list[str],
    query_vectors: np.ndarray,
    principal: Principal,
    source: str | None,
    settings: Settings,
) -> dict[str, Any]:
    narrow = MetadataFilters(filters=[MetadataFilter(key="source", value=source)]) if source else None
    filters = scoped_filters(narrow, principal)
    mask = mask_of(records, principal, source)
    k = settings.candidate_chunks
    timings, recalls, keyword_ms, dense_ms = [], [], [], []
    for n, (text, vec) in enumerate(zip(queries, query_vectors, strict=True)):
        q = VectorStoreQuery(
            query_str=text,
            query_embedding=vec.tolist(),
            similarity_top_k=k,
            sparse_top_k=k,
            mode=VectorStoreQueryMode.HYBRID,
            alpha=settings.hybrid_alpha,
            filters=filters,
        )
        started = time.perf_counter()
        found = store.query(q, fusion=settings.hybrid_fusion)
        elapsed = (time.perf_counter() - started) * 1000
        if n >= 3:  # warm-up
            timings.append(elapsed)
        # the same fusion over an exact dense search (numpy, same predicate) and the store's keyword list
        scores = vectors @ vec
        scores[~mask] = -np.inf
        top = np.argsort(-scores)[:k]
        dense = {f"c{i}": float(scores[i]) for i in top if np.isfinite(scores[i])}
        started = time.perf_counter()
        keyword = store.query(
            VectorStoreQuery(query_str=text, similarity_top_k=k, mode=VectorStoreQueryMode.TEXT_SEARCH, filters=filters)
        )
        keyword_ms.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        store.query(VectorStoreQuery(query_embedding=vec.tolist(), similarity_top_k=k, filters=filters))
        dense_ms.append((time.perf_counter() - started) * 1000)
        exact = fuse(
            dense,
            dict(zip(keyword.ids or [], keyword.similarities or [], strict=True)),
            alpha=settings.hybrid_alpha,
            method=settings.hybrid_fusion,
        )[:K]
        want = {i for i, _ in exact}
        if want:
            recalls.append(len(want & set((found.ids or [])[:K])) / len(want))
    return {
        "p50_ms": pct(timings, 0.5),
        "p95_ms": pct(timings, 0.95),
        "recall_at_10": round(statistics.mean(recalls), 4) if recalls else None,
        "dense_p50_ms": pct(dense_ms[3:], 0.5),
        "keyword_p50_ms": pct(keyword_ms[3:], 0.5),
    }


def vector_index_type(store: Any) -> str | None:
    """The LanceDB table's vector index, as LanceDB names it (``IvfSq``); None without one."""
    return next((i.index_type for i in store._open().list_indices() if i.columns == ["vector"]), None)


def postgres_rss_mb(server: Any) -> float:
    pid_file = server.data / "postmaster.pid"
    main = pid_file.read_text().split()[0]
    out = subprocess.run(["ps", "-o", "rss=", "--ppid", main, "-p", main], capture_output=True, text=True).stdout
    return round(sum(int(x) for x in out.split()) / 1024, 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", choices=("lancedb", "postgres"), required=True)
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--real-chunks", type=int, default=3000)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--m", type=int, default=32)
    p.add_argument("--ef-construction", type=int, default=128)
    p.add_argument("--ef-search", type=int, default=400)
    p.add_argument("--index-min-rows", type=int, default=20_000, help="postgres: chunks before the HNSW index")
    p.add_argument("--also-ef-search", type=int, action="append", default=[], help="postgres: time these too")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/ragidx-store-scale"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--nprobes", type=int, help="lancedb: IVF partitions probed per query (default: the store's)")
    p.add_argument("--reuse", action="store_true", help="lancedb: keep the table and query it again next run")
    args = p.parse_args()
    if args.reuse and args.store != "lancedb":
        p.error("--reuse works with --store lancedb")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    settings = Settings(reranker="none")

    sample, titles = real_sample(args.real_chunks, args.seed)
    queries = random.Random(args.seed + 1).sample(titles, args.queries + 3)
    real_vectors, query_vectors = embed_sample(args.work_dir, sample, queries)
    records, vectors = synthetic(args.chunks, sample, real_vectors, args.seed)

    server = None
    reused = False
    if args.store == "postgres":
        from ragidx.stores.postgres_settings import PgvectorSettings
        from ragidx.stores.postgres_store import PostgresChunkStore
        from tests.postgres_server import PostgresServer

        server = PostgresServer.start(fsync=True, extra=("-c shared_buffers=1GB", "-c maintenance_work_mem=2GB"))
        url = server.create_database("scale")
        hnsw = PgvectorSettings(
            m=args.m, ef_construction=args.ef_construction, ef_search=args.ef_search, index_min_rows=args.index_min_rows
        )
        store: Any = PostgresChunkStore(url=url, hnsw=hnsw)
        where = server.folder
    else:
        import shutil

        from ragidx.stores.lancedb_store import LanceDBChunkStore

        where = args.work_dir / f"lancedb-{args.chunks}"
        built = where / "built.json"  # written once the table is complete: what it holds
        recipe = {"chunks": args.chunks, "real_chunks": args.real_chunks, "seed": args.seed}
        reused = args.reuse and built.exists() and json.loads(built.read_text()) == recipe
        if not reused:
            shutil.rmtree(where, ignore_errors=True)
        store = LanceDBChunkStore(uri=where, **({"nprobes": args.nprobes} if args.nprobes else {}))
    try:
        insert_s = None
        if not reused:
            started = time.perf_counter()
            for start in range(0, args.chunks, BATCH):
                store.add(nodes_of(records, vectors, start, min(args.chunks, start + BATCH)))
            insert_s = time.perf_counter() - started
        started = time.perf_counter()
        store.finalize()
        index_s = time.perf_counter() - started
        if args.reuse and not reused:
            built.write_text(json.dumps(recipe))

        public = run_queries(store, records, vectors, queries, query_vectors, Principal(), None, settings)
        member = Principal(user="u1", groups=("g1",))
        filtered = run_queries(store, records, vectors, queries, query_vectors, member, "libreoffice_en", settings)
        sweep = {}
        for ef in args.also_ef_search:
            store.hnsw = store.hnsw.model_copy(update={"ef_search": ef})
            sweep[ef] = {
                "public": run_queries(store, records, vectors, queries, query_vectors, Principal(), None, settings),
                "filtered": run_queries(
                    store, records, vectors, queries, query_vectors, member, "libreoffice_en", settings
                ),
            }
            print(json.dumps({"ef_search": ef, **sweep[ef]}), file=sys.stderr, flush=True)

        delete_s = rewrite_s = None
        if not args.reuse:  # a kept table stays as built
            articles = sorted({r["kb_id"] for r in records})
            gone = random.Random(args.seed + 2).sample(articles, max(1, len(articles) // 100))
            gone_set = set(gone)
            started = time.perf_counter()
            store.delete_articles(gone)
            delete_s = time.perf_counter() - started
            again = [i for i, r in enumerate(records) if r["kb_id"] in gone_set]
            started = time.perf_counter()
            for start in range(0, len(again), BATCH):
                part = again[start : start + BATCH]
                store.add([nodes_of(records, vectors, i, i + 1)[0] for i in part])
            store.finalize()
            rewrite_s = time.perf_counter() - started
        if server is not None:
            disk = int(
                server.execute(
                    "SELECT sum(pg_total_relation_size(oid)) FROM pg_class WHERE relname LIKE 'ragidx_chunks_%' "
                    "AND relkind = 'r'",
                    "scale",
                )[0][0]
            )
            server_rss = postgres_rss_mb(server)
        else:
            disk, server_rss = dir_bytes(where), None
        line = {
            "store": args.store,
            "chunks": args.chunks,
            "real_chunks": args.real_chunks,
            "queries": args.queries,
            "hnsw": {"m": args.m, "ef_construction": args.ef_construction, "ef_search": args.ef_search}
            if args.store == "postgres"
            else {"index": vector_index_type(store), "nprobes": store.nprobes, "refine_factor": store.refine_factor},
            "reused_table": reused,
            "insert_chunks_per_s": round(args.chunks / insert_s) if insert_s else None,
            "index_build_s": round(index_s, 1),
            "hybrid_public": public,
            "hybrid_filtered": filtered,
            "ef_search_sweep": sweep,
            "delete_1pct_s": None if delete_s is None else round(delete_s, 2),
            "rewrite_1pct_s": None if rewrite_s is None else round(rewrite_s, 1),
            "disk_mb": round(disk / 2**20),
            "process_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "postgres_rss_mb": server_rss,
            "load_avg": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        }
        print(json.dumps(line))
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
