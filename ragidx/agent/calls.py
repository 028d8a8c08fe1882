"""The model calls of a turn: each one budgeted first, on the turn's model, counted and timed.

:class:`TurnCalls` runs the context budget hook (:class:`ragidx.budget.ContextBudget`) before every LLM call
and sends what it returns: the fixed system prompt, the conversation with the search results the budget kept
(as JSON, or inline as numbered text for chat templates without tool messages), then the step's instruction.
It switches a turn to the fallback model when the primary window cannot hold the prompt or the budget
recommends it, budgets again for a smaller window when an endpoint counts more tokens than the budget did
(remembered per model), and feeds the answer-time deadline its measurements.

Example:
    >>> calls = TurnCalls(llm, budget, prompts=default_prompts())              # doctest: +SKIP
    >>> fit = await calls.budgeted(emit, turn, None, "Answer now.")             # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Event
from pydantic import BaseModel, Field

from ragidx.agent.events import AnswerDeltaEvent, BudgetReportEvent
from ragidx.agent.guards.gates import check_log_odds, check_options
from ragidx.agent.rendering import to_inline
from ragidx.agent.turn import Turn
from ragidx.article import Article, SearchResult
from ragidx.budget import ContextBudget, Fit, Renderer
from ragidx.budget.messages import call_id, with_results
from ragidx.budget.report import ContextWindowTooSmallError
from ragidx.providers.chat import ChatCaller, ContextOverflowError, LLMRequestError, model_name, usage
from ragidx.providers.speed import AnswerDeadline

logger = logging.getLogger(__name__)

T = TypeVar("T")
Emit = Callable[[Event], None]
"""Writes an event to the workflow's stream (``ctx.write_event_to_stream``)."""
Instruction = str | Callable[[Sequence[Article]], str] | None
"""A step's closing instruction, or a function of the articles the prompt shows (the answer's sources)."""


class PlanSearches(BaseModel):
    queries: list[str] = Field(description="1 to 3 short search queries, one per part of the question.")


def _plan_searches(queries: list[str]) -> str:
    return "\n".join(queries)


PLAN_TOOL = FunctionTool.from_defaults(
    _plan_searches,
    name="plan_searches",
    description="Plan the knowledge-base searches for the question: one short query per part of it.",
    fn_schema=PlanSearches,
)


def call_name(tools: Sequence[Any] | None) -> str:
    """Which LLM call of the turn a budget run is for: ``answer`` (no tools), ``plan`` or ``decide``."""
    if not tools:
        return "answer"
    return "plan" if tools[0].metadata.name == PLAN_TOOL.metadata.name else "decide"


class TurnCalls:
    """The budgeted LLM calls of the agent's turns. See the module docstring.

    Args:
        llm: the model; ``fallback_llm`` / ``fallback_context_window`` / ``fallback_max_output_tokens``: a
            larger-context model for the rest of a turn whose material cannot fit usefully.
        budget: the context budget hook.
        prompts: the agent's prompts by name (read on every call, so a replaced prompt takes effect at once).
        inline_tool_results: write tool traffic as plain text.
        retries / backoff_s: retries of a failing endpoint (exponential backoff), then a clear error.
        deadline / max_prompt_tokens: prompt-token caps, enforced by the budget as a tighter window.
    """

    def __init__(
        self,
        llm: FunctionCallingLLM,
        budget: ContextBudget,
        *,
        prompts: Mapping[str, BasePromptTemplate],
        inline_tool_results: bool = False,
        fallback_llm: FunctionCallingLLM | None = None,
        fallback_context_window: int | None = None,
        fallback_max_output_tokens: int = 512,
        retries: int = 2,
        backoff_s: float = 1.0,
        deadline: AnswerDeadline | None = None,
        max_prompt_tokens: int | None = None,
    ) -> None:
        self.llm = llm
        self.budget = budget
        self.prompts = prompts
        self.inline_tool_results = inline_tool_results
        self.fallback_llm = fallback_llm
        self.fallback_context_window = fallback_context_window
        self.fallback_max_output_tokens = fallback_max_output_tokens
        self.retries = retries
        self.backoff_s = backoff_s
        self.deadline = deadline
        self.max_prompt_tokens = max_prompt_tokens
        self.learned_shrink: dict[str, int] = {}

    async def send(
        self,
        emit: Emit,
        turn: Turn,
        tools: Sequence[Any] | None,
        instruction: Instruction,
        send: Callable[[Fit], Awaitable[T]],
    ) -> T:
        """Budget, then send. The last resort: if the endpoint still answers that the prompt overflows (its
        tokenizer or chat template counts more than ours), budget once more for a window smaller by the
        endpoint's excess, remembered for later calls to the same model, and send again."""
        fit = await self.budgeted(emit, turn, tools, instruction)
        try:
            return await send(fit)
        except ContextOverflowError as exc:
            # The endpoint counts `ratio` times what we count: scale the room for the prompt down by it.
            ratio = (exc.prompt_tokens / fit.tokens) if exc.prompt_tokens and fit.tokens else 1.15
            ratio = max(ratio, 1.02) * 1.02
            room = turn.model.window - turn.model.shrink - turn.model.max_out
            turn.model.shrink = turn.model.window - turn.model.max_out - int(room / ratio)
            self.learned_shrink[model_name(turn.model.llm)] = turn.model.shrink
            logger.warning(
                "the endpoint counts %.2fx our prompt tokens; budgeting a %d-token smaller window",
                ratio,
                turn.model.shrink,
            )
        return await send(await self.budgeted(emit, turn, tools, instruction))

    async def budgeted(self, emit: Emit, turn: Turn, tools: Sequence[Any] | None, instruction: Instruction) -> Fit:
        """Run the budget hook; keep the conversation it kept as the turn's; return what to send.

        Switches the rest of the turn to the fallback model when the primary window cannot hold the fixed
        prompt, or when the budget recommends it; the reason is recorded on the answer.
        """
        t0 = time.perf_counter()
        render = self.renderer(turn, instruction)
        try:
            fit = await self.fit(turn, tools, render)
        except ContextWindowTooSmallError as exc:
            if not self.switch_to_fallback(turn, f"the {turn.model.window}-token window cannot hold the prompt: {exc}"):
                raise
            fit = await self.fit(turn, tools, render)
        if fit.report.fallback_recommended and self.switch_to_fallback(
            turn, fit.report.fallback_reason or "the budget recommended a larger window"
        ):
            turn.usage.reports.append(fit.report)
            fit = await self.fit(turn, tools, render)
        turn.conversation.messages = fit.conversation
        kept = {call_id(m) for m in fit.conversation}
        turn.conversation.results = {k: r for k, r in turn.conversation.results.items() if k in kept}
        turn.usage.reports.append(fit.report)
        turn.usage.timings["hook"] += time.perf_counter() - t0
        emit(
            BudgetReportEvent(
                report=fit.report.model_dump(mode="json"),
                call=call_name(tools),
                tokens=fit.report.tokens_after,
                expected_s=self.deadline.speed.seconds_for(fit.report.tokens_after) if self.deadline else None,
                titles=[a.title or a.kb_id for a in fit.articles],
            )
        )
        return fit

    async def fit(self, turn: Turn, tools: Sequence[Any] | None, render: Renderer) -> Fit:
        """The budget on the model's window, filling the prompt cap (answer-time deadline, fixed cap) where one
        is set and can hold the fixed prompt."""
        kwargs = {
            "tools": tools,
            "question": turn.conversation.question,
            "context_window": turn.model.window - turn.model.shrink,
            "max_output_tokens": turn.model.max_out,
        }
        if (cap := self.prompt_cap(turn)) is not None:
            try:
                return await self.budget.afit(
                    turn.conversation.messages, turn.conversation.results, render, prompt_cap=cap, **kwargs
                )
            except ContextWindowTooSmallError as exc:
                logger.info("the prompt cap (%d tokens) cannot hold the prompt (%s); using the window", cap, exc)
        return await self.budget.afit(turn.conversation.messages, turn.conversation.results, render, **kwargs)

    def prompt_cap(self, turn: Turn) -> int | None:
        """The tighter of the fixed cap and the deadline's cap on prompt tokens (none on the fallback model)."""
        caps = [] if self.max_prompt_tokens is None else [self.max_prompt_tokens]
        if self.deadline is not None:
            caps.append(self.deadline.prompt_cap(time.perf_counter() - turn.usage.started))
        if not caps or turn.model.fallback_reason is not None:
            return None
        turn.model.prompt_cap = min(caps)
        return turn.model.prompt_cap

    def switch_to_fallback(self, turn: Turn, reason: str) -> bool:
        if self.fallback_llm is None or turn.model.fallback_reason is not None:
            return False
        logger.warning("switching to the fallback model: %s", reason)
        turn.model.fallback_reason = reason
        turn.model.llm = self.fallback_llm
        turn.model.window = self.fallback_context_window or turn.model.window
        turn.model.max_out = self.fallback_max_output_tokens
        turn.model.shrink = self.learned_shrink.get(model_name(self.fallback_llm), 0)
        return True

    def renderer(self, turn: Turn, instruction: Instruction) -> Renderer:
        """What is sent: the fixed system prompt, the messages, then the step's instruction.

        The system prompt is the same on every call and the instruction comes last, so a local server's
        prompt cache reuses everything before it from one call to the next. Search results are written as
        the budget gives them (as JSON, or inline as numbered text); the others as they came.
        """

        def render(
            messages: Sequence[ChatMessage], results: Mapping[str, SearchResult], articles: Sequence[Article]
        ) -> list[ChatMessage]:
            if self.inline_tool_results:
                body = to_inline(messages, {**turn.conversation.results, **results}, articles)
            else:
                body = with_results(messages, results, turn.conversation.results)
            wire = [ChatMessage(role=MessageRole.SYSTEM, content=self.prompts["system_prompt"].format()), *body]
            text = instruction(articles) if callable(instruction) else instruction
            if text:
                wire.append(ChatMessage(role=MessageRole.USER, content=text))
            return wire

        return render

    async def chat(self, turn: Turn, fit: Fit, *, tools: Sequence[Any], tool_choice: Any) -> Any:
        turn.usage.record(fit)
        t0 = time.perf_counter()
        try:
            response = await self.caller(turn).achat(fit.messages, tools=tools, tool_choice=tool_choice)
        finally:
            turn.usage.timings["llm"] += time.perf_counter() - t0
        turn.usage.completion_tokens += (usage(response) or {}).get("completion_tokens", 0)
        return response

    @get_dispatcher(__name__).span  # a span of its own in traces (ragidx.telemetry)
    async def answer_check(self, turn: Turn, fit: Fit, margin: float) -> str | None:
        """The answer check: whether the model rates YES, "the articles shown answer the question", likelier
        than NO by ``margin`` log-odds. One token on the answer's prompt with the check in place of the
        answer instruction (shorter, so it fits wherever the answer's prompt fits); the server reuses the
        articles' cache for it and again for the answer. Both tokens get +100, so the reply is one of them,
        and YES ``-answer_check`` more: greedy decoding then picks YES exactly when its log-odds over NO reach
        the margin. Returns the model's reply for the profile's ``answer_check`` gate to judge; None (the model
        answers) on the fallback model, or when the server refuses the call."""
        if turn.model.llm is not self.llm:
            return None
        messages = [
            *fit.messages[:-1],
            ChatMessage(
                role=MessageRole.USER, content=self.prompts["check_prompt"].format(question=turn.conversation.question)
            ),
        ]
        t0 = time.perf_counter()
        try:
            response = await self.caller(turn).achat(messages, **check_options(margin))
        except LLMRequestError as exc:  # e.g. a server that refuses logit_bias; a dead one fails the answer too
            logger.warning("the answer check failed (%s); asking for the answer anyway", exc)
            return None
        finally:
            turn.usage.timings["answer_check"] = time.perf_counter() - t0
            turn.usage.timings["llm"] += turn.usage.timings["answer_check"]
        turn.gate.check_log_odds = check_log_odds(response)
        turn.gate.prompt_read = True
        if self.deadline is not None:
            # The check's one token on the articles is the turn's reading; the answer after it starts from the
            # server's cache, so its first token says nothing about reading (see _stream_answer). The system
            # prompt is cached from earlier calls (Engine.warm_up reads it first), so it is not counted.
            count = self.budget.tokens.count
            read = fit.tokens - count(fit.messages[-1].content or "") + count(messages[-1].content or "")
            if fit.messages[0].role == MessageRole.SYSTEM:
                read -= count(fit.messages[0].content or "")
            seconds = turn.usage.timings["answer_check"]
            self.deadline.observe(prompt_tokens=read, ttft_s=seconds, completion_tokens=0, total_s=seconds)
        return (response.message.content or "").strip()

    async def stream_answer(self, emit: Emit, turn: Turn, fit: Fit) -> str:
        turn.usage.record(fit)
        t0 = time.perf_counter()
        first: list[float] = []

        def on_delta(delta: str) -> None:
            if not first:
                first.append(time.perf_counter() - t0)
            emit(AnswerDeltaEvent(delta=delta))

        try:
            text = await self.caller(turn).astream(fit.messages, on_delta)
        finally:
            turn.usage.timings["llm"] += time.perf_counter() - t0
        total = time.perf_counter() - t0
        written = self.budget.tokens.count(text)
        turn.usage.completion_tokens += written
        if first:
            turn.usage.timings["answer_ttft"] = first[0]
            if self.deadline is not None and turn.model.llm is self.llm:
                read = 0 if turn.gate.prompt_read else turn.usage.prompt_tokens[-1]  # after the check: writing only
                self.deadline.observe(prompt_tokens=read, ttft_s=first[0], completion_tokens=written, total_s=total)
        return text

    def caller(self, turn: Turn) -> ChatCaller:
        return ChatCaller(
            turn.model.llm, retries=self.retries, backoff_s=self.backoff_s, max_output_tokens=turn.model.max_out
        )
