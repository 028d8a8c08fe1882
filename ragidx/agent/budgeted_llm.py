"""BudgetedLLM: ragidx's context budget before every LLM call of LlamaIndex's own agents.

LlamaIndex's ``FunctionAgent`` / ``AgentWorkflow`` / ``ReActAgent`` send the whole conversation, tool
results included, on every call, and nothing keeps it inside the model's window. This wrapper is an LLM
that runs :class:`~ragidx.budget.ContextBudget` on exactly the messages (and tool schemas) about to be
sent, then hands the budgeted messages to the wrapped LLM: results of ragidx's ``retrieve_context`` tool
are deduplicated across calls by kb_id and compressed in proportion to their rank, old turns are
summarized, and the prompt never exceeds ``context_window - max_output_tokens`` by the budget's count
(its safety margin covers a tokenizer that differs from the model's). A prompt whose fixed part alone
cannot fit raises ``ContextWindowTooSmallError`` instead of being sent.

Why an LLM wrapper: it sees every call, whatever the agent, its memory or its steps do (a memory block
only holds chat history, not the tool results of the current run; a workflow step cannot reach inside
``FunctionAgent``'s own loop). It delegates tool-call parsing to the wrapped LLM, so it works with any
function-calling LLM.

Example:
    >>> llm = BudgetedLLM(OpenAI(model="gpt-4o-mini"), ContextBudget())          # doctest: +SKIP
    >>> agent = FunctionAgent(tools=[engine.retrieve_context_tool()], llm=llm)  # doctest: +SKIP
    >>> llm.reports[-1].tokens_after                                            # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
)
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.tools import BaseTool
from pydantic import PrivateAttr

from ragidx.article import SearchResult
from ragidx.budget import ContextBudget
from ragidx.budget.messages import message_text, tool_results, with_results
from ragidx.budget.report import BudgetReport
from ragidx.sync_call import run_sync

__all__ = ["BudgetedLLM"]


class BudgetedLLM(FunctionCallingLLM):
    """A function-calling LLM that budgets every prompt before the wrapped LLM sees it.

    Args:
        llm: the LLM that answers (its ``metadata.context_window`` and ``num_output`` set the budget).
        budget: the context budget (``Engine.budgeted_llm`` builds it from the settings).
        context_window / max_output_tokens: override the wrapped LLM's metadata.

    Attributes:
        reports: one :class:`~ragidx.budget.report.BudgetReport` per call, in order.

    Example:
        >>> BudgetedLLM(llm, ContextBudget()).metadata.context_window  # doctest: +SKIP
        8192
    """

    _llm: FunctionCallingLLM = PrivateAttr()
    _budget: ContextBudget = PrivateAttr()
    _window: int = PrivateAttr()
    _max_out: int = PrivateAttr()
    _reports: list[BudgetReport] = PrivateAttr(default_factory=list)

    def __init__(
        self,
        llm: FunctionCallingLLM,
        budget: ContextBudget,
        *,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        super().__init__()
        self._llm = llm
        self._budget = budget
        meta = llm.metadata
        self._window = context_window or meta.context_window
        self._max_out = max_output_tokens or meta.num_output
        self._reports = []

    @classmethod
    def class_name(cls) -> str:
        return "BudgetedLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return self._llm.metadata.model_copy(update={"context_window": self._window, "num_output": self._max_out})

    @property
    def reports(self) -> list[BudgetReport]:
        return self._reports

    # --- the budget ---------------------------------------------------------------------------------
    async def abudget(self, messages: Sequence[ChatMessage], tools: Sequence[Any] | None = None) -> list[ChatMessage]:
        """The messages that will be sent for this call: the system messages first, then the conversation
        with its search results (read once) budgeted and written back as JSON."""
        system = [m for m in messages if m.role == MessageRole.SYSTEM]
        rest = [m for m in messages if m.role != MessageRole.SYSTEM]
        results = tool_results(rest)

        def render(conversation: Sequence[ChatMessage], sent: Mapping[str, SearchResult], _: Any) -> list[ChatMessage]:
            return [*system, *with_results(conversation, sent, results)]

        limits = {"context_window": self._window, "max_output_tokens": self._max_out}
        fit = await self._budget.afit(rest, results, render, tools=tools, **limits)
        self._reports.append(fit.report)
        return fit.messages

    def budget(self, messages: Sequence[ChatMessage], tools: Sequence[Any] | None = None) -> list[ChatMessage]:
        """``abudget`` from synchronous code."""
        sent: list[ChatMessage] = run_sync(self.abudget(messages, tools))
        return sent

    # --- chat ----------------------------------------------------------------------------------------
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._llm.chat(self.budget(messages), **kwargs)

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return await self._llm.achat(await self.abudget(messages), **kwargs)

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        return self._llm.stream_chat(self.budget(messages), **kwargs)

    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        return await self._llm.astream_chat(await self.abudget(messages), **kwargs)

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
        history = self.budget(self._history(user_msg, chat_history), tools)
        return self._llm.chat_with_tools(
            tools,
            chat_history=history,
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

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
        history = await self.abudget(self._history(user_msg, chat_history), tools)
        return await self._llm.achat_with_tools(
            tools,
            chat_history=history,
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

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
        history = self.budget(self._history(user_msg, chat_history), tools)
        return self._llm.stream_chat_with_tools(
            tools,
            chat_history=history,
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

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
        history = await self.abudget(self._history(user_msg, chat_history), tools)
        return await self._llm.astream_chat_with_tools(
            tools,
            chat_history=history,
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

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
        return self._llm.get_tool_calls_from_response(response, error_on_no_tool_call=error_on_no_tool_call, **kwargs)

    # --- completion: a single prompt, budgeted as one user message ---------------------------------------
    def _prompt(self, prompt: str) -> str:
        return message_text(self.budget([ChatMessage(role=MessageRole.USER, content=prompt)])[-1])

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self._llm.complete(self._prompt(prompt), formatted=formatted, **kwargs)

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return await self._llm.acomplete(self._prompt(prompt), formatted=formatted, **kwargs)

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        return self._llm.stream_complete(self._prompt(prompt), formatted=formatted, **kwargs)

    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseAsyncGen:
        return await self._llm.astream_complete(self._prompt(prompt), formatted=formatted, **kwargs)
