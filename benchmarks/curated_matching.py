"""Curated answers' matching: do paraphrases of a pinned question get its answer, and near misses none?

``benchmarks/data/curated_questions.jsonl``: 47 pinned help-desk questions, each with 3 paraphrases (another
wording, the same need) and 2 to 4 near misses (the same words, another intent: delete for insert, header for
footer, Windows 7 for Windows 11, another product ...). All answers are pinned in one store (``CuratedAnswers`` on
an in-memory article store), so a question may also hit another pinned answer: on a paraphrase that is a
``wrong_answer``, on a near miss a false hit like any other. ``pinned_to_gap`` (embedding only): each answer
pinned to its question and two paraphrases, the third asked.

What was looked at while tuning (so is not held out):

- ``tune`` (13): the intent guard's rules, the thresholds, and the judge's (``--judge``: the similarity band, the
  margin, the veto; ``--sweep``) were chosen on its figures and errors;
- ``confirm`` (13), ``holdout`` (8), ``holdout2`` (8): the guard's rules were written reading their errors
  (earlier commits); for the judge only their pinned-question similarities were read (the top candidate is the
  right pinned question for 110 of their 112 guard-passing paraphrases: ``judge_limit`` 1);
- ``holdout3`` (13 pinned, 39 paraphrases, 52 near misses): written before the judge was measured; five of its
  rows were rewritten before it was measured because their pinned questions repeated pinned questions of the
  other sets (the tune sweep showed tune paraphrases going to them). Measured twice, each time with settings
  chosen on tune alone: first with the judge's prompt rendered by the GGUF's own template (hit rate 0.641, 4
  false hits and 1 wrong answer), then, the server renders llama-cpp's ``chatml-function-calling`` template
  instead (HTML-escaped, another system prompt: log-odds 0.03 to 0.7 apart), re-swept on tune through the
  server's own chat handler (``LlamaJudge``; within 0.03-0.17 of the running server's) and measured again: the
  figures below.

Target (issue 60): on paraphrases a hit rate of at least 0.8; 0 false hits on at least 50 near misses. Not met
(2026-11-28, MiniLM, Qwen2.5 1.5B Q4 as the judge, load 2-7 on 2 cores; one run each, interleaved):

| set | embedding + guard: hit rate, false hits | + judge: hit rate, false hits |
|---|---|---|
| tune | 0.769, 1 of 26 | 0.846, 0 of 26 |
| confirm | 0.564, 0 of 26 | 0.641, 1 of 26 |
| holdout | 0.583, 1 of 19 | 0.708, 2 of 19 |
| holdout2 | 0.458, 2 of 18 | 0.500, 0 of 18 |
| holdout3 | 0.538, 9 of 52 | 0.564, 6 of 52 |
| held out, pooled | 0.528, 12 of 89 | 0.586, 8 of 89 |

No paraphrase got another question's answer with the judge (``wrong_answer`` 0 on every set). The judge: 122
calls, 6.2 s each in this process under that load (about 100 prompt tokens, one token out).

    python benchmarks/curated_matching.py [--sweep] [--judge ~/.cache/ragidx/models/qwen2.5-1.5b.gguf
        --judge-cache verdicts.json] [--only SET]

Prints one JSON line (with ``--sweep``, one per setting on the tune set first).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ragidx.questions import curated as curated_module  # noqa: E402
from ragidx.questions.curated import (  # noqa: E402
    DEFAULT_JUDGE_CONFIDENT,
    DEFAULT_JUDGE_LIMIT,
    DEFAULT_JUDGE_MARGIN,
    DEFAULT_JUDGE_THRESHOLD,
    DEFAULT_JUDGE_VETO,
    DEFAULT_PAIR_THRESHOLD,
    DEFAULT_THRESHOLD,
    CuratedAnswers,
    judge_messages,
)
from ragidx.stores.access import Principal  # noqa: E402
from ragidx.stores.article_store import ArticleStore  # noqa: E402


def measure(answers: CuratedAnswers, rows: list[dict[str, Any]], ids: dict[str, str]) -> dict[str, Any]:
    """Hit rate on the rows' paraphrases, and false hits on paraphrases (another answer) and near misses (any)."""
    hits = wrong = false_hits = 0
    misses: list[str] = []
    false: list[str] = []
    for row in rows:
        for q in row["paraphrases"]:
            got = answers.match(q, Principal())
            if got is not None and got.id == ids[row["id"]]:
                hits += 1
            elif got is not None:
                wrong += 1
                false.append(q)
            else:
                misses.append(q)
        for q in row["near_misses"]:
            if answers.match(q, Principal()) is not None:
                false_hits += 1
                false.append(q)
    paraphrases = sum(len(r["paraphrases"]) for r in rows)
    return {
        "paraphrases": paraphrases,
        "hit_rate": round(hits / paraphrases, 3),
        "wrong_answer": wrong,
        "near_misses": sum(len(r["near_misses"]) for r in rows),
        "false_hits": false_hits,
        "missed": misses,
        "false": false,
    }


class LlamaJudge:
    """The judge as ``ragidx.questions.curated.ModelJudge`` asks it of ragidx's local server, in this process: the
    chat (``judge_messages``) through the server's own chat handler (``ragidx.providers.llama_server``: llama-cpp's
    ``chatml-function-calling`` template, HTML-escaped), the log-odds of YES over NO from the first token's top
    log-probabilities, as ``check_log_odds`` reads them. Verdicts are kept in ``cache`` (a JSON file) so a sweep or
    a second run asks the model nothing twice."""

    def __init__(self, model: str, cache: Path | None, threads: int) -> None:
        import llama_cpp

        self.llm = llama_cpp.Llama(model, n_ctx=1024, n_threads=threads, verbose=False)
        self.cache_path = cache
        self.cache: dict[str, float | None] = json.loads(cache.read_text()) if cache and cache.exists() else {}
        self.calls = 0
        self.seconds = 0.0

    def __call__(self, question: str, pinned: str) -> float | None:
        key = f"{question}\t{pinned}"
        if key not in self.cache:
            from llama_index.core.base.llms.types import ChatResponse, LogProb

            from ragidx.agent.guards.gates import check_log_odds
            from ragidx.providers.llama_server import chat_handler

            t0 = time.perf_counter()
            messages = [{"role": m.role.value, "content": m.content} for m in judge_messages(question, pinned)]
            reply = chat_handler(self.llm, messages, logprobs=True, top_logprobs=20, max_tokens=1, temperature=0.0)
            steps = reply["choices"][0]["logprobs"]["content"]
            top = [LogProb(token=t["token"], logprob=t["logprob"]) for t in (steps[0]["top_logprobs"] if steps else [])]
            odds = check_log_odds(ChatResponse(message=judge_messages(question, pinned)[0], logprobs=[top]))
            self.cache[key] = None if odds is None else round(odds, 3)
            self.calls += 1
            self.seconds += time.perf_counter() - t0
            if self.cache_path is not None and self.calls % 10 == 0:
                self.save()
        return self.cache[key]

    def save(self) -> None:
        if self.cache_path is not None:
            self.cache_path.write_text(json.dumps(self.cache, ensure_ascii=False, indent=0))


SPLITS = ("tune", "confirm", "holdout", "holdout2", "holdout3")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", default=str(ROOT / "benchmarks/data/curated_questions.jsonl"))
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    p.add_argument("--sweep", action="store_true", help="thresholds (and margins, with --judge) on tune only")
    p.add_argument("--pair-threshold", type=float, default=DEFAULT_PAIR_THRESHOLD)
    p.add_argument("--judge-threshold", type=float, default=DEFAULT_JUDGE_THRESHOLD)
    p.add_argument("--judge-margin", type=float, default=DEFAULT_JUDGE_MARGIN)
    p.add_argument("--judge-limit", type=int, default=DEFAULT_JUDGE_LIMIT)
    p.add_argument("--judge-confident", type=float, default=DEFAULT_JUDGE_CONFIDENT)
    p.add_argument("--judge-veto", type=float, default=DEFAULT_JUDGE_VETO)
    p.add_argument("--embed", default="minilm", help="the embedding model (Settings.embed_model)")
    p.add_argument("--judge", metavar="GGUF", help="the local model as the judge (e.g. ~/.cache/ragidx/models/...)")
    p.add_argument("--judge-cache", metavar="JSON", help="keep the judge's verdicts here (read, then updated)")
    p.add_argument("--judge-threads", type=int, default=2)
    p.add_argument("--only", choices=SPLITS, action="append", help="measure only these sets (default: all)")
    args = p.parse_args()

    from ragidx.config import Settings
    from ragidx.providers.embedding_factory import build_embed_model

    settings = Settings(embed_model=args.embed)
    embed = build_embed_model(settings)
    rows = [json.loads(line) for line in Path(args.set).read_text().splitlines() if line.strip()]
    judge = None
    if args.judge:
        judge = LlamaJudge(str(Path(args.judge).expanduser()), Path(args.judge_cache) if args.judge_cache else None,
                           args.judge_threads)  # fmt: skip
    answers = CuratedAnswers(
        ArticleStore(":memory:"), embed, threshold=args.threshold, pair_threshold=args.pair_threshold, judge=judge,
        judge_threshold=args.judge_threshold, judge_margin=args.judge_margin, judge_limit=args.judge_limit,
        judge_confident=args.judge_confident, judge_veto=args.judge_veto,
    )  # fmt: skip
    ids = {r["id"]: answers.add([r["pinned"]], f"Answer to: {r['pinned']}").id for r in rows}
    by_split = {s: [r for r in rows if r["split"] == s] for s in (args.only or SPLITS)}

    if args.sweep:
        tune = [r for r in rows if r["split"] == "tune"]
        guard = curated_module.same_intent
        if judge is None:
            for guarded in (True, False):
                curated_module.same_intent = guard if guarded else (lambda q, p: True)  # type: ignore[assignment]
                for threshold, pair in [(t, p) for t in (0.55, 0.6, 0.62, 0.65, 0.7) for p in (0.8, 0.85, 0.9)]:
                    answers.threshold, answers.pair_threshold = threshold, pair
                    m = measure(answers, tune, ids)
                    print(json.dumps({"split": "tune", "guard": guarded, "threshold": threshold, "pair": pair,
                                      **{k: v for k, v in m.items() if k not in ("missed", "false")}}))  # fmt: skip
            curated_module.same_intent = guard
        else:
            grid = [
                (t, c, m) for t in (0.45, 0.5, 0.55) for c in (0.8, 0.85, 0.9, 2.0) for m in (-1, -0.7, -0.5, -0.3, 0)
            ]
            for wide, confident, margin in grid:  # confident 2.0: the judge decides at every similarity
                answers.judge_threshold, answers.judge_confident, answers.judge_margin = wide, confident, margin
                m = measure(answers, tune, ids)
                shown = {k: v for k, v in m.items() if k not in ("missed", "false")}
                row = {"split": "tune", "judge_threshold": wide, "judge_confident": confident, "judge_margin": margin}
                print(json.dumps({**row, **shown}), flush=True)
            judge.save()
            return 0
        answers.threshold, answers.pair_threshold = args.threshold, args.pair_threshold

    t0 = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "curated_matching",
        "embed_model": settings.embed_model,
        "threshold": args.threshold,
        "pair_threshold": args.pair_threshold,
        "judge": Path(args.judge).name if args.judge else None,
        **(
            {
                "judge_threshold": args.judge_threshold,
                "judge_confident": args.judge_confident,
                "judge_margin": args.judge_margin,
                "judge_veto": args.judge_veto,
            }
            if judge
            else {}
        ),  # fmt: skip
        **{s: measure(answers, split_rows, ids) for s, split_rows in by_split.items()},
    }
    held = [s for s in ("holdout", "holdout2", "holdout3") if s in by_split]
    result["held_out"] = {
        "paraphrases": sum(result[s]["paraphrases"] for s in held),
        "hit_rate": round(
            sum(result[s]["hit_rate"] * result[s]["paraphrases"] for s in held)
            / max(1, sum(result[s]["paraphrases"] for s in held)),
            3,
        ),
        "near_misses": sum(result[s]["near_misses"] for s in held),
        "false_hits": sum(result[s]["false_hits"] + result[s]["wrong_answer"] for s in held),
    }
    if judge is not None:
        judge.save()
        result["judge_calls"] = judge.calls
        result["judge_s_per_call"] = round(judge.seconds / judge.calls, 2) if judge.calls else None
    else:
        result["pinned_to_gap"] = pinned_to_gap(rows, embed, args, answers)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result))
    return 0


def pinned_to_gap(rows: list[dict[str, Any]], embed: Any, args: argparse.Namespace, answers: CuratedAnswers) -> dict:
    """Pinned to a gap: the answer holds several phrasings (the pinned question and the other paraphrases); each
    paraphrase is asked with itself left out (leave one out), near misses against all of them. Embedding only."""
    gap_hits, gap_false, gap_paraphrases = 0, 0, 0
    for row in rows:
        for i, q in enumerate(row["paraphrases"]):
            others = [row["pinned"], *(p for j, p in enumerate(row["paraphrases"]) if j != i)]
            single = CuratedAnswers(
                ArticleStore(":memory:"), embed, threshold=args.threshold, pair_threshold=args.pair_threshold
            )
            single._vectors = answers._vectors  # the same model: share what is embedded
            pinned = single.add(others, "answer")
            got = single.match(q, Principal())
            gap_paraphrases += 1
            gap_hits += got is not None and got.id == pinned.id
            gap_false += sum(single.match(m, Principal()) is not None for m in row["near_misses"]) if i == 0 else 0
    return {
        "paraphrases": gap_paraphrases,
        "hit_rate": round(gap_hits / gap_paraphrases, 3),
        "near_misses": sum(len(r["near_misses"]) for r in rows),
        "false_hits": gap_false,
    }


if __name__ == "__main__":
    raise SystemExit(main())
