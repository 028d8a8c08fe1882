"""Flash rerank: an agentic LLM reranker over whole articles, with fallbacks, metrics and replay.

Example:
    >>> from ragidx.retrieval.flash import FlashReranker, QueryContextualizer
    >>> flash = FlashReranker(llm, top_n=5)  # doctest: +SKIP
    >>> result = flash.rerank_detailed(query, article_nodes)  # doctest: +SKIP
"""

from ragidx.retrieval.flash.contextualize import ContextualizedQuery, QueryContextualizer
from ragidx.retrieval.flash.conversation import current_conversation, flash_conversation
from ragidx.retrieval.flash.metrics import FlashMetrics
from ragidx.retrieval.flash.parsing import JsonRepair, ParsedAnswer, ParsedTopic, heal_json, parse_answer
from ragidx.retrieval.flash.prompts import FlashCandidate
from ragidx.retrieval.flash.replay import ReplayLLM, areplay, replay
from ragidx.retrieval.flash.reranker import FLASH_METADATA_KEYS, FlashReranker
from ragidx.retrieval.flash.result import FlashResult, FlashSelection
from ragidx.retrieval.flash.trace import FlashDecision, FlashTrace, SelectionSource

__all__ = [
    "FLASH_METADATA_KEYS",
    "ContextualizedQuery",
    "FlashCandidate",
    "FlashDecision",
    "FlashMetrics",
    "FlashReranker",
    "FlashResult",
    "FlashSelection",
    "FlashTrace",
    "JsonRepair",
    "ParsedAnswer",
    "ParsedTopic",
    "QueryContextualizer",
    "ReplayLLM",
    "SelectionSource",
    "areplay",
    "current_conversation",
    "flash_conversation",
    "heal_json",
    "parse_answer",
    "replay",
]
