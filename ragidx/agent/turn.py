"""A question's turn through the agent, as small typed pieces that the workflow's events carry.

- :class:`Conversation`: what the model is shown and what the searches found.
- :class:`Searches`: the searches run, and the errors they met.
- :class:`ModelInUse`: the model the turn talks to (the fallback model after a switch) and its window.
- :class:`Usage`: tokens, budget reports and timings, for the answer's report.
- :class:`GateOutcome`: why the model was not asked for an answer, and the guards that fired.

Example:
    >>> turn = Turn.start("How do I insert a table?", None, [], llm=None, window=8192, max_out=512)
    >>> (turn.conversation.question, turn.model.window, turn.searches.rounds)
    ('How do I insert a table?', 8192, 0)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms.function_calling import FunctionCallingLLM

from ragidx.agent.answer import Answer, Citation
from ragidx.agent.guards import Fired
from ragidx.article import SearchResult
from ragidx.budget import Fit
from ragidx.budget.report import BudgetReport
from ragidx.providers.chat import model_name

JSONArticle = dict[str, object]


@dataclass
class Conversation:
    """What the model is shown (``messages``), the session's conversation before the question (``history``),
    and the search results of ``messages``' tool calls, by call id, as the tool returned them."""

    question: str
    session_id: str | None
    history: list[ChatMessage]
    messages: list[ChatMessage]
    results: dict[str, SearchResult] = field(default_factory=dict)
    searched: str = ""  # the question as searched, when a rewriter made it standalone (a follow-up)


@dataclass
class Searches:
    rounds: int = 0
    queries: list[str] = field(default_factory=list)
    tool_errors: list[str] = field(default_factory=list)


@dataclass
class ModelInUse:
    """The model the turn's calls go to, its window and output cap; a fallback switch changes all three."""

    llm: FunctionCallingLLM
    window: int
    max_out: int
    shrink: int = 0  # tokens taken off the window after the endpoint counted more than the budget did
    fallback_reason: str | None = None
    prompt_cap: int | None = None  # the answer-time deadline's cap on prompt tokens, when one is set


@dataclass
class Usage:
    """Prompt tokens per call (as sent, and without dedup and compression), budget reports, timings."""

    reports: list[BudgetReport] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    raw_prompt_tokens: list[int] = field(default_factory=list)
    completion_tokens: int = 0
    timings: dict[str, float] = field(default_factory=lambda: {"retrieval": 0.0, "hook": 0.0, "llm": 0.0})
    started: float = field(default_factory=time.perf_counter)

    def record(self, fit: Fit) -> None:
        """The call's prompt tokens as the budget counted them, and without dedup and compression."""
        self.prompt_tokens.append(fit.tokens)
        self.raw_prompt_tokens.append(fit.report.tokens_before)

    def tokens(self, prompt_cap: int | None) -> dict[str, object]:
        return {
            "prompt_per_call": list(self.prompt_tokens),
            "prompt_total": sum(self.prompt_tokens),
            "prompt_max": max(self.prompt_tokens, default=0),
            # what the same calls would have sent without dedup and compression
            "prompt_raw_per_call": list(self.raw_prompt_tokens),
            "prompt_raw_total": sum(self.raw_prompt_tokens),
            "completion": self.completion_tokens,
            "prompt_cap": prompt_cap,
        }


@dataclass
class GateOutcome:
    reason: str | None = None  # why the model was not asked for an answer, when it was not
    check_log_odds: float | None = None  # the answer check's log P(YES) - log P(NO), when the server reports them
    prompt_read: bool = False  # the answer's articles are in the server's cache already (the check read them)
    fired: list[Fired] = field(default_factory=list)  # the gates and guards that fired, in order


@dataclass
class Turn:
    conversation: Conversation
    model: ModelInUse
    searches: Searches = field(default_factory=Searches)
    usage: Usage = field(default_factory=Usage)
    gate: GateOutcome = field(default_factory=GateOutcome)

    @classmethod
    def start(
        cls, question: str, session_id: str | None, messages: list[ChatMessage], *, llm: FunctionCallingLLM,
        window: int, max_out: int,
    ) -> Turn:  # fmt: skip
        return cls(Conversation(question, session_id, [], messages), ModelInUse(llm, window, max_out))

    def answer(
        self,
        text: str,
        citations: list[Citation],
        method: str,
        sources: list[JSONArticle],
        *,
        not_found: bool,
        reason: str | None,
        guard_profile: dict[str, object],
    ) -> Answer:
        """The turn's ``Answer`` (``timings["total"]`` is taken now)."""
        usage, conversation = self.usage, self.conversation
        usage.timings["total"] = time.perf_counter() - usage.started
        return Answer(
            question=conversation.question,
            text=text,
            citations=citations,
            articles=sources,
            not_found=not_found,
            citation_method=method,
            queries=list(self.searches.queries),
            tool_errors=list(self.searches.tool_errors),
            budget_reports=list(usage.reports),
            model=model_name(self.model.llm),
            fallback_reason=self.model.fallback_reason,
            session_id=conversation.session_id,
            timings={k: round(v, 4) for k, v in usage.timings.items()},
            tokens=usage.tokens(self.model.prompt_cap),
            not_found_reason=reason,
            answer_check=self.gate.check_log_odds,
            guards=[f.as_dict() for f in self.gate.fired],
            guard_profile=guard_profile,
        )
