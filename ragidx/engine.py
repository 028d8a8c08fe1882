"""The Python API: ``Engine`` ingests, retrieves and answers over one knowledge base.

Built from :class:`~ragidx.config.Settings` (or with its parts passed in, for tests and custom
setups). Everything is created lazily: constructing an ``Engine`` loads no model and opens no store.

One ``Engine`` serves many threads and event loops at once (the dashboard's users, ``ragidx serve``): each part is
built once, under a lock; questions take turns at the model in a fair, bounded queue (``Settings.queue``; past its
bounds :class:`~ragidx.providers.model_queue.EngineBusyError` says when to ask again); each question answered at
the same time has its own agent (an agent's budget and retrieval cap hold one turn's state); and an ingest swaps the
retrieval chain only when it is done, so questions asked meanwhile keep the chain they started with.

``Engine`` is the facade: its jobs live in :mod:`ragidx.engine_parts` (``stores``: the embedding model, the stores,
ingest and delete; ``retrieval``: the chain and its tuning; ``agents``: agents by scope, prompts, guards, budget;
``sessions``: the model queue, who owns a conversation, a question's turn), which it builds and wires together.

Example:
    >>> from ragidx import Engine, Settings
    >>> engine = Engine(Settings(data_dir="/tmp/ragidx-demo"))
    >>> report = engine.ingest("ragidx/data/kb/libreoffice_en_sample.jsonl")   # doctest: +SKIP
    >>> [a.title for a in engine.retrieve("insert a table of contents", top_k=3)]  # doctest: +SKIP

Every query surface (``retrieve``, ``ask``, ``stream_ask``, ``as_retriever``, ``as_query_engine``,
``as_chat_engine``, ``retrieve_context_tool``) takes ``filters`` (LlamaIndex ``MetadataFilters``, or a mapping
``{"product": "writer", "version": ["7.4", "7.5"]}``) and runs as a principal, ``user=`` / ``groups=`` (by
default the public, who reads only articles that carry no principals). Both go into the stores' queries
(``ragidx.stores.access``); nothing above them sees an article the principal may not read.

    >>> engine.retrieve("vacation policy", user="ann", groups=["hr"], filters={"product": "handbook"})  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncGenerator, Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast

from llama_index.core.prompts.mixin import PromptDictType, PromptMixin, PromptMixinType

from ingestion.pipeline import Ingestor, IngestReport
from ingestion.sources import SourceItem
from ragidx import telemetry
from ragidx.article import Article
from ragidx.config import Settings
from ragidx.engine_parts.agents import EngineAgents
from ragidx.engine_parts.retrieval import EngineRetrieval
from ragidx.engine_parts.sessions import EngineSessions, ScopedAsker
from ragidx.engine_parts.stores import DeleteReport, EngineStores
from ragidx.providers.llms import LLMProvider
from ragidx.providers.model_queue import EngineBusyError, ModelQueue
from ragidx.questions.recorder import recorder_for
from ragidx.stores.access import Principal, Scope
from ragidx.stores.article_store import ArticleStore
from ragidx.stores.filters import FilterSpec
from ragidx.sync_call import run_sync

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.llms.function_calling import FunctionCallingLLM
    from llama_index.core.llms.llm import LLM
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.tools import FunctionTool

    from ragidx.agent.answer import Answer
    from ragidx.agent.budgeted_llm import BudgetedLLM
    from ragidx.agent.chat_engine import RagChatEngine
    from ragidx.agent.guards import GuardChain, StreamFilter
    from ragidx.agent.memory import SessionMemory
    from ragidx.agent.query_engine import RagQueryEngine
    from ragidx.agent.workflow import RagAgent
    from ragidx.budget import RetrievalCap
    from ragidx.engine_parts.sessions import StreamItem, TurnPlace
    from ragidx.engine_parts.stores import ChunkStore
    from ragidx.retrieval.flash import FlashMetrics
    from ragidx.retrieval.node_retriever import ArticleNodeRetriever
    from ragidx.retrieval.retriever import ArticleRetriever
    from ragidx.tuning.stored import TuningResult


Groups = Iterable[str] | None
"""Who asks besides ``user``: the reader's groups (as ``Principal.of`` takes them)."""

logger = logging.getLogger(__name__)

__all__ = ["DeleteReport", "Engine", "EngineBusyError", "ScopedAsker"]


def _prime_local_model(provider: LLMProvider, endpoint: Any, system_prompt: str) -> None:
    """Start the local model's server and have it read the agent's system prompt, so the first answer finds
    the model's weights in memory and that prefix in its prompt cache (best effort, see ``Engine.warm_up``)."""
    from llama_index.core.base.llms.types import ChatMessage, MessageRole

    from ragidx.providers.chat import capped

    try:
        llm = capped(provider.get(endpoint), 1)
        llm.chat(
            [
                ChatMessage(role=MessageRole.SYSTEM, content=system_prompt),
                ChatMessage(role=MessageRole.USER, content="Hi"),
            ],
            max_tokens=1,
        )
    except Exception as exc:  # the first question starts the server again and says what failed
        logger.debug("warming up the local model failed: %s", exc)


class Engine(PromptMixin):
    """Ingest, retrieve and ask over a knowledge base.

    The agent's prompts are LlamaIndex templates: ``get_prompts()`` lists them by name, ``update_prompts()``
    replaces them (:mod:`ragidx.agent.prompts`), here or on the query and chat engines, which share them.

    Args:
        settings: configuration; ``Settings()`` (env vars, ``ragidx.toml``, offline defaults) if omitted.
        llm: a LlamaIndex ``LLM`` to answer with instead of the configured ``[llm]`` endpoint (its metadata gives
            the context window and the answer's length unless ``[llm]`` sets them; the ``endpoint`` guard
            profile unless ``[llm] guards`` names one; no answer check, which needs the endpoint's log-odds).
        embed_model: a LlamaIndex ``BaseEmbedding`` instead of the configured one (the index records its name:
            an index built with another model is refused).
        reranker: a LlamaIndex ``BaseNodePostprocessor`` that reranks the searched chunks instead of the
            configured ``reranker`` (it keeps ``rerank_top_n`` of them).
        chunk_store, article_store, llm_provider: the stores and the model factory, to override the ones built
            from settings (tests, a shared database).

    Example:
        >>> Engine(Settings(data_dir="/tmp/x")).settings.store
        'lancedb'
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        llm: LLM | None = None,
        embed_model: BaseEmbedding | None = None,
        reranker: BaseNodePostprocessor | None = None,
        chunk_store: ChunkStore | None = None,
        article_store: ArticleStore | None = None,
        llm_provider: LLMProvider | None = None,
    ) -> None:
        self.settings = settings or Settings()
        if llm is not None:
            if llm_provider is not None:
                raise ValueError("Engine: pass llm or llm_provider, not both")
            from ragidx.providers.given_llm import GivenLLMProvider, settings_for

            self.settings = settings_for(self.settings, llm)
            llm_provider = cast(LLMProvider, GivenLLMProvider(llm))
        # Re-entrant: a part built under it builds the parts it needs (the agent, the retriever, the stores).
        self._lock = threading.RLock()
        self._llm_provider = llm_provider
        self._stores = EngineStores(
            self.settings,
            self._lock,
            embed_model=embed_model,
            chunk_store=chunk_store,
            article_store=article_store,
            on_change=self._rebuild_retrieval,
        )
        # The parts reach each other through the engine (late, so a part is built only when used; and through
        # Engine's own methods, which a program may wrap).
        self._retrieval = EngineRetrieval(
            self.settings,
            self._lock,
            self._stores,
            llm_provider=lambda: self.llm_provider,
            reranker=reranker,
            build=lambda: self._build_retriever(),
            on_change=self._rebuild_retrieval,
        )
        self._agents = EngineAgents(
            self.settings,
            self._lock,
            llm_provider=lambda: self.llm_provider,
            retriever=lambda: self.retriever,
            memory=lambda: self.memory,
            slots=lambda: self.model_queue.slots,
        )
        self._sessions = EngineSessions(self.settings, self._lock, self._agents)
        telemetry.configure(self.settings.tracing)  # off (the default): one check, nothing imported

    # --- the embedding model and the stores (ragidx.engine_parts.stores) ----------------------------
    @property
    def embed_model(self) -> BaseEmbedding:
        """The embedding model; with ``embed_model="auto"`` the one this index was built with (see
        :attr:`embed_model_name`)."""
        return self._stores.embed_model

    @property
    def embed_model_name(self) -> str:
        """The embedding model in use: the configured one, or for ``"auto"`` the one the index holds vectors of
        (MiniLM while it is empty; :mod:`ragidx.providers.embedding_choice`)."""
        return self._stores.embed_model_name

    def choose_embedding(
        self, items: Iterable[SourceItem], *, sample: Iterable[SourceItem] | None = None
    ) -> Iterable[SourceItem]:
        """Before the first ingest into an empty index with ``embed_model="auto"``, pick the embedding model for
        the articles' languages (:mod:`ragidx.providers.embedding_choice`) and return the same items.

        ``sample`` is a second pass over the same source (a file read again): the articles are drawn evenly
        from it, so a file that starts in English and goes on in Russian counts both. Without it the first
        articles of ``items`` decide (read ahead, then handed on: none is lost or read twice). A model set in
        the settings or passed in, or an index that already holds vectors, leaves everything as it is.
        """
        return self._stores.choose_embedding(items, sample=sample)

    @property
    def chunk_store(self) -> ChunkStore:
        return self._stores.chunk_store

    @property
    def article_store(self) -> ArticleStore:
        return self._stores.article_store

    @property
    def _embed_model(self) -> BaseEmbedding | None:
        """The embedding model if it is built (None until it is needed)."""
        return self._stores._embed_model

    @property
    def _chunk_store(self) -> ChunkStore | None:
        """The chunk store if it is opened (None until it is needed)."""
        return self._stores._chunk_store

    @property
    def llm_provider(self) -> LLMProvider:
        """The model factory (the one passed in, or one for these settings, made on first use). It is made here,
        not in a part, so that ``ragidx.engine.LLMProvider`` is the class a program or test replaces."""
        if self._llm_provider is None:
            with self._lock:
                if self._llm_provider is None:
                    self._llm_provider = LLMProvider(
                        threads=self.settings.local_llm_threads, model_cache_dir=self.settings.model_cache_dir
                    )
        return self._llm_provider

    # --- retrieval (ragidx.engine_parts.retrieval) ------------------------------------------------------
    @property
    def retriever(self) -> ArticleRetriever:
        """The retrieval chain, built on first use with :attr:`retrieval_settings` (the stored tuning applied)."""
        return self._retrieval.retriever

    def _build_retriever(self) -> ArticleRetriever:
        """A new chain (:meth:`ragidx.engine_parts.retrieval.EngineRetrieval.build`); the part builds through
        this method, so one that wraps it sees every build."""
        return self._retrieval.build()

    @property
    def _retriever(self) -> ArticleRetriever | None:
        """The retrieval chain if it is built (None until a search needs it)."""
        return self._retrieval._retriever

    @property
    def tuning(self) -> TuningResult | None:
        """The stored ``ragidx tune`` result if it was made on this index as it is now, else None."""
        return self._retrieval.tuning

    @property
    def retrieval_settings(self) -> Settings:
        """The settings retrieval runs with: the stored tuning (when valid) under the explicitly set fields."""
        return self._retrieval.retrieval_settings

    def tune(
        self,
        *,
        queries: int | None = None,
        method: str | None = None,
        seed: int = 0,
        save: bool = True,
        progress: bool = False,
    ) -> TuningResult:
        """Calibrate retrieval on this KB without labels and store the choice beside the index.

        Pseudo-queries are made from a sample of the articles (``method``: ``held_out`` by default,
        ``llm`` asks the configured LLM to write them), every candidate configuration of hybrid alpha,
        fusion, candidate depth and rerank stage is scored on them, and the best is kept
        (:func:`ragidx.tuning.calibrate.calibrate`). Explicitly set settings are not tuned and always
        win. Returns the :class:`~ragidx.tuning.stored.TuningResult`; with ``save`` it is written to
        ``tuning.json`` and used by this engine's retrieval from now on (until the index changes).

        Example:
            >>> engine.tune().picked                                    # doctest: +SKIP
            'rsf a0.35 c50 offline(1,0.1,0.1,0)'
        """
        return self._retrieval.tune(queries=queries, method=method, seed=seed, save=save, progress=progress)

    def _rebuild_retrieval(self) -> None:
        """Forget the chain (and the agents holding it): the next use reads the stored tuning again. Questions
        under way finish with the chain they started with."""
        with self._lock:
            self._retrieval.forget()
            self._agents.forget()

    @property
    def flash_metrics(self) -> FlashMetrics:
        """The flash reranker's Prometheus metrics (``FlashMetrics``; serve ``.registry``), made on first use."""
        return self._retrieval.flash_metrics

    # --- agents and turns (ragidx.engine_parts.agents, .sessions) -----------------------------------
    def agent(self, filters: FilterSpec = None, *, user: str | None = None, groups: Groups = None) -> RagAgent:
        """The agent workflow (built once; starts the local model server if the LLM is local). Questions asked
        at the same time each get their own (``EngineAgents.borrow``); this is the first of them. With ``filters``
        or a principal, an agent whose every search runs with them."""
        return self._agents.agent(Scope.of(filters, user, groups))

    @property
    def model_queue(self) -> ModelQueue:
        """The queue questions wait in for the chat model (``Settings.queue``), made on first use."""
        return self._sessions.model_queue

    def _turn(
        self, session_id: str | None, history: Sequence[Any] | None, scope: Scope
    ) -> contextlib.AbstractAsyncContextManager[TurnPlace]:
        """A question's turn at the model (:meth:`ragidx.engine_parts.sessions.EngineSessions.turn`)."""
        return self._sessions.turn(session_id, history, scope)

    @property
    def _agent(self) -> RagAgent | None:
        """The first agent if it is built (None until a question or :meth:`agent` needs it)."""
        agent: RagAgent | None = self._agents._agent
        return agent

    @property
    def _idle_agents(self) -> dict[str, list[Any]]:
        """The agents no question is using, by scope."""
        return self._agents._idle_agents

    # --- prompts (LlamaIndex's PromptMixin) -------------------------------------------------------------
    def _get_prompts(self) -> PromptDictType:
        """The agent's prompts by name; without building the agent (which may start the local model's server)
        until it is needed."""
        return self._agents.get_prompts()

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        self._agents.update_prompts(prompts_dict)

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    # --- guards and conversations (ragidx.engine_parts.agents, .sessions) ------------------------------
    @property
    def guards(self) -> GuardChain:
        """The answer guard chain of the configured model's profile (``[llm] guards``; see ``ragidx.agent.guards``)."""
        return self._agents.guards

    @guards.setter
    def guards(self, chain: GuardChain) -> None:
        """Answers asked from now on run ``chain`` (a program's own guards: ``engine.guards =
        engine.guards.with_rules(MyGuard())``); agents built with the earlier chain are not handed out again."""
        self._agents.guards = chain

    def stream_filter(self, question: str = "") -> StreamFilter:
        """A fresh :class:`ragidx.agent.guards.StreamFilter` for one streamed answer to ``question``: what
        :meth:`stream_ask` lets through of the model's words (no text the finished answer withdraws)."""
        return self._agents.stream_filter(question)

    @property
    def memory(self) -> SessionMemory:
        """The conversations of ``session_id`` turns (``SessionMemory``), shared by the agent and chat engines."""
        return self._sessions.memory

    def ingestor(self) -> Ingestor:
        return self._stores.ingestor()

    # --- API ---------------------------------------------------------------------------------------
    def ingest(
        self,
        source: str | Path | Iterable[SourceItem],
        *,
        source_name: str | None = None,
        prune: bool = False,
        progress: bool = False,
        base_url: str | None = None,
        replace: bool = False,
        allow_widening: bool | None = None,
    ) -> IngestReport:
        """Ingest a JSONL file, a document (PDF, DOCX, HTML, Markdown, text), a folder of them, or an iterable of
        ``Article``.

        Bad items (a line, a file) are reported in ``IngestReport.errors`` (file and line) and skipped; the rest
        is ingested. ``prune=True`` deletes the articles of this source that are no longer in it (else they are
        counted, ``missing``). ``base_url``: where the documents are published; their urls (and citations) point
        there instead of to the files. ``replace=True`` replaces articles stored from another source (else each is
        reported in ``conflicts``); ``allow_widening`` applies changes that let more people read an article (None:
        unless the ``refuse_widening`` setting says no). See ``ingestion.pipeline``.
        """
        with telemetry.span("ragidx.ingest", source=source_name, prune=prune) as traced:
            report = self._stores.ingest(
                source,
                source_name=source_name,
                prune=prune,
                progress=progress,
                base_url=base_url,
                replace=replace,
                allow_widening=allow_widening,
            )
            traced.counts(report.as_dict())
        return report

    def delete(self, kb_ids: Sequence[str]) -> DeleteReport:
        """Delete articles and their chunks; says which were deleted and which ids this KB (this tenant's part
        of it) does not hold.

        Example:
            >>> engine.delete(["tables", "no-such-article"]).as_dict()  # doctest: +SKIP
            {'deleted': 1, 'deleted_ids': ['tables'], 'not_found': ['no-such-article']}
        """
        return self._stores.delete(kb_ids)

    def retrieve(
        self,
        query: str,
        top_k: int | None = None,
        *,
        filters: FilterSpec = None,
        user: str | None = None,
        groups: Groups = None,
    ) -> list[Article]:
        """Whole articles best first, each with ``rerank_score``, ``normalized_rank``, ``article_rank``.

        Args:
            query: the search text.
            top_k: articles to return (None: the configured ``top_k``).
            filters: ``MetadataFilters``, or a mapping of field → value (a list: any of them); applied in the
                store's search before its top-k, so a narrow filter still returns its best ``top_k``.
            user, groups: who asks; only articles they may read are searched (default: the public).
        """
        scope = Scope.of(filters, user, groups)
        result: list[Article] = self.retriever.retrieve(
            query, top_k=top_k, filters=scope.filters, principal=scope.principal
        )
        return result

    def check_filters(self, filters: FilterSpec) -> None:
        """Refuse, before any search, filters the index would refuse: a field no article carries, a value not of its
        field's type (ValueError naming it and the filterable fields). For a question this is the clear error;
        the agent's own search would only report it to the model. Stores that cannot tell (Weaviate) accept any
        filter here and refuse it in the search.

        Example:
            >>> engine.check_filters({"no_such_field": "x"})  # doctest: +SKIP
            Traceback (most recent call last):
            ValueError: cannot filter on 'no_such_field': no article carries it; filterable fields are ...
        """
        self._stores.check_filters(filters)

    async def aretrieve(
        self,
        query: str,
        top_k: int | None = None,
        *,
        filters: FilterSpec = None,
        user: str | None = None,
        groups: Groups = None,
    ) -> list[Article]:
        scope = Scope.of(filters, user, groups)
        result: list[Article] = await self.retriever.aretrieve(
            query, top_k=top_k, filters=scope.filters, principal=scope.principal
        )
        return result

    def warm_up(self) -> None:
        """Get ready for a first answer in one process (the CLI's ``ask``): the local model server starts and
        reads the system prompt once in the background while this thread opens the index, loads the embedding
        model and runs one search, instead of one after the other on the first question. Best effort: what
        fails here fails again, with its own error, when the question is asked.
        """
        endpoint = self.settings.llm
        provider = self.llm_provider
        system_prompt = self._get_prompts()["system_prompt"].format()  # as the agent will send it
        server = threading.Thread(
            target=_prime_local_model, args=(provider, endpoint, system_prompt), name="ragidx-warm-up"
        )
        if endpoint.is_local:
            server.start()
        try:
            self.retrieve("warm up", top_k=1)
        except Exception as exc:  # the question's own search reports it
            logger.debug("warm-up search failed: %s", exc)
        finally:
            if server.is_alive():
                server.join()

    def ask(
        self,
        question: str,
        session_id: str | None = None,
        *,
        filters: FilterSpec = None,
        user: str | None = None,
        groups: Groups = None,
        history: Sequence[ChatMessage] | None = None,
        log: bool = False,
    ) -> Answer:
        """Answer with citations.

        ``session_id`` keeps a conversation: later questions see the earlier turns (summarized as they grow).
        A session belongs to the principal of its first turn (``user``/``groups``): another may not continue it.
        ``filters`` and the principal scope every search of the turn (see :meth:`retrieve`). ``history``
        (LlamaIndex ``ChatMessage`` s, user and assistant turns) is the conversation before this question, given
        whole instead (what an OpenAI client sends); it is not kept.

        Safe from many threads at once; the question waits its turn at the model
        (:attr:`model_queue`) and raises :class:`EngineBusyError` when the queue is full or the wait too long.
        ``log=True`` writes the turn to the question log (unless ``[questions]`` is off; never failing the answer):
        its ``question_id`` then names it for :meth:`feedback` (docs: the question log).
        """
        asked = self._aask(question, session_id, Scope.of(filters, user, groups), history)
        if log:
            asked = recorder_for(self).logged(asked, question, user=user, groups=groups, history=history)
        return run_sync(asked)

    async def aask(
        self,
        question: str,
        session_id: str | None = None,
        *,
        filters: FilterSpec = None,
        user: str | None = None,
        groups: Groups = None,
        history: Sequence[ChatMessage] | None = None,
        log: bool = False,
    ) -> Answer:
        """Async :meth:`ask`."""
        asked = self._aask(question, session_id, Scope.of(filters, user, groups), history)
        if log:
            asked = recorder_for(self).logged(asked, question, user=user, groups=groups, history=history)
        return await asked

    def feedback(
        self,
        question_id: str,
        vote: Literal["up", "down"] | None,
        *,
        user: str | None = None,
        groups: Groups = None,
        comment: str | None = None,
        wrong_article: str | None = None,
    ) -> None:
        """Rate a logged answer (its ``question_id``) as the reader who asked it (``user``, ``groups``); None takes
        the vote back. Raises ``QuestionNotFound`` for a question that reader did not ask (ragidx.questions)."""
        reader = Principal.of(user, groups)
        recorder_for(self).feedback(question_id, vote, reader=reader, comment=comment, wrong_article=wrong_article)

    async def _aask(
        self, question: str, session_id: str | None, scope: Scope, history: Sequence[ChatMessage] | None = None
    ) -> Answer:
        from ragidx.questions.curated import curated_turn  # an editor's answer first, before the model's queue

        curated = await curated_turn(self, question, session_id, scope, history)
        return curated or await self._sessions.ask(question, session_id, scope, history)

    def astream_ask(
        self,
        question: str,
        session_id: str | None = None,
        *,
        progress: bool = False,
        filters: FilterSpec = None,
        user: str | None = None,
        groups: Groups = None,
        history: Sequence[ChatMessage] | None = None,
        raw: bool = False,
    ) -> AsyncGenerator[StreamItem, None]:
        """Yield the answer's text pieces (``str``) as they can be shown, then the final ``Answer``.

        The pieces are what the guard profile's stream filter (:meth:`stream_filter`) lets through: joined, they
        are the answer's text as the user should read it, and never hold text that the finished answer withdraws
        (a reply the guards set aside is not shown at all; the answer's text comes as the last piece). ``raw=True``
        yields the model's own words instead (to time the model, not what a user sees).

        With ``progress=True`` also :class:`~ragidx.agent.answer.Progress` items as the turn goes: each
        search with the articles it found, each prompt with its size, before the model reads it. A consumer that
        stops reading (a client gone) stops the turn: the model stops writing and the queue's place is freed.
        ``filters``, ``user``, ``groups`` and ``history`` as for :meth:`ask`; a filter or principal that is not one
        raises here, before the question waits for the model.
        """
        return self._astream_ask(
            question, session_id, Scope.of(filters, user, groups), history, progress=progress, raw=raw
        )

    def _astream_ask(
        self,
        question: str,
        session_id: str | None,
        scope: Scope,
        history: Sequence[ChatMessage] | None = None,
        *,
        progress: bool = False,
        raw: bool = False,
    ) -> AsyncGenerator[StreamItem, None]:
        from ragidx.questions.curated import curated_stream  # an editor's answer first, before the model's queue

        stream = self._sessions.astream(question, session_id, scope, history, progress=progress, raw=raw)
        return curated_stream(self, question, session_id, scope, history, stream)

    def stream_ask(
        self,
        question: str,
        session_id: str | None = None,
        *,
        progress: bool = False,
        filters: FilterSpec = None,
        user: str | None = None,
        groups: Groups = None,
        history: Sequence[ChatMessage] | None = None,
        raw: bool = False,
    ) -> Iterator[StreamItem]:
        """Synchronous ``astream_ask`` (works inside Jupyter and Streamlit, which run their own loops)."""
        return self._stream_ask(
            question, session_id, Scope.of(filters, user, groups), history, progress=progress, raw=raw
        )

    def _stream_ask(
        self,
        question: str,
        session_id: str | None,
        scope: Scope,
        history: Sequence[ChatMessage] | None = None,
        *,
        progress: bool = False,
        raw: bool = False,
    ) -> Iterator[StreamItem]:
        from ragidx.questions.curated import curated_now  # an editor's answer first, before the model's queue

        if (curated := curated_now(self, question, session_id, scope, history)) is not None:
            return iter((curated.text, curated))
        return self._sessions.stream(question, session_id, scope, history, progress=progress, raw=raw)

    # --- LlamaIndex surfaces ---------------------------------------------------------------------
    def as_retriever(
        self, top_k: int | None = None, *, filters: FilterSpec = None, user: str | None = None, groups: Groups = None
    ) -> ArticleNodeRetriever:
        """The retrieval chain as a LlamaIndex ``BaseRetriever``: one ``NodeWithScore`` per whole article,
        best first, ranks in metadata (:class:`~ragidx.retrieval.node_retriever.ArticleNodeRetriever`); every
        search with ``filters`` as ``user``/``groups``."""
        from ragidx.retrieval.node_retriever import ArticleNodeRetriever

        scope = Scope.of(filters, user, groups)
        return ArticleNodeRetriever(self.retriever.scoped(scope.filters, scope.principal), top_k=top_k)

    def as_query_engine(
        self,
        *,
        streaming: bool = False,
        session_id: str | None = None,
        filters: FilterSpec = None,
        user: str | None = None,
        groups: Groups = None,
    ) -> RagQueryEngine:
        """The agent as a LlamaIndex ``BaseQueryEngine`` returning ``Response`` with the cited articles as
        ``source_nodes`` (:class:`~ragidx.agent.query_engine.RagQueryEngine`); every question with ``filters``
        as ``user``/``groups``."""
        from ragidx.agent.query_engine import RagQueryEngine

        asker = ScopedAsker(self, Scope.of(filters, user, groups))
        return RagQueryEngine(asker, streaming=streaming, session_id=session_id)

    def retrieve_context_tool(
        self, *, filters: FilterSpec = None, user: str | None = None, groups: Groups = None
    ) -> FunctionTool:
        """The ``retrieve_context`` ``FunctionTool`` over this engine's chain, for LlamaIndex's own agents:
        whole ranked articles as JSON (kb_id, title, url, content, ranks), the shape the budget reads. Every
        search it makes runs with ``filters`` as ``user``/``groups`` (default: the public): an agent that holds
        it can find nothing else, whatever the model asks for."""
        from ragidx.tools.retrieve_context import make_retrieve_context_tool

        scope = Scope.of(filters, user, groups)
        return make_retrieve_context_tool(
            self.retriever, filters=scope.filters, principal=scope.principal, cap=self.retrieval_cap
        )

    # --- the budget on LlamaIndex's own agents (budgeted_llm + retrieve_context_tool share the cap) ---------
    @property
    def retrieval_cap(self) -> RetrievalCap:
        """How many articles the next search of :meth:`retrieve_context_tool` may return: set after every call
        of an LLM from :meth:`budgeted_llm` by the room left in its window (the small-window top-k)."""
        return self._agents.retrieval_cap

    def budgeted_llm(
        self,
        llm: FunctionCallingLLM,
        *,
        tokenizer: str | None = None,
        fallback_llm: FunctionCallingLLM | None = None,
    ) -> BudgetedLLM:
        """``llm`` wrapped so ragidx's context budget (these settings) runs before every call it makes
        (:class:`~ragidx.agent.budgeted_llm.BudgetedLLM`): for a LlamaIndex ``FunctionAgent`` or
        ``AgentWorkflow`` that uses :meth:`retrieve_context_tool`. Tokens are counted with ``tokenizer``
        (a bundled tiktoken encoding; default ``cl100k_base``, with the budget's safety margin).

        A call the budget says needs a larger window goes to ``fallback_llm`` (default: the settings'
        ``fallback_llm``, if any). After every call the budget sets :attr:`retrieval_cap`, which
        :meth:`retrieve_context_tool` reads: on a small window the next search returns fewer articles."""
        return self._agents.budgeted_llm(llm, tokenizer=tokenizer, fallback_llm=fallback_llm)

    def as_chat_engine(
        self,
        *,
        session_id: str | None = None,
        filters: FilterSpec = None,
        user: str | None = None,
        groups: Groups = None,
    ) -> RagChatEngine:
        """The agent as a LlamaIndex ``BaseChatEngine``: one conversation, one ragidx session
        (:class:`~ragidx.agent.chat_engine.RagChatEngine`); every turn with ``filters`` as ``user``/``groups``."""
        from ragidx.agent.chat_engine import RagChatEngine

        return RagChatEngine(ScopedAsker(self, Scope.of(filters, user, groups)), self.memory, session_id=session_id)

    def stats(self) -> dict[str, Any]:
        """Counts of articles and chunks (of this engine's tenant; without one, of no tenant), and where they live."""
        return {
            "tenant": self.settings.tenant,
            "articles": self.article_store.count(),
            "pending": self.article_store.count("pending"),
            "chunks": self.chunk_store.count(),
            "store": self.settings.store,
            "embed_model": self.embed_model_name,
            "article_store": self.article_store.display_url,
            "data_dir": str(self.settings.data_dir),
            "tuned": tuning.picked if (tuning := self.tuning) is not None else None,
        }

    def close(self) -> None:
        """Stop local model servers and close stores."""
        if self._llm_provider is not None:
            self._llm_provider.close()
        self._stores.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
