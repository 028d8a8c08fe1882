"""Builders for budget tests: articles, retrieve_context results, tool-call turns; the budget on messages."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock

from ragidx.article import SearchResult
from ragidx.budget import ContextBudget, Fit
from ragidx.budget.accounting import PromptAccountant
from ragidx.budget.messages import tool_results, with_results

_VOCAB = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "table",
    "chart",
    "server",
    "printer",
    "network",
    "driver",
    "update",
    "install",
    "window",
    "layout",
    "format",
    "export",
    "import",
    "backup",
    "restore",
    "user",
    "account",
    "password",
    "token",
    "cache",
    "index",
    "query",
    "engine",
    "module",
]


def text_of_tokens(n: int, seed: int = 0, acc: PromptAccountant | None = None) -> str:
    """Sentences of random words with about ``n`` tokens (exactly ``n`` or fewer when cut)."""
    acc = acc or PromptAccountant()
    rng = random.Random(seed)
    sentences: list[str] = []
    while acc.tokens.count(" ".join(sentences)) < n:
        words = [rng.choice(_VOCAB) for _ in range(rng.randint(6, 14))]
        sentences.append(" ".join(words).capitalize() + ".")
    return acc.tokens.truncate(" ".join(sentences), n)


def article(
    kb_id: str, score: float, content: str, *, title: str | None = None, url: str | None = None
) -> dict[str, Any]:
    return {
        "kb_id": kb_id,
        "title": title or f"Article {kb_id}",
        "url": url or f"https://kb.example/{kb_id}",
        "content": content,
        "metadata": {"rerank_score": score, "normalized_rank": 0.0, "article_rank": 0},
    }


def tool_result(call_id: str, articles: list[dict[str, Any]], query: str = "q") -> ChatMessage:
    payload = {
        "articles": articles,
        "metadata": {
            "query": query,
            "top_k_requested": 5,
            "articles_count": len(articles),
            "has_results": bool(articles),
        },
    }
    return ChatMessage(
        role=MessageRole.TOOL,
        content=json.dumps(payload, ensure_ascii=False),
        additional_kwargs={"tool_call_id": call_id, "name": "retrieve_context"},
    )


def tool_call(*call_ids: str, query: str = "q") -> ChatMessage:
    return ChatMessage(
        role=MessageRole.ASSISTANT,
        blocks=[
            ToolCallBlock(tool_call_id=c, tool_name="retrieve_context", tool_kwargs={"query": query}) for c in call_ids
        ],
    )


def system_message(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.SYSTEM, content=text)


def user(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.USER, content=text)


def assistant(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, content=text)


def payload_of(message: ChatMessage) -> dict[str, Any]:
    return json.loads(message.content or "")


def retrieve_tool_spec() -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": "retrieve_context",
            "description": "Search the knowledge base and return whole ranked articles.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "top_k": {"type": "integer"}},
                "required": ["query"],
            },
        },
    }


def fit(budget: ContextBudget, messages: list[ChatMessage], *, system_prompt: str | None = None, **kwargs: Any) -> Fit:
    """``budget.fit`` on a conversation that arrives as messages: its search results are read from them, and
    the prompt is sent as ``system_prompt`` (a system message) and the conversation, results as JSON."""
    results = tool_results(messages)
    head = [system_message(system_prompt)] if system_prompt else []

    def render(conversation: Sequence[ChatMessage], sent: Mapping[str, SearchResult], _: Any) -> list[ChatMessage]:
        return [*head, *with_results(conversation, sent, results)]

    return budget.fit(messages, results, render, **kwargs)
