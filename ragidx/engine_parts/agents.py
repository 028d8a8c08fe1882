"""The engine's agents: one per question answered at the same time, kept by scope, with the prompts, guards and
context budget they are built with.

Separate from ``Engine`` because an agent holds one turn's state (its budget's retrieval cap, the learned window
shrink), so agents are lent out and taken back (:meth:`EngineAgents.borrow`, :meth:`EngineAgents.give_back`), and
every change that makes them stale (a new chain, new prompts or guards, a model server that moved) starts a new
generation (:meth:`EngineAgents.forget`): an agent of an older one is not lent again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from llama_index.core.prompts.mixin import PromptDictType

from ragidx.config import Settings
from ragidx.providers.llms import LLMProvider
from ragidx.stores.access import Scope

if TYPE_CHECKING:
    from llama_index.core.llms.function_calling import FunctionCallingLLM

    from ragidx.agent.budgeted_llm import BudgetedLLM
    from ragidx.agent.guards import GuardChain, StreamFilter
    from ragidx.agent.memory import SessionMemory
    from ragidx.agent.workflow import RagAgent
    from ragidx.budget import ArticleCompressor, ContextBudget, RetrievalCap
    from ragidx.providers.tokenizer import TokenCounter
    from ragidx.retrieval.retriever import ArticleRetriever

logger = logging.getLogger(__name__)

SCOPED_AGENTS = 32
"""Agents kept for filtered or per-principal questions (each holds its scope's tool; the model is shared)."""


def _local_base(provider: Any, endpoint: Any) -> str | None:
    """The local model server's address, when the provider runs one that is started."""
    local_server = getattr(provider, "local_server", None)
    if local_server is None:
        return None
    server = local_server(endpoint)
    return server.api_base if server.running else None


class EngineAgents:
    """The agents of one engine, lent to questions by scope, and what they are built with.

    Args:
        settings: the engine's settings.
        lock: the engine's re-entrant lock (an agent is built under it with the parts it needs).
        llm_provider: the engine's model factory, asked for when an agent is built.
        retriever: the engine's current retrieval chain, which a new agent's search tool holds.
        memory: the engine's conversations, which every agent reads and writes.
        slots: how many questions the model queue lets answer at once (as many idle agents are kept per scope).
    """

    def __init__(
        self,
        settings: Settings,
        lock: threading.RLock,
        *,
        llm_provider: Callable[[], LLMProvider],
        retriever: Callable[[], ArticleRetriever],
        memory: Callable[[], SessionMemory],
        slots: Callable[[], int],
    ) -> None:
        self.settings = settings
        self._lock = lock
        self._llm_provider = llm_provider
        self._retriever = retriever
        self._memory = memory
        self._slots = slots
        self._agent: Any | None = None
        self._guards: GuardChain | None = None
        self._prompts: PromptDictType = {}  # replaced prompts, applied to the agent when it is built
        self._retrieval_cap: RetrievalCap | None = None  # shared by budgeted_llm() and retrieve_context_tool()
        # Agents no question is using, by scope (filters and principal; "" for unscoped public questions), of the
        # current generation: a turn's state lives on its agent's parts, so two questions never share one.
        self._idle_agents: dict[str, list[Any]] = {}
        self._generation = 0  # counts retrieval rebuilds: an agent of an older one is not handed out again
        self._model_base: str | None = None  # the local model server's address the agents were built for

    def agent(self, scope: Scope) -> RagAgent:
        """The first agent (built once; starts the local model server if the LLM is local); for a scope other than
        the default one, an agent whose every search runs in it."""
        with self._lock:
            if self._agent is None:
                self._agent = self.build(Scope())
                self._idle_agents.setdefault("", []).append(self._agent)
            if scope.is_default:
                return self._agent
        agent, generation = self.borrow(scope)
        self.give_back(agent, generation, scope)
        return agent

    def borrow(self, scope: Scope) -> tuple[Any, int]:
        """An agent no other question is using, for ``scope``, and the generation it belongs to (see
        :meth:`give_back`).

        A turn's state lives on its agent's parts (the budget's retrieval cap, the learned window shrink), so two
        questions answered at once never share one; a scoped agent's retrieval tool holds its filters and reader."""
        self.agent(Scope())  # the first one, and the local model server, exist
        with self._lock:
            generation = self._generation
            idle = self._idle_agents.pop(scope.key, [])
            agent = idle.pop() if idle else None
            if idle:
                self._idle_agents[scope.key] = idle  # most recently used scope last
        if agent is None:
            agent = self.build(scope)
        return agent, generation

    def give_back(self, agent: Any, generation: int, scope: Scope) -> None:
        """Keep ``agent`` for the next question in ``scope``, unless it is of an older generation or enough wait."""
        with self._lock:
            idle = self._idle_agents.setdefault(scope.key, [])
            if generation == self._generation and len(idle) < self._slots():
                idle.append(agent)
            while len(self._idle_agents) > SCOPED_AGENTS:  # the least recently used scope goes
                self._idle_agents.pop(next(iter(self._idle_agents)))

    def check_model_server(self) -> None:
        """Before a turn: start the local model's server again if it died (killed, out of memory). It restarts on
        its old port where it can; if it moved, the agents built for the old one are dropped."""
        endpoint = self.settings.llm
        if not endpoint.is_local or self._agent is None:  # no agent yet: no server started for one
            return
        local_server = getattr(self._llm_provider(), "local_server", None)
        if local_server is None:
            return
        server = local_server(endpoint)
        if server.running:
            return
        logger.warning("the local model server is not running; starting it again")
        base = server.start()
        with self._lock:
            if self._model_base is not None and base != self._model_base:
                self.forget()
            self._model_base = base

    def get_prompts(self) -> PromptDictType:
        """The agent's prompts by name; without building the agent (which may start the local model's server)
        until it is needed."""
        if self._agent is not None:
            prompts: PromptDictType = self._agent.get_prompts()
            return prompts
        from llama_index.core.prompts import PromptTemplate

        from ragidx.agent.prompts import CONDENSE_PROMPT, default_prompts

        defaults = default_prompts()
        if self.settings.llm.effective_follow_ups == "condense":
            defaults["condense_prompt"] = PromptTemplate(CONDENSE_PROMPT)
        return {**defaults, **self._prompts}

    def update_prompts(self, prompts_dict: PromptDictType) -> None:
        """Replace prompts by name, on the agents built and on those built from now on."""
        from ragidx.agent.prompts import checked

        checked(prompts_dict, self.get_prompts())
        self._prompts.update(prompts_dict)
        with self._lock:
            agents = [self._agent, *(a for idle in self._idle_agents.values() for a in idle)]
            for agent in {id(a): a for a in agents if a is not None}.values():
                agent.update_prompts(prompts_dict)
            self._generation += 1  # an agent answering now is not handed out again with the old prompts

    def build(self, scope: Scope) -> RagAgent:
        """A new agent for ``scope``: the configured model, its budget, guards and prompts, a search tool in scope."""
        from ragidx.agent.rewrite import CondenseRewriter, HeuristicRewriter
        from ragidx.agent.workflow import RagAgent
        from ragidx.budget import LLMSummaryCompressor, RetrievalCap
        from ragidx.tools.retrieve_context import make_retrieve_context_tool

        s = self.settings
        provider = self._llm_provider()
        llm = provider.get(s.llm)
        fallback = provider.get(s.fallback_llm) if s.fallback_llm is not None else None
        tokens = provider.token_counter(s.llm)
        cap = RetrievalCap()
        compressor = LLMSummaryCompressor(llm, token_counter=tokens) if s.compressor == "llm" else None
        budget = self.context_budget(tokens, compressor=compressor, cap=cap, memory_llm=llm)
        deadline = provider.answer_deadline(s.llm, llm, tokens)
        follow_ups = s.llm.effective_follow_ups
        rewriter = (
            CondenseRewriter(llm)
            if follow_ups == "condense"
            else HeuristicRewriter()
            if follow_ups == "heuristic"
            else None
        )
        return RagAgent(
            llm,
            make_retrieve_context_tool(self._retriever(), cap=cap, filters=scope.filters, principal=scope.principal),
            budget,
            context_window=s.llm.context_window,
            max_output_tokens=s.llm.max_output_tokens,
            tool_mode=s.llm.effective_tool_mode,
            inline_tool_results=s.llm.effective_inline_tool_results,
            max_tool_rounds=s.max_tool_rounds,
            max_queries=s.max_tool_rounds,
            fallback_llm=fallback,
            fallback_context_window=s.fallback_llm.context_window if s.fallback_llm else None,
            fallback_max_output_tokens=s.fallback_llm.max_output_tokens if s.fallback_llm else None,
            memory=self._memory(),
            retries=s.llm.effective_max_retries,
            plan=s.plan_searches,
            deadline=deadline,
            max_prompt_tokens=s.llm.max_prompt_tokens,
            answer_check=provider.answer_check(s.llm),
            guards=self.guards,
            rewriter=rewriter,
            prompts=self._prompts,
        )

    @property
    def guards(self) -> GuardChain:
        """The answer guard chain of the configured model's profile (``[llm] guards``; see ``ragidx.agent.guards``)."""
        if self._guards is None:
            from ragidx.agent.guards import GuardChain
            from ragidx.agent.rendering import prompt_title

            llm = self.settings.llm
            self._guards = GuardChain(llm.effective_guards, llm.guard_names, title=prompt_title)
        return self._guards

    @guards.setter
    def guards(self, chain: GuardChain) -> None:
        """Answers asked from now on run ``chain``; agents built with the earlier one are not lent again."""
        with self._lock:
            self._guards = chain
            self.forget()

    def stream_filter(self, question: str = "") -> StreamFilter:
        """A fresh stream filter of the guard chain for one streamed answer to ``question``."""
        return cast("StreamFilter", self.guards.stream_filter(question))

    @property
    def retrieval_cap(self) -> RetrievalCap:
        """The cap :meth:`budgeted_llm` sets and ``Engine.retrieve_context_tool`` reads, made on first use."""
        if self._retrieval_cap is None:
            from ragidx.budget import RetrievalCap

            self._retrieval_cap = RetrievalCap()
        return self._retrieval_cap

    def budgeted_llm(
        self,
        llm: FunctionCallingLLM,
        *,
        tokenizer: str | None = None,
        fallback_llm: FunctionCallingLLM | None = None,
    ) -> BudgetedLLM:
        """``Engine.budgeted_llm``: ``llm`` wrapped so the context budget of these settings runs before each call."""
        from ragidx.agent.budgeted_llm import BudgetedLLM
        from ragidx.providers.tokenizer import TokenCounter

        endpoint = self.settings.fallback_llm if fallback_llm is None else None
        tokens = TokenCounter(tokenizer or "cl100k_base")
        budget = self.context_budget(tokens, cap=self.retrieval_cap, memory_llm=llm)
        return BudgetedLLM(
            llm,
            budget,
            fallback_llm=self._llm_provider().get(endpoint) if endpoint is not None else fallback_llm,
            fallback_context_window=endpoint.context_window if endpoint is not None else None,
            fallback_max_output_tokens=endpoint.max_output_tokens if endpoint is not None else None,
        )

    def context_budget(
        self,
        tokens: TokenCounter,
        *,
        compressor: ArticleCompressor | None = None,
        cap: RetrievalCap | None = None,
        memory_llm: Any | None = None,
    ) -> ContextBudget:
        """The context budget these settings describe (budget_* values, the fallback model's window, top_k); with
        ``memory_summary="llm"`` earlier turns are summarized by ``memory_llm``."""
        from ragidx.budget import ContextBudget, ConversationMemory

        s = self.settings
        by_llm = memory_llm if s.memory_summary == "llm" else None
        return ContextBudget(
            tokens,
            compressor,
            memory=ConversationMemory(by_llm, token_counter=tokens),
            cap=cap,
            trigger_pct=s.budget_trigger_pct,
            target_pct=s.budget_target_pct,
            min_article_tokens=s.budget_min_article_tokens,
            safety_margin_pct=s.budget_safety_margin_pct,
            memory_trigger_pct=s.memory_trigger_pct,
            fallback_context_window=s.fallback_llm.context_window if s.fallback_llm is not None else None,
            max_articles_per_call=s.top_k,
            relevance_floor=s.budget_relevance_floor,
        )

    def forget(self) -> None:
        """Drop the agents (the caller holds the lock) and start a new generation: agents answering now are not
        lent again when they come back."""
        self._agent = None
        self._idle_agents = {}
        self._generation += 1

    def note_model_base(self) -> None:
        """Remember the local model server's address the agents are built for (see :meth:`check_model_server`)."""
        if self._model_base is None and self.settings.llm.is_local:
            self._model_base = _local_base(self._llm_provider(), self.settings.llm)
