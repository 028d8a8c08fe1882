"""The engine's sessions: who owns a conversation, the conversations' memory, and a question's turn at the model.

Separate from ``Engine`` because this is where questions asked at the same time meet: the fair, bounded model
queue (``Settings.queue``), the check that only a session's own reader continues it, and the turn that holds a
queue place, a running model server and an agent of its own (:meth:`EngineSessions.turn`), and the question
answered in it, whole or streamed (:meth:`EngineSessions.ask`, :meth:`EngineSessions.astream`,
:meth:`EngineSessions.stream`). :class:`ScopedAsker` binds ``Engine.ask`` to one scope for LlamaIndex's query and
chat engines.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llama_index.core.prompts.mixin import PromptDictType, PromptMixin, PromptMixinType

from ragidx import telemetry
from ragidx.config import Settings
from ragidx.engine_parts.agents import EngineAgents
from ragidx.providers.model_queue import ModelQueue
from ragidx.stores.access import Principal, Scope
from ragidx.sync_call import run_sync

if TYPE_CHECKING:
    from llama_index.core.base.llms.types import ChatMessage

    from ragidx.agent.answer import Answer, Progress
    from ragidx.agent.memory import SessionMemory
    from ragidx.engine import Engine

    StreamItem = str | Progress | Answer
    """What ``Engine.stream_ask`` yields: text as it can be shown, progress (with ``progress=True``), the Answer."""


@dataclass
class TurnPlace:
    """A question's turn at the model: its agent, the session it runs in, and how long it waited in the queue."""

    agent: Any
    session: str | None
    waited_s: float

    def finish(self, answer: Answer, throwaway_session: bool) -> Answer:
        """The answer with its queue wait in ``timings["queue_wait"]`` (not in ``total``: the turn's own time)."""
        answer.timings["queue_wait"] = round(self.waited_s, 4)
        if throwaway_session:
            answer.session_id = None
        return answer


class EngineSessions:
    """The conversations of one engine, who owns each, and the queue its questions take turns in.

    Args:
        settings: the engine's settings (``queue`` sizes the model queue).
        lock: the engine's re-entrant lock, under which each part is built once.
        agents: the engine's agents, lent to each turn.
    """

    def __init__(self, settings: Settings, lock: threading.RLock, agents: EngineAgents) -> None:
        self.settings = settings
        self._lock = lock
        self._agents = agents
        self._session_readers: dict[str, Principal] = {}
        self._memory: SessionMemory | None = None
        self._queue: ModelQueue | None = None

    @property
    def model_queue(self) -> ModelQueue:
        """The queue questions wait in for the chat model (``Settings.queue``), made on first use."""
        if self._queue is None:
            with self._lock:
                if self._queue is None:
                    q = self.settings.queue
                    self._queue = ModelQueue(
                        slots=q.effective_slots(self.settings.llm),
                        max_waiting=q.max_waiting,
                        max_wait_s=q.max_wait_s,
                        max_waiting_per_reader=q.max_waiting_per_reader,
                    )
        return self._queue

    @property
    def memory(self) -> SessionMemory:
        """The conversations of ``session_id`` turns (``SessionMemory``), shared by the agent and chat engines."""
        if self._memory is None:
            from ragidx.agent.memory import SessionMemory

            with self._lock:
                if self._memory is None:
                    self._memory = SessionMemory()
        return self._memory

    def claim(self, session_id: str | None, principal: Principal) -> None:
        """A conversation's memory holds answers from what its reader may read: no one else continues it."""
        if session_id is None:
            return
        with self._lock:
            owner = self._session_readers.setdefault(session_id, principal)
        if set(owner.principals) != set(principal.principals):
            raise PermissionError(
                f"session {session_id!r} belongs to another reader; start a new session (another session_id)"
            )

    @contextlib.asynccontextmanager
    async def turn(
        self, session_id: str | None, history: Sequence[Any] | None, scope: Scope
    ) -> AsyncIterator[TurnPlace]:
        """A place in the model queue, a model server that runs, an agent of one's own (its searches in ``scope``),
        and the session the turn runs in (a throwaway one holding ``history`` when given)."""
        if history is not None and session_id is not None:
            raise ValueError("pass either session_id or history, not both")
        self.claim(session_id, scope.principal)
        t0 = time.perf_counter()
        async with self.model_queue.aslot(reader=str(scope.principal)):  # readers take turns (the queue's fairness)
            waited = time.perf_counter() - t0
            await asyncio.to_thread(self._agents.check_model_server)
            agent, generation = await asyncio.to_thread(self._agents.borrow, scope)
            self._agents.note_model_base()
            session = session_id
            if history is not None:
                session = f"~history-{uuid.uuid4().hex}"
                self.memory.set(session, list(history))
            try:
                yield TurnPlace(agent, session, waited)
            finally:
                if history is not None and session is not None:
                    self.memory.clear(session)
                self._agents.give_back(agent, generation, scope)

    @telemetry.traced_turn  # a ragidx.ask span when tracing is on (ragidx.telemetry)
    async def ask(
        self, question: str, session_id: str | None, scope: Scope, history: Sequence[ChatMessage] | None = None
    ) -> Answer:
        """``Engine.ask``: ``question`` answered in a turn of its own."""
        async with self.turn(session_id, history, scope) as place:
            answer = await place.agent.run(question=question, session_id=place.session)
        return place.finish(answer, history is not None)

    @telemetry.traced_stream
    async def astream(
        self,
        question: str,
        session_id: str | None,
        scope: Scope,
        history: Sequence[ChatMessage] | None = None,
        *,
        progress: bool = False,
        raw: bool = False,
    ) -> AsyncGenerator[StreamItem, None]:
        """``Engine.astream_ask``: the answer's pieces as the stream filter lets them through (all of the model's
        words with ``raw``), progress with ``progress``, then the Answer; a consumer that stops stops the turn."""
        from ragidx.agent.answer import Progress
        from ragidx.agent.events import AnswerDeltaEvent, BudgetReportEvent, SearchEvent

        shown = None if raw else self._agents.stream_filter(question)
        async with self.turn(session_id, history, scope) as place:
            handler = place.agent.run(question=question, session_id=place.session)
            try:
                async for event in handler.stream_events():
                    if isinstance(event, AnswerDeltaEvent):
                        if piece := (event.delta if shown is None else shown.feed(event.delta)):
                            yield piece
                    elif progress and isinstance(event, SearchEvent):
                        yield Progress("search", query=event.query, articles=tuple(event.titles), error=event.error)
                    elif isinstance(event, BudgetReportEvent):
                        titles = tuple(event.titles)
                        if shown is not None:
                            shown.show(titles)  # a closing sentence that only names them is held back too
                        if progress:
                            yield Progress(
                                "prompt", call=event.call, tokens=event.tokens, articles=titles,
                                expected_s=event.expected_s,
                            )  # fmt: skip
                answer = await handler
            finally:
                if not handler.done():
                    with contextlib.suppress(Exception):
                        await asyncio.shield(handler.cancel_run())
        final = place.finish(answer, history is not None)
        if shown is not None and (closing := shown.finish(final)):
            yield closing
        yield final

    def stream(
        self,
        question: str,
        session_id: str | None,
        scope: Scope,
        history: Sequence[ChatMessage] | None = None,
        *,
        progress: bool = False,
        raw: bool = False,
    ) -> Iterator[StreamItem]:
        """``Engine.stream_ask``: :meth:`astream` run on an event loop of its own in a thread, its items handed on."""
        items: queue.Queue[tuple[str, Any]] = queue.Queue()

        async def pump() -> None:
            try:
                stream = self.astream(question, session_id, scope, history, progress=progress, raw=raw)
                async for item in stream:
                    items.put(("item", item))
            except BaseException as exc:
                items.put(("error", exc))
            finally:
                items.put(("end", None))

        thread = threading.Thread(target=lambda: asyncio.run(pump()), daemon=True)
        thread.start()
        while True:
            kind, value = items.get()
            if kind == "end":
                break
            if kind == "error":
                raise value
            yield value
        thread.join()


class ScopedAsker(PromptMixin):
    """``Engine.ask`` and its streaming forms, bound to one scope: what the LlamaIndex query and chat engines
    hold, so every question they pass on runs with these filters as this principal. Its prompts are the
    engine's (shared by every scope).

    Example:
        >>> asker = ScopedAsker(engine, Scope.of(user="ann"))  # doctest: +SKIP
        >>> asker.ask("How do I file expenses?").citations     # doctest: +SKIP
    """

    def __init__(self, engine: Engine, scope: Scope) -> None:
        self.engine = engine
        self.scope = scope

    def ask(self, question: str, session_id: str | None = None) -> Answer:
        return run_sync(self.engine._aask(question, session_id, self.scope))

    async def aask(self, question: str, session_id: str | None = None) -> Answer:
        return await self.engine._aask(question, session_id, self.scope)

    def stream_ask(self, question: str, session_id: str | None = None) -> Iterator[StreamItem]:
        return self.engine._stream_ask(question, session_id, self.scope)

    def astream_ask(self, question: str, session_id: str | None = None) -> AsyncIterator[StreamItem]:
        return self.engine._astream_ask(question, session_id, self.scope)

    def _get_prompts(self) -> PromptDictType:
        prompts: PromptDictType = self.engine.get_prompts()
        return prompts

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        self.engine.update_prompts(prompts_dict)

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    def __getattr__(self, name: str) -> Any:  # settings, memory ... of the engine
        return getattr(self.engine, name)
