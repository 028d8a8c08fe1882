"""The context budget: dedup, rank-proportional compression and memory before every LLM call.

Example:
    >>> from ragidx.budget import ContextBudget, RetrievalCap
    >>> cap = RetrievalCap()
    >>> budget = ContextBudget(cap=cap)
    >>> budget.fit([], {}, lambda conversation, results, articles: list(conversation),
    ...            context_window=8192, max_output_tokens=512).changed
    False
"""

from ragidx.budget.accounting import PromptAccountant, tool_specs
from ragidx.budget.allocation import (
    WindowLimits,
    adaptive_min_tokens,
    allocate_article_budgets,
    rank_share,
    suggest_article_cap,
)
from ragidx.budget.compressor import ArticleCompressor, TruncateCompressor, acompress_many
from ragidx.budget.extractive import ExtractiveCompressor
from ragidx.budget.hook import ContextBudget, Fit, Renderer
from ragidx.budget.llm_summary import LLMSummaryCompressor
from ragidx.budget.memory import SUMMARY_PREFIX, ConversationMemory, MemoryResult
from ragidx.budget.postprocessor import ContextBudgetPostprocessor
from ragidx.budget.prompt_context import PROMPT_CONTEXT_MARKERS, ContextMarker
from ragidx.budget.report import ArticleOutcome, BudgetReport, ContextBudgetEvent, ContextWindowTooSmallError
from ragidx.tools.cap import RetrievalCap

__all__ = [
    "PROMPT_CONTEXT_MARKERS",
    "SUMMARY_PREFIX",
    "ArticleCompressor",
    "ArticleOutcome",
    "BudgetReport",
    "ContextBudget",
    "ContextBudgetEvent",
    "ContextBudgetPostprocessor",
    "ContextMarker",
    "ContextWindowTooSmallError",
    "ConversationMemory",
    "ExtractiveCompressor",
    "Fit",
    "LLMSummaryCompressor",
    "MemoryResult",
    "PromptAccountant",
    "Renderer",
    "RetrievalCap",
    "TruncateCompressor",
    "WindowLimits",
    "acompress_many",
    "adaptive_min_tokens",
    "allocate_article_budgets",
    "rank_share",
    "suggest_article_cap",
    "tool_specs",
]
