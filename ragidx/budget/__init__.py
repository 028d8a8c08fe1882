"""The context budget: dedup, rank-proportional compression and memory before every LLM call.

Example:
    >>> from ragidx.budget import ContextBudget, RetrievalCap
    >>> cap = RetrievalCap()
    >>> budget = ContextBudget(cap=cap)
    >>> budget.apply([], context_window=8192, max_output_tokens=512).messages is None
    True
"""

from ragidx.budget.accounting import PromptAccountant, WindowLimits, tool_specs
from ragidx.budget.allocation import (
    BudgetThresholds,
    adaptive_min_tokens,
    allocate_article_budgets,
    rank_share,
    suggest_article_cap,
    thresholds_for_window,
)
from ragidx.budget.compressor import ArticleCompressor, TruncateCompressor, acompress_many, compress_many
from ragidx.budget.dedup import dedupe_articles, dedupe_keyed
from ragidx.budget.extractive import ExtractiveCompressor
from ragidx.budget.hook import REFERENCE_KEY, BudgetResult, ContextBudget, Fit, Renderer
from ragidx.budget.llm_summary import LLMSummaryCompressor
from ragidx.budget.memory import SUMMARY_PREFIX, ConversationMemory, MemoryResult
from ragidx.budget.report import ArticleOutcome, BudgetReport, ContextBudgetEvent, ContextWindowTooSmallError
from ragidx.tools.cap import RetrievalCap

__all__ = [
    "REFERENCE_KEY",
    "SUMMARY_PREFIX",
    "ArticleCompressor",
    "ArticleOutcome",
    "BudgetReport",
    "BudgetResult",
    "BudgetThresholds",
    "ContextBudget",
    "ContextBudgetEvent",
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
    "compress_many",
    "dedupe_articles",
    "dedupe_keyed",
    "rank_share",
    "suggest_article_cap",
    "thresholds_for_window",
    "tool_specs",
]
