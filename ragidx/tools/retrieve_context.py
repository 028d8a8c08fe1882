"""The ``retrieve_context`` tool: ranked, uncompressed whole articles as compact JSON.

Pure retrieval: the tool never counts tokens. When the context budget has set a ``RetrievalCap``,
the tool asks it how many articles to return, nothing more. Its answer is the contract the budget
reads::

    {"articles": [{"kb_id", "title", "url", "content",
                   "metadata": {"rerank_score", "normalized_rank", "article_rank",
                                "matched_spans", ...}}],
     "metadata": {"query", "top_k_requested", "articles_count", "has_results"}}

A failure returns the same shape with ``"error"`` and no articles; the tool never raises into the agent.
The chunk ids an article matched (``matched_chunk_ids``, UUIDs: 20-25 tokens each, often dozens an
article) stay on ``Engine.retrieve``'s articles and out of the prompt; where those chunks sit in the
article (``matched_spans``) stays, for the budget's compressor.

Example:
    >>> tool = make_retrieve_context_tool(retriever)                 # doctest: +SKIP
    >>> json.loads(tool.call(query="insert a table").content)["metadata"]["has_results"]  # doctest: +SKIP
    True
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from llama_index.core.tools import FunctionTool

from ragidx.article import MATCHED_CHUNKS, Article
from ragidx.budget.cap import RetrievalCap
from ragidx.budget.messages import dump_payload

__all__ = ["TOOL_NAME", "ArticleSearch", "articles_to_json", "error_json", "make_retrieve_context_tool"]

logger = logging.getLogger(__name__)

TOOL_NAME = "retrieve_context"
TOOL_DESCRIPTION = (
    "Search the knowledge base and return whole articles, best first, as JSON. Each article has kb_id, "
    "title, url, content and metadata with rerank_score and normalized_rank (0.0 = best). Call it again "
    "with a rephrased or narrower query to cover another aspect of a question. "
    "Arguments: query (what to search for), top_k (optional: how many articles)."
)


class ArticleSearch(Protocol):
    """What the tool needs from a retriever (``ArticleRetriever`` has it)."""

    top_k: int

    def retrieve(self, query: str, top_k: int | None = None) -> list[Article]: ...

    async def aretrieve(self, query: str, top_k: int | None = None) -> list[Article]: ...


def articles_to_json(articles: Sequence[Article], query: str, top_k: int | None) -> str:
    """The tool's success answer: compact JSON, UTF-8 kept, each content between two spaces so that the
    context budget counts it alone (``ragidx.budget.messages.dump_payload``)."""
    payload = {
        "articles": [_for_prompt(a) for a in articles],
        "metadata": _metadata(query, top_k, len(articles)),
    }
    return dump_payload(payload, default=_jsonable)


def _for_prompt(article: Article) -> dict[str, Any]:
    data = article.to_dict()
    data["metadata"].pop(MATCHED_CHUNKS, None)
    return data


def error_json(message: str, query: Any, top_k: Any) -> str:
    """The tool's failure answer: the same shape, no articles, and ``error``."""
    payload = {
        "error": message,
        "articles": [],
        "metadata": _metadata(query if isinstance(query, str) else str(query), top_k, 0),
    }
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)


def _metadata(query: str, top_k: Any, count: int) -> dict[str, Any]:
    return {"query": query, "top_k_requested": top_k, "articles_count": count, "has_results": count > 0}


def _jsonable(value: Any) -> Any:
    # numpy scalars and the like in metadata: fall back to their Python value, else their text
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)


def _coerce_top_k(top_k: Any) -> int | None:
    if top_k is None or top_k == "":
        return None
    if isinstance(top_k, bool):
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    try:
        value = int(top_k)
    except (TypeError, ValueError):
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}") from None
    if value != top_k and not (isinstance(top_k, str) and top_k.strip().isdigit()):
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    if value < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    return value


def make_retrieve_context_tool(retriever: ArticleSearch, cap: RetrievalCap | None = None) -> FunctionTool:
    """A LlamaIndex ``FunctionTool`` named ``retrieve_context`` over ``retriever`` (sync and async).

    Args:
        retriever: returns ranked ``Article`` objects (``ArticleRetriever``).
        cap: when given, the article count is lowered to ``cap.limit(top_k)`` on every call.

    Example:
        >>> tool = make_retrieve_context_tool(retriever, cap=RetrievalCap())  # doctest: +SKIP
        >>> tool.metadata.name                                               # doctest: +SKIP
        'retrieve_context'
    """

    def _prepare(query: Any, top_k: Any) -> tuple[str, int]:
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        wanted = _coerce_top_k(top_k) or retriever.top_k
        return query, cap.limit(wanted) if cap is not None else wanted

    def retrieve_context(query: str, top_k: int | None = None) -> str:
        """Search the knowledge base; return ranked whole articles as JSON.

        Args:
            query: what to search for, in the user's words or rephrased.
            top_k: how many articles to return (optional).
        """
        try:
            text, k = _prepare(query, top_k)
            articles = retriever.retrieve(text, top_k=k)
        except Exception as exc:
            logger.exception("retrieve_context failed: %s", exc)
            return error_json(f"Retrieval failed: {type(exc).__name__}: {exc}", query, top_k)
        logger.info("retrieve_context returned %d articles", len(articles))
        return articles_to_json(articles, text, top_k)

    async def aretrieve_context(query: str, top_k: int | None = None) -> str:
        """Search the knowledge base; return ranked whole articles as JSON.

        Args:
            query: what to search for, in the user's words or rephrased.
            top_k: how many articles to return (optional).
        """
        try:
            text, k = _prepare(query, top_k)
            articles = await retriever.aretrieve(text, top_k=k)
        except Exception as exc:
            logger.exception("retrieve_context failed: %s", exc)
            return error_json(f"Retrieval failed: {type(exc).__name__}: {exc}", query, top_k)
        logger.info("retrieve_context returned %d articles", len(articles))
        return articles_to_json(articles, text, top_k)

    return FunctionTool.from_defaults(
        fn=retrieve_context,
        async_fn=aretrieve_context,
        name=TOOL_NAME,
        description=TOOL_DESCRIPTION,
    )
