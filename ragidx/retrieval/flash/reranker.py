"""FlashReranker: an agentic LLM reranker over whole-article candidates.

Turn 1 shows the model up to ``max_candidates`` one-line summaries (``[ID:n] date | size | title``)
with the date, the query and optional conversation/user facts. The model may call
``get_topics_content(ids)`` (a batch, up to ``max_tool_calls`` times) to read full articles, then
answers ``{"topics": [{"id", "reason", "excerpt"?}]}``. In ``auto`` mode the tool is offered, not forced: a
valid answer without a tool call is accepted, and ``{"topics": []}`` ("nothing relevant") is honoured. In
``forced`` mode the first call must call the tool: a reply without one is a protocol violation
(``FlashDecision.PROTOCOL_VIOLATION``), which falls back to the upstream order and is counted in the
metrics' fallbacks with that reason, whatever the reply says (a safety net for endpoints that ignore
``tool_choice``).

Fallback ladder (``FlashResult.decision`` / ``.source``): a valid answer is accepted; after a tool
call, invalid JSON, a timeout or too many tool calls return the first ``top_n`` ids the model asked
to read; no usable answer without a tool call, or an API error at any turn, returns the upstream
order's top ``top_n`` (an endpoint that fails mid-rerank says nothing about the requested ids).
``timeout_s`` is one budget for all turns together.

Two tool protocols (``tool_mode``): ``auto`` offers the tool on every call (OpenAI, OpenRouter, vLLM);
``forced`` forces the named tool on the first call and then asks for the answer without tools, for
endpoints that only follow a forced named call (the local Qwen through llama-cpp-python's server,
where ``tool_choice="auto"`` returns empty replies). ``inline_tool_results`` sends the tool traffic as
plain text for chat templates that drop ``tool`` messages (llama-cpp-python's
``chatml-function-calling``). ``response_format`` constrains the final answer: ``json_schema`` is the
OpenAI structured-output form, ``json_object`` the ``{"type": "json_object", "schema": ...}`` form
that llama-cpp-python's server understands (it rejects ``json_schema``).

The final selection is read only from the assistant's own final message; tool calls only from the
response's tool-call blocks. Article text goes to the model fenced as data and can change neither.

As a LlamaIndex postprocessor it composes like any reranker: ``top_n`` (``max_topics`` is its old name, kept for
one release with a ``DeprecationWarning``), its prompts through ``get_prompts``/``update_prompts``
(``system_prompt``, ``user_prompt``, ``tool_limit_prompt``: ``ragidx.retrieval.flash.prompts``), ranks on its
output by its order (``article_rank``, ``normalized_rank``, ``rerank_score``: ``ragidx.retrieval.ranks``), and
``to_dict()``/``from_dict(data, llm=...)`` for its settings and replaced prompts (the model is given again).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole, ToolCallBlock
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixin
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.tools import FunctionTool
from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from ragidx.article import RERANK_SCORE
from ragidx.providers.chat import ChatCaller, LLMRequestError, LLMUnavailableError, model_name, usage
from ragidx.providers.tokenizer import TokenCounter
from ragidx.retrieval.flash.contextualize import QueryContextualizer
from ragidx.retrieval.flash.conversation import current_conversation
from ragidx.retrieval.flash.excerpts import EXCERPT_OF_CHARS, excerpt_text, snap_excerpt
from ragidx.retrieval.flash.metrics import FlashMetrics
from ragidx.retrieval.flash.parsing import JsonRepair, coerce_id, parse_answer
from ragidx.retrieval.flash.prompts import (
    PROMPT_TEXTS,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    FlashCandidate,
    answer_response_format,
    checked,
    content_block,
    default_prompts,
    system_prompt,
    tool_limit_note,
    turn1_user_prompt,
)
from ragidx.retrieval.flash.result import FlashResult, FlashSelection
from ragidx.retrieval.flash.trace import (
    FlashDecision,
    FlashTrace,
    SelectionSource,
    TraceCandidate,
    TraceMessage,
    TraceResponse,
    TraceToolCall,
    TraceTurn,
)
from ragidx.retrieval.ranks import assign_ranks
from ragidx.sync_call import run_sync

__all__ = ["FLASH_METADATA_KEYS", "FlashReranker", "FlashResult", "FlashSelection"]

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

FLASH_REASON = "flash_reason"
FLASH_EXCERPT = "flash_excerpt"
FLASH_RANK = "flash_rank"
FLASH_DECISION = "flash_decision"
FLASH_METADATA_KEYS = (FLASH_REASON, FLASH_EXCERPT, FLASH_RANK, FLASH_DECISION, RERANK_SCORE, EXCERPT_OF_CHARS)


class _TopicIds(BaseModel):
    ids: list[int] = Field(description="[ID:n] numbers of the candidates to load, all in one call")


def _tool_stub(ids: list[int]) -> str:  # never executed: the reranker answers tool calls itself
    return ""


class _Run:
    """Mutable state of one rerank."""

    def __init__(self, candidates: list[FlashCandidate], trace: FlashTrace, deadline: float) -> None:
        self.candidates = candidates
        self.by_id = {c.display_id: c for c in candidates}
        self.trace = trace
        self.deadline = deadline
        self.messages: list[ChatMessage] = []
        self.recorded = 0
        self.requested: list[int] = []
        self.invented: list[int] = []
        self.tool_calls = 0
        self.repairs: list[JsonRepair] = []
        self.shown_tokens = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.excerpts_dropped = 0
        self.error: str | None = None
        self.query = trace.query
        self.original_query: str | None = None

    def invent(self, cid: int) -> None:
        if cid not in self.invented:
            self.invented.append(cid)


class FlashReranker(BaseNodePostprocessor, PromptMixin):
    """Agentic LLM reranker: the model reads summaries, loads what it needs, picks up to ``top_n``.

    Use it after (or instead of) a chunk reranker, on nodes that hold whole articles (``TextNode`` with
    the full text; ``metadata["kb_id"]`` or ``node.id_`` is the kb_id; ``title``/``url``/``date``
    optional). Returns new nodes in the model's order with ``flash_reason``/``flash_excerpt`` metadata
    and a position score (also its ``rerank_score``; ``article_rank``/``normalized_rank`` by the model's order);
    ``last_result`` (or ``rerank_detailed``) gives the full ``FlashResult``.

    The prompts (``system_prompt``, ``user_prompt``, ``tool_limit_prompt``; ``ragidx.retrieval.flash.prompts``)
    are replaced through ``prompts=`` or ``update_prompts`` (LlamaIndex's ``PromptMixin``).

    Metrics go to ``registry`` (default: a private one) or to a shared ``metrics`` (``FlashMetrics``);
    ``clock``/``today`` are injectable for tests and replays.

    Example:
        >>> from llama_index.llms.openai_like import OpenAILike
        >>> llm = OpenAILike(model="qwen3", api_base="http://localhost:8080/v1", api_key="x",
        ...                  is_chat_model=True, is_function_calling_model=True)
        >>> flash = FlashReranker(llm, top_n=5, timeout_s=10.0)
        >>> engine = index.as_query_engine(node_postprocessors=[grouper, flash])  # doctest: +SKIP
        >>> result = flash.rerank_detailed("how do I rotate keys?", nodes)  # doctest: +SKIP
        >>> result.decision, result.selected_kb_ids, result.reasons  # doctest: +SKIP

        For the local Qwen through llama-cpp-python's server (forced named calls only, no tool messages
        in its chat template, ``json_object`` schemas only):

        >>> local = FlashReranker(llm, tool_mode="forced", inline_tool_results=True,
        ...                       response_format="json_object")  # doctest: +SKIP
    """

    max_candidates: int = Field(default=50, gt=0, description="Candidates shown to the model (turn 1).")
    top_n: int = Field(default=5, gt=0, description="Most candidates returned (formerly max_topics).")
    max_tool_calls: int = Field(default=3, ge=0, description="Most get_topics_content calls per rerank.")
    timeout_s: float = Field(default=10.0, gt=0, description="Total time budget for all turns, in seconds.")
    excerpt_threshold_chars: int = Field(
        default=25_000, gt=0, description="Only candidates larger than this may carry an excerpt."
    )
    excerpt_replaces_text: bool = Field(
        default=True,
        description="A returned node with an excerpt has the excerpt as its text (under a note naming the whole "
        "article's kb_id, URL and size) instead of the full article, so the answer model reads the excerpt; "
        "False keeps the full text and the excerpt in metadata only.",
    )
    tool_mode: Literal["auto", "forced"] = Field(
        default="auto",
        description="auto: offer the tool on every call, the model decides; forced: force the named tool on "
        "the first call, then ask for the answer without tools (endpoints that only follow forced calls).",
    )
    inline_tool_results: bool = Field(
        default=False,
        description="Send tool calls and results as plain assistant/user text (chat templates that drop "
        "tool messages, e.g. llama-cpp-python's chatml-function-calling).",
    )
    response_format: Literal["none", "json_schema", "json_object"] = Field(
        default="none",
        description="Constrain the final answer: json_schema (OpenAI structured outputs), json_object "
        "(llama-cpp-python's {type: json_object, schema}), or none. Sent only on calls that offer no tool "
        "or come after a tool call, since some endpoints cannot combine it with tool calling.",
    )
    context_window: int | None = Field(
        default=None,
        ge=512,
        description="The model's window in tokens. When set, loaded content is cut (whole paragraphs first) so "
        "the prompt plus max_output_tokens always fits; None trusts the endpoint.",
    )
    max_output_tokens: int = Field(default=512, gt=0, description="Tokens kept free for the reply.")
    max_conversation_messages: int = Field(default=6, ge=0, description="Recent messages shown in turn 1.")
    max_message_chars: int = Field(default=600, gt=0, description="Each shown message is cut to this.")
    input_price_per_million: float = Field(default=0.0, ge=0, description="USD per 1M input tokens.")
    output_price_per_million: float = Field(default=0.0, ge=0, description="USD per 1M output tokens.")
    trace_dir: str | None = Field(default=None, description="If set, every rerank's trace is saved here.")

    _llm: FunctionCallingLLM = PrivateAttr()
    _metrics: FlashMetrics = PrivateAttr()
    _tokens: TokenCounter = PrivateAttr()
    _clock: Callable[[], float] = PrivateAttr()
    _today: Callable[[], dt.date] = PrivateAttr()
    _tool: FunctionTool = PrivateAttr()
    _last_result: FlashResult | None = PrivateAttr(default=None)
    _contextualizer: QueryContextualizer | None = PrivateAttr(default=None)
    _prompts: dict[str, BasePromptTemplate] = PrivateAttr(default_factory=default_prompts)

    def __init__(
        self,
        llm: FunctionCallingLLM | None = None,
        *,
        registry: CollectorRegistry | None = None,
        metrics: FlashMetrics | None = None,
        token_counter: TokenCounter | None = None,
        clock: Callable[[], float] | None = None,
        today: Callable[[], dt.date] | None = None,
        contextualizer: QueryContextualizer | None = None,
        prompts: Mapping[str, BasePromptTemplate | str] | None = None,
        **settings: Any,
    ) -> None:
        if llm is None:
            raise TypeError(
                "FlashReranker needs the model that reranks: FlashReranker(llm, ...); when rebuilding one from "
                "to_dict(), pass it again: FlashReranker.from_dict(data, llm=llm)"
            )
        if not isinstance(llm, FunctionCallingLLM):
            raise TypeError(
                f"FlashReranker needs a FunctionCallingLLM (e.g. OpenAILike(..., is_function_calling_model="
                f"True)), got {type(llm).__name__}; wrap plain LLMs in a chunk reranker instead"
            )
        _take_old_names(settings)
        unknown = sorted(set(settings) - set(type(self).model_fields))
        if unknown:
            valid = ", ".join(sorted(k for k in type(self).model_fields if k != "callback_manager"))
            raise TypeError(f"unknown FlashReranker setting(s) {', '.join(unknown)}; the settings are: {valid}")
        super().__init__(**settings)
        self._llm = llm
        if metrics is not None and registry is not None and metrics.registry is not registry:
            raise ValueError("pass either registry= or metrics= (whose registry is used), not both")
        self._metrics = metrics or FlashMetrics(registry)
        self._tokens = token_counter or TokenCounter()
        self._clock = clock or time.monotonic
        self._today = today or dt.date.today
        self._tool = FunctionTool.from_defaults(
            fn=_tool_stub, name=TOOL_NAME, description=TOOL_DESCRIPTION, fn_schema=_TopicIds
        )
        self._contextualizer = contextualizer
        self._prompts = default_prompts()
        if prompts:
            self._prompts.update(checked(prompts))  # text is taken as a template too

    @classmethod
    def class_name(cls) -> str:
        return "FlashReranker"

    @property
    def max_topics(self) -> int:
        """Deprecated: ``top_n`` (the name every LlamaIndex reranker uses)."""
        warnings.warn(_OLD_NAME_WARNING, DeprecationWarning, stacklevel=2)
        return self.top_n

    # --- prompts (LlamaIndex's PromptMixin) ----------------------------------------------------------
    def _get_prompts(self) -> PromptDictType:
        """``system_prompt``, ``user_prompt`` and ``tool_limit_prompt`` (see ``ragidx.retrieval.flash.prompts``)."""
        return dict(self._prompts)

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        """Replace prompts by name; an unknown name or a replacement without a required variable is refused."""
        self._prompts.update(checked(prompts_dict))

    # --- serialization -------------------------------------------------------------------------------
    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """The settings, and the text of each prompt that was replaced (under ``prompts``); not the model."""
        data = super().to_dict(**kwargs)
        replaced = {
            name: prompt.get_template()
            for name, prompt in self._prompts.items()
            if prompt.get_template() != PROMPT_TEXTS[name]
        }
        if replaced:
            data["prompts"] = replaced
        return data

    @property
    def llm(self) -> FunctionCallingLLM:
        return self._llm

    @property
    def metrics(self) -> FlashMetrics:
        return self._metrics

    @property
    def llm_name(self) -> str:
        """The reranking model's name, as the endpoint knows it."""
        return self._model_name()

    @property
    def contextualizer(self) -> QueryContextualizer | None:
        """Rewrites a follow-up into a standalone query before reranking, when a conversation is given."""
        return self._contextualizer

    @property
    def last_result(self) -> FlashResult | None:
        """The result of the latest rerank on this instance (use ``rerank_detailed`` when concurrent)."""
        return self._last_result

    # --- LlamaIndex postprocessor -------------------------------------------------------------------
    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        query, conversation = _require_query(query_bundle), current_conversation()
        return self.rerank_detailed(query, nodes, conversation=conversation).nodes

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        query, conversation = _require_query(query_bundle), current_conversation()
        return (await self.arerank_detailed(query, nodes, conversation=conversation)).nodes

    # --- public API ---------------------------------------------------------------------------------
    def rerank_detailed(
        self,
        query: str | QueryBundle,
        nodes: Sequence[NodeWithScore],
        *,
        conversation: Sequence[ChatMessage | str] = (),
        user_facts: Sequence[str] = (),
        today: dt.date | None = None,
    ) -> FlashResult:
        """Rerank ``nodes`` for ``query``; see ``arerank_detailed``."""
        return run_sync(
            self.arerank_detailed(query, nodes, conversation=conversation, user_facts=user_facts, today=today)
        )

    @dispatcher.span
    async def arerank_detailed(
        self,
        query: str | QueryBundle,
        nodes: Sequence[NodeWithScore],
        *,
        conversation: Sequence[ChatMessage | str] = (),
        user_facts: Sequence[str] = (),
        today: dt.date | None = None,
    ) -> FlashResult:
        """Rerank ``nodes`` (in upstream order) for a standalone ``query``; never raises on LLM failure.

        As a node postprocessor it reranks in the conversation that ``flash_conversation`` set around the
        search (``ragidx.retrieval.flash.conversation``; the agent sets it for every search of a session).

        Args:
            query: the query; with a ``contextualizer`` and a conversation it is first rewritten into a
                standalone query ("and how do I update it?" → "how do I update a table of contents?"), which
                the model sees and ``FlashResult.query`` holds (``original_query`` the one given).
            nodes: whole-article candidates, best first; only the first ``max_candidates`` are shown.
            conversation: recent messages (``ChatMessage`` or ``"role: text"``), most recent last.
            user_facts: short facts about the user.
            today: the date shown to the model (default: today).
        """
        bundle = query if isinstance(query, QueryBundle) else QueryBundle(query_str=query)
        dispatcher.event(
            ReRankStartEvent(query=bundle, nodes=list(nodes), top_n=self.top_n, model_name=self._model_name())
        )
        result = await self._rerank(bundle.query_str, list(nodes), conversation, user_facts, today)
        self._last_result = result
        self._metrics.observe(result)
        if self.trace_dir and result.trace is not None:
            self._save_trace(result.trace)
        logger.info(
            "flash rerank: %s (%s), %d of %d candidates, %d tool calls, %.2fs",
            result.decision.value,
            result.source.value,
            len(result.selections),
            result.candidates_shown,
            result.tool_calls,
            result.duration_s,
        )
        dispatcher.event(ReRankEndEvent(nodes=result.nodes))
        return result

    # --- the loop -----------------------------------------------------------------------------------
    async def _rerank(
        self,
        query: str,
        nodes: list[NodeWithScore],
        conversation: Sequence[ChatMessage | str],
        user_facts: Sequence[str],
        today: dt.date | None,
    ) -> FlashResult:
        started = self._clock()
        day = today or self._today()
        shown = nodes[: self.max_candidates]
        candidates = [FlashCandidate.from_node(i + 1, n) for i, n in enumerate(shown)]
        convo = self._conversation_lines(conversation)
        original, rewrite_tokens = None, (0, 0)
        if self._contextualizer is not None and convo and candidates:
            rewritten, rewrite_tokens = await self._contextualize(query, conversation)
            if rewritten != query:
                original, query = query, rewritten
        trace = FlashTrace(
            model_name=self._model_name(),
            settings=self._trace_settings(),
            query=query,
            original_query=original,
            today=day.isoformat(),
            conversation=convo,
            user_facts=list(user_facts),
            candidates=[
                TraceCandidate(
                    display_id=c.display_id,
                    kb_id=c.kb_id,
                    title=c.title,
                    text=c.text,
                    date=c.date,
                    score=n.score,
                )
                for c, n in zip(candidates, shown, strict=True)
            ],
            decision=FlashDecision.NO_CANDIDATES,
            source=SelectionSource.NONE,
        )
        run = _Run(candidates, trace, deadline=started + self.timeout_s)
        run.query, run.original_query = query, original
        run.input_tokens, run.output_tokens = rewrite_tokens
        if not candidates:
            return self._finish(run, shown, FlashDecision.NO_CANDIDATES, started)

        system = system_prompt(
            top_n=self.top_n,
            max_tool_calls=self.max_tool_calls,
            excerpt_threshold=self.excerpt_threshold_chars,
            template=self._prompts["system_prompt"],
        )
        user = turn1_user_prompt(
            query=query,
            candidates=candidates,
            today=day,
            conversation=convo,
            user_facts=user_facts,
            message=original,
            template=self._prompts["user_prompt"],
        )
        run.messages = [
            ChatMessage(role=MessageRole.SYSTEM, content=system),
            ChatMessage(role=MessageRole.USER, content=user),
        ]
        run.shown_tokens = self._tokens.count(system) + self._tokens.count(user)

        # No retries: one time budget covers all turns, and a failed call has a fallback.
        chat = ChatCaller(self._llm, retries=0, inline_tool_results=self.inline_tool_results)
        while True:
            remaining = run.deadline - self._clock()
            if remaining <= 0:
                # Recorded as a timed-out call so that a replay reaches the same decision.
                run.error = f"the {self.timeout_s}s budget ran out before LLM call {len(trace.turns) + 1}"
                trace.turns.append(TraceTurn(response=TraceResponse(error_kind="timeout", error=run.error)))
                return self._finish(run, shown, FlashDecision.TIMEOUT, started)
            offer_tool = self.max_tool_calls > 0 and (self.tool_mode == "auto" or run.tool_calls == 0)
            forced = offer_tool and self.tool_mode == "forced"
            options: dict[str, Any] = {}
            if self.response_format != "none" and (run.tool_calls > 0 or not offer_tool):
                options["response_format"] = answer_response_format(self.top_n, self.response_format)
            turn = TraceTurn(
                new_messages=[_trace_message(m) for m in run.messages[run.recorded :]],
                options={"response_format": "response_format" in options, "tools": offer_tool, "forced": forced},
            )
            run.recorded = len(run.messages)
            trace.turns.append(turn)
            try:
                if offer_tool:
                    choice: dict[str, Any] = (
                        {"tool_required": True, "tool_choice": {"type": "function", "function": {"name": TOOL_NAME}}}
                        if forced
                        else {"tool_required": False}
                    )
                    response = await chat.achat(
                        run.messages,
                        tools=[self._tool],
                        timeout=remaining,
                        allow_parallel_tool_calls=False,
                        **choice,
                        **options,
                    )
                else:
                    response = await chat.achat(run.messages, timeout=remaining, **options)
            except Exception as exc:
                timed_out = isinstance(exc, LLMUnavailableError) and exc.timed_out
                kind = "timeout" if timed_out else "api_error"
                # The endpoint's own error, not the wrapper that says it was not retried.
                wrapped = isinstance(exc, LLMUnavailableError | LLMRequestError) and exc.__cause__ is not None
                cause = exc.__cause__ if wrapped and exc.__cause__ is not None else exc
                turn.response = TraceResponse(error_kind=kind, error=f"{type(cause).__name__}: {cause}")
                run.error = turn.response.error
                logger.warning("flash rerank: LLM call failed (%s): %s", kind, run.error)
                decision = FlashDecision.TIMEOUT if timed_out else FlashDecision.API_ERROR
                return self._finish(run, shown, decision, started)

            text = response.message.content or ""
            try:
                calls = self._llm.get_tool_calls_from_response(response, error_on_no_tool_call=False)
            except Exception as exc:  # e.g. arguments that are not a JSON object: the reply is unusable
                turn.response = TraceResponse(text=text, usage=self._account(run, response, []))
                run.error = f"unreadable tool call: {type(exc).__name__}: {exc}"
                return self._finish(run, shown, FlashDecision.INVALID_JSON, started)
            turn.response = TraceResponse(
                text=text,
                tool_calls=[TraceToolCall(id=c.tool_id, name=c.tool_name, arguments=c.tool_kwargs) for c in calls],
                usage=self._account(run, response, calls),
            )
            if calls:
                if run.tool_calls >= self.max_tool_calls:
                    return self._finish(run, shown, FlashDecision.TOO_MANY_TOOL_CALLS, started)
                run.messages.append(response.message)
                for call in calls:
                    result_text = self._answer_tool_call(run, call)
                    run.shown_tokens += self._tokens.count(result_text)
                    run.messages.append(
                        ChatMessage(
                            role=MessageRole.TOOL,
                            content=result_text,
                            additional_kwargs={"tool_call_id": call.tool_id, "name": call.tool_name},
                        )
                    )
                if run.tool_calls >= self.max_tool_calls:
                    run.messages.append(
                        ChatMessage(
                            role=MessageRole.USER,
                            content=tool_limit_note(self.max_tool_calls, self._prompts["tool_limit_prompt"]),
                        )
                    )
                continue
            if forced:
                # The tool call was required: an answer that skips it was given without reading any article.
                # Taken at its word it would pass unread picks off as a reranking; the upstream order stands.
                run.error = "the reply made no get_topics_content call where one was required (forced mode)"
                return self._finish(run, shown, FlashDecision.PROTOCOL_VIOLATION, started)
            return self._accept(run, shown, text, started)

    def _answer_tool_call(self, run: _Run, call: ToolSelection) -> str:
        """The tool result for one call. Counts the call; records requested and invented ids."""
        if run.tool_calls >= self.max_tool_calls:
            return f"Not run: the limit of {self.max_tool_calls} {TOOL_NAME} calls is reached."
        run.tool_calls += 1
        if call.tool_name != TOOL_NAME:
            return f"Unknown tool {call.tool_name!r}; the only tool is {TOOL_NAME}(ids)."
        blocks: list[FlashCandidate] = []
        invented: list[str] = []
        again: list[str] = []
        for raw in _raw_ids(call.tool_kwargs.get("ids")):
            cid, _ = coerce_id(raw)
            if cid is None or cid not in run.by_id:
                if cid is not None:
                    run.invent(cid)
                invented.append(str(raw))
                continue
            if cid in run.requested:
                again.append(str(cid))
                continue
            run.requested.append(cid)
            blocks.append(run.by_id[cid])
        notes = []
        if invented:
            notes.append(f"Not in the candidate list (ignored): {', '.join(invented)}.")
        if again:
            notes.append(f"Already loaded above: {', '.join(again)}.")
        if not blocks and not again:
            notes.append('No valid ids given; pass ids from the candidate list, e.g. {"ids": [1, 2]}.')
        return "\n\n".join(self._fitted_blocks(run, blocks) + notes)

    def _fitted_blocks(self, run: _Run, candidates: list[FlashCandidate]) -> list[str]:
        """Content blocks, each cut to an equal share of the room left in the window (if one is set)."""
        full = [content_block(c) for c in candidates]
        if self.context_window is None or not candidates:
            return full
        # Room left: the window minus the reply, what was shown so far, and slack for the chat template,
        # the assistant's call and notes (~16 tokens per message plus 128).
        room = self.context_window - self.max_output_tokens - run.shown_tokens - 16 * len(run.messages) - 128
        share = room // len(candidates)
        out = []
        for cand, block in zip(candidates, full, strict=True):
            if self._tokens.count(block) <= share:
                out.append(block)
                continue
            overhead = self._tokens.count(content_block(replace(cand, text=""))) + 24
            kept = _cut_to(self._tokens, cand.text, share - overhead) if share > overhead else ""
            note = f"[cut to fit the context: {len(kept)} of {len(cand.text)} chars shown]"
            out.append(content_block(replace(cand, text=f"{kept}\n\n{note}" if kept else note)))
            logger.info("flash rerank: [ID:%d] cut to %d of %d chars", cand.display_id, len(kept), len(cand.text))
        return out

    def _accept(self, run: _Run, shown: list[NodeWithScore], text: str, started: float) -> FlashResult:
        parsed = parse_answer(text)
        run.repairs.extend(parsed.repairs)
        if not parsed.ok or parsed.topics is None:
            run.error = parsed.error
            return self._finish(run, shown, FlashDecision.INVALID_JSON, started)
        selections: list[FlashSelection] = []
        for topic in parsed.topics:
            cand = run.by_id.get(topic.id)
            if cand is None:
                run.invent(topic.id)
                continue
            if len(selections) >= self.top_n:
                continue
            excerpt = None
            if topic.excerpt is not None:
                if cand.size > self.excerpt_threshold_chars:
                    excerpt = snap_excerpt(topic.excerpt, cand.text)
                if excerpt is None:
                    run.excerpts_dropped += 1
            selections.append(FlashSelection(cand.display_id, cand.kb_id, topic.reason, excerpt))
        if parsed.topics and not selections:
            run.error = "every selected id was invented"
            return self._finish(run, shown, FlashDecision.INVENTED_IDS, started)
        return self._finish(run, shown, FlashDecision.ACCEPTED, started, selections)

    def _finish(
        self,
        run: _Run,
        shown: list[NodeWithScore],
        decision: FlashDecision,
        started: float,
        selections: list[FlashSelection] | None = None,
    ) -> FlashResult:
        if decision is FlashDecision.ACCEPTED:
            source = SelectionSource.MODEL
        elif decision is FlashDecision.NO_CANDIDATES:
            source, selections = SelectionSource.NONE, []
        elif run.requested and decision is not FlashDecision.API_ERROR:
            source = SelectionSource.TOOL_REQUESTS
            selections = [FlashSelection(cid, run.by_id[cid].kb_id) for cid in run.requested[: self.top_n]]
        else:
            source = SelectionSource.UPSTREAM
            selections = [FlashSelection(c.display_id, c.kb_id) for c in run.candidates[: self.top_n]]
        selections = selections or []
        if decision is not FlashDecision.ACCEPTED and decision is not FlashDecision.NO_CANDIDATES:
            logger.warning("flash rerank fell back: %s -> %s (%s)", decision.value, source.value, run.error)
        out_nodes = assign_ranks(_output_nodes(shown, selections, decision, excerpt_as_text=self.excerpt_replaces_text))
        trace = run.trace
        trace.decision, trace.source = decision, source
        trace.selected_kb_ids = [s.kb_id for s in selections]
        trace.reasons = [s.reason for s in selections]
        cost = (
            run.input_tokens * self.input_price_per_million + run.output_tokens * self.output_price_per_million
        ) / 1_000_000
        return FlashResult(
            nodes=out_nodes,
            selections=selections,
            decision=decision,
            source=source,
            tool_calls=run.tool_calls,
            requested_ids=list(run.requested),
            invented_ids=list(run.invented),
            repairs=tuple(run.repairs),
            candidates_shown=len(run.candidates),
            prompt_tokens_shown=run.shown_tokens,
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            cost_usd=cost,
            duration_s=max(0.0, self._clock() - started),
            excerpts_dropped=run.excerpts_dropped,
            error=run.error,
            trace=trace,
            query=run.query,
            original_query=run.original_query,
        )

    # --- helpers ------------------------------------------------------------------------------------
    async def _contextualize(
        self, query: str, conversation: Sequence[ChatMessage | str]
    ) -> tuple[str, tuple[int, int]]:
        """The standalone query (``query`` itself when the rewrite fails) and the rewrite's tokens (in, out)."""
        assert self._contextualizer is not None
        result = await self._contextualizer.acontextualize(query, conversation)
        sent = sum(self._tokens.count(m.content or "") for m in self._contextualizer.messages(query, conversation))
        if result.rewritten:
            logger.info("flash rerank: follow-up %r searched as %r", query, result.query)
        return result.query, (sent, self._tokens.count(result.query))

    def _account(self, run: _Run, response: ChatResponse, calls: list[ToolSelection]) -> dict[str, int]:
        """Add this call's billed tokens (endpoint usage, else counted) and return them."""
        billed = usage(response)
        if billed is None:
            sent = sum(self._tokens.count(_message_text(m)) for m in run.messages)
            out_text = (response.message.content or "") + "".join(
                json.dumps(c.tool_kwargs, ensure_ascii=False) for c in calls
            )
            billed = {"prompt_tokens": sent, "completion_tokens": self._tokens.count(out_text)}
        run.input_tokens += billed["prompt_tokens"]
        run.output_tokens += billed["completion_tokens"]
        return billed

    def _conversation_lines(self, conversation: Sequence[ChatMessage | str]) -> list[str]:
        if self.max_conversation_messages == 0:
            return []
        lines = []
        for m in list(conversation)[-self.max_conversation_messages :]:
            line = m if isinstance(m, str) else f"{m.role.value}: {m.content or ''}"
            line = " ".join(line.split())
            if len(line) > self.max_message_chars:
                line = line[: self.max_message_chars - 1] + "…"
            lines.append(line)
        return lines

    def _model_name(self) -> str:
        return model_name(self._llm)

    def _trace_settings(self) -> dict[str, Any]:
        return self.model_dump(exclude={"callback_manager", "trace_dir"})

    def _save_trace(self, trace: FlashTrace) -> None:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
        path = Path(self.trace_dir or ".") / f"flash-{stamp}-{uuid.uuid4().hex[:8]}.json"
        try:
            trace.save(path)
        except OSError as exc:
            logger.warning("flash rerank: could not save trace to %s: %s", path, exc)


_OLD_NAME_WARNING = (
    "FlashReranker's max_topics is now top_n, the name every LlamaIndex reranker uses; max_topics will be "
    "removed in the next release"
)


def _take_old_names(settings: dict[str, Any]) -> None:
    """Settings given under an old name (``max_topics``) moved to the new one, with a ``DeprecationWarning``."""
    if "max_topics" not in settings:
        return
    old = settings.pop("max_topics")
    warnings.warn(_OLD_NAME_WARNING, DeprecationWarning, stacklevel=3)
    if "top_n" in settings and settings["top_n"] != old:
        raise ValueError(f"max_topics={old} and top_n={settings['top_n']} disagree; pass top_n only")
    settings["top_n"] = old


def _cut_to(tokens: TokenCounter, text: str, max_tokens: int) -> str:
    """The longest prefix within ``max_tokens`` that ends at a paragraph, else a sentence, else a word."""
    prefix = tokens.truncate(text, max_tokens)
    if len(prefix) >= len(text):
        return text
    for sep in ("\n\n", ". ", "\n", " "):
        end = prefix.rfind(sep)
        if end >= len(prefix) // 2:
            return prefix[: end + (1 if sep == ". " else 0)].rstrip()
    return prefix.rstrip()


def _require_query(query_bundle: QueryBundle | None) -> QueryBundle:
    if query_bundle is None:
        raise ValueError(
            "FlashReranker needs the query: call postprocess_nodes(nodes, query_str=...) "
            "or use it inside a query engine"
        )
    return query_bundle


def _raw_ids(value: Any) -> list[Any]:
    """The ``ids`` argument as a list, tolerating ``"[1, 2]"``, ``"1, 2"`` and a single id."""
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        try:
            loaded = json.loads(value)
        except ValueError:
            return [p for p in value.replace(",", " ").split() if p]
        return loaded if isinstance(loaded, list) else [loaded]
    return [] if value is None else [value]


def _message_text(message: ChatMessage) -> str:
    text = message.content or ""
    for block in message.blocks:
        if isinstance(block, ToolCallBlock):
            kwargs = block.tool_kwargs
            text += kwargs if isinstance(kwargs, str) else json.dumps(kwargs, ensure_ascii=False)
    return text


def _trace_message(message: ChatMessage) -> TraceMessage:
    calls = []
    for block in message.blocks:
        if isinstance(block, ToolCallBlock):
            kwargs = block.tool_kwargs
            if isinstance(kwargs, str):
                try:
                    kwargs = json.loads(kwargs)
                except ValueError:
                    kwargs = {"_raw": kwargs}
            calls.append(TraceToolCall(id=block.tool_call_id or "", name=block.tool_name, arguments=kwargs))
    return TraceMessage(
        role=message.role.value,
        content=message.content or "",
        tool_calls=calls,
        tool_call_id=message.additional_kwargs.get("tool_call_id"),
    )


def _output_nodes(
    shown: list[NodeWithScore],
    selections: list[FlashSelection],
    decision: FlashDecision,
    *,
    excerpt_as_text: bool = False,
) -> list[NodeWithScore]:
    """New nodes (inputs untouched) in selection order, scored by position: 1.0, then down to 1/k.

    With ``excerpt_as_text`` a node with an excerpt gets it as its text (``excerpt_text``: marked, with where the
    whole article is) and ``flash_excerpt_of_chars`` (the whole article's length) in its metadata, unless the
    marked excerpt would be as long as the article.
    """
    k = len(selections)
    out = []
    for rank, sel in enumerate(selections):
        original = shown[sel.display_id - 1]
        score = (k - rank) / k
        meta = dict(original.node.metadata)
        meta.update({FLASH_RANK: rank + 1, FLASH_DECISION: decision.value, RERANK_SCORE: score})
        meta.pop(FLASH_REASON, None)
        meta.pop(FLASH_EXCERPT, None)
        meta.pop(EXCERPT_OF_CHARS, None)
        if sel.reason:
            meta[FLASH_REASON] = sel.reason
        full_text = original.node.get_content()
        shown_text = None
        if sel.excerpt:
            meta[FLASH_EXCERPT] = sel.excerpt
            title, url = str(meta.get("title") or sel.kb_id), str(meta.get("url") or "")
            marked = excerpt_text(sel.excerpt, kb_id=sel.kb_id, title=title, url=url, full_chars=len(full_text))
            if excerpt_as_text and len(marked) < len(full_text):  # only where it saves: the note has a cost too
                meta[EXCERPT_OF_CHARS], shown_text = len(full_text), marked
        node = original.node.model_copy(
            update={
                "metadata": meta,
                "excluded_llm_metadata_keys": _with_keys(original.node.excluded_llm_metadata_keys),
                "excluded_embed_metadata_keys": _with_keys(original.node.excluded_embed_metadata_keys),
            }
        )
        if shown_text is not None:
            node.set_content(shown_text)
        out.append(NodeWithScore(node=node, score=score))
    return out


def _with_keys(keys: list[str]) -> list[str]:
    return list(keys) + [k for k in FLASH_METADATA_KEYS if k not in keys]
