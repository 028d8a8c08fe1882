"""A fake retrieve_context tool over a tiny in-memory KB, producing the real JSON contract."""

from __future__ import annotations

import json
from typing import Any

from llama_index.core.tools import FunctionTool

from ragidx.agent.workflow import RagAgent
from ragidx.budget import ContextBudget
from tests.fakes.scripted_llm import ScriptedLLM

KB = {
    "tables": ("Tables", "To insert a table in Writer choose Table > Insert Table or press Ctrl+F12. " * 3),
    "charts": ("Charts", "To create a chart in Calc select the data and choose Insert > Chart. " * 3),
    "print": ("Printing", "To print a document choose File > Print and pick the printer. " * 3),
}


def search(query: str, top_k: int = 2) -> list[tuple[str, float]]:
    words = set(query.lower().split())
    scored = [(k, len(words & set(f"{t} {c}".lower().split())) / 10) for k, (t, c) in KB.items()]
    return [s for s in sorted(scored, key=lambda s: -s[1]) if s[1] > 0][:top_k]


def make_tool(fail_on: str | None = None, calls: list[str] | None = None) -> FunctionTool:
    def retrieve_context(query: str, top_k: int | None = None) -> str:
        """Search the knowledge base; returns articles as JSON."""
        if calls is not None:
            calls.append(query)
        if fail_on and fail_on in query:
            raise RuntimeError("vector store is down")
        hits = search(query, top_k or 2)
        n = len(hits)
        articles = [
            {
                "kb_id": k,
                "title": KB[k][0],
                "url": f"https://kb/{k}",
                "content": KB[k][1],
                "metadata": {"rerank_score": s, "normalized_rank": i / (n - 1) if n > 1 else 0.0, "article_rank": i},
            }
            for i, (k, s) in enumerate(hits)
        ]
        meta = {"query": query, "top_k_requested": top_k, "articles_count": n, "has_results": bool(n)}
        return json.dumps({"articles": articles, "metadata": meta})

    return FunctionTool.from_defaults(retrieve_context)


def make_agent(script: list[Any], **kwargs: Any) -> tuple[RagAgent, ScriptedLLM]:
    llm = ScriptedLLM(script)
    tool = kwargs.pop("tool", None) or make_tool()
    budget = kwargs.pop("budget", None) or ContextBudget()
    agent = RagAgent(llm, tool, budget, context_window=kwargs.pop("context_window", 8192), backoff_s=0.0, **kwargs)
    return agent, llm
