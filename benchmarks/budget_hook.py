"""Overhead of the context-budget hook: ``ContextBudget.apply`` on 20 real articles, extractive compressor.

The articles are LibreOffice help pages (``--kb``) of realistic size (300-3000 tokens each, a fixed
sample), returned by two ``retrieve_context`` calls of 10 articles with 3 repeats between them, after a
~600-token system prompt, the tool schema and a short conversation; the tool results are written as
``retrieve_context`` writes them. Each window size is timed ``--repeats`` times (the windows take
turns, so that the machine's slow spells fall on all alike) cold (a fresh budget: nothing counted,
split yet, as when new tool results arrive) and warm (the same budget again after ``--warmup`` runs:
the next LLM call of the turn re-sends the same messages).

``--tokenizer`` picks the counter: ``tiktoken`` (``cl100k_base``, what endpoints without their own
tokenizer get), ``gguf`` (the local model's own vocabulary, ``--gguf-model``: what the default
configuration, local ``qwen2.5-1.5b``, counts with) or ``both``. The vocabulary is loaded and scanned
before timing (once per process in the app: about a second).
Prints ONE JSON line per tokenizer: wall-clock p50/p95 milliseconds (``*_ms``), the same runs' CPU time
of this process (``*_cpu_*_ms``: less disturbed by other load on a shared machine), the load average
before and after, and ``reference_ms_*``: a fixed pure-Python loop timed before and after (on a
shared machine its speed drifts by up to 1.6x over minutes; compare runs with similar references).

Run::

    python benchmarks/budget_hook.py --kb ../shared/data/kb/libreoffice_en.jsonl --tokenizer both
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock

from ragidx.article import Article, SearchResult
from ragidx.budget import ContextBudget, PromptAccountant
from ragidx.providers.local_llm import assemble_gguf
from ragidx.providers.tokenizer import GGUFTokenCounter, TokenCounter

DEFAULT_KB = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "kb" / "libreoffice_en.jsonl"
WINDOWS = (4096, 8192, 16384, 131072)
QUESTION = "How do I insert a table of contents and update its page numbers in Writer?"
TOOL_SPEC = {
    "type": "function",
    "function": {
        "name": "retrieve_context",
        "description": "Search the knowledge base and return whole ranked articles with their scores.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "top_k": {"type": "integer"}},
            "required": ["query"],
        },
    },
}


def load_articles(path: Path, n: int, tokens: TokenCounter, seed: int) -> list[dict[str, Any]]:
    """``n`` articles of 300-3000 tokens, a fixed random sample of the file."""
    pool = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if 300 <= tokens.count(row["text"]) <= 3000:
                pool.append(row)
    rng = random.Random(seed)
    picked = rng.sample(pool, n)
    return [
        {
            "kb_id": row["id"],
            "title": row["title"],
            "url": row["url"],
            "content": row["text"],
            "metadata": {"rerank_score": round(1.0 - i / n, 3)},
        }
        for i, row in enumerate(picked)
    ]


def tool_message(call_id: str, articles: list[dict[str, Any]]) -> ChatMessage:
    """A ``retrieve_context`` result written as the tool writes it (``SearchResult.to_json``)."""
    result = SearchResult.of([Article.from_dict(a) for a in articles], QUESTION, None)
    return ChatMessage(
        role=MessageRole.TOOL,
        content=result.to_json(),
        additional_kwargs={"tool_call_id": call_id, "name": "retrieve_context"},
    )


def build_messages(articles: list[dict[str, Any]]) -> list[ChatMessage]:
    first, second = articles[:10], articles[10:] + articles[3:6]  # 3 repeats across the calls
    calls = ChatMessage(
        role=MessageRole.ASSISTANT,
        blocks=[
            ToolCallBlock(tool_call_id=c, tool_name="retrieve_context", tool_kwargs={"query": QUESTION})
            for c in ("c1", "c2")
        ],
    )
    return [
        ChatMessage(role=MessageRole.USER, content="Hi, I am writing a long report in Writer."),
        ChatMessage(role=MessageRole.ASSISTANT, content="Happy to help. What do you need?"),
        ChatMessage(role=MessageRole.USER, content=QUESTION),
        calls,
        tool_message("c1", first),
        tool_message("c2", second),
    ]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def counter_factory(name: str, model: str) -> Callable[[], TokenCounter]:
    """New counters of one kind (each cold run gets its own; a GGUF vocabulary loads once per process)."""
    if name == "tiktoken":
        return TokenCounter
    path = str(assemble_gguf(model))  # a packaged model's parts are joined on first use
    warm = GGUFTokenCounter(path)
    warm.count("warm up")  # loads the vocabulary (and scans it, once per process) outside the timings

    def make() -> TokenCounter:
        return GGUFTokenCounter(path)

    return make


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def reference_ms() -> float:
    """Milliseconds of a fixed pure-Python loop (best of 3): how fast this machine runs Python right now,
    to compare runs taken on a shared machine at different times."""
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        total = 0
        for i in range(300_000):
            total += i * i % 7
        best = min(best, time.perf_counter() - start)
    return round(best * 1000, 2)


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float, float]:
    """``fn(*args, **kwargs)``, its wall-clock and CPU (this process) milliseconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000


def run(args: argparse.Namespace, tokenizer: str) -> dict[str, Any]:
    new_counter = counter_factory(tokenizer, args.gguf_model)
    tokens = new_counter()
    acc = PromptAccountant(tokens)
    articles = load_articles(args.kb, args.articles, TokenCounter(), args.seed)  # the same sample for all
    messages = build_messages(articles)
    system_prompt = (
        "You answer questions about LibreOffice from the knowledge-base articles that the "
        "retrieve_context tool returns. Cite every claim with the article's title and URL. " * 15
    )
    prompt_tokens = acc.count_prompt(messages, system_prompt=system_prompt, tools=[TOOL_SPEC])
    result: dict[str, Any] = {
        "benchmark": "budget_hook",
        "tokenizer": tokens.encoding_name,
        "articles": args.articles,
        "article_tokens": sum(tokens.count(a["content"]) for a in articles),
        "prompt_tokens_before": prompt_tokens,
        "repeats": args.repeats,
        "load_avg_before": load_average(),
        "reference_ms_before": reference_ms(),
        "windows": {},
    }

    def call_kwargs(window: int) -> dict[str, Any]:
        return {
            "system_prompt": system_prompt,
            "tools": [TOOL_SPEC],
            "context_window": window,
            "max_output_tokens": 512,
        }

    # cold: a fresh budget, as when new tool results arrive;
    # warm: the same budget again, as on the next LLM call of the turn with the same messages.
    # The windows take turns within each repeat, so that a shared machine's slow spells (its speed
    # drifts over minutes) fall on all of them alike.
    cold: dict[int, list[tuple[float, float]]] = {w: [] for w in WINDOWS}
    for _ in range(args.repeats):
        for window in WINDOWS:
            fresh = ContextBudget(new_counter(), fallback_context_window=131072)
            _, wall_ms, cpu_ms = timed(fresh.apply, messages, **call_kwargs(window))
            cold[window].append((wall_ms, cpu_ms))
    budgets = {w: ContextBudget(new_counter(), fallback_context_window=131072) for w in WINDOWS}
    for _ in range(args.warmup):
        for window in WINDOWS:
            budgets[window].apply(messages, **call_kwargs(window))
    warm: dict[int, list[tuple[float, float]]] = {w: [] for w in WINDOWS}
    outs = {}
    for _ in range(args.repeats):
        for window in WINDOWS:
            outs[window], wall_ms, cpu_ms = timed(budgets[window].apply, messages, **call_kwargs(window))
            warm[window].append((wall_ms, cpu_ms))
    for window in WINDOWS:
        out = outs[window]
        sent = out.messages if out.messages is not None else messages
        after = acc.count_prompt(sent, system_prompt=system_prompt, tools=[TOOL_SPEC])
        cold_wall, cold_cpu = [t for t, _ in cold[window]], [c for _, c in cold[window]]
        times, cpu = [t for t, _ in warm[window]], [c for _, c in warm[window]]
        result["windows"][str(window)] = {
            "cold_p50_ms": round(statistics.median(cold_wall), 2),
            "cold_p95_ms": round(percentile(cold_wall, 0.95), 2),
            "p50_ms": round(statistics.median(times), 2),
            "p95_ms": round(percentile(times, 0.95), 2),
            "cold_cpu_p50_ms": round(statistics.median(cold_cpu), 2),
            "cold_cpu_p95_ms": round(percentile(cold_cpu, 0.95), 2),
            "cpu_p50_ms": round(statistics.median(cpu), 2),
            "cpu_p95_ms": round(percentile(cpu, 0.95), 2),
            "tokens_after": after,
            "fits": after + out.report.safety_margin_tokens + 512 <= window,
            "path": out.report.path,
        }
    result["max_p95_ms"] = max(w["p95_ms"] for w in result["windows"].values())
    result["max_cold_p95_ms"] = max(w["cold_p95_ms"] for w in result["windows"].values())
    result["max_cold_cpu_p95_ms"] = max(w["cold_cpu_p95_ms"] for w in result["windows"].values())
    result["target_ms"] = 50
    result["load_avg_after"] = load_average()
    result["reference_ms_after"] = reference_ms()
    result["machine"] = f"{platform.machine()}, {os.cpu_count()} cpus (shared)"
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--kb", type=Path, default=DEFAULT_KB, help="JSONL with id, title, url, text")
    parser.add_argument("--articles", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--tokenizer",
        choices=("tiktoken", "gguf", "both"),
        default="both",
        help="tiktoken cl100k_base, the local model's GGUF vocabulary (the default configuration's), or both",
    )
    parser.add_argument("--gguf-model", default="qwen2.5-1.5b", help="packaged local model or a .gguf path")
    args = parser.parse_args(argv)
    logging.getLogger("ragidx.budget").setLevel(logging.ERROR)  # one fallback warning per run otherwise
    for tokenizer in ("tiktoken", "gguf") if args.tokenizer == "both" else (args.tokenizer,):
        print(json.dumps(run(args, tokenizer)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
