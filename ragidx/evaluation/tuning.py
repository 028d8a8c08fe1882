"""How well label-free calibration chose, judged with the labels it never saw.

``ragidx eval retrieval`` calibrates on the corpus it indexes (:func:`ragidx.tuning.calibrate.calibrate`,
pseudo-queries only), then :func:`judge_tuning` scores every candidate configuration again on the
labelled queries through the same replay. The block it returns says what was picked, each candidate's
nDCG@10 on the pseudo-queries and on the real ones, how well the two rankings of the candidates agree
(Spearman and Kendall), and the *regret*: the real nDCG@10 of the best candidate minus that of the pick.

Example:
    >>> round(spearman([1, 2, 3, 4], [10, 20, 40, 30]), 2)
    0.8
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from ragidx.tuning.candidates import RetrievalConfig
from ragidx.tuning.stored import TuningResult
from ragidx.tuning.tuner import RetrievalTuner

__all__ = ["judge_tuning", "kendall", "spearman"]


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (ties get their mean rank); 0.0 when either side is constant."""
    ra, rb = _ranks(a), _ranks(b)
    n = len(ra)
    if n < 2:
        return 0.0
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    return cov / (va * vb) ** 0.5 if va and vb else 0.0


def kendall(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b over all pairs."""
    concordant = discordant = ties_a = ties_b = 0
    for i, j in itertools.combinations(range(len(a)), 2):
        da, db = a[i] - a[j], b[i] - b[j]
        if da == 0 and db == 0:
            continue
        if da == 0:
            ties_a += 1
        elif db == 0:
            ties_b += 1
        elif (da > 0) == (db > 0):
            concordant += 1
        else:
            discordant += 1
    denom = ((concordant + discordant + ties_a) * (concordant + discordant + ties_b)) ** 0.5
    return (concordant - discordant) / denom if denom else 0.0


def judge_tuning(
    result: TuningResult,
    configs: Sequence[RetrievalConfig],
    tuner: RetrievalTuner,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    progress: bool = False,
) -> dict[str, Any]:
    """The tuning block of the retrieval report: the pick, every candidate on pseudo and real queries."""
    pools = tuner.pools(queries, progress=progress)
    real = {s.config.label: s.metrics for s in tuner.score(configs, pools, qrels, progress=progress)}
    pseudo = {row["config"]: row for row in result.candidates}
    labels = [c.label for c in configs if c.label in pseudo]
    xs = [pseudo[label]["ndcg@10"] for label in labels]
    ys = [real[label]["ndcg@10"] for label in labels]
    best_real = max(labels, key=lambda label: real[label]["ndcg@10"])
    rows = sorted(
        (
            {
                "config": label,
                "pseudo_ndcg@10": pseudo[label]["ndcg@10"],
                "ndcg@10": real[label]["ndcg@10"],
                "recall@10": real[label]["recall@10"],
            }
            for label in labels
        ),
        key=lambda r: -r["pseudo_ndcg@10"],
    )
    return {
        "picked": result.picked,
        "settings": result.settings,
        "untuned": result.untuned,
        "method": result.method,
        "pseudo_queries": result.queries,
        "seconds": result.seconds,
        "load_average": result.load_average,
        "picked_ndcg@10": real[result.picked]["ndcg@10"],
        "untuned_ndcg@10": real[result.untuned]["ndcg@10"],
        "best_by_labels": best_real,
        "best_ndcg@10": real[best_real]["ndcg@10"],
        "regret": round(real[best_real]["ndcg@10"] - real[result.picked]["ndcg@10"], 4),
        "spearman": round(spearman(xs, ys), 3),
        "kendall": round(kendall(xs, ys), 3),
        "candidates": rows,
    }
