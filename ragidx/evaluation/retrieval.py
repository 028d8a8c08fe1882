"""Retrieval evaluation on a BEIR folder: every stage of the chain side by side.

A BEIR folder holds ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``,
``text``) and ``qrels/test.tsv`` (``query-id  corpus-id  score`` after a header line). The corpus is
ingested once into a scratch store under ``--cache-dir``, keyed by the corpus bytes and the chunking
and embedding settings, so a rerun does not re-embed. Every corpus document is one article.

For each query the stages are measured on the same store:

- ``dense``: vector search only, chunks grouped to articles by their best chunk;
- ``bm25``: full-text search only, grouped the same way;
- ``hybrid``: hybrid search (dense + full text, relative score fusion with ``hybrid_alpha``);
- ``hybrid+rerank``: hybrid candidates reranked at chunk level, then grouped;
- ``full_chain``: ``ArticleRetriever.retrieve`` exactly as the product runs it (``build_retriever``),
  whole articles loaded, with the depth raised to ``--depth`` articles so Recall@100 is defined;
- ``untuned``: the chain the settings configure (their candidate depth), ``--depth`` articles;
- ``tuned``: the same after self-calibration on this corpus (``ragidx.tuning``: pseudo-queries made
  from the corpus, labels unseen), with a ``tuning`` block saying what it picked and every candidate's
  nDCG@10 on the pseudo-queries and on the labelled ones (``ragidx.evaluation.tuning``). ``--no-tune``
  leaves both out.

Each stage reports nDCG@10, Recall@10, Recall@100, MRR@10 and p50/p95 latency in milliseconds; a
``default_config`` block repeats the full chain with the configured candidate counts and ``top_k``
(the latency a user gets). With ``--flash`` a ``flash`` block adds the LLM reranker's stage
(``ragidx.evaluation.flash``): precision/recall of its selection against the labels beside the chain's
own top-k, tokens shown, tool calls and fallbacks, on the first ``--flash-limit`` queries. One JSON line
goes to stdout.

Run::

    python -m ragidx.evaluation.retrieval --beir ../shared/data/beir_scifact [--limit 100]
    python -m ragidx.evaluation.retrieval --beir ../shared/data/hotpotqa_dev500/beir --flash \
        --flash-model qwen2.5-0.5b --flash-limit 30

Example:
    >>> ndcg_at_k(["d1", "d2"], {"d2": 1}, 10) < 1.0
    True
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

from llama_index.core.postprocessor.types import BaseNodePostprocessor

from ingestion.pipeline import Ingestor
from ragidx.article import Article
from ragidx.config import Settings
from ragidx.metrics import mrr_at_k, ndcg_at_k, recall_at_k, score_runs
from ragidx.retrieval.article_grouper import group_chunks
from ragidx.retrieval.factory import build_chunk_reranker, build_retriever
from ragidx.retrieval.retriever import ArticleRetriever, SearchMode
from ragidx.stores.article_store import ArticleStore
from ragidx.stores.lancedb_store import LanceDBChunkStore
from ragidx.terms import TERMS_FORMAT

__all__ = [
    "BeirDataset",
    "corpus_key",
    "evaluate",
    "load_beir",
    "main",
    "mrr_at_k",
    "ndcg_at_k",
    "recall_at_k",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
STAGES = ("dense", "bm25", "hybrid", "hybrid+rerank", "full_chain")
TUNED_STAGES = ("untuned", "tuned")


# --- data ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BeirDataset:
    """A BEIR folder read into memory: corpus path, queries and graded relevance judgements."""

    root: Path
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    @property
    def corpus_path(self) -> Path:
        return self.root / "corpus.jsonl"

    def articles(self) -> Iterator[Article]:
        """The corpus as articles (``_id`` → kb_id); empty documents are left to ingestion to report."""
        with self.corpus_path.open(encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                doc = json.loads(line)
                kb_id = str(doc["_id"])
                yield Article(
                    kb_id=kb_id,
                    title=str(doc.get("title") or "").strip() or kb_id,
                    url="",
                    content=str(doc.get("text") or ""),
                )


def load_beir(root: str | Path, split: str = "test", limit: int | None = None) -> BeirDataset:
    """Read queries and qrels of a BEIR folder; keep queries with at least one relevant document.

    Args:
        root: folder with ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.
        split: qrels file name without ``.tsv``.
        limit: keep only the first ``limit`` judged queries (in qrels order).
    """
    root = Path(root)
    missing = [p for p in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv") if not (root / p).is_file()]
    if missing:
        raise FileNotFoundError(f"{root} is not a BEIR folder: missing {', '.join(missing)}")
    qrels: dict[str, dict[str, int]] = {}
    with (root / "qrels" / f"{split}.tsv").open(encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            parts = line.rstrip("\n").split("\t")
            if n == 0 and not parts[-1].lstrip("-").isdigit():
                continue  # header line
            if len(parts) < 3:
                continue
            qid, doc_id, score = parts[0], parts[1], int(parts[2])
            if score > 0:
                qrels.setdefault(qid, {})[doc_id] = score
    queries: dict[str, str] = {}
    with (root / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                q = json.loads(line)
                queries[str(q["_id"])] = str(q["text"])
    judged = [qid for qid in qrels if qid in queries]
    if limit is not None:
        judged = judged[:limit]
    return BeirDataset(root, {q: queries[q] for q in judged}, {q: qrels[q] for q in judged})


def corpus_key(corpus: Path, **settings: Any) -> str:
    """Cache key of an ingested corpus: its bytes plus every setting that changes the index."""
    h = hashlib.sha256()
    with corpus.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def _timed(fn: Callable[[], T]) -> tuple[T, float]:
    t0 = time.perf_counter()
    result = fn()
    return result, (time.perf_counter() - t0) * 1000.0


# --- scratch index ---------------------------------------------------------------------------------
INDEX_FORMAT = 2
"""Bump when ingestion changes what a chunk is, what gets embedded or what the full-text index holds: old
scratch indexes are then ignored. (Hashing the source instead would rebuild the index after every
unrelated edit.) 2: language-aware full-text terms (``ragidx.terms.TERMS_FORMAT``)."""


def index_settings(settings: Settings) -> dict[str, Any]:
    """What changes the index, so belongs in the cache key."""
    return {
        "embed_model": settings.embed_model,
        "embed_quantize": settings.embed_quantize,
        "chunk_tokens": settings.chunk_tokens,
        "chunk_overlap_tokens": settings.chunk_overlap_tokens,
        "default_language": settings.default_language,
        "terms_format": TERMS_FORMAT,
        "index_format": INDEX_FORMAT,
    }


def open_scratch_index(
    dataset: BeirDataset, settings: Settings, embed_model: Any, cache_dir: Path
) -> tuple[LanceDBChunkStore, ArticleStore, Path]:
    """Ingest the corpus into ``cache_dir/<key>`` unless a finished index is already there.

    Ingestion is idempotent, so an interrupted run resumes where it stopped; ``ingest.json`` marks a
    finished index and holds its ingest report.
    """
    # The embedding backend (torch / onnx) changes the vectors as much as quantization does.
    key = corpus_key(dataset.corpus_path, **index_settings(settings), backend=getattr(embed_model, "backend", None))
    folder = cache_dir / key
    chunk_store = LanceDBChunkStore(uri=folder / "lancedb", table_name="Beir")
    article_store = ArticleStore(folder / "articles.sqlite")
    marker = folder / "ingest.json"
    if marker.is_file():
        logger.info("reusing the index in %s", folder)
        return chunk_store, article_store, folder
    logger.info("ingesting %s into %s (embedding once; later runs reuse it)", dataset.corpus_path, folder)
    ingestor = Ingestor(
        chunk_store,
        article_store,
        embed_model,
        chunk_tokens=settings.chunk_tokens,
        chunk_overlap=settings.chunk_overlap_tokens,
        default_language=settings.default_language,
    )
    report = ingestor.ingest(dataset.articles(), source=str(dataset.corpus_path), progress=sys.stderr.isatty())
    if report.errors:
        logger.warning("%d corpus documents were skipped, e.g. %s", len(report.errors), report.errors[0])
    marker.write_text(json.dumps({**report.as_dict(), **index_settings(settings)}), encoding="utf-8")
    return chunk_store, article_store, folder


# --- the evaluation --------------------------------------------------------------------------------
def evaluate(
    dataset: BeirDataset,
    settings: Settings,
    embed_model: Any,
    cache_dir: Path,
    *,
    depth: int = 100,
    reranker: BaseNodePostprocessor | None | Literal["settings"] = "settings",
    tune: bool = True,
    tune_queries: int | None = None,
    tune_method: str | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Every stage's metrics and latencies on ``dataset``; the dict ``main`` prints.

    Args:
        dataset: the BEIR queries and qrels (the corpus is ingested, or reused from ``cache_dir``).
        settings: chunking, embedding, ``hybrid_alpha``, ``reranker`` and the default counts.
        embed_model: the embedding model (must match ``settings.embed_model``/``embed_quantize``
            for the cache key to mean anything).
        cache_dir: where scratch indexes live.
        depth: articles ranked per query for the metrics (Recall@100 needs 100).
        reranker: the chunk reranker to measure; by default the one ``settings`` configures.
        tune: calibrate on the corpus (pseudo-queries) and add the ``untuned`` and ``tuned`` stages.
        tune_queries, tune_method: pseudo-queries and how they are made (``ragidx.tuning`` defaults).
        progress: progress bars for the calibration.
    """
    if depth < 10:
        raise ValueError(f"depth must be >= 10 (nDCG@10 needs ten results), got {depth}")
    started = time.perf_counter()
    chunk_store, article_store, folder = open_scratch_index(dataset, settings, embed_model, cache_dir)
    ingest_seconds = time.perf_counter() - started
    if reranker == "settings":
        reranker = build_chunk_reranker(settings.model_copy(update={"rerank_top_n": 10_000}))
    if reranker is not None and getattr(reranker, "top_n", None) is not None:  # a registered one may have no top_n
        reranker = reranker.model_copy(update={"top_n": None})
    candidates = max(settings.candidate_chunks, 2 * depth)

    def stage_retriever(mode: SearchMode, with_reranker: bool) -> ArticleRetriever:
        return ArticleRetriever(
            chunk_store,
            article_store,
            embed_model,
            reranker=reranker if with_reranker else None,
            mode=mode,
            alpha=settings.hybrid_alpha,
            candidate_chunks=candidates,
            rerank_top_n=candidates,
            top_k=depth,
        )

    dense = stage_retriever("dense", False)
    bm25 = stage_retriever("text", False)
    hybrid = stage_retriever("hybrid", False)
    full = stage_retriever("hybrid", True)
    default = build_retriever(settings, chunk_store, article_store, embed_model)
    chains: dict[str, ArticleRetriever] = {}
    tuning: dict[str, Any] | None = None
    if tune:
        tuning, tuned_settings = _calibrate(
            dataset, settings, chunk_store, article_store, embed_model, tune_queries, tune_method, progress
        )
        chains = {
            "untuned": build_retriever(settings, chunk_store, article_store, embed_model),
            "tuned": build_retriever(tuned_settings, chunk_store, article_store, embed_model),
        }

    first = next(iter(dataset.queries.values()), "warm up")
    for r in (dense, bm25, hybrid, full, default, *chains.values()):  # load models, open indexes before timing
        r.retrieve(first)

    runs: dict[str, dict[str, list[str]]] = {name: {} for name in (*STAGES, *chains, "default_config")}
    latency: dict[str, list[float]] = {name: [] for name in runs}
    for qid, query in dataset.queries.items():
        nodes, ms = _timed(partial(dense.search, query))
        runs["dense"][qid] = [g.kb_id for g in group_chunks(nodes)][:depth]
        latency["dense"].append(ms)

        nodes, ms = _timed(partial(bm25.search, query))
        runs["bm25"][qid] = [g.kb_id for g in group_chunks(nodes)][:depth]
        latency["bm25"].append(ms)

        nodes, ms = _timed(partial(hybrid.search, query))
        runs["hybrid"][qid] = [g.kb_id for g in group_chunks(nodes)][:depth]
        latency["hybrid"].append(ms)

        reranked, rerank_ms = _timed(partial(full.rerank, query, nodes))
        runs["hybrid+rerank"][qid] = [g.kb_id for g in group_chunks(reranked)][:depth]
        latency["hybrid+rerank"].append(ms + rerank_ms)

        articles, ms = _timed(partial(full.retrieve, query, top_k=depth))
        runs["full_chain"][qid] = [a.kb_id for a in articles]
        latency["full_chain"].append(ms)

        articles, ms = _timed(partial(default.retrieve, query))
        runs["default_config"][qid] = [a.kb_id for a in articles]
        latency["default_config"].append(ms)

        for name, chain in chains.items():
            articles, ms = _timed(partial(chain.retrieve, query, top_k=depth))
            runs[name][qid] = [a.kb_id for a in articles]
            latency[name].append(ms)

    stages = {name: score_runs(runs[name], latency[name], dataset.qrels) for name in (*STAGES, *chains)}
    default_scores = score_runs(runs["default_config"], latency["default_config"], dataset.qrels)
    return {
        "dataset": dataset.root.name,
        "queries": len(dataset.queries),
        "articles": article_store.count(),
        "chunks": chunk_store.count(),
        "depth": depth,
        "candidate_chunks": candidates,
        "reranker": reranker.class_name() if reranker is not None else "none",
        "hybrid_alpha": settings.hybrid_alpha,
        "embed_model": settings.embed_model,
        "embed_quantize": settings.embed_quantize,
        "stages": stages,
        "default_config": {
            "candidate_chunks": settings.candidate_chunks,
            "rerank_top_n": settings.rerank_top_n,
            "top_k": settings.top_k,
            **default_scores,
        },
        "index": {"folder": str(folder), "prepare_seconds": round(ingest_seconds, 1)},
        **({"tuning": tuning} if tuning is not None else {}),
    }


def _calibrate(
    dataset: BeirDataset,
    settings: Settings,
    chunk_store: Any,
    article_store: Any,
    embed_model: Any,
    queries: int | None,
    method: str | None,
    progress: bool,
) -> tuple[dict[str, Any], Settings]:
    """Tune on the corpus without its labels; the report block (judged with the labels) and tuned settings."""
    from ragidx.evaluation.tuning import judge_tuning
    from ragidx.tuning.calibrate import DEFAULT_QUERIES, calibrate
    from ragidx.tuning.candidates import candidate_configs
    from ragidx.tuning.pseudo_queries import DEFAULT_METHOD
    from ragidx.tuning.stored import apply_tuning
    from ragidx.tuning.tuner import RetrievalTuner

    configs = candidate_configs(settings)
    chosen = method or DEFAULT_METHOD
    with contextlib.ExitStack() as stack:
        llm = None
        if chosen == "llm":  # the configured LLM writes the questions (the local model is started here)
            from ragidx.providers.llms import LLMProvider

            provider = stack.enter_context(
                LLMProvider(threads=settings.local_llm_threads, model_cache_dir=settings.model_cache_dir)
            )
            llm = provider.get(settings.llm)
        result = calibrate(
            settings,
            chunk_store,
            article_store,
            embed_model,
            queries=queries or DEFAULT_QUERIES,
            method=chosen,  # type: ignore[arg-type]
            llm=llm,
            progress=progress,
            configs=configs,
        )
    tuner = RetrievalTuner(chunk_store, embed_model, settings, depth=max(c.candidate_chunks for c in configs))
    block = judge_tuning(result, configs, tuner, dataset.queries, dataset.qrels, progress=progress)
    return block, apply_tuning(settings, result.settings)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragidx eval retrieval",
        description="Retrieval quality and latency of every stage on a BEIR folder; prints one JSON line.",
    )
    parser.add_argument("--beir", required=True, type=Path, help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/)")
    parser.add_argument("--limit", type=int, default=None, help="evaluate only the first N judged queries")
    parser.add_argument("--split", default="test", help="qrels file name without .tsv (default: test)")
    parser.add_argument("--depth", type=int, default=100, help="articles ranked per query (default: 100)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="scratch indexes (default: DATA_DIR/eval-cache)")
    parser.add_argument("--data-dir", type=Path, default=None, help="DATA_DIR (default: RAGIDX_DATA_DIR or ./.ragidx)")
    parser.add_argument("--reranker", choices=["offline", "cohere", "cross-encoder", "none"], default=None)
    parser.add_argument("--alpha", type=float, default=None, help="hybrid_alpha (1.0 = vector only)")
    parser.add_argument("--quantize", action=argparse.BooleanOptionalAction, default=None, help="int8 embedding model")
    tune = parser.add_argument_group("calibration (the tuned stage; labels unseen by the tuner)")
    tune.add_argument("--no-tune", action="store_true", help="leave out the untuned and tuned stages")
    tune.add_argument("--tune-queries", type=int, default=None, help="pseudo-queries (default 300)")
    tune.add_argument(
        "--tune-method",
        choices=["held_out", "masked_sentence", "sentence", "first_sentence", "title", "llm"],
        default=None,
        help="how pseudo-queries are made (default held_out; llm: the configured LLM writes them)",
    )
    flash = parser.add_argument_group("flash stage (LLM reranker; slow on CPU)")
    flash.add_argument("--flash", action="store_true", help="add the flash rerank stage")
    flash.add_argument("--flash-model", default=None, help="model name (local: qwen2.5-0.5b, qwen2.5-1.5b)")
    flash.add_argument("--flash-api-base", default=None, help="OpenAI-compatible URL (key: RAGIDX_FLASH__LLM__API_KEY)")
    flash.add_argument("--flash-limit", type=int, default=50, help="queries run through flash (default: 50)")
    flash.add_argument("--flash-candidates", type=int, default=None, help="articles shown (default: settings)")
    flash.add_argument("--flash-timeout", type=float, default=None, help="seconds per rerank, all turns")
    flash.add_argument("--flash-trace-dir", type=Path, default=None, help="save each rerank's trace for replay")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``ragidx eval retrieval``: evaluate and print one JSON line. Returns the exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr)
    overrides: dict[str, Any] = {}
    if args.reranker is not None:
        overrides["reranker"] = args.reranker
    if args.alpha is not None:
        overrides["hybrid_alpha"] = args.alpha
    if args.quantize is not None:
        overrides["embed_quantize"] = args.quantize
    if args.data_dir is not None:
        overrides["data_dir"] = args.data_dir
    try:
        settings = Settings(**overrides)
        dataset = load_beir(args.beir, split=args.split, limit=args.limit)
    except (ValueError, FileNotFoundError) as exc:
        print(f"ragidx eval retrieval: {exc}", file=sys.stderr)
        return 2
    if not dataset.queries:
        print(f"ragidx eval retrieval: no judged queries in {args.beir}", file=sys.stderr)
        return 2
    from ragidx.providers.embedding_choice import AUTO_EMBED_MODEL, choose_embed_model, sample_languages
    from ragidx.providers.embedding_factory import build_embed_model

    if settings.embed_model == AUTO_EMBED_MODEL:  # what the engine would pick for this corpus
        chosen = choose_embed_model(sample_languages(dataset.articles(), settings.default_language))
        settings = settings.model_copy(update={"embed_model": chosen})
    embed_model = build_embed_model(settings)
    cache_dir = args.cache_dir or settings.data_dir / "eval-cache"
    result = evaluate(
        dataset,
        settings,
        embed_model,
        cache_dir,
        depth=args.depth,
        tune=not args.no_tune,
        tune_queries=args.tune_queries,
        tune_method=args.tune_method,
        progress=sys.stderr.isatty(),
    )
    if args.flash:
        try:
            result["flash"] = _run_flash_stage(args, settings, dataset, embed_model, cache_dir)
        except FlashStageError as exc:
            print(f"ragidx eval retrieval: flash stage: {exc}", file=sys.stderr)
            return 1
    print(json.dumps(result, separators=(",", ":")))
    return 0


class FlashStageError(RuntimeError):
    """The flash stage could not start (no model, bad settings)."""


def _run_flash_stage(
    args: argparse.Namespace, settings: Settings, dataset: BeirDataset, embed_model: Any, cache_dir: Path
) -> dict[str, Any]:
    """Build the flash reranker from settings plus the ``--flash-*`` options and evaluate it."""
    import asyncio

    from ragidx.config import LLMEndpoint
    from ragidx.evaluation.flash import evaluate_flash
    from ragidx.providers.llms import LLMProvider
    from ragidx.retrieval.factory import build_flash_reranker

    flash_cfg: dict[str, Any] = {"enabled": True}
    if args.flash_model or args.flash_api_base:
        base = settings.flash.endpoint(settings.llm)
        update: dict[str, Any] = {"temperature": 0.0}
        if args.flash_model:
            update["model"] = args.flash_model
        if args.flash_api_base:
            update["api_base"] = args.flash_api_base
        flash_cfg["llm"] = LLMEndpoint(**{**base.model_dump(), **update})
    if args.flash_candidates is not None:
        flash_cfg["candidates"] = args.flash_candidates
    if args.flash_timeout is not None:
        flash_cfg["timeout_s"] = args.flash_timeout
    try:
        settings = settings.model_copy(update={"flash": settings.flash.model_copy(update=flash_cfg)})
        endpoint = settings.flash.endpoint(settings.llm)
    except ValueError as exc:
        raise FlashStageError(str(exc)) from exc
    chunk_store, article_store, _ = open_scratch_index(dataset, settings, embed_model, cache_dir)
    chain = build_retriever(settings, chunk_store, article_store, embed_model)
    queries = dict(list(dataset.queries.items())[: args.flash_limit])
    if args.flash_trace_dir is not None:
        args.flash_trace_dir.mkdir(parents=True, exist_ok=True)
    with LLMProvider(threads=settings.local_llm_threads, model_cache_dir=settings.model_cache_dir) as provider:
        try:
            llm = provider.get(endpoint)
            tokens = provider.token_counter(endpoint)
        except Exception as exc:  # a model that cannot start: say which and why
            raise FlashStageError(f"cannot start {endpoint.model!r}: {exc}") from exc
        flash = build_flash_reranker(settings, llm, token_counter=tokens)
        return asyncio.run(
            evaluate_flash(
                queries,
                dataset.qrels,
                chain,
                flash,
                candidates=settings.flash.effective_candidates(settings.top_k),
                trace_dir=args.flash_trace_dir,
            )
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
