"""RagQueryEngine: the ragidx agent as a LlamaIndex ``BaseQueryEngine``.

Each query runs the whole ragidx turn (searches, the context budget before every LLM call, citations)
through ``Engine.ask`` and returns LlamaIndex's ``Response``: ``response`` is the answer text with its
``[n]`` markers, ``source_nodes`` the cited articles in citation order (their text as the model was shown
it, ``citation`` = the ``[n]``), and ``metadata`` the rest of the answer (citations, every article shown
with its ranks, queries, budget reports, timings, tokens, ``not_found``). With ``streaming=True`` it
returns a ``StreamingResponse`` (``AsyncStreamingResponse`` from ``aquery``) whose generator yields the
model's text as it comes; ``source_nodes`` and ``metadata`` are filled when the generator ends (the
citations are only known then), and ``metadata["text"]`` holds the final, cleaned answer.

Usable wherever LlamaIndex takes a query engine: ``QueryEngineTool``, ``RouterQueryEngine``,
``SubQuestionQueryEngine``. ``get_prompts()`` / ``update_prompts()`` read and replace the engine's prompts
(:mod:`ragidx.agent.prompts`; shared by every query and chat engine of one ``Engine``).

Example:
    >>> qe = engine.as_query_engine()                                  # doctest: +SKIP
    >>> response = qe.query("How do I number pages in Writer?")        # doctest: +SKIP
    >>> [n.node.metadata["title"] for n in response.source_nodes]       # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import Any, Protocol

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import AsyncStreamingResponse, Response, StreamingResponse
from llama_index.core.callbacks import CallbackManager
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
from llama_index.core.schema import NodeWithScore, QueryBundle

from ragidx.agent.answer import Answer
from ragidx.agent.prompts import prompts_of, update_prompts_of
from ragidx.article import RERANK_SCORE, Article
from ragidx.retrieval.article_grouper import article_to_node

__all__ = ["Asker", "RagQueryEngine", "answer_metadata", "answer_source_nodes"]

CITATION = "citation"
"""Metadata key of a source node's ``[n]`` in the answer."""


class Asker(Protocol):
    """What the LlamaIndex surfaces need of an ``Engine``: a turn, sync and async, whole or streamed."""

    def ask(self, question: str, session_id: str | None = None) -> Any: ...

    async def aask(self, question: str, session_id: str | None = None) -> Any: ...

    def stream_ask(self, question: str, session_id: str | None = None) -> Iterator[Any]: ...

    def astream_ask(self, question: str, session_id: str | None = None) -> AsyncIterator[Any]: ...


def answer_source_nodes(answer: Answer) -> list[NodeWithScore]:
    """The cited articles as nodes, in citation order: text as shown, ranks and ``citation`` in metadata."""
    shown = {str(a.get("kb_id")): a for a in answer.articles}
    nodes = []
    for citation in answer.citations:
        data = shown.get(citation.kb_id)
        article = (
            Article.from_dict(data)
            if data is not None
            else Article(kb_id=citation.kb_id, title=citation.title, url=citation.url, content="")
        )
        article = article.with_metadata(**{CITATION: citation.number})
        nodes.append(article_to_node(article, float(article.metadata.get(RERANK_SCORE, 0.0))))
    return nodes


def answer_metadata(answer: Answer) -> dict[str, Any]:
    """Everything about the answer but its text twice over: plain data (the articles without their text)."""
    data = answer.to_dict()
    data["articles"] = [{key: value for key, value in a.items() if key != "content"} for a in data.get("articles", [])]
    data.pop("model_text", None)
    return data


class RagQueryEngine(BaseQueryEngine):
    """The ragidx agent behind LlamaIndex's query-engine interface. See the module docstring.

    Args:
        engine: a :class:`ragidx.Engine` (anything with ``ask`` / ``aask`` / ``stream_ask`` / ``astream_ask``).
        streaming: return streaming responses.
        session_id: keep a conversation across queries (each query sees the earlier ones); None: every
            query stands alone.

    Example:
        >>> tool = QueryEngineTool.from_defaults(engine.as_query_engine(), name="kb",  # doctest: +SKIP
        ...                                      description="Answers from the product docs")
    """

    def __init__(
        self,
        engine: Asker,
        *,
        streaming: bool = False,
        session_id: str | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        super().__init__(callback_manager=callback_manager)
        self._engine = engine
        self.streaming = streaming
        self.session_id = session_id

    def _get_prompts(self) -> PromptDictType:
        """The engine's prompts (the agent's; shared with every query and chat engine of the engine)."""
        return prompts_of(self._engine)

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        update_prompts_of(self._engine, prompts_dict)

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    def _query(self, query_bundle: QueryBundle) -> Response | StreamingResponse:
        if self.streaming:
            return _streaming(self._engine.stream_ask(query_bundle.query_str, session_id=self.session_id))
        answer = self._engine.ask(query_bundle.query_str, session_id=self.session_id)
        return Response(answer.text, source_nodes=answer_source_nodes(answer), metadata=answer_metadata(answer))

    async def _aquery(self, query_bundle: QueryBundle) -> Response | AsyncStreamingResponse:
        if self.streaming:
            return _astreaming(self._engine.astream_ask(query_bundle.query_str, session_id=self.session_id))
        answer = await self._engine.aask(query_bundle.query_str, session_id=self.session_id)
        return Response(answer.text, source_nodes=answer_source_nodes(answer), metadata=answer_metadata(answer))


def _streaming(items: Iterator[Any]) -> StreamingResponse:
    nodes: list[NodeWithScore] = []
    metadata: dict[str, Any] = {}

    def gen() -> Generator[str, None, None]:
        for item in items:  # the text as it can be shown (Engine.stream_ask), then the Answer
            if isinstance(item, str):
                yield item
            else:  # the final Answer: its citations become the response's sources
                nodes.extend(answer_source_nodes(item))
                metadata.update(answer_metadata(item))

    return StreamingResponse(response_gen=gen(), source_nodes=nodes, metadata=metadata)


def _astreaming(items: AsyncIterator[Any]) -> AsyncStreamingResponse:
    nodes: list[NodeWithScore] = []
    metadata: dict[str, Any] = {}

    async def gen() -> AsyncGenerator[str, None]:
        async for item in items:
            if isinstance(item, str):
                yield item
            else:
                nodes.extend(answer_source_nodes(item))
                metadata.update(answer_metadata(item))

    return AsyncStreamingResponse(response_gen=gen(), source_nodes=nodes, metadata=metadata)
