"""Benchmark ``retrieve()`` latency on a large store (default 100k chunks). One JSON line.

    python benchmarks/retrieval_scale.py [--chunks 100000] [--real-chunks 8000] [--queries 100]
        [--data-dir DIR] [--source FILE ...] [--query-file FILE ...]
        [--filter EXPR ...] [--user NAME] [--group NAME ...]

Builds, once, a production store in ``--data-dir``: the LanceDB chunk store and the SQLite article store
from ``ragidx.stores.factory`` filled by the real ``Ingestor`` (same chunking, node ids, metadata,
batches, ``finalize()`` indexes: full text, BTREE on kb_id, IVF_SQ past 20k rows). A later run with
the same arguments reuses it (``build_s`` then reports the original build).

Every chunk is real text from ``--source`` files (JSONL articles: ``{id|_id|kb_id, title, url, text, lang}``,
so BEIR corpora work too). Embedding 100k chunks with MiniLM takes about an hour on 2 cores, so only the
first ``--real-chunks`` chunks (articles shuffled across sources, so a mixed sample) are embedded with the
default model; every later chunk gets a perturbed copy of a random real vector (gaussian noise of
``--noise`` per dimension, renormalized), which keeps the vectors clustered like real data. When the
sources hold fewer chunks than asked for, articles are re-emitted as "versions" (``kb_id#vN``) whose
paragraphs (or sentences) are rotated, and reversed in every other version, so chunk boundaries and chunk
texts differ from the original's; a version with any chunk text already stored is skipped.

Then it times ``build_retriever(Settings(data_dir=...))`` ``.retrieve(q)`` with the shipped defaults over
real queries (BEIR query files and article titles, mixed), after warm-up queries: wall p50/p95, CPU ms per
query (process CPU time, all threads) and the p50 of each stage (query embedding, dense and full-text
search inside the store, chunk rerank, article grouping). Load averages are recorded because figures from a
shared machine are inflated by whatever else runs.

Every article carries metadata to filter on: ``source`` (the source file's label: libreoffice_en, postgresql15,
docker, scifact ...) and, for two thirds of them (by a hash of the kb_id), ``allowed: ["group:gN"]`` (N in
0..4), so the permission predicate is as selective as in a KB with internal articles. Every query runs as a
principal (by default the public, who reads the public third). With ``--filter`` (``ragidx search``'s
expressions) and/or ``--user``/``--group``, each query is timed twice, unfiltered (public) and filtered, one
after the other (the same load for both), and the line adds ``filtered`` (the same figures) and
``filtered_p50_ratio``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import re
import resource
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding  # noqa: E402
from llama_index.core.schema import MetadataMode  # noqa: E402
from pydantic import PrivateAttr  # noqa: E402

from ingestion.pipeline import Ingestor  # noqa: E402
from ragidx.article import Article  # noqa: E402
from ragidx.config import Settings  # noqa: E402
from ragidx.providers.embeddings import build_embed_model  # noqa: E402
from ragidx.retrieval.factory import build_retriever  # noqa: E402
from ragidx.stores.access import Principal  # noqa: E402
from ragidx.stores.factory import build_article_store, build_chunk_store  # noqa: E402
from ragidx.stores.filters import parse_filters  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
DEFAULT_SOURCES = [
    SHARED / "kb" / "libreoffice_en.jsonl",
    SHARED / "kb" / "libreoffice_ru.jsonl",
    SHARED / "kb" / "postgresql15.jsonl",
    SHARED / "kb" / "docker.jsonl",
    SHARED / "beir_scifact" / "corpus.jsonl",
    SHARED / "hotpotqa_dev500" / "beir" / "corpus.jsonl",
]
DEFAULT_QUERY_FILES = [SHARED / "beir_scifact" / "queries.jsonl", SHARED / "hotpotqa_dev500" / "beir" / "queries.jsonl"]
MANIFEST = "retrieval_scale.json"
STORE_FORMAT = 3
"""Bump when what the build writes changes: a store of another format is rebuilt, not reused."""
SOURCE_NAME = "retrieval_scale"
BEIR_LABELS: set[str] = set()
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


# --- synthetic-but-clustered embeddings --------------------------------------------------------------
class ScaleEmbedding(BaseEmbedding):
    """The real model for the first ``real_budget`` texts, perturbed copies of real vectors after them.

    Queries are always embedded by the real model.
    """

    real_budget: int = 8000
    noise: float = 0.03

    _real: Any = PrivateAttr()
    _rng: Any = PrivateAttr()
    _pool: list[np.ndarray] = PrivateAttr(default_factory=list)
    _base_cos: list[float] = PrivateAttr(default_factory=list)
    _seen: set[bytes] = PrivateAttr(default_factory=set)
    real_count: int = 0
    synthetic_count: int = 0
    real_seconds: float = 0.0

    def __init__(self, real: BaseEmbedding, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(model_name=f"scale({real.model_name})", embed_batch_size=real.embed_batch_size, **kwargs)
        self._real = real
        self._rng = np.random.default_rng(seed)

    @property
    def tokenizer(self) -> Any:  # Ingestor sizes chunks with the embedding model's own tokenizer
        return self._real.tokenizer

    @property
    def seen(self) -> set[bytes]:
        """Keys (``text_key``) of every text embedded so far."""
        return self._seen

    @property
    def total(self) -> int:
        return self.real_count + self.synthetic_count

    def real_vectors(self) -> np.ndarray:
        return np.stack(self._pool) if self._pool else np.zeros((0, 0), dtype=np.float32)

    def base_cosine_mean(self) -> float:
        return float(np.mean(self._base_cos)) if self._base_cos else 0.0

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._real.get_query_embedding(query)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        self._seen.update(text_key(t) for t in texts)
        n_real = max(0, min(len(texts), self.real_budget - self.real_count))
        out: list[Embedding] = []
        if n_real:
            t0 = time.perf_counter()
            vectors = self._real.get_text_embedding_batch(texts[:n_real])
            self.real_seconds += time.perf_counter() - t0
            self._pool.extend(np.asarray(v, dtype=np.float32) for v in vectors)
            self.real_count += n_real
            out.extend(vectors)
        rest = len(texts) - n_real
        if rest:
            if not self._pool:
                raise RuntimeError("no real vectors to perturb: --real-chunks must be at least 1")
            bases = np.stack([self._pool[i] for i in self._rng.integers(len(self._pool), size=rest)])
            noisy = bases + self._rng.normal(0.0, self.noise, size=bases.shape).astype(np.float32)
            noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
            self._base_cos.extend(np.sum(noisy * bases, axis=1).tolist())
            self.synthetic_count += rest
            out.extend(v.tolist() for v in noisy)
        return out


# --- sources -----------------------------------------------------------------------------------------
def read_articles(paths: list[Path]) -> list[tuple[str, Article]]:
    """(source label, article) for every usable record; ``_id`` (BEIR) is accepted as the id."""
    out: list[tuple[str, Article]] = []
    seen: set[str] = set()
    for path in paths:
        label = path.stem
        if path.name == "corpus.jsonl":  # a BEIR corpus: name it by its folder; its titles are not queries
            label = path.parent.parent.name if path.parent.name == "beir" else path.parent.name
            BEIR_LABELS.add(label)
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                rec = json.loads(line)
                kb_id = str(rec.get("id") or rec.get("kb_id") or rec.get("_id") or "").strip()
                text = rec.get("text") or rec.get("content") or ""
                if not kb_id or not isinstance(text, str) or not text.strip():
                    continue
                if kb_id in seen:
                    kb_id = f"{label}:{kb_id}"
                seen.add(kb_id)
                title = str(rec.get("title") or kb_id)
                language = rec.get("lang") or rec.get("language")
                meta = scale_metadata(label, kb_id)
                out.append((label, Article(kb_id, title, str(rec.get("url") or ""), text, language, meta)))
    return out


GROUPS = 5


def scale_metadata(label: str, kb_id: str) -> dict[str, Any]:
    """What each benchmark article carries: its source, and for two thirds a group that may read it."""
    h = int.from_bytes(hashlib.blake2b(kb_id.encode(), digest_size=4).digest(), "big")
    meta: dict[str, Any] = {"source": label}
    if h % 3:
        meta["allowed"] = [f"group:g{h % GROUPS}"]
    return meta


def _units(text: str) -> tuple[list[str], str]:
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    if len(paragraphs) >= 2:
        return paragraphs, "\n\n"
    return [s for s in _SENTENCE.split(text) if s.strip()], " "


def version(article: Article, n: int) -> Article | None:
    """Version ``n`` (>= 1): the paragraphs (or sentences) rotated, and reversed for even ``n``; None if unchanged."""
    units, sep = _units(article.content)
    if len(units) < 2:
        return None
    shift = (len(units) * n) // (n + 1) % len(units) or n % len(units)
    rotated = units[shift:] + units[:shift]
    if n % 2 == 0:  # reversed order too: chunk boundaries cannot fall back in step with the original's
        rotated.reverse()
    if rotated == units:
        return None
    return Article(
        f"{article.kb_id}#v{n}",
        article.title,
        f"{article.url}#v{n}" if article.url else "",
        sep.join(rotated),
        article.language,
        dict(article.metadata),
    )


def text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def stream(
    articles: list[tuple[str, Article]],
    embed: ScaleEmbedding,
    target: int,
    seed: int,
    chunk_keys: Callable[[Article], list[bytes]],
    log_every: int = 2000,
) -> Iterator[Article]:
    """Articles (shuffled across sources), then versions, until ``target`` chunks are embedded.

    A version is skipped when any of its chunks repeats a chunk already embedded (or queued), so the
    versions add only new chunk texts.
    """
    rng = random.Random(seed)
    started = time.perf_counter()
    yielded = skipped = 0
    queued: set[bytes] = set()
    for n in range(0, 50):
        batch = [a for _, a in articles] if n == 0 else [v for _, a in articles if (v := version(a, n))]
        rng.shuffle(batch)
        for article in batch:
            if embed.total >= target:
                return
            if n > 0:
                keys = chunk_keys(article)
                if any(k in queued or k in embed.seen for k in keys) or len(set(keys)) < len(keys):
                    skipped += 1
                    continue
                queued.update(keys)
            yield article
            yielded += 1
            if yielded % log_every == 0:
                elapsed = time.perf_counter() - started
                print(
                    f"[build] {yielded} articles (pass {n}, {skipped} versions skipped as repeats), "
                    f"chunks {embed.total} (real {embed.real_count}, synthetic {embed.synthetic_count}), "
                    f"{elapsed:.0f} s, load {os.getloadavg()[0]:.1f}",
                    file=sys.stderr,
                    flush=True,
                )
    raise RuntimeError(f"the sources cannot make {target} chunks even in 50 versions")


# --- build or reuse ----------------------------------------------------------------------------------
def build_params(args: argparse.Namespace, sources: list[Path]) -> dict[str, Any]:
    return {
        "store_format": STORE_FORMAT,
        "chunks_requested": args.chunks,
        "real_chunks_requested": args.real_chunks,
        "noise": args.noise,
        "seed": args.seed,
        "sources": [str(p.resolve()) for p in sources],
    }


def load_manifest(data_dir: Path) -> dict[str, Any] | None:
    path = data_dir / MANIFEST
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def build(args: argparse.Namespace, settings: Settings, sources: list[Path]) -> dict[str, Any]:
    data_dir = settings.data_dir
    if data_dir.exists() and any(data_dir.iterdir()):
        if load_manifest(data_dir) is None:
            raise SystemExit(f"{data_dir} holds something that this benchmark did not build: use another --data-dir")
        print(f"[build] removing the previous benchmark store in {data_dir}", file=sys.stderr)
        shutil.rmtree(settings.lancedb_uri, ignore_errors=True)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{settings.article_db_path}{suffix}").unlink(missing_ok=True)
        (data_dir / MANIFEST).unlink()
    data_dir.mkdir(parents=True, exist_ok=True)

    articles = read_articles(sources)
    embed = ScaleEmbedding(build_embed_model(settings), seed=args.seed, real_budget=args.real_chunks, noise=args.noise)
    embed.get_query_embedding("warm up")  # model load is not build time
    chunk_store, article_store = build_chunk_store(settings), build_article_store(settings)
    ingestor = Ingestor(  # exactly what Engine.ingestor() builds
        chunk_store,
        article_store,
        embed,
        chunk_tokens=settings.chunk_tokens,
        chunk_overlap=settings.chunk_overlap_tokens,
        tenant=settings.tenant,
    )
    load_before = os.getloadavg()
    c0, t0 = cpu_seconds(), time.perf_counter()
    splitter = ingestor.pipeline.transformations[0]  # the pipeline's own SentenceSplitter

    def chunk_keys(article: Article) -> list[bytes]:
        # What the pipeline will embed for this article (chunk_no is excluded from the embedded text).
        nodes = splitter([ingestor._document(article)])
        return [text_key(n.get_content(metadata_mode=MetadataMode.EMBED)) for n in nodes]

    report = ingestor.ingest(stream(articles, embed, args.chunks, args.seed, chunk_keys), source=SOURCE_NAME)
    build_s, build_cpu = time.perf_counter() - t0, cpu_seconds() - c0
    load_after = os.getloadavg()
    versioned = sum(1 for kb_id in article_store.ids_for_source(SOURCE_NAME) if "#v" in kb_id)
    article_store.close()

    texts = chunk_store._open().to_lance().to_table(columns=["text"]).column("text").to_pylist()
    distinct = len({text_key(t) for t in texts})
    real = embed.real_vectors()
    sample = real[: min(1000, len(real))]
    sims = sample @ real.T
    sims[np.arange(len(sample)), np.arange(len(sample))] = -1.0  # a vector is not its own neighbour
    indices = {i.name: list(i.columns) for i in chunk_store._open().list_indices()}
    manifest = {
        **build_params(args, sources),
        "chunks": chunk_store.count(),
        "articles": report.seen,
        "versioned_articles": versioned,
        "distinct_chunk_texts": distinct,
        "real_chunks": embed.real_count,
        "synthetic_chunks": embed.synthetic_count,
        "real_embed_s": round(embed.real_seconds, 1),
        "real_nn_cosine_mean": round(float(sims.max(axis=1).mean()), 3),
        "synthetic_to_base_cosine_mean": round(embed.base_cosine_mean(), 3),
        "indexes": indices,
        "build_s": round(build_s, 1),
        "build_cpu_s": round(build_cpu, 1),
        "build_load_avg": [round(x, 2) for x in (*load_before, *load_after)],
        "build_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "ingest_errors": len(report.errors),
    }
    (data_dir / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return manifest


# --- queries -----------------------------------------------------------------------------------------
def make_queries(query_files: list[Path], articles: list[tuple[str, Article]], n: int, seed: int) -> list[str]:
    """Half questions from the query files, half article titles (one source after another), shuffled."""
    rng = random.Random(seed)
    pools: list[list[str]] = []
    for path in query_files:
        with path.open(encoding="utf-8") as fh:
            pools.append([t for line in fh if line.strip() and (t := str(json.loads(line).get("text") or "").strip())])
    by_label: dict[str, list[str]] = {}
    for label, article in articles:
        if article.title and article.title != article.kb_id:
            by_label.setdefault(label, []).append(article.title)
    title_pools = [v for k, v in sorted(by_label.items()) if k not in BEIR_LABELS]
    for pool in (*pools, *title_pools):
        rng.shuffle(pool)
    questions = _round_robin(pools, (n + 1) // 2)
    titles = _round_robin(title_pools or pools, n - len(questions))
    mixed = [*questions, *titles]
    rng.shuffle(mixed)
    return mixed


def _round_robin(pools: list[list[str]], n: int) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    iterators = [iter(p) for p in pools if p]
    while len(out) < n and iterators:
        for it in list(iterators):
            value = next(it, None)
            if value is None:
                iterators.remove(it)
            elif value not in seen:
                seen.add(value)
                out.append(value)
                if len(out) >= n:
                    break
    return out


# --- timing ------------------------------------------------------------------------------------------
class Stopwatch:
    """Accumulates the wall time of wrapped calls, per name, for the query in progress."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.current[name] = self.current.get(name, 0.0) + (time.perf_counter() - t0) * 1000

        return timed

    def patch(self, obj: Any, attr: str, name: str) -> None:
        # object.__setattr__: pydantic models (the store, the embedding) refuse unknown attributes.
        object.__setattr__(obj, attr, self.wrap(name, getattr(obj, attr)))


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def time_queries(
    settings: Settings,
    queries: list[str],
    warmup: list[str],
    scope: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Time ``retrieve`` over ``queries``; with ``scope`` (filters, principal) each query also runs scoped,
    right after the unfiltered run, and ``filtered`` holds those figures."""
    embed = build_embed_model(settings)
    embed.get_query_embedding("warm up")  # model load is not query latency
    chunk_store, article_store = build_chunk_store(settings), build_article_store(settings)
    retriever = build_retriever(settings, chunk_store, article_store, embed)
    watch = Stopwatch()
    for attr in ("search", "rerank", "group"):
        watch.patch(retriever, attr, attr)
    watch.patch(embed, "_get_query_embedding", "embed")
    watch.patch(chunk_store, "query", "store_query")
    watch.patch(chunk_store, "_dense", "dense")
    watch.patch(chunk_store, "_fts", "fts")

    t0 = time.perf_counter()
    retriever.retrieve(warmup[0])  # opens the table and loads its indexes
    first_ms = (time.perf_counter() - t0) * 1000
    for q in warmup[1:]:
        retriever.retrieve(q)
        if scope is not None:
            retriever.retrieve(q, **scope)

    load_before = os.getloadavg()
    runs: dict[str, tuple[list[dict[str, float]], list[int]]] = {"all": ([], [])}
    if scope is not None:
        runs["filtered"] = ([], [])
    for q in queries:
        for name, kwargs in (("all", {}), ("filtered", scope or {})):
            if name not in runs:
                continue
            watch.current = {}
            c, t = time.process_time(), time.perf_counter()
            articles = retriever.retrieve(q, **kwargs)
            wall, cpu = (time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000
            runs[name][1].append(len(articles))
            runs[name][0].append({"wall": wall, "cpu": cpu, **watch.current})
    load_after = os.getloadavg()
    article_store.close()
    out = _figures(*runs["all"])
    out.update(
        {
            "first_query_ms": round(first_ms, 1),
            "query_load_avg": [round(x, 2) for x in (*load_before, *load_after)],
            "settings": {
                "mode": retriever.mode,
                "hybrid_alpha": settings.hybrid_alpha,
                "candidate_chunks": settings.candidate_chunks,
                "rerank_top_n": settings.rerank_top_n,
                "top_k": settings.top_k,
                "reranker": settings.reranker,
                "nprobes": getattr(chunk_store, "nprobes", None),
                "refine_factor": getattr(chunk_store, "refine_factor", None),
                "embed_backend": settings.embed_backend,
            },
        }
    )
    if "filtered" in runs:
        out["filtered"] = _figures(*runs["filtered"])
        out["filtered_p50_ratio"] = round(out["filtered"]["p50_ms"] / max(out["p50_ms"], 1e-9), 2)
    return out


def _figures(rows: list[dict[str, float]], returned: list[int]) -> dict[str, Any]:
    def p50(key: str) -> float:
        return pct([r.get(key, 0.0) for r in rows], 0.5)

    walls = [r["wall"] for r in rows]
    return {
        "p50_ms": pct(walls, 0.5),
        "p95_ms": pct(walls, 0.95),
        "mean_ms": round(statistics.fmean(walls), 1),
        "max_ms": round(max(walls), 1),
        "cpu_ms_per_query": round(statistics.fmean(r["cpu"] for r in rows), 1),
        "cpu_ms_p50": p50("cpu"),
        "stage_p50_ms": {
            "search": p50("search"),
            "search.embed": p50("embed"),
            "search.store_query": p50("store_query"),
            "search.store.dense": p50("dense"),
            "search.store.fts": p50("fts"),
            "rerank": p50("rerank"),
            "group": p50("group"),
        },
        "stage_p95_ms": {k: pct([r.get(k, 0.0) for r in rows], 0.95) for k in ("search", "dense", "fts", "rerank")},
        "articles_per_query": round(statistics.fmean(returned), 2),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunks", type=int, default=100_000, help="chunks in the store (at least; whole articles)")
    p.add_argument("--real-chunks", type=int, default=8000, help="chunks embedded with the real model")
    p.add_argument("--queries", type=int, default=100, help="timed queries")
    p.add_argument("--warmup", type=int, default=5, help="untimed queries first")
    p.add_argument("--data-dir", type=Path, default=None, help="store folder (default: /tmp/ragidx-scale-N)")
    p.add_argument("--source", type=Path, action="append", help="JSONL articles (repeat); default: ../shared/data")
    p.add_argument("--query-file", type=Path, action="append", help="BEIR queries.jsonl (repeat)")
    p.add_argument("--noise", type=float, default=0.03, help="per-dimension std of the synthetic perturbation")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rebuild", action="store_true", help="rebuild the store even if it matches")
    p.add_argument("--filter", action="append", metavar="EXPR", help="also time each query with this filter")
    p.add_argument("--user", help="... and as this user")
    p.add_argument("--group", action="append", metavar="NAME", help="... and as a member of this group")
    args = p.parse_args()
    sources: list[Path] = args.source or [s for s in DEFAULT_SOURCES if s.is_file()]
    query_files: list[Path] = args.query_file or [q for q in DEFAULT_QUERY_FILES if q.is_file()]
    if not sources:
        p.error("no --source given and ../shared/data is not there")
    data_dir = args.data_dir or Path(f"/tmp/ragidx-scale-{args.chunks}")
    settings = Settings(data_dir=data_dir)

    manifest = load_manifest(data_dir)
    reused = (
        not args.rebuild
        and manifest is not None
        and {k: manifest.get(k) for k in build_params(args, sources)} == build_params(args, sources)
        and build_chunk_store(settings).count() == manifest.get("chunks")
        and build_article_store(settings).count("pending") == 0
    )
    if not reused:
        manifest = build(args, settings, sources)
    assert manifest is not None

    articles = read_articles(sources)
    queries = make_queries(query_files, articles, args.queries + args.warmup, args.seed)
    scope = None
    if args.filter or args.user or args.group:
        scope = {"filters": parse_filters(args.filter or []), "principal": Principal.of(args.user, args.group)}
    timing = time_queries(settings, queries[args.warmup :], queries[: args.warmup] or queries[:1], scope)
    print(
        json.dumps(
            {
                "benchmark": "retrieval_scale",
                "chunks": manifest["chunks"],
                "real_chunks": manifest["real_chunks"],
                "synthetic_chunks": manifest["synthetic_chunks"],
                "articles": manifest["articles"],
                "versioned_articles": manifest["versioned_articles"],
                "distinct_chunk_texts": manifest["distinct_chunk_texts"],
                "build_s": manifest["build_s"],
                "build_cpu_s": manifest["build_cpu_s"],
                "build_reused": reused,
                "queries": len(queries) - args.warmup,
                "filter": args.filter or [],
                "principal": str(Principal.of(args.user, args.group)) if scope is not None else "public",
                **timing,
                "load_avg_now": [round(x, 2) for x in os.getloadavg()],
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "machine": f"{platform.machine()}, {os.cpu_count()} cpus, {platform.python_version()}",
                "build": {k: manifest[k] for k in manifest if k not in {"sources", "chunks"}},
            },
            ensure_ascii=False,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
