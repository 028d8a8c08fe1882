"""What the context budget did, as plain data: the report, its instrumentation event, its error.

``BudgetReport`` is JSON-serializable (``report.model_dump_json()``) so an agent can log it, show it
in a dashboard or attach it to a trace. ``ContextBudgetEvent`` carries it to LlamaIndex
instrumentation handlers.

Example:
    >>> r = BudgetReport(context_window=8192, path=["under_trigger"])
    >>> r.model_dump()["path"]
    ['under_trigger']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from llama_index.core.instrumentation.events.base import BaseEvent
from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from ragidx.budget.allocation import WindowLimits

__all__ = [
    "ArticleOutcome",
    "ArticleStatus",
    "BudgetReport",
    "ContextBudgetEvent",
    "ContextWindowTooSmallError",
]

ArticleStatus = Literal["kept", "compressed", "truncated", "dropped", "reference"]


class ArticleOutcome(BaseModel):
    """One article occurrence in the prompt: its rank and its tokens before and after the budget."""

    kb_id: str
    title: str = ""
    normalized_rank: float = Field(default=1.0, description="0.0 = best, 1.0 = worst, after dedup.")
    article_rank: int = 0
    tokens_before: int = 0
    allocated: int | None = Field(default=None, description="Tokens the allocation granted, if any.")
    tokens_after: int = 0
    status: ArticleStatus = "kept"
    fallback_reason: str | None = Field(
        default=None,
        description="Why the compressor's output was replaced (error, empty, overshoot), or why the article "
        "was left out although it fit (below_relevance_floor).",
    )


class BudgetReport(BaseModel):
    """Everything the budget measured and decided for one LLM call.

    ``path`` lists the steps taken, in order, from: ``below_floor``, ``under_trigger``,
    ``memory_summarized``, ``deduplicated``, ``compressed``, ``truncated``, ``dropped``,
    ``history_dropped``, ``tool_calls_dropped``, ``fallback_recommended``, ``nothing_to_compress``, and
    ``middle_truncated`` alone (``BudgetedLLM``'s last resort for a prompt with no context block it recognises).

    Example:
        >>> BudgetReport(context_window=4096, tokens_after=3000).tokens_after
        3000
    """

    context_window: int
    trigger_pct: float = 0.0
    target_pct: float = 0.0
    trigger_tokens: int = 0
    target_tokens: int = 0
    safety_margin_pct: float = 0.0
    safety_margin_tokens: int = 0
    reserved_output_tokens: int = 0
    hard_limit_tokens: int = Field(default=0, description="Most prompt tokens allowed: window - margin - output.")
    fixed_tokens: int = Field(default=0, description="System prompt + tool schemas + current question.")
    tokens_before: int = 0
    tokens_after: int = 0
    article_tokens_before: int = 0
    article_tokens_after: int = 0
    article_budget: int | None = None
    min_article_tokens: int = 0
    articles: list[ArticleOutcome] = Field(default_factory=list)
    path: list[str] = Field(default_factory=list)
    compressor: str = ""
    memory_summarized_messages: int = 0
    article_cap: int | None = Field(
        default=None, description="Articles the next retrieve call should return at most; None = no limit."
    )
    available_tokens: int = Field(default=0, description="Tokens left under the target for new material.")
    fallback_recommended: bool = False
    fallback_reason: str | None = None
    duration_ms: float = 0.0

    @classmethod
    def of(cls, limits: WindowLimits, **measured: Any) -> BudgetReport:
        """A report of one call under ``limits`` (its window, trigger, target, margin, reserve, hard limit), with
        what was ``measured``.

        Example:
            >>> from ragidx.budget.allocation import WindowLimits
            >>> limits = WindowLimits.compute(8192, max_output_tokens=512)
            >>> BudgetReport.of(limits, tokens_after=900).hard_limit_tokens
            7270
        """
        return cls(
            context_window=limits.context_window,
            trigger_pct=limits.trigger_pct,
            target_pct=limits.target_pct,
            trigger_tokens=limits.trigger,
            target_tokens=limits.target,
            safety_margin_pct=limits.margin_pct,
            safety_margin_tokens=limits.margin,
            reserved_output_tokens=limits.max_output_tokens,
            hard_limit_tokens=limits.hard_limit,
            min_article_tokens=limits.min_article_tokens,
            **measured,
        )


class ContextBudgetEvent(BaseEvent):
    """Instrumentation event emitted once per budget run, carrying its report."""

    report: BudgetReport

    @classmethod
    def class_name(cls) -> str:
        return "ContextBudgetEvent"


class ContextWindowTooSmallError(ValueError):
    """The fixed part of the prompt (system prompt, tool schemas, question, reserved output) can't fit.

    Attributes carry the numbers so a caller can pick a larger model or trim the prompt.
    """

    def __init__(
        self,
        *,
        context_window: int,
        system_tokens: int,
        tool_tokens: int,
        question_tokens: int,
        reserved_output_tokens: int,
        safety_margin_tokens: int,
        fallback_context_window: int | None = None,
    ) -> None:
        self.context_window = context_window
        self.system_tokens = system_tokens
        self.tool_tokens = tool_tokens
        self.question_tokens = question_tokens
        self.reserved_output_tokens = reserved_output_tokens
        self.safety_margin_tokens = safety_margin_tokens
        self.fallback_context_window = fallback_context_window
        self.required_tokens = (
            system_tokens + tool_tokens + question_tokens + reserved_output_tokens + safety_margin_tokens
        )
        hint = (
            f" A fallback model with a {fallback_context_window}-token window is configured: retry with it."
            if fallback_context_window and fallback_context_window > context_window
            else ""
        )
        super().__init__(
            f"context window of {context_window} tokens cannot hold the fixed prompt: "
            f"system prompt {system_tokens} + tool schemas {tool_tokens} + question {question_tokens} "
            f"+ reserved output {reserved_output_tokens} + safety margin {safety_margin_tokens} "
            f"= {self.required_tokens} tokens. Use a model with a larger context window, shorten the "
            f"system prompt, pass fewer tools, or lower max_output_tokens.{hint}"
        )
