"""Citation precision of recorded answers, replayed through the real turn with and without the marker check.

The model's replies are taken from a ``ragidx eval answers --out`` file (its ``model_text``); the turn runs
for real (hybrid search, rerank, whole articles, the context budget at the prompt cap the run had) with a
stand-in chat model that writes the recorded reply back, so the articles shown and their numbers are those
the model saw. Each answer's citations are resolved twice: markers as the model wrote them, and checked
against the statement they close (``ragidx.agent.citations.check_markers``). Scored as ``ragidx eval
answers`` scores them. No model runs: seconds per question.

    python benchmarks/citation_replay.py --kb ../shared/data/kb/postgresql15.jsonl \\
        --questions ragidx/evaluation/data/answers_postgresql15.jsonl --data-dir DIR --rows pg.jsonl

``--data-dir`` must be the index the recorded run used (``same_shown`` counts the questions whose shown
articles came out as recorded). Prints ONE JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ragidx.agent.citations as citations  # noqa: E402
from benchmarks.prompt_recall import RecordingProvider  # noqa: E402
from ragidx.config import LLMEndpoint, Settings  # noqa: E402
from ragidx.engine import Engine  # noqa: E402
from ragidx.evaluation.answers import (  # noqa: E402
    add_data_arguments,
    citation_scores,
    load_eval_data,
    machine_line,
    store_texts,
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_arguments(parser)
    parser.add_argument("--rows", type=Path, required=True, help="per-question file of a ragidx eval answers run")
    parser.add_argument("--prompt-cap", type=int, default=1024, help="the recorded run's answer prompt cap")
    parser.add_argument("--window", type=int, default=8192)
    parser.add_argument("--model", default="qwen2.5-1.5b", help="whose tokens the budget counts")
    args = parser.parse_args(argv)
    recorded = {r["question"]: r for r in map(json.loads, args.rows.read_text(encoding="utf-8").splitlines())}
    data = load_eval_data(args)
    questions = [q for q in data.questions if q.answerable and q.question in recorded]
    llm = LLMEndpoint(model=args.model, context_window=args.window, max_prompt_tokens=args.prompt_cap)
    settings = Settings(data_dir=args.data_dir or Path(".ragidx"), llm=llm)
    replies = {q: r.get("model_text") or r.get("text") or "" for q, r in recorded.items()}

    def reply(prompt: str) -> str:
        """The recorded reply to the question the prompt asks (the longest match: one may contain another)."""
        asked = [q for q in replies if f"Question: {q}" in prompt]
        return replies[max(asked, key=len)] if asked else "NOT_FOUND"

    check = citations.check_markers
    result: dict[str, Any] = {"benchmark": "citation_replay", "dataset": data.label, "questions": len(questions)}
    for mode in ("as_written", "checked"):
        citations.check_markers = check if mode == "checked" else (lambda text, sources, **_: text)
        precision: list[float] = []
        same_shown = 0
        with Engine(settings, llm_provider=RecordingProvider(reply)) as engine:  # type: ignore[arg-type]
            texts = store_texts(engine.article_store)
            for q in questions:
                answer = engine.ask(q.question)
                shown = [a["kb_id"] for a in answer.articles]
                same_shown += shown == [s["kb_id"] for s in recorded[q.question]["shown"]]
                cited = [c.kb_id for c in answer.citations]
                p, _ = citation_scores(cited, q, texts(list(dict.fromkeys(shown + cited))))
                if p is not None:
                    precision.append(p)
        result[mode] = {
            "citation_precision": round(statistics.fmean(precision), 4) if precision else None,
            "judged": len(precision),
            "same_shown": same_shown,
        }
    citations.check_markers = check
    result["machine"] = machine_line()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
