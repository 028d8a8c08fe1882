"""The flash stage of the retrieval evaluation: what an LLM reranker picks, against the gold labels.

For each judged query the product's chunk chain (``ArticleRetriever`` without flash) ranks
``candidates`` whole articles; ``FlashReranker`` reads them and selects at most ``max_topics``. The
selection is scored against the qrels as a set (precision, recall, F1, share of queries with every
relevant article selected), beside the chain's own top ``max_topics`` on the same queries, so the
LLM's gain or loss is visible. It also reports what the protocol did: tokens shown to the model,
billed tokens, tool calls, the fallback ladder's decisions, invented ids, JSON repairs and latency, and the
characters of the selection the answer model reads (excerpts standing in for large articles) against whole.

Local models are slow on CPU and weak at this task: their figures say whether the protocol and the
fallbacks work, not how good flash rerank can be (run it with ``--flash-api-base`` for a real model).

Example:
    >>> set_scores(["a", "b"], {"a": 1, "c": 1})
    {'precision': 0.5, 'recall': 0.5, 'f1': 0.5, 'all_found': 0.0}
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragidx.article import Article
from ragidx.retrieval.flash import FlashReranker, FlashResult
from ragidx.retrieval.flash.excerpts import EXCERPT_OF_CHARS
from ragidx.retrieval.retriever import ArticleRetriever, article_nodes

__all__ = ["evaluate_flash", "set_scores"]

logger = logging.getLogger(__name__)


def set_scores(selected: Sequence[str], relevant: dict[str, int]) -> dict[str, float]:
    """Precision, recall and F1 of a selection as a set; ``all_found`` is 1.0 when it holds every relevant id.

    An empty selection has precision 0.0 (it found nothing), not an undefined value.
    """
    chosen = set(selected)
    gold = {d for d, g in relevant.items() if g > 0}
    hits = len(chosen & gold)
    precision = hits / len(chosen) if chosen else 0.0
    recall = hits / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "all_found": float(bool(gold) and gold <= chosen)}


def _chars(result: FlashResult, *, full: bool = False) -> int:
    """Characters of the selected articles' text as returned (an excerpt where flash gave one), or whole."""
    total = 0
    for node in result.nodes:
        whole = node.node.metadata.get(EXCERPT_OF_CHARS)
        total += int(whole) if full and whole is not None else len(node.node.get_content())
    return total


def _mean(rows: list[dict[str, float]], key: str) -> float:
    return round(statistics.fmean(r[key] for r in rows), 4) if rows else 0.0


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


async def evaluate_flash(
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    retriever: ArticleRetriever,
    flash: FlashReranker,
    *,
    candidates: int = 20,
    trace_dir: Path | None = None,
) -> dict[str, Any]:
    """Run flash on every query's ``candidates`` chain articles; return the figures as a dict.

    Args:
        queries: query id → text (only ids in ``qrels`` are run).
        qrels: query id → {corpus id: grade}.
        retriever: the chunk chain without an article reranker (its ``retrieve`` gives the candidates).
        flash: the reranker under test; ``max_topics`` is also the size of the chain baseline.
        candidates: articles shown to flash per query.
        trace_dir: if set, each rerank's trace is saved there (``<query id>.json``) for replay.
    """
    if retriever.article_reranker is not None:
        raise ValueError("pass the chain without an article reranker: flash is the stage under test")
    k = flash.top_n
    flash_rows: list[dict[str, float]] = []
    chain_rows: list[dict[str, float]] = []
    ceiling: list[float] = []
    results: list[FlashResult] = []
    retrieval_ms: list[float] = []
    for qid, query in queries.items():
        relevant = qrels.get(qid)
        if not relevant:
            continue
        t0 = time.perf_counter()
        articles: list[Article] = await retriever.aretrieve(query, top_k=candidates)
        retrieval_ms.append((time.perf_counter() - t0) * 1000)
        result = await flash.arerank_detailed(query, article_nodes(articles))
        results.append(result)
        if trace_dir is not None and result.trace is not None:
            result.trace.save(trace_dir / f"{qid}.json")
        flash_rows.append(set_scores(result.selected_kb_ids, relevant))
        chain_rows.append(set_scores([a.kb_id for a in articles[:k]], relevant))
        ceiling.append(set_scores([a.kb_id for a in articles], relevant)["recall"])
        logger.info(
            "flash %s: %s/%s selected %s (gold %s), %.1fs",
            qid,
            result.decision.value,
            result.source.value,
            result.selected_kb_ids,
            sorted(relevant),
            result.duration_s,
        )
    decisions = Counter(r.decision.value for r in results)
    sources = Counter(r.source.value for r in results)
    repairs = Counter(rep.value for r in results for rep in r.repairs)
    return {
        "queries": len(results),
        "candidates": candidates,
        "max_topics": k,
        "model": flash.llm_name,
        "tool_mode": flash.tool_mode,
        "flash": {m: _mean(flash_rows, m) for m in ("precision", "recall", "f1", "all_found")},
        "chain_top_k": {m: _mean(chain_rows, m) for m in ("precision", "recall", "f1", "all_found")},
        "candidate_recall": round(statistics.fmean(ceiling), 4) if ceiling else 0.0,
        "selected_mean": round(statistics.fmean(len(r.selections) for r in results), 2) if results else 0.0,
        "empty_selections": sum(1 for r in results if not r.selections),
        "tokens_shown_mean": round(statistics.fmean(r.prompt_tokens_shown for r in results), 1) if results else 0,
        "tokens_shown_p95": _pct([r.prompt_tokens_shown for r in results], 0.95),
        "input_tokens_mean": round(statistics.fmean(r.input_tokens for r in results), 1) if results else 0,
        "output_tokens_mean": round(statistics.fmean(r.output_tokens for r in results), 1) if results else 0,
        "tool_calls_mean": round(statistics.fmean(r.tool_calls for r in results), 2) if results else 0.0,
        "decisions": dict(decisions),
        "sources": dict(sources),
        "fallbacks": sum(1 for r in results if r.is_fallback),
        "invented_ids": sum(r.invented_count for r in results),
        # What the answer model reads of the selection: an excerpt stands in for a large article's text.
        "excerpts": sum(1 for r in results for s in r.selections if s.excerpt),
        "selected_chars_mean": round(statistics.fmean(_chars(r) for r in results), 1) if results else 0.0,
        "selected_full_chars_mean": round(statistics.fmean(_chars(r, full=True) for r in results), 1)
        if results
        else 0.0,
        "json_repairs": dict(repairs),
        "duration_p50_s": _pct([r.duration_s for r in results], 0.5),
        "duration_p95_s": _pct([r.duration_s for r in results], 0.95),
        "retrieval_p50_ms": round(_pct(retrieval_ms, 0.5), 1),
        "timeout_s": flash.timeout_s,
    }
