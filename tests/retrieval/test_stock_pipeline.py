"""ragidx's postprocessors in a stock LlamaIndex query engine over a stock ``VectorStoreIndex`` (issue 56.1).

Thirty real LibreOffice articles become LlamaIndex ``Document``s (no ragidx ``kb_id``: their chunks carry only
``ref_doc_id``), a stock index splits and embeds them, and a stock ``RetrieverQueryEngine`` runs the chunk
reranker, the grouper (reading whole articles from ``index.docstore``) and flash (a scripted model) as its node
postprocessors. A pass-through recorder after each stage keeps what that stage handed on.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle
from pydantic import PrivateAttr

from ragidx import ArticleGrouper, FlashReranker, OfflineChunkReranker
from tests.fakes.scripted_llm import RecordedCall, ScriptedLLM, text_of
from tests.retrieval.helpers import sample_documents, stock_index

QUESTION = "How do I create a pivot table from a cell range?"
ANSWER = "Choose Insert - Pivot Table and select the cell range."


class Recorder(BaseNodePostprocessor):
    """Hands nodes on untouched and keeps them: what the stage before it returned."""

    _seen: list[list[NodeWithScore]] = PrivateAttr(default_factory=list)

    @property
    def last(self) -> list[NodeWithScore]:
        return self._seen[-1]

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        self._seen.append(list(nodes))
        return nodes


def third_then_first(messages: list[ChatMessage], call: RecordedCall) -> str:
    """Flash's model: picks the third candidate it is shown, then the first (candidates are ``[ID:n]`` lines)."""
    shown = re.findall(r"^\[ID:(\d+)\]", "\n".join(text_of(m) for m in messages), re.MULTILINE)
    assert len(shown) >= 3, "flash showed fewer than three candidates"
    return '{"topics": [{"id": 3, "reason": "the steps"}, {"id": 1, "reason": "background"}]}'


def assert_ranked(nodes: Sequence[NodeWithScore], stage: str) -> None:
    """Ranks that describe the order the stage returned: 0-based position, 0.0 … 1.0, the node's own score."""
    assert nodes, f"{stage} returned nothing"
    last = len(nodes) - 1
    for position, node in enumerate(nodes):
        meta = node.node.metadata
        assert meta["article_rank"] == position, (stage, position, meta["article_rank"])
        assert meta["normalized_rank"] == pytest.approx(position / last if last else 0.0), (stage, position)
        assert meta["rerank_score"] == pytest.approx(node.score), (stage, position)
    scores = [node.score or 0.0 for node in nodes]
    assert scores == sorted(scores, reverse=True), f"{stage}: scores out of order"


def kb_id(node: NodeWithScore) -> str:
    return str(node.node.metadata["kb_id"])


def words(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def documents() -> list[Document]:
    return sample_documents(30)


@pytest.fixture(scope="module")
def index(documents: list[Document]) -> VectorStoreIndex:
    return stock_index(documents)


def pipeline(index: VectorStoreIndex, flash_llm: ScriptedLLM, answer_llm: ScriptedLLM) -> tuple[
    RetrieverQueryEngine, Recorder, Recorder, Recorder
]:  # fmt: skip
    chunks, articles, picked = Recorder(), Recorder(), Recorder()
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=12),
        llm=answer_llm,
        node_postprocessors=[
            OfflineChunkReranker(top_n=10),
            chunks,
            ArticleGrouper(docstore=index.docstore, top_n=5),
            articles,
            FlashReranker(flash_llm, top_n=2),
            picked,
        ],
    )
    return engine, chunks, articles, picked


def test_every_stage_of_a_stock_query_engine_leaves_ranks_of_its_own_order(
    index: VectorStoreIndex, documents: list[Document]
) -> None:
    answer_llm = ScriptedLLM([ANSWER], cycle=True)
    engine, chunks, articles, picked = pipeline(index, ScriptedLLM([third_then_first]), answer_llm)

    response = engine.query(QUESTION)

    assert str(response) == ANSWER
    # the chunks of a stock index name their document only by ref_doc_id
    assert all("kb_id" not in n.node.metadata and n.node.ref_doc_id for n in chunks.last)
    assert_ranked(chunks.last, "chunk reranker")
    assert_ranked(articles.last, "grouper")
    assert_ranked(picked.last, "flash")
    grouped = [kb_id(n) for n in articles.last]
    assert len(grouped) >= 3
    assert [kb_id(n) for n in picked.last] == [grouped[2], grouped[0]]
    first = picked.last[0].node.metadata
    assert (first["article_rank"], first["normalized_rank"], first["rerank_score"]) == (0, 0.0, 1.0)
    assert [kb_id(n) for n in response.source_nodes] == [grouped[2], grouped[0]]
    # the synthesizer read the whole top article, as its document holds it
    by_id = {d.doc_id: d for d in documents}
    top = by_id[grouped[2]]
    prompt = words("\n".join(text_of(m) for m in answer_llm.calls[0].messages))
    assert words(top.text) in prompt


def test_the_grouper_turns_a_stock_index_s_chunks_into_its_documents(
    index: VectorStoreIndex, documents: list[Document]
) -> None:
    engine, chunks, articles, _ = pipeline(index, ScriptedLLM([third_then_first]), ScriptedLLM([ANSWER]))
    engine.query(QUESTION)

    by_id = {d.doc_id: d for d in documents}
    assert len({n.node.ref_doc_id for n in chunks.last}) < len(chunks.last)  # several chunks of one article
    for node in articles.last:
        document = by_id[kb_id(node)]
        assert words(node.node.get_content()) == words(document.text)  # whole, not the matched chunks
        assert node.node.metadata["title"] == document.metadata["title"]
        assert node.node.metadata["url"] == document.metadata["url"]
        assert node.node.metadata["matched_chunk_ids"]


def test_the_async_path_ranks_the_same_way(index: VectorStoreIndex) -> None:
    engine, _, articles, picked = pipeline(index, ScriptedLLM([third_then_first]), ScriptedLLM([ANSWER]))

    asyncio.run(engine.aquery(QUESTION))

    assert_ranked(articles.last, "grouper")
    assert_ranked(picked.last, "flash")
    assert kb_id(picked.last[0]) == kb_id(articles.last[2])
