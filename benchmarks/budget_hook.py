"""Overhead of the context-budget hook: ``ContextBudget.apply`` on 20 real articles, extractive compressor.

The articles are LibreOffice help pages (``--kb``) of realistic size (300-3000 tokens each, a fixed
sample), returned by two ``retrieve_context`` calls of 10 articles with 3 repeats between them, after a
~600-token system prompt, the tool schema and a short conversation. Each window size is timed
``--repeats`` times cold (a fresh budget: nothing counted yet, as when new tool results arrive) and
warm (the same budget again after ``--warmup`` runs: the next LLM call of the turn re-sends the same
messages, whose token counts are cached); prints ONE JSON line with p50/p95 milliseconds.

Run::

    python benchmarks/budget_hook.py --kb ../shared/data/kb/libreoffice_en.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock

from ragidx.budget import ContextBudget, PromptAccountant
from ragidx.providers.tokenizer import TokenCounter

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
    payload = {"articles": articles, "metadata": {"query": QUESTION, "articles_count": len(articles)}}
    return ChatMessage(
        role=MessageRole.TOOL,
        content=json.dumps(payload, ensure_ascii=False),
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--kb", type=Path, default=DEFAULT_KB, help="JSONL with id, title, url, text")
    parser.add_argument("--articles", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    tokens = TokenCounter()
    acc = PromptAccountant(tokens)
    articles = load_articles(args.kb, args.articles, tokens, args.seed)
    messages = build_messages(articles)
    system_prompt = (
        "You answer questions about LibreOffice from the knowledge-base articles that the "
        "retrieve_context tool returns. Cite every claim with the article's title and URL. " * 15
    )
    budget = ContextBudget(tokens, fallback_context_window=131072)  # extractive compressor by default
    prompt_tokens = acc.count_prompt(messages, system_prompt=system_prompt, tools=[TOOL_SPEC])
    result: dict[str, Any] = {
        "benchmark": "budget_hook",
        "articles": args.articles,
        "article_tokens": sum(tokens.count(a["content"]) for a in articles),
        "prompt_tokens_before": prompt_tokens,
        "repeats": args.repeats,
        "windows": {},
    }
    for window in WINDOWS:
        kwargs: dict[str, Any] = {
            "system_prompt": system_prompt,
            "tools": [TOOL_SPEC],
            "context_window": window,
            "max_output_tokens": 512,
        }
        # cold: a fresh budget (empty token-count cache), as when new tool results arrive;
        # warm: the same budget again, as on the next LLM call of the turn with the same messages.
        cold: list[float] = []
        for _ in range(args.repeats):
            fresh = ContextBudget(TokenCounter(), fallback_context_window=131072)
            start = time.perf_counter()
            fresh.apply(messages, **kwargs)
            cold.append((time.perf_counter() - start) * 1000)
        for _ in range(args.warmup):
            budget.apply(messages, **kwargs)
        times: list[float] = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            out = budget.apply(messages, **kwargs)
            times.append((time.perf_counter() - start) * 1000)
        sent = out.messages if out.messages is not None else messages
        after = acc.count_prompt(sent, system_prompt=system_prompt, tools=[TOOL_SPEC])
        result["windows"][str(window)] = {
            "cold_p50_ms": round(statistics.median(cold), 2),
            "cold_p95_ms": round(percentile(cold, 0.95), 2),
            "p50_ms": round(statistics.median(times), 2),
            "p95_ms": round(percentile(times, 0.95), 2),
            "tokens_after": after,
            "fits": after + out.report.safety_margin_tokens + 512 <= window,
            "path": out.report.path,
        }
    result["max_p95_ms"] = max(w["p95_ms"] for w in result["windows"].values())
    result["max_cold_p95_ms"] = max(w["cold_p95_ms"] for w in result["windows"].values())
    result["target_ms"] = 50
    result["machine"] = f"{platform.machine()}, {os.cpu_count()} cpus (shared)"
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
