"""How often the gold answer reaches the model's prompt, without running the model: retrieval + budget only.

For every answerable question of an answer-evaluation set (the inputs of ``ragidx eval answers``), the
real turn runs (hybrid search, rerank, whole articles, the context budget with the local model's own
token counts) with a stand-in chat model that plans no extra search and records the answer prompt. A
question counts as *in prompt* when a gold answer (normalized as ``ragidx eval answers`` does) occurs in
that prompt; ``gold_shown`` is the share of gold articles among those shown. So this measures what the
retrieval and compression steps hand the model, in seconds instead of the model's minutes, at several
context windows (the budget's cap), or at prompt caps (``--caps``: ``max_prompt_tokens``, the way the answer
deadline caps the local model's prompt, in the largest window). Yes/no questions have no answer text to look
for and are skipped.

    python benchmarks/prompt_recall.py --kb ../shared/data/kb/postgresql15.jsonl \\
        --questions ragidx/evaluation/data/answers_postgresql15.jsonl --data-dir DIR --windows 2048,4096,8192

``--data-dir`` may be the index ``ragidx eval answers`` built (it is reused; the KB is ingested only into
an empty one). Prints ONE JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ragidx.config import LLMEndpoint, Settings  # noqa: E402
from ragidx.engine import Engine  # noqa: E402
from ragidx.evaluation.answers import add_data_arguments, contains_answer, load_eval_data, machine_line  # noqa: E402
from ragidx.providers.llms import LLMProvider  # noqa: E402
from tests.fakes.scripted_llm import ScriptedLLM, ToolCall, text_of  # noqa: E402


class RecordingProvider:
    """Chat models that plan no extra search, record the answer prompt and answer ``reply(prompt)``
    (by default a one-word answer citing [1]); the real model's token counter."""

    def __init__(self, reply: Callable[[str], str] = lambda prompt: "x [1]") -> None:
        self.prompts: list[str] = []
        self.reply = reply
        self._real = LLMProvider()

    def get(self, endpoint: LLMEndpoint) -> ScriptedLLM:
        def step(messages: list[Any], call: Any) -> Any:
            if call.tools:
                return ToolCall("plan_searches", {"queries": []})
            self.prompts.append("\n".join(text_of(m) for m in messages))
            return self.reply(self.prompts[-1])

        llm = ScriptedLLM([step], cycle=True)
        llm.context_window = endpoint.context_window
        llm.num_output = endpoint.max_output_tokens
        return llm

    def token_counter(self, endpoint: LLMEndpoint) -> Any:
        return self._real.token_counter(endpoint)

    def answer_deadline(self, endpoint: LLMEndpoint, llm: Any, tokens: Any) -> None:
        return None  # prompts are measured at the windows or caps asked for, never capped for time

    def answer_check(self, endpoint: LLMEndpoint) -> None:
        return None  # the stand-in has no log-odds to give; the check never changes what the prompt holds

    def close(self) -> None:
        self._real.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_arguments(parser)
    parser.add_argument("--windows", default="2048,4096,8192", help="context windows (comma-separated)")
    parser.add_argument("--caps", default="", help="prompt caps (max_prompt_tokens), in the largest window")
    parser.add_argument("--max-output-tokens", type=int, default=512)
    parser.add_argument("--model", default="qwen2.5-1.5b", help="whose tokens the budget counts")
    args = parser.parse_args(argv)
    data = load_eval_data(args)
    questions = [q for q in data.questions if q.answerable and any(a.lower() not in ("yes", "no") for a in q.answers)]
    result: dict[str, Any] = {"benchmark": "prompt_recall", "dataset": data.label, "questions": len(questions)}
    rows: list[dict[str, Any]] = []
    windows = [int(w) for w in args.windows.split(",") if w]
    caps = [int(c) for c in args.caps.split(",") if c]
    runs = [(str(w), w, None) for w in windows] if not caps else [(f"cap{c}", max(windows), c) for c in caps]
    for key, window, cap in runs:
        llm = LLMEndpoint(
            model=args.model, context_window=window, max_output_tokens=args.max_output_tokens, max_prompt_tokens=cap
        )
        settings = Settings(data_dir=args.data_dir or Path(".ragidx"), llm=llm)
        provider = RecordingProvider()
        in_prompt, gold, tokens, seconds = [], [], [], []
        with Engine(settings, llm_provider=provider) as engine:  # type: ignore[arg-type]
            if engine.article_store.count() == 0:
                for source, name in zip(data.sources, data.names, strict=True):
                    engine.ingest(source, source_name=name)
            for q in questions:
                provider.prompts.clear()
                t0 = time.perf_counter()
                answer = engine.ask(q.question)
                seconds.append(time.perf_counter() - t0)
                prompt = provider.prompts[-1] if provider.prompts else ""
                hit = contains_answer(prompt, [a for a in q.answers if a.lower() not in ("yes", "no")])
                shown = {a["kb_id"] for a in answer.articles}
                in_prompt.append(hit)
                if q.gold_kb_ids:
                    gold.append(sum(k in shown for k in q.gold_kb_ids) / len(q.gold_kb_ids))
                tokens.append(answer.tokens.get("prompt_max", 0))
                rows.append({"run": key, "id": q.id, "in_prompt": hit, "prompt_tokens": tokens[-1]})
        result[key] = {
            "answer_in_prompt": round(sum(in_prompt) / len(in_prompt), 4) if in_prompt else None,
            "gold_shown": round(statistics.fmean(gold), 4) if gold else None,
            "prompt_tokens_mean": round(statistics.fmean(tokens), 1) if tokens else None,
            "seconds_per_question": round(statistics.fmean(seconds), 3) if seconds else None,
        }
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    result["machine"] = machine_line()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
