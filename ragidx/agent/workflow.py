"""The agent: a LlamaIndex ``Workflow`` that retrieves several times, budgets every call, answers with citations.

Steps: ``start`` → (``decide`` ⇄ ``run_tools``)* → ``answer``. The context budget hook
(:class:`ragidx.budget.ContextBudget`) runs before **every** LLM call, sees all tool results of the
turn, and returns the messages that are actually sent; the agent continues with them.

Two tool protocols, one code path (``tool_mode``):

- ``auto``: the model sees ``retrieve_context`` with ``tool_choice="auto"`` and calls it as it likes
  (OpenAI, OpenRouter, vLLM with a tool parser).
- ``forced``: for models that only follow a *forced named* tool call (llama-cpp-python's server, where
  ``auto`` returns empty replies and ``required`` fails). On a short prompt the model must call
  ``plan_searches`` (its JSON schema constrains the output to a list of queries, one per part of the
  question); the question itself and those queries are searched in one round, then the model answers.
  One long prompt per question, which is what a slow CPU model can afford.

A follow-up question is searched as the turn's :class:`~ragidx.agent.rewrite.QueryRewriter` makes it stand
alone; the prompts are templates in :mod:`ragidx.agent.prompts`, replaceable with ``update_prompts``; the
budgeted model calls are :class:`~ragidx.agent.calls.TurnCalls`; a turn's state is a typed
:class:`~ragidx.agent.turn.Turn`.

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
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixin, PromptMixinType
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context, StartEvent, StopEvent, Workflow, step
from workflows.workflow import WorkflowMeta

from ragidx.agent.answer import NOT_FOUND_TEXT, Answer, Citation
from ragidx.agent.calls import PLAN_TOOL, TurnCalls
from ragidx.agent.citations import resolve_citations
from ragidx.agent.events import (
    AnswerDeltaEvent,
    AnswerEvent,
    BudgetReportEvent,
    DecideEvent,
    SearchEvent,
    ToolCallsEvent,
)
from ragidx.agent.guards import GateInput, GuardChain
from ragidx.agent.guards.gates import ANSWER_CHECK, RELEVANCE_GATES
from ragidx.agent.memory import SessionMemory
from ragidx.agent.prompts import SYSTEM_PROMPT, checked, default_prompts
from ragidx.agent.rendering import _answer_prompt, prompt_title
from ragidx.agent.rewrite import HeuristicRewriter, QueryRewriter, earlier_questions
from ragidx.agent.turn import Turn
from ragidx.article import SEE_ABOVE, Article, SearchResult
from ragidx.budget import ContextBudget, Fit
from ragidx.budget.messages import tool_results
from ragidx.providers.chat import LLMRequestError, LLMUnavailableError, model_name
from ragidx.providers.speed import AnswerDeadline
from ragidx.retrieval.flash.conversation import flash_conversation

__all__ = [
    "AnswerDeltaEvent",
    "BudgetReportEvent",
    "LLMRequestError",
    "LLMUnavailableError",
    "RagAgent",
    "SearchEvent",
    "SessionMemory",
]

logger = logging.getLogger(__name__)

ToolMode = Literal["auto", "forced"]
PlanMode = Literal["always", "never"]


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
        self.max_tool_rounds = max_tool_rounds
        self.max_queries = max_queries
        self.memory = memory or SessionMemory()
        self.prompts = default_prompts()
        self.prompts["system_prompt"] = PromptTemplate(system_prompt)
        self.rewriter = rewriter if rewriter is not None or tool_mode == "auto" else HeuristicRewriter()
        self.relevance_gate = relevance_gate
        self.plan = plan
        self.answer_check = answer_check
        self.guards = guards or GuardChain.from_profile("small-model", title=prompt_title)
        self.calls = TurnCalls(
            llm, budget, prompts=self.prompts, inline_tool_results=inline_tool_results, fallback_llm=fallback_llm,
            fallback_context_window=fallback_context_window,
            fallback_max_output_tokens=fallback_max_output_tokens or max_output_tokens, retries=retries,
            backoff_s=backoff_s, deadline=deadline, max_prompt_tokens=max_prompt_tokens,
        )  # fmt: skip
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
            # Forced mode shows the conversation's questions only: earlier answers in the prompt get copied into
            # the next answer by a model that follows its prompt closely, and the turn searches afresh anyway.
            seen, results = earlier_questions(history), {}
        else:
            kept = self.memory.results(session_id)
            seen, results = history, kept if kept is not None else tool_results(history)  # from outside: read once
        messages = [*seen, ChatMessage(role=MessageRole.USER, content=question)]
        turn = Turn.start(
            question, session_id, messages, llm=self.llm, window=self.context_window, max_out=self.max_output_tokens
        )
        turn.conversation.history, turn.conversation.results = history, results
        turn.model.shrink = self.calls.learned_shrink.get(model_name(self.llm), 0)
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
            response = await self.calls.send(
                ctx.write_event_to_stream, turn, [PLAN_TOOL], self.prompts["plan_prompt"].format(),
                lambda fit: self.calls.chat(turn, fit, tools=[PLAN_TOOL], tool_choice=forced),
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
            response = await self.calls.send(
                ctx.write_event_to_stream,
                turn,
                tools,
                None,
                lambda fit: self.calls.chat(turn, fit, tools=tools, tool_choice="auto"),
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
        retrieved = [a for r in turn.conversation.results.values() for a in r.articles if not a.metadata.get(SEE_ABOVE)]
        if not any(a.content for a in retrieved):
            return StopEvent(
                result=self._finish(turn, NOT_FOUND_TEXT, [], not_found=True, reason="the search found no article")
            )

        async def send(fit: Fit) -> tuple[str | None, list[Article]]:
            sources = list(fit.articles)
            turn.gate.reason = self._gate(turn, sources, retrieved)
            margin = self.answer_check if self.guards.answer_check and turn.gate.reason is None else None
            if margin is not None and (reply := await self.calls.answer_check(turn, fit, margin)) is not None:
                turn.gate.reason = self._gate(turn, sources, retrieved, reply)
            if turn.gate.reason is not None:
                logger.info("not asking the model for an answer: %s", turn.gate.reason)
                return None, sources
            return await self.calls.stream_answer(ctx.write_event_to_stream, turn, fit), sources

        # The instruction lists the articles the prompt shows, numbered as the inline transport numbers them.
        instruction = lambda shown: _answer_prompt(turn.conversation.question, shown, self.prompts["answer_prompt"])  # noqa: E731
        text, sources = await self.calls.send(ctx.write_event_to_stream, turn, None, instruction, send)
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
            # The conversation reaches a flash rerank at the end of the chain (ragidx.retrieval.flash.conversation).
            with flash_conversation(turn.conversation.history):
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

    def _finish(
        self, turn: Turn, text: str, sources: Sequence[Article], *, not_found: bool, reason: str | None = None
    ) -> Answer:
        """The turn's ``Answer``, kept in the session's memory; ``reason``: why it is "not found" when a gate or a
        check decided so."""
        citations: list[Citation]
        if not_found:
            text, citations, method = NOT_FOUND_TEXT, [], "none"
        else:
            text, citations, method = resolve_citations(text, sources, question=turn.conversation.question)
        self._remember(turn, text)
        shown = [a.to_dict() for a in sources]  # the answer's articles: the tool's JSON shape
        return turn.answer(
            text, citations, method, shown, not_found=not_found, reason=reason, guard_profile=self.guards.describe()
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
Articles = Sequence[Article]
"""The articles a step shows or retrieved, in the order the prompt numbers them."""


def _norm(query: str) -> str:
    return " ".join(re.findall(r"\w+", query.lower()))
