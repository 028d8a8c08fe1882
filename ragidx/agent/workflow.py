"""The agent: a LlamaIndex ``Workflow`` that retrieves several times, budgets every call, answers with citations.

Steps: ``start`` → (``decide`` ⇄ ``run_tools``)* → ``answer``. The context budget hook
(:class:`ragidx.budget.ContextBudget`) runs before **every** LLM call, sees all tool results of the
turn, and returns the messages that are actually sent; the agent continues with them.

Two tool protocols, one code path (``tool_mode``):

- ``auto``: the model sees ``retrieve_context`` with ``tool_choice="auto"`` and calls it as it likes
  (OpenAI, OpenRouter, vLLM with a tool parser).
- ``forced``: for models that only follow a *forced named* tool call (the local Qwen2.5 through
  llama-cpp-python's server: ``auto`` returns empty replies, ``required`` fails). On a short prompt the
  model must call ``plan_searches`` (its JSON schema constrains the output to a list of queries, one per
  part of the question); the question itself and those queries are searched in one round, then the
  model answers. One long prompt per question, which is what a slow CPU model can afford.

``inline_tool_results`` sends tool calls and results as plain assistant/user text, for chat
templates that drop ``tool`` messages (llama-cpp-python's ``chatml-function-calling`` does). The
budget renders each prompt as it is sent (through the agent's renderer) and counts that, so the window
holds either way.

The turn keeps its search results as objects (``SearchResult`` by tool-call id, as the tool returned them
in ``ToolOutput.raw_output``; a tool that only writes JSON is read once, where its answer enters). The
budget takes them with the conversation and returns the messages to send, the articles shown and the count.

The answer step lists the surviving articles as ``[n] title`` in a closing instruction, asks for ``[n]``
citations, or to say that the articles do not answer, and keeps only citations of articles the model
really saw.

Example:
    >>> agent = RagAgent(llm, retrieve_tool, ContextBudget(), context_window=8192)  # doctest: +SKIP
    >>> answer = await agent.run(question="How do I insert a table?")                # doctest: +SKIP
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from abc import ABCMeta
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixin, PromptMixinType
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context, Event, StartEvent, StopEvent, Workflow, step
from pydantic import BaseModel, Field
from workflows.workflow import WorkflowMeta

from ragidx.agent.answer import NOT_FOUND_TEXT, Answer, Citation
from ragidx.agent.citations import resolve_citations
from ragidx.agent.guards import GateInput, GuardChain
from ragidx.agent.guards.gates import ANSWER_CHECK, RELEVANCE_GATES, check_log_odds, check_options
from ragidx.agent.memory import SessionMemory
from ragidx.agent.prompts import SYSTEM_PROMPT, checked, default_prompts
from ragidx.agent.rendering import _answer_prompt, prompt_title, to_inline
from ragidx.agent.rewrite import HeuristicRewriter, QueryRewriter, earlier_questions
from ragidx.agent.turn import Turn
from ragidx.article import SEE_ABOVE, Article, SearchResult
from ragidx.budget import ContextBudget, Fit, Renderer
from ragidx.budget.messages import call_id, tool_results, with_results
from ragidx.budget.report import ContextWindowTooSmallError
from ragidx.providers.chat import (
    ChatCaller,
    ContextOverflowError,
    LLMRequestError,
    LLMUnavailableError,
    model_name,
    usage,
)
from ragidx.providers.speed import AnswerDeadline

__all__ = [
    "AnswerDeltaEvent",
    "AnswerEvent",
    "BudgetReportEvent",
    "DecideEvent",
    "LLMRequestError",
    "LLMUnavailableError",
    "RagAgent",
    "SearchEvent",
    "SessionMemory",
    "ToolCallsEvent",
]

logger = logging.getLogger(__name__)

ToolMode = Literal["auto", "forced"]
PlanMode = Literal["always", "never"]
T = TypeVar("T")


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


class DecideEvent(Event):
    turn: Turn


class ToolCallsEvent(Event):
    turn: Turn
    calls: list[ToolSelection]


class AnswerEvent(Event):
    turn: Turn


class AnswerDeltaEvent(Event):
    """Streamed: a piece of the answer text."""

    delta: str


class BudgetReportEvent(Event):
    """Streamed: what the budget hook did before an LLM call (``call``: plan, decide or answer)."""

    report: dict[str, object]  # the BudgetReport as JSON
    call: str = ""
    tokens: int = 0  # the prompt's tokens as sent (the report's ``tokens_after``)
    expected_s: float | None = None  # how long the model should take over it, from its measured speed
    titles: list[str] = Field(default_factory=list)  # of the articles the prompt shows, best first


class SearchEvent(Event):
    """Streamed: a retrieval ran; the titles it found, best first, or the error."""

    query: str
    titles: list[str]
    error: str | None = None


class _AgentMeta(WorkflowMeta, ABCMeta):
    """A workflow that is also a ``PromptMixin`` (an ABC)."""


class RagAgent(Workflow, PromptMixin, metaclass=_AgentMeta):
    """Retrieve → budget → answer with citations. See the module docstring.

    Args:
        llm: a function-calling LLM (``OpenAILike`` in production, a scripted fake in tests).
        retrieve_tool: the ``retrieve_context`` ``FunctionTool``.
        budget: the context budget hook.
        context_window / max_output_tokens: of ``llm``.
        tool_mode: ``auto`` or ``forced`` (see module docstring).
        inline_tool_results: send tool traffic as plain text (for templates that drop tool messages).
        max_tool_rounds: most retrieval rounds per question (auto mode).
        max_queries: most searches per question in forced mode (the question + planned queries).
        fallback_llm / fallback_context_window / fallback_max_output_tokens: a larger-context model
            for the answer when the budget says the material cannot fit usefully.
        memory: per-session conversation store.
        retries / backoff_s: retries of a failing endpoint (exponential backoff), then a clear error.
        relevance_gate: run the guard profile's gates before the answer (``shares_terms``: no article shown
            shares a content word with the question; ``missing_identifiers``: the question names something such
            as ``io_method`` or ``--incremental`` that no retrieved article mentions); False: skip them.
        plan: forced mode only: ``always`` asks the model for extra search queries before searching (one
            short LLM call), ``never`` searches the question alone and goes straight to the answer.
        deadline: an answer-time target; its prompt-token cap is enforced by the budget as a tighter window.
        max_prompt_tokens: a fixed prompt-token cap, enforced the same way (the tighter cap wins).
        answer_check: before the answer, ask the model (one token, on the answer's cached articles) whether
            the articles shown answer the question; answer "not found" unless YES is likelier than NO by this
            many log-odds, when the guard profile has the ``answer_check`` gate. Needs llama.cpp's server
            (``logit_bias`` by token string); None: no check.
        guards: the guard profile's chain (:class:`ragidx.agent.guards.GuardChain`) that judges the reply and
            runs the gates; default: ``small-model`` (every rule).
        system_prompt / prompts: the prompts (:mod:`ragidx.agent.prompts`), by name; replaceable later through
            ``update_prompts`` (LlamaIndex's ``PromptMixin``); ``get_prompts()`` lists them with the rewriter's.
        rewriter: what a turn searches for, given the conversation (:mod:`ragidx.agent.rewrite`). In forced
            mode it is the first search (default: :class:`~ragidx.agent.rewrite.HeuristicRewriter`); in auto mode
            a follow-up it rewrites is searched once before the model decides (default: none, the model reads
            the conversation and writes its own queries).

    Example:
        >>> RagAgent(llm, tool, ContextBudget(), context_window=8192).tool_mode   # doctest: +SKIP
        'auto'
    """

    def __init__(
        self,
        llm: Any,
        retrieve_tool: FunctionTool,
        budget: ContextBudget,
        *,
        context_window: int,
        max_output_tokens: int = 512,
        tool_mode: ToolMode = "auto",
        inline_tool_results: bool = False,
        max_tool_rounds: int = 3,
        max_queries: int = 3,
        fallback_llm: Any | None = None,
        fallback_context_window: int | None = None,
        fallback_max_output_tokens: int | None = None,
        memory: SessionMemory | None = None,
        system_prompt: str = SYSTEM_PROMPT,
        prompts: Mapping[str, BasePromptTemplate] | None = None,
        rewriter: QueryRewriter | None = None,
        retries: int = 2,
        backoff_s: float = 1.0,
        relevance_gate: bool = True,
        plan: PlanMode = "always",
        deadline: AnswerDeadline | None = None,
        max_prompt_tokens: int | None = None,
        answer_check: float | None = None,
        guards: GuardChain | None = None,
        timeout: float | None = 1800.0,
    ) -> None:
        super().__init__(timeout=timeout)
        if max_tool_rounds < 1:
            raise ValueError("max_tool_rounds must be >= 1")
        self.llm = llm
        self.retrieve_tool = retrieve_tool
        self.budget = budget
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens
        self.tool_mode = tool_mode
        self.inline_tool_results = inline_tool_results
        self.max_tool_rounds = max_tool_rounds
        self.max_queries = max_queries
        self.fallback_llm = fallback_llm
        self.fallback_context_window = fallback_context_window
        self.fallback_max_output_tokens = fallback_max_output_tokens or max_output_tokens
        self.memory = memory or SessionMemory()
        self.prompts = default_prompts()
        self.prompts["system_prompt"] = PromptTemplate(system_prompt)
        self.rewriter = rewriter if rewriter is not None or tool_mode == "auto" else HeuristicRewriter()
        self.retries = retries
        self.backoff_s = backoff_s
        self.relevance_gate = relevance_gate
        self.plan = plan
        self.deadline = deadline
        self.max_prompt_tokens = max_prompt_tokens
        self.answer_check = answer_check
        self.guards = guards or GuardChain.from_profile("small-model", title=prompt_title)
        self._learned_shrink: dict[str, int] = {}
        self._update_prompts(dict(prompts or {}))

    # --- prompts (LlamaIndex's PromptMixin) ----------------------------------------------------------
    def _get_prompts(self) -> PromptDictType:
        """The agent's prompts and its rewriter's (e.g. ``condense_prompt``), under one flat set of names."""
        own: PromptDictType = self.rewriter.get_prompts() if isinstance(self.rewriter, PromptMixin) else {}
        return {**self.prompts, **own}

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        checked(prompts_dict, self._get_prompts())
        self.prompts.update({k: v for k, v in prompts_dict.items() if k in self.prompts})
        if isinstance(self.rewriter, PromptMixin):
            self.rewriter.update_prompts({k: v for k, v in prompts_dict.items() if k not in self.prompts})

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    # --- steps ---------------------------------------------------------------------------------------
    @step
    async def start(self, ctx: Context, ev: StartEvent) -> DecideEvent | ToolCallsEvent:
        question = str(ev.get("question", "")).strip()
        if not question:
            raise ValueError("ask() needs a non-empty question")
        session_id = ev.get("session_id")
        history = self.memory.get(session_id)
        if self.tool_mode == "forced":
            # A small local model shown its earlier answers copied one into the next answer ("To protect cells
            # … 1. Click where you want the table of contents"): it sees the conversation's questions only.
            seen, results = earlier_questions(history), {}
        else:
            kept = self.memory.results(session_id)
            seen, results = history, kept if kept is not None else tool_results(history)  # from outside: read once
        messages = [*seen, ChatMessage(role=MessageRole.USER, content=question)]
        turn = Turn.start(
            question, session_id, messages, llm=self.llm, window=self.context_window, max_out=self.max_output_tokens
        )
        turn.conversation.history, turn.conversation.results = history, results
        turn.model.shrink = self._learned_shrink.get(model_name(self.llm), 0)
        if self.budget.cap is not None:
            # The cap limits later searches of a turn by the room its prompt has left; a new question's first
            # search must not inherit the last answer's (a full 1K-token prompt left room for one article).
            self.budget.cap.set(None)
        # A follow-up ("And how do I update it?") is searched as the rewriter makes it stand alone.
        query = await self.rewriter.arewrite(history, question) if self.rewriter is not None else question
        if self.tool_mode == "forced":
            turn.conversation.searched = query
            if self.plan == "never":
                return ToolCallsEvent(turn=turn, calls=[self._retrieve_call(query)])
            return ToolCallsEvent(turn=turn, calls=await self._planned_searches(ctx, turn, query))
        if query != question:  # auto mode: the rewritten follow-up first, then the model searches as it likes
            turn.conversation.searched = query
            return ToolCallsEvent(turn=turn, calls=[self._retrieve_call(query)])
        return DecideEvent(turn=turn)

    async def _planned_searches(self, ctx: Context, turn: Turn, question: str) -> list[ToolSelection]:
        """Forced mode: the question itself (``question``: as a follow-up reads it), plus the model's planned
        queries, all searched in one round.

        Planning happens on a short prompt (no articles yet), so a slow local model pays for one long
        prompt per question (the answer), not one per decision; the first search is always the question,
        so grounding never depends on a weak model's query.
        """
        forced = {"type": "function", "function": {"name": PLAN_TOOL.metadata.name}}
        try:
            response = await self._send(
                ctx, turn, [PLAN_TOOL], self.prompts["plan_prompt"].format(),
                lambda fit: self._chat(turn, fit, tools=[PLAN_TOOL], tool_choice=forced),
            )  # fmt: skip
            calls = turn.model.llm.get_tool_calls_from_response(response, error_on_no_tool_call=False)
            planned = calls[0].tool_kwargs.get("queries", []) if calls else []
        except (LLMUnavailableError, LLMRequestError):
            raise
        except Exception as exc:  # an unreadable plan is not fatal: search with the question alone
            logger.warning("could not read the search plan (%s); searching with the question only", exc)
            planned = []
        queries = [question]
        for q in planned if isinstance(planned, list) else []:
            q = str(q).strip()
            if q and _norm(q) not in {_norm(x) for x in queries} and len(queries) < self.max_queries:
                queries.append(q)
        return [self._retrieve_call(q) for q in queries]

    @step
    async def decide(self, ctx: Context, ev: DecideEvent) -> ToolCallsEvent | AnswerEvent:
        turn = ev.turn
        if turn.searches.rounds >= self.max_tool_rounds:
            return AnswerEvent(turn=turn)
        if self.tool_mode == "auto":
            tools = [self.retrieve_tool]
            response = await self._send(
                ctx, turn, tools, None, lambda fit: self._chat(turn, fit, tools=tools, tool_choice="auto")
            )
            calls = turn.model.llm.get_tool_calls_from_response(response, error_on_no_tool_call=False)
            calls = [c for c in calls if c.tool_name == self.retrieve_tool.metadata.name]
            return ToolCallsEvent(turn=turn, calls=calls) if calls else AnswerEvent(turn=turn)
        return AnswerEvent(turn=turn)  # forced mode searched everything it planned in one round

    @step
    async def run_tools(self, ctx: Context, ev: ToolCallsEvent) -> DecideEvent:
        turn = ev.turn
        turn.searches.rounds += 1
        blocks: list[Any] = [
            ToolCallBlock(tool_call_id=c.tool_id, tool_name=c.tool_name, tool_kwargs=c.tool_kwargs) for c in ev.calls
        ]
        turn.conversation.messages.append(ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks))
        for call in ev.calls:
            message, result = await self._run_tool(turn, call)
            turn.conversation.messages.append(message)
            if result is not None:
                turn.conversation.results[call.tool_id] = result
            ctx.write_event_to_stream(
                SearchEvent(
                    query=str(call.tool_kwargs.get("query", "")),
                    titles=[a.title or a.kb_id for a in result.articles] if result else [],
                    error=result.error if result else None,
                )
            )
        return DecideEvent(turn=turn)

    @step
    async def answer(self, ctx: Context, ev: AnswerEvent) -> StopEvent:
        turn = ev.turn
        # Whole, as retrieved: what the gate checks the question's names against.
        retrieved = [
            a.to_dict() for r in turn.conversation.results.values() for a in r.articles if not a.metadata.get(SEE_ABOVE)
        ]
        if not any(a["content"] for a in retrieved):
            return StopEvent(
                result=self._finish(turn, NOT_FOUND_TEXT, [], not_found=True, reason="the search found no article")
            )

        async def send(fit: Fit) -> tuple[str | None, list[dict[str, Any]]]:
            sources = [a.to_dict() for a in fit.articles]
            turn.gate.reason = self._gate(turn, sources, retrieved)
            if turn.gate.reason is None and (reply := await self._answer_check(turn, fit)) is not None:
                turn.gate.reason = self._gate(turn, sources, retrieved, reply)
            if turn.gate.reason is not None:
                logger.info("not asking the model for an answer: %s", turn.gate.reason)
                return None, sources
            return await self._stream_answer(ctx, turn, fit), sources

        # The instruction lists the articles the prompt shows, numbered as the inline transport numbers them.
        text, sources = await self._send(
            ctx,
            turn,
            None,
            lambda shown: _answer_prompt(turn.conversation.question, shown, self.prompts["answer_prompt"]),
            send,
        )
        if text is None:
            # The articles that were searched stay visible on the answer; none is cited.
            return StopEvent(
                result=self._finish(turn, NOT_FOUND_TEXT, sources, not_found=True, reason=turn.gate.reason)
            )
        turn.conversation.messages = [
            *turn.conversation.messages,
            ChatMessage(role=MessageRole.ASSISTANT, content=text),
        ]
        verdict = self.guards.review(turn.conversation.question, text, sources)
        turn.gate.fired.extend(verdict.fired)
        if verdict.reason is not None:
            logger.info("%s: answering not found", verdict.reason)
        answer = self._finish(turn, verdict.text, sources, not_found=verdict.not_found, reason=verdict.reason)
        answer.model_text = text
        return StopEvent(result=answer)

    # --- pieces ----------------------------------------------------------------------------------------
    def _retrieve_call(self, query: str) -> ToolSelection:
        return ToolSelection(
            tool_id=f"call_{uuid.uuid4().hex[:12]}",
            tool_name=self.retrieve_tool.metadata.name,
            tool_kwargs={"query": query},
        )

    async def _run_tool(self, turn: Turn, call: ToolSelection) -> tuple[ChatMessage, SearchResult | None]:
        """The tool message and its search result: the tool's ``raw_output``, or its JSON read once, here."""
        t0 = time.perf_counter()
        query = str(call.tool_kwargs.get("query", ""))
        turn.searches.queries.append(query)
        result: SearchResult | None
        try:
            if call.tool_name != self.retrieve_tool.metadata.name:
                raise ValueError(
                    f"unknown tool {call.tool_name!r}; the only tool is {self.retrieve_tool.metadata.name}"
                )
            output = await self.retrieve_tool.acall(**call.tool_kwargs)
            content = output.content
            raw = output.raw_output
            result = raw if isinstance(raw, SearchResult) else SearchResult.from_json(content)
            if output.is_error:
                turn.searches.tool_errors.append(content)
            elif result is not None and result.error:
                turn.searches.tool_errors.append(result.error)
        except Exception as exc:  # a tool failure becomes a message the model can read, never a crash
            logger.warning("tool %s failed: %s", call.tool_name, exc)
            result = SearchResult((), {"query": query}, f"{type(exc).__name__}: {exc}")
            content = result.to_json()
            turn.searches.tool_errors.append(f"{call.tool_name}: {type(exc).__name__}: {exc}")
        turn.usage.timings["retrieval"] += time.perf_counter() - t0
        kwargs = {"tool_call_id": call.tool_id, "name": call.tool_name}
        return ChatMessage(role=MessageRole.TOOL, content=content, additional_kwargs=kwargs), result

    async def _send(
        self,
        ctx: Context,
        turn: Turn,
        tools: Sequence[Any] | None,
        instruction: Instruction,
        send: Callable[[Fit], Awaitable[T]],
    ) -> T:
        """Budget, then send. The last resort: if the endpoint still answers that the prompt overflows (its
        tokenizer or chat template counts more than ours), budget once more for a window smaller by the
        endpoint's excess, remembered for later calls to the same model, and send again."""
        fit = await self._budgeted(ctx, turn, tools, instruction)
        try:
            return await send(fit)
        except ContextOverflowError as exc:
            # The endpoint counts `ratio` times what we count: scale the room for the prompt down by it.
            ratio = (exc.prompt_tokens / fit.tokens) if exc.prompt_tokens and fit.tokens else 1.15
            ratio = max(ratio, 1.02) * 1.02
            room = turn.model.window - turn.model.shrink - turn.model.max_out
            turn.model.shrink = turn.model.window - turn.model.max_out - int(room / ratio)
            self._learned_shrink[model_name(turn.model.llm)] = turn.model.shrink
            logger.warning(
                "the endpoint counts %.2fx our prompt tokens; budgeting a %d-token smaller window",
                ratio,
                turn.model.shrink,
            )
        return await send(await self._budgeted(ctx, turn, tools, instruction))

    async def _budgeted(self, ctx: Context, turn: Turn, tools: Sequence[Any] | None, instruction: Instruction) -> Fit:
        """Run the budget hook; keep the conversation it kept as the turn's; return what to send.

        Switches the rest of the turn to the fallback model when the primary window cannot hold the fixed
        prompt, or when the budget recommends it; the reason is recorded on the answer.
        """
        t0 = time.perf_counter()
        render = self._renderer(turn, instruction)
        try:
            fit = await self._fit(turn, tools, render)
        except ContextWindowTooSmallError as exc:
            if not self._switch_to_fallback(
                turn, f"the {turn.model.window}-token window cannot hold the prompt: {exc}"
            ):
                raise
            fit = await self._fit(turn, tools, render)
        if fit.report.fallback_recommended and self._switch_to_fallback(
            turn, fit.report.fallback_reason or "the budget recommended a larger window"
        ):
            turn.usage.reports.append(fit.report)
            fit = await self._fit(turn, tools, render)
        turn.conversation.messages = fit.conversation
        kept = {call_id(m) for m in fit.conversation}
        turn.conversation.results = {k: r for k, r in turn.conversation.results.items() if k in kept}
        turn.usage.reports.append(fit.report)
        turn.usage.timings["hook"] += time.perf_counter() - t0
        ctx.write_event_to_stream(
            BudgetReportEvent(
                report=fit.report.model_dump(mode="json"),
                call=_call_name(tools),
                tokens=fit.report.tokens_after,
                expected_s=self.deadline.speed.seconds_for(fit.report.tokens_after) if self.deadline else None,
                titles=[a.title or a.kb_id for a in fit.articles],
            )
        )
        return fit

    async def _fit(self, turn: Turn, tools: Sequence[Any] | None, render: Renderer) -> Fit:
        """The budget on the model's window, filling the prompt cap (answer-time deadline, fixed cap) where one
        is set and can hold the fixed prompt."""
        kwargs = {
            "tools": tools,
            "question": turn.conversation.question,
            "context_window": turn.model.window - turn.model.shrink,
            "max_output_tokens": turn.model.max_out,
        }
        if (cap := self._prompt_cap(turn)) is not None:
            try:
                return await self.budget.afit(
                    turn.conversation.messages, turn.conversation.results, render, prompt_cap=cap, **kwargs
                )
            except ContextWindowTooSmallError as exc:
                logger.info("the prompt cap (%d tokens) cannot hold the prompt (%s); using the window", cap, exc)
        return await self.budget.afit(turn.conversation.messages, turn.conversation.results, render, **kwargs)

    def _prompt_cap(self, turn: Turn) -> int | None:
        """The tighter of the fixed cap and the deadline's cap on prompt tokens (none on the fallback model)."""
        caps = [] if self.max_prompt_tokens is None else [self.max_prompt_tokens]
        if self.deadline is not None:
            caps.append(self.deadline.prompt_cap(time.perf_counter() - turn.usage.started))
        if not caps or turn.model.fallback_reason is not None:
            return None
        turn.model.prompt_cap = min(caps)
        return turn.model.prompt_cap

    def _switch_to_fallback(self, turn: Turn, reason: str) -> bool:
        if self.fallback_llm is None or turn.model.fallback_reason is not None:
            return False
        logger.warning("switching to the fallback model: %s", reason)
        turn.model.fallback_reason = reason
        turn.model.llm = self.fallback_llm
        turn.model.window = self.fallback_context_window or turn.model.window
        turn.model.max_out = self.fallback_max_output_tokens
        turn.model.shrink = self._learned_shrink.get(model_name(self.fallback_llm), 0)
        return True

    def _renderer(self, turn: Turn, instruction: Instruction) -> Renderer:
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

    async def _chat(self, turn: Turn, fit: Fit, *, tools: Sequence[Any], tool_choice: Any) -> Any:
        turn.usage.record(fit)
        t0 = time.perf_counter()
        try:
            response = await self._caller(turn).achat(fit.messages, tools=tools, tool_choice=tool_choice)
        finally:
            turn.usage.timings["llm"] += time.perf_counter() - t0
        turn.usage.completion_tokens += (usage(response) or {}).get("completion_tokens", 0)
        return response

    def _gate(self, turn: Turn, sources: Articles, retrieved: Articles, check_reply: str | None = None) -> str | None:
        """Why the model is not asked at all (the answer's ``not_found_reason``), or None: the profile's gates on
        the articles, or with ``check_reply`` its answer check's."""
        if not sources:
            return "no article found was relevant enough to show the model"
        asked = (
            turn.conversation.searched or turn.conversation.question
        )  # a follow-up's words may all be in the question before it
        inp = GateInput(asked, sources, retrieved, check_reply, turn.gate.check_log_odds, self.answer_check)
        only = (ANSWER_CHECK,) if check_reply is not None else RELEVANCE_GATES if self.relevance_gate else ()
        if (fired := self.guards.gate(inp, only=only)) is not None:
            turn.gate.fired.append(fired)
        return fired.reason if fired else None

    async def _answer_check(self, turn: Turn, fit: Fit) -> str | None:
        """The answer check: whether the model rates YES, "the articles shown answer the question", likelier
        than NO by ``answer_check`` log-odds. One token on the answer's prompt with the check in place of the
        answer instruction (shorter, so it fits wherever the answer's prompt fits); the server reuses the
        articles' cache for it and again for the answer. Both tokens get +100, so the reply is one of them,
        and YES ``-answer_check`` more: greedy decoding then picks YES exactly when its log-odds over NO reach
        the margin. Returns the model's reply for the profile's ``answer_check`` gate to judge; None (the model
        answers) without a check (or with the fallback model), or when the server refuses the call."""
        if self.answer_check is None or not self.guards.answer_check or turn.model.llm is not self.llm:
            return None
        messages = [
            *fit.messages[:-1],
            ChatMessage(
                role=MessageRole.USER, content=self.prompts["check_prompt"].format(question=turn.conversation.question)
            ),
        ]
        t0 = time.perf_counter()
        try:
            response = await self._caller(turn).achat(messages, **check_options(self.answer_check))
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

    async def _stream_answer(self, ctx: Context, turn: Turn, fit: Fit) -> str:
        turn.usage.record(fit)
        t0 = time.perf_counter()
        first: list[float] = []

        def on_delta(delta: str) -> None:
            if not first:
                first.append(time.perf_counter() - t0)
            ctx.write_event_to_stream(AnswerDeltaEvent(delta=delta))

        try:
            text = await self._caller(turn).astream(fit.messages, on_delta)
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

    def _caller(self, turn: Turn) -> ChatCaller:
        return ChatCaller(
            turn.model.llm, retries=self.retries, backoff_s=self.backoff_s, max_output_tokens=turn.model.max_out
        )

    def _finish(
        self, turn: Turn, text: str, sources: list[dict[str, Any]], *, not_found: bool, reason: str | None = None
    ) -> Answer:
        """The turn's ``Answer``, kept in the session's memory; ``reason``: why it is "not found" when a gate or a
        check decided so."""
        citations: list[Citation]
        if not_found:
            text, citations, method = NOT_FOUND_TEXT, [], "none"
        else:
            text, citations, method = resolve_citations(text, sources, question=turn.conversation.question)
        self._remember(turn, text)
        return turn.answer(
            text, citations, method, sources, not_found=not_found, reason=reason, guard_profile=self.guards.describe()
        )

    def _remember(self, turn: Turn, text: str) -> None:
        """The exchange in the session's memory: in forced mode the question and the answer only (the next turn
        shows the questions and searches afresh), else the whole conversation with its search results."""
        c = turn.conversation
        if c.session_id is None:
            return
        if self.tool_mode == "forced":
            exchange = [
                ChatMessage(role=r, content=t)
                for r, t in ((MessageRole.USER, c.question), (MessageRole.ASSISTANT, text))
            ]
            self.memory.set(c.session_id, [*c.history, *exchange], {})
            return
        answered = c.messages and c.messages[-1].role == MessageRole.ASSISTANT
        final = c.messages if answered else [*c.messages, ChatMessage(role=MessageRole.ASSISTANT, content=text)]
        self.memory.set(c.session_id, final, c.results)


# --- helpers -------------------------------------------------------------------------------------------
Articles = list[dict[str, Any]]
"""Articles as the tool's JSON writes them (the answer's ``articles``)."""
Instruction = str | Callable[[Sequence[Article]], str] | None
"""A step's closing instruction, or a function of the articles the prompt shows (the answer's sources)."""


def _call_name(tools: Sequence[Any] | None) -> str:
    """Which LLM call of the turn a budget run is for: ``answer`` (no tools), ``plan`` or ``decide``."""
    if not tools:
        return "answer"
    return "plan" if tools[0].metadata.name == PLAN_TOOL.metadata.name else "decide"


def _norm(query: str) -> str:
    return " ".join(re.findall(r"\w+", query.lower()))
