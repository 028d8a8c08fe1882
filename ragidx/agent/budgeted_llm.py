"""BudgetedLLM: ragidx's context budget before every LLM call of LlamaIndex's own agents.

LlamaIndex's ``FunctionAgent`` / ``AgentWorkflow`` / ``ReActAgent`` send the whole conversation, tool
results included, on every call, and nothing keeps it inside the model's window. This wrapper is an LLM
that runs :class:`~ragidx.budget.ContextBudget` on exactly the messages (and tool schemas) about to be
sent, then hands the budgeted messages to the wrapped LLM: results of ragidx's ``retrieve_context`` tool
are deduplicated across calls by kb_id and compressed in proportion to their rank, old turns are
summarized, and the prompt never exceeds ``context_window - max_output_tokens`` by the budget's count
(its safety margin covers a tokenizer that differs from the model's).

Context in the prompt: LlamaIndex's response synthesizers and chat engines (``RetrieverQueryEngine``,
``CondensePlusContextChatEngine``, ...) send retrieved text inside a prompt template, not as tool results. When
a message holds the context block of a recognised template (``ragidx.budget.prompt_context``: LlamaIndex's text
QA, tree-summarize and refine templates, chat and text, and the condense-plus-context system message; pass
``context_markers`` for templates of your own), that block is budgeted as one article (``kb_id``
``"prompt-context"`` in the report): compressed guided by the question (its ``Query:`` line, else the last
user message) when the prompt passes the trigger, in the message where it was, the template's text around it
and the other messages kept (a chat engine's history may be folded or dropped, as in an agent's conversation).
To make many small calls one (a 1,024-token window split into 19 refine calls), budget the nodes before the
synthesizer with :class:`~ragidx.budget.postprocessor.ContextBudgetPostprocessor`. A prompt that still cannot
fit (no block recognised: a condense prompt's long chat history, say) has the middle of its largest non-system
message cut (its start and end kept), with a warning in the log and ``middle_truncated`` in the report; only
when even that cannot make it fit (the system prompt or the tool schemas alone are too large) is
``ContextWindowTooSmallError`` raised. An overflowing prompt is never sent.

With a ``fallback_llm`` (a larger-window model) each call is budgeted for the wrapped LLM first; when the
budget recommends the larger window (``BudgetReport.fallback_recommended``: the best article would be cut
below its useful minimum, or articles dropped) or the fixed prompt cannot fit, the call is budgeted again for
the fallback's window and sent to the fallback. The decision is made per call, so an agent whose material
shrinks (a summarized history) goes back to the first model. ``routes`` says, per call, which model answered
and why. Responses carry the route (``additional_kwargs["ragidx_route"]``), so tool calls are read by the
parser of the model that wrote them.

The retrieval cap: the budget (``ContextBudget(cap=...)``) sets after every call how many articles the next
search may return, by the room left under its target (the proactive top-k of small windows);
``Engine.retrieve_context_tool()`` reads the same cap as ``Engine.budgeted_llm(...)`` sets.

Why an LLM wrapper: it sees every call, whatever the agent, its memory or its steps do (a memory block
only holds chat history, not the tool results of the current run; a workflow step cannot reach inside
``FunctionAgent``'s own loop). It delegates tool-call parsing to the wrapped LLM, so it works with any
function-calling LLM.

Example:
    >>> llm = BudgetedLLM(OpenAI(model="gpt-4o-mini"), ContextBudget())          # doctest: +SKIP
    >>> agent = FunctionAgent(tools=[engine.retrieve_context_tool()], llm=llm)  # doctest: +SKIP
    >>> llm.reports[-1].tokens_after                                            # doctest: +SKIP
    >>> big = BudgetedLLM(small_llm, budget, fallback_llm=large_llm)            # doctest: +SKIP
    >>> big.routes[-1]                        # None: the wrapped LLM; else why the fallback answered  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import logging
from collections.abc import AsyncGenerator, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
    TextBlock,
)
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.tools import BaseTool
from pydantic import PrivateAttr

from ragidx.article import ARTICLE_RANK, NORMALIZED_RANK, Article, SearchResult
from ragidx.budget import ContextBudget, Fit
from ragidx.budget.messages import call_id, message_text, tool_results, with_results
from ragidx.budget.prompt_context import (
    PROMPT_CONTEXT_MARKERS,
    ContextMarker,
    PromptContext,
    find_context,
    truncate_middle,
)
from ragidx.budget.report import BudgetReport, ContextBudgetEvent, ContextWindowTooSmallError
from ragidx.sync_call import run_sync

__all__ = ["ROUTE_KEY", "BudgetedLLM"]

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

ROUTE_KEY = "ragidx_route"
"""``ChatResponse.additional_kwargs`` key: ``"fallback"`` on responses of the fallback model, else absent."""
PROMPT_CONTEXT_ID = "prompt-context"
"""``kb_id`` of the context block of a prompt in a ``BudgetReport`` (see "Context in the prompt" above)."""
_HOST = "ragidx_context_host"
_MIN_CUT_TOKENS = 16


@dataclass(frozen=True)
class _Route:
    """Where one call goes: the LLM, the budgeted messages, and why the fallback (None: the wrapped LLM)."""

    llm: FunctionCallingLLM
    messages: list[ChatMessage]
    fallback_reason: str | None


class BudgetedLLM(FunctionCallingLLM):
    """A function-calling LLM that budgets every prompt before the wrapped LLM sees it.

    Args:
        llm: the LLM that answers (its ``metadata.context_window`` and ``num_output`` set the budget).
        budget: the context budget (``Engine.budgeted_llm`` builds it from the settings).
        context_window / max_output_tokens: override the wrapped LLM's metadata.
        fallback_llm: a larger-window model for the calls the budget says need it (see the module docstring).
        fallback_context_window / fallback_max_output_tokens: override the fallback's metadata.
        context_markers: the context blocks of prompt templates to recognise (default
            ``ragidx.budget.prompt_context.PROMPT_CONTEXT_MARKERS``, LlamaIndex's own).

    Attributes:
        reports: one :class:`~ragidx.budget.report.BudgetReport` per call, in order (the report of the budget
            actually sent: the fallback's when it answered).
        routes: per call, ``None`` when the wrapped LLM answered, else why the fallback did.

    Example:
        >>> BudgetedLLM(llm, ContextBudget()).metadata.context_window  # doctest: +SKIP
        8192
    """

    _llm: FunctionCallingLLM = PrivateAttr()
    _budget: ContextBudget = PrivateAttr()
    _window: int = PrivateAttr()
    _max_out: int = PrivateAttr()
    _reports: list[BudgetReport] = PrivateAttr(default_factory=list)
    _fallback: FunctionCallingLLM | None = PrivateAttr(default=None)
    _fallback_window: int = PrivateAttr(default=0)
    _fallback_max_out: int = PrivateAttr(default=0)
    _routes: list[str | None] = PrivateAttr(default_factory=list)
    _markers: tuple[ContextMarker, ...] = PrivateAttr(default=PROMPT_CONTEXT_MARKERS)

    def __init__(
        self,
        llm: FunctionCallingLLM,
        budget: ContextBudget,
        *,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        fallback_llm: FunctionCallingLLM | None = None,
        fallback_context_window: int | None = None,
        fallback_max_output_tokens: int | None = None,
        context_markers: Sequence[ContextMarker] | None = None,
    ) -> None:
        super().__init__()
        self._llm = llm
        self._budget = budget
        self._markers = tuple(context_markers) if context_markers is not None else PROMPT_CONTEXT_MARKERS
        meta = llm.metadata
        self._window = context_window or meta.context_window
        self._max_out = max_output_tokens or meta.num_output
        self._reports = []
        self._routes = []
        self._fallback = fallback_llm
        if fallback_llm is not None:
            self._fallback_window = fallback_context_window or fallback_llm.metadata.context_window
            self._fallback_max_out = fallback_max_output_tokens or fallback_llm.metadata.num_output
            if budget.fallback_context_window is None or budget.fallback_context_window < self._fallback_window:
                # The budget recommends the fallback only when it knows a larger window is there. A copy: the
                # caller's budget stays as it was; cap, memory and compressor are shared on purpose.
                self._budget = copy.copy(budget)
                self._budget.fallback_context_window = self._fallback_window

    @classmethod
    def class_name(cls) -> str:
        return "BudgetedLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return self._llm.metadata.model_copy(update={"context_window": self._window, "num_output": self._max_out})

    @property
    def reports(self) -> list[BudgetReport]:
        return self._reports

    @property
    def routes(self) -> list[str | None]:
        return self._routes

    @property
    def fallback_llm(self) -> FunctionCallingLLM | None:
        return self._fallback

    @property
    def budget_memory(self) -> Any:
        """The budget's ``ConversationMemory`` (folds earlier turns when the conversation grows)."""
        return self._budget.memory

    @property
    def budget_memory_llm(self) -> Any | None:
        """The LLM that writes memory summaries (``Settings.memory_summary="llm"``); None: extractive."""
        return self._budget.memory.llm

    # --- the budget ---------------------------------------------------------------------------------
    async def abudget(self, messages: Sequence[ChatMessage], tools: Sequence[Any] | None = None) -> list[ChatMessage]:
        """The messages that will be sent for this call: the system messages first, then the conversation
        with its search results (read once) budgeted and written back as JSON (for the fallback's window
        when the call goes there)."""
        return (await self._aroute(messages, tools)).messages

    def budget(self, messages: Sequence[ChatMessage], tools: Sequence[Any] | None = None) -> list[ChatMessage]:
        """``abudget`` from synchronous code."""
        sent: list[ChatMessage] = run_sync(self.abudget(messages, tools))
        return sent

    async def _aroute(self, messages: Sequence[ChatMessage], tools: Sequence[Any] | None = None) -> _Route:
        """Budget for the wrapped LLM; switch this call to the fallback when the budget says so."""
        reason: str | None = None
        try:
            primary: Fit | None = await self._afit(messages, tools, self._window, self._max_out)
        except ContextWindowTooSmallError as exc:
            if self._fallback is None or self._fallback_window <= self._window:
                primary = self._cut_middle(messages, tools, self._window, self._max_out, exc)
            else:
                primary, reason = None, f"the {self._window}-token window cannot hold the prompt: {exc}"
        if primary is not None and primary.report.fallback_recommended and self._fallback is not None:
            reason = primary.report.fallback_reason or "the budget recommended a larger window"
        if reason is None or self._fallback is None:
            assert primary is not None  # no reason: the first budget succeeded
            self._reports.append(primary.report)
            self._routes.append(None)
            return _Route(self._llm, primary.messages, None)
        logger.warning("this call goes to the fallback model: %s", reason)
        try:
            chosen = await self._afit(messages, tools, self._fallback_window, self._fallback_max_out)
        except ContextWindowTooSmallError as exc:
            chosen = self._cut_middle(messages, tools, self._fallback_window, self._fallback_max_out, exc)
        self._reports.append(chosen.report)
        self._routes.append(reason)
        return _Route(self._fallback, chosen.messages, reason)

    async def _afit(
        self, messages: Sequence[ChatMessage], tools: Sequence[Any] | None, window: int, max_out: int
    ) -> Fit:
        """The budget on ``messages``: their search results (an agent's tool results; the system messages are
        sent first), else the context block of a recognised template when the prompt has one."""
        system = [m for m in messages if m.role == MessageRole.SYSTEM]
        rest = [m for m in messages if m.role != MessageRole.SYSTEM]
        results = tool_results(rest)
        found = None if any(r.articles for r in results.values()) else find_context(messages, self._markers)
        if found is not None:
            return await self._afit_context(messages, found, tools, window, max_out)

        def render(conversation: Sequence[ChatMessage], sent: Mapping[str, SearchResult], _: Any) -> list[ChatMessage]:
            return [*system, *with_results(conversation, sent, results)]

        return await self._budget.afit(
            rest, results, render, tools=tools, context_window=window, max_output_tokens=max_out
        )

    async def _afit_context(
        self,
        messages: Sequence[ChatMessage],
        found: PromptContext,
        tools: Sequence[Any] | None,
        window: int,
        max_out: int,
    ) -> Fit:
        """The budget on a prompt whose context block a template put in ``messages[found.index]``: the block is
        one article (rank 0) the budget compresses, guided by the question, in the message where it was; the
        other messages are the conversation around it (a chat engine's history may be folded or dropped)."""
        host = messages[found.index]
        kwargs = copy.deepcopy(host.additional_kwargs)
        skeleton = ChatMessage(role=host.role, content=found.host_text(""), additional_kwargs={**kwargs, _HOST: True})
        call = ChatMessage(role=MessageRole.TOOL, content="", additional_kwargs={"tool_call_id": PROMPT_CONTEXT_ID})
        conversation = [*messages[: found.index], skeleton, *messages[found.index + 1 :], call]
        block = Article(PROMPT_CONTEXT_ID, "", "", found.block, metadata={NORMALIZED_RANK: 0.0, ARTICLE_RANK: 0})

        def render(kept: Sequence[ChatMessage], sent: Mapping[str, SearchResult], _: Any) -> list[ChatMessage]:
            shown = sent.get(PROMPT_CONTEXT_ID) if any(call_id(m) == PROMPT_CONTEXT_ID for m in kept) else None
            text = shown.articles[0].content if shown is not None and shown.articles else ""
            out = []
            for m in kept:
                if m.additional_kwargs.get(_HOST):
                    out.append(ChatMessage(role=m.role, content=found.host_text(text), additional_kwargs=kwargs))
                elif call_id(m) != PROMPT_CONTEXT_ID:
                    out.append(m)
            return out

        return await self._budget.afit(
            conversation,
            {PROMPT_CONTEXT_ID: SearchResult((block,))},
            render,
            tools=tools,
            question=found.question,
            context_window=window,
            max_output_tokens=max_out,
        )

    def _cut_middle(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[Any] | None,
        window: int,
        max_out: int,
        error: ContextWindowTooSmallError,
    ) -> Fit:
        """The last resort when the budget cannot fit the prompt (no context block it could compress): the
        middle of the largest text message that is not a system message is cut (``truncate_middle``) until the
        prompt fits. Raises ``error`` when even that cannot fit it (the system prompt or tools alone are too
        large): an overflowing prompt is never sent."""
        limits = self._budget.limits(window, max_output_tokens=max_out)
        acc = self._budget.accountant
        before = acc.count_prompt(messages, tools=tools)
        texts = [
            i
            for i, m in enumerate(messages)
            if m.role != MessageRole.SYSTEM and m.blocks and all(isinstance(b, TextBlock) for b in m.blocks)
        ]
        if not texts:
            raise error
        i = max(texts, key=lambda k: acc.count_message(messages[k]))
        text, sent, total = message_text(messages[i]), list(messages), before
        keep = acc.tokens.count(text) - (before - limits.hard_limit)
        while total > limits.hard_limit:
            if keep < _MIN_CUT_TOKENS:
                raise error
            kwargs = copy.deepcopy(messages[i].additional_kwargs)
            sent[i] = ChatMessage(
                role=messages[i].role, content=truncate_middle(text, keep, acc.tokens), additional_kwargs=kwargs
            )
            total = acc.count_prompt(sent, tools=tools)
            keep -= max(1, total - limits.hard_limit)
        report = BudgetReport.of(limits, tokens_before=before, tokens_after=total, path=["middle_truncated"])
        logger.warning(
            "context budget: no context block of a known template in the prompt (ragidx.budget.prompt_context); "
            "cut the middle of its largest message (%s, %d of its tokens kept) to fit: %d -> %d tokens of %d",
            messages[i].role.value,
            acc.tokens.count(message_text(sent[i])),
            before,
            total,
            window,
        )
        dispatcher.event(ContextBudgetEvent(report=report))
        return Fit(sent, list(messages), [], total, report, True)

    def _route(self, messages: Sequence[ChatMessage], tools: Sequence[Any] | None = None) -> _Route:
        route: _Route = run_sync(self._aroute(messages, tools))
        return route

    # --- chat ----------------------------------------------------------------------------------------
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        r = self._route(messages)
        return _tagged(r.llm.chat(r.messages, **kwargs), r)

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        r = await self._aroute(messages)
        return _tagged(await r.llm.achat(r.messages, **kwargs), r)

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        r = self._route(messages)
        return _tagged_gen(r.llm.stream_chat(r.messages, **kwargs), r)

    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        r = await self._aroute(messages)
        return _tagged_agen(await r.llm.astream_chat(r.messages, **kwargs), r)

    # --- tools: budget with the tool schemas counted, then the wrapped LLM's own tool protocol ----------
    @staticmethod
    def _history(user_msg: str | ChatMessage | None, chat_history: list[ChatMessage] | None) -> list[ChatMessage]:
        history = list(chat_history or [])
        if user_msg is not None:
            history.append(
                user_msg if isinstance(user_msg, ChatMessage) else ChatMessage(role="user", content=user_msg)
            )
        return history

    def chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        r = self._route(self._history(user_msg, chat_history), tools)
        response = r.llm.chat_with_tools(
            tools,
            chat_history=r.messages,
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )
        return _tagged(response, r)

    async def achat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        r = await self._aroute(self._history(user_msg, chat_history), tools)
        response = await r.llm.achat_with_tools(
            tools,
            chat_history=r.messages,
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )
        return _tagged(response, r)

    def stream_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponseGen:
        r = self._route(self._history(user_msg, chat_history), tools)
        response = r.llm.stream_chat_with_tools(
            tools,
            chat_history=r.messages,
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )
        return _tagged_gen(response, r)

    async def astream_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponseAsyncGen:
        r = await self._aroute(self._history(user_msg, chat_history), tools)
        response = await r.llm.astream_chat_with_tools(
            tools,
            chat_history=r.messages,
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )
        return _tagged_agen(response, r)

    def _prepare_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        return self._llm._prepare_chat_with_tools(
            tools,
            user_msg=user_msg,
            chat_history=chat_history,
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        fallback = response.additional_kwargs.get(ROUTE_KEY) == "fallback" and self._fallback is not None
        parser = self._fallback if fallback and self._fallback is not None else self._llm
        return parser.get_tool_calls_from_response(response, error_on_no_tool_call=error_on_no_tool_call, **kwargs)

    # --- completion: a single prompt, budgeted as one user message ---------------------------------------
    def _prompt(self, prompt: str) -> tuple[FunctionCallingLLM, str]:
        r = self._route([ChatMessage(role=MessageRole.USER, content=prompt)])
        return r.llm, message_text(r.messages[-1])

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        llm, text = self._prompt(prompt)
        return llm.complete(text, formatted=formatted, **kwargs)

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        llm, text = self._prompt(prompt)
        return await llm.acomplete(text, formatted=formatted, **kwargs)

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        llm, text = self._prompt(prompt)
        return llm.stream_complete(text, formatted=formatted, **kwargs)

    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseAsyncGen:
        llm, text = self._prompt(prompt)
        return await llm.astream_complete(text, formatted=formatted, **kwargs)


def _tagged(response: ChatResponse, route: _Route) -> ChatResponse:
    """``response`` marked with the model that wrote it, when that is the fallback."""
    if route.fallback_reason is not None:
        response.additional_kwargs[ROUTE_KEY] = "fallback"
    return response


def _tagged_gen(responses: ChatResponseGen, route: _Route) -> Generator[ChatResponse, None, None]:
    for response in responses:
        yield _tagged(response, route)


async def _tagged_agen(responses: ChatResponseAsyncGen, route: _Route) -> AsyncGenerator[ChatResponse, None]:
    async for response in responses:
        yield _tagged(response, route)
