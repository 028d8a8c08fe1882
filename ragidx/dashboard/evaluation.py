"""The retrieval evaluation as the evaluation page runs and plots it.

Runs :func:`ragidx.evaluation.retrieval.evaluate` with the dashboard engine's settings and embedding
model, and turns its result into long-form rows (stage, metric, value) for tables and charts.

Example:
    >>> rows = stage_rows({"stages": {"dense": {"ndcg@10": 0.5, "p50_ms": 3.0}}})
    >>> rows[0]
    {'stage': 'dense', 'metric': 'ndcg@10', 'value': 0.5}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragidx.evaluation.retrieval import STAGES, evaluate, load_beir

__all__ = ["run_retrieval_eval", "stage_rows", "stage_table"]


def run_retrieval_eval(
    engine: Any,
    beir_folder: str | Path,
    *,
    limit: int | None = None,
    depth: int = 100,
    cache_dir: Path | None = None,
) -> dict[str, Any]:
    """Evaluate every retrieval stage on a BEIR folder; returns ``evaluate``'s dict.

    Args:
        engine: its ``settings`` (chunking, ``hybrid_alpha``, ``reranker``) and ``embed_model`` are used.
        beir_folder: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``.
        limit: evaluate the first ``limit`` judged queries only.
        depth: articles ranked per query (Recall@100 needs 100).
        cache_dir: scratch indexes; ``<data_dir>/eval-cache`` by default, shared with the CLI.

    Raises:
        FileNotFoundError: the folder is not a BEIR folder (the message lists what is missing).
        ValueError: no query in it has a relevance judgement, or ``depth`` is below 10.
    """
    folder = Path(str(beir_folder).strip()).expanduser()
    if not str(beir_folder).strip():
        raise FileNotFoundError("give the path of a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv)")
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder: give the path of a BEIR folder")
    dataset = load_beir(folder, limit=limit)
    if not dataset.queries:
        raise ValueError(f"no judged queries in {folder}: qrels/test.tsv has no positive judgement of a known query")
    settings = engine.settings
    return evaluate(
        dataset,
        settings,
        engine.embed_model,
        cache_dir or Path(settings.data_dir) / "eval-cache",
        depth=depth,
    )


def stage_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """``{"stage", "metric", "value"}`` for every stage and metric, stages in pipeline order."""
    stages = result.get("stages") or {}
    order = [s for s in STAGES if s in stages] + [s for s in stages if s not in STAGES]
    return [
        {"stage": stage, "metric": metric, "value": value} for stage in order for metric, value in stages[stage].items()
    ]


def stage_table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per stage with every metric as a column (for ``st.dataframe``)."""
    stages = result.get("stages") or {}
    order = [s for s in STAGES if s in stages] + [s for s in stages if s not in STAGES]
    return [{"stage": stage, **stages[stage]} for stage in order]
