"""The retrieval and answer evaluations as the evaluation page runs and shows them.

Runs :func:`ragidx.evaluation.retrieval.evaluate` with the dashboard engine's settings and embedding
model, and turns its result into long-form rows (stage, metric, value) for tables and charts; runs
:func:`ragidx.evaluation.answers.evaluate_answers` on the engine's own knowledge base and shows one
row per question.

Example:
    >>> rows = stage_rows({"stages": {"dense": {"ndcg@10": 0.5, "p50_ms": 3.0}}})
    >>> rows[0]
    {'stage': 'dense', 'metric': 'ndcg@10', 'value': 0.5}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragidx.evaluation.answers import evaluate_answers, load_questions, spread
from ragidx.evaluation.retrieval import STAGES, evaluate, load_beir

__all__ = ["ANSWER_METRICS", "answer_table", "run_answer_eval", "run_retrieval_eval", "stage_rows", "stage_table"]

ANSWER_METRICS = {
    "containment": "Right answers",
    "f1": "Token F1",
    "citation_precision": "Citation precision",
    "false_not_found": "False 'not found'",
    "abstention": "Abstention",
    "p50_s": "p50 seconds",
    "ttft_p50_s": "p50 first token (s)",
}
"""Summary fields the page shows as metrics, with their labels."""


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


def run_answer_eval(
    engine: Any, questions_file: str | Path, *, limit: int | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Ask the questions of a JSONL file (``{id, question, answers, gold_kb_ids?, answerable?}``) through
    ``engine`` over the knowledge base it holds; returns ``evaluate_answers``'s (summary, rows).

    Raises:
        FileNotFoundError: no file at that path (or none given).
        ValueError: a malformed questions file (the message names the line), or an empty knowledge base.
    """
    if not str(questions_file).strip():
        raise FileNotFoundError("give the path of a questions JSONL file ({id, question, answers, gold_kb_ids})")
    path = Path(str(questions_file).strip()).expanduser()
    questions = spread(load_questions(path), limit)
    return evaluate_answers(engine, questions, dataset=str(path))


def answer_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per question for ``st.dataframe``: the answer, whether it was right, citations and time."""
    return [
        {
            "id": r["id"],
            "kind": r["kind"],
            "question": r["question"],
            "answer": r["text"],
            "right": r["contained"],
            "not_found": r["not_found"],
            "lost_at": r.get("miss") or "",
            "cited": ", ".join(r["cited"]),
            "seconds": r["seconds"],
            "prompt_tokens": r["prompt_tokens"],
            "error": r["error"] or "",
        }
        for r in rows
    ]
