"""Self-calibration without labels: pseudo-queries from the KB, every candidate scored, the best kept.

:func:`calibrate` is what ``Engine.tune`` and ``ragidx eval retrieval`` run: sample ``queries`` indexed
articles (seeded), make one pseudo-query per article (``method``), search each once, replay every
candidate configuration (:class:`~ragidx.tuning.tuner.RetrievalTuner`), and pick the best by nDCG@10
against the article each query came from. The untuned configuration is kept unless a candidate beats
it convincingly: by more than ``min_gain`` after subtracting ``z`` standard errors of the paired
per-query gains (noise in a few hundred pseudo-queries should not move a working setup).
A stage that does not pay is switched off this way: a winner with ``reranker="none"`` turns the rerank
stage off.

Example:
    >>> result = calibrate(settings, chunk_store, article_store, embed_model)   # doctest: +SKIP
    >>> result.settings["hybrid_alpha"], result.picked                          # doctest: +SKIP
    (0.35, 'rsf a0.35 c50 offline(1,0.1,0.1,0)')
"""

from __future__ import annotations

import logging
import os
import random
import time
from typing import Any

from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from ragidx.config import Settings
from ragidx.tuning.candidates import RetrievalConfig, candidate_configs
from ragidx.tuning.pseudo_queries import (
    DEFAULT_METHOD,
    LLMQueryWriter,
    PseudoQuery,
    PseudoQueryMethod,
    make_pseudo_queries,
)
from ragidx.tuning.stored import TuningResult, index_fingerprint
from ragidx.tuning.tuner import CandidateScore, RetrievalTuner, pick

__all__ = ["DEFAULT_QUERIES", "MIN_GAIN", "Z", "calibrate", "pseudo_queries"]

logger = logging.getLogger(__name__)

DEFAULT_QUERIES = 300
"""Pseudo-queries per calibration (articles sampled); fewer when the KB is smaller."""
MIN_HELD_OUT = 20
"""Fewest multi-chunk articles the ``held_out`` method works with; below it ``HELD_OUT_FALLBACK`` is used."""
HELD_OUT_FALLBACK: PseudoQueryMethod = "masked_sentence"
MIN_GAIN = 0.01
"""nDCG@10 a candidate must gain over the untuned configuration on the pseudo-queries to replace it...

Pseudo-queries share words with their article, so they favour keyword search and lexical rerank weights
a little more than users' questions do: a small but steady pseudo gain is that bias, not a better setup.
Measured on nine labelled index/default pairs (CHANGELOG.md, 2026-11-27): every pick whose lower
bound stayed under 0.0085 moved labelled nDCG@10 by -0.012 to +0.011 (two of four lost more than 0.005);
the two above 0.01 gained 0.032 and 0.052."""
Z = 2.0
"""... after subtracting this many standard errors of its per-query gains (see ``tuner.pick``)."""


def pseudo_queries(
    article_store: Any,
    *,
    queries: int = DEFAULT_QUERIES,
    method: PseudoQueryMethod = DEFAULT_METHOD,
    seed: int = 0,
    llm: Any | None = None,
) -> list[PseudoQuery]:
    """Pseudo-queries for a seeded sample of the indexed articles (``llm`` writes them for ``method="llm"``)."""
    if queries < 1:
        raise ValueError(f"queries must be >= 1, got {queries}")
    ids = article_store.indexed_ids()
    if not ids:
        raise ValueError("the knowledge base is empty: run `ragidx ingest PATH` before `ragidx tune`")
    if method == "held_out":
        multi = article_store.indexed_ids(min_chunks=2)
        if len(multi) >= MIN_HELD_OUT:
            ids = multi
        else:
            logger.warning(
                "held_out pseudo-queries need articles of two or more chunks; this KB has %d: using %s instead",
                len(multi),
                HELD_OUT_FALLBACK,
            )
            method = HELD_OUT_FALLBACK
    sample = random.Random(seed).sample(ids, min(queries, len(ids)))
    by_id = article_store.get(sample)
    articles = [by_id[k] for k in sample if k in by_id]
    if method == "llm":
        if llm is None:
            raise ValueError("method='llm' needs an LLM (the engine passes its configured one)")
        return LLMQueryWriter(llm).write(articles)
    return make_pseudo_queries(articles, method, seed=seed)


def calibrate(
    settings: Settings,
    chunk_store: Any,
    article_store: Any,
    embed_model: Any,
    *,
    queries: int = DEFAULT_QUERIES,
    method: PseudoQueryMethod = DEFAULT_METHOD,
    seed: int = 0,
    llm: Any | None = None,
    min_gain: float = MIN_GAIN,
    z: float = Z,
    progress: bool = False,
    configs: list[RetrievalConfig] | None = None,
) -> TuningResult:
    """Tune the retrieval settings on the KB itself (see the module docstring); nothing is written.

    Args:
        settings: the settings as given (explicitly set tunable fields are held fixed).
        chunk_store, article_store, embed_model: the index to tune on.
        queries: pseudo-queries to make (one per sampled article).
        method: how to make them (``ragidx.tuning.pseudo_queries``).
        seed: sampling seed (the same index and seed give the same choice).
        llm: the LLM for ``method="llm"``.
        min_gain, z: see ``MIN_GAIN`` and ``Z``.
        progress: progress bars on stderr.
        configs: the candidates; default ``candidate_configs(settings)``.
    """
    started = time.perf_counter()
    pqs = pseudo_queries(article_store, queries=queries, method=method, seed=seed, llm=llm)
    if not pqs:
        raise ValueError(f"no pseudo-queries could be made with method {method!r}; try another --method")
    used = pqs[0].method  # held_out falls back on KBs of one-chunk articles
    configs = configs or candidate_configs(settings)
    untuned = RetrievalConfig.from_settings(settings)
    if untuned not in configs:
        configs = [untuned, *configs]
    filters = None
    if settings.tenant:
        filters = MetadataFilters(filters=[MetadataFilter(key="tenant", value=settings.tenant)])
    tuner = RetrievalTuner(
        chunk_store, embed_model, settings, filters=filters, depth=max(c.candidate_chunks for c in configs)
    )
    hide = {q.qid: q.hides for q in pqs if q.hide is not None}
    pools = tuner.pools({q.qid: q.text for q in pqs}, hide=hide, progress=progress)
    scores = tuner.score(configs, pools, {q.qid: {q.kb_id: 1} for q in pqs}, progress=progress)
    best = pick(scores, untuned, min_gain=min_gain, z=z)
    seconds = time.perf_counter() - started
    logger.info("tuned on %d %s pseudo-queries in %.1f s: %s", len(pqs), used, seconds, best.config.label)
    return TuningResult(
        settings=best.config.settings_update(),
        picked=best.config.label,
        untuned=untuned.label,
        method=used,
        queries=len(pqs),
        candidates=candidate_rows(scores),
        fingerprint=index_fingerprint(settings, article_store),
        seconds=round(seconds, 1),
        load_average=round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    )


def candidate_rows(scores: list[CandidateScore]) -> list[dict[str, Any]]:
    """Every candidate's label, settings and metrics, best nDCG@10 first."""
    rows = [{"config": s.config.label, "settings": s.config.settings_update(), **s.metrics} for s in scores]
    return sorted(rows, key=lambda r: -r["ndcg@10"])
