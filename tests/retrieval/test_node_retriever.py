"""The article chain as a LlamaIndex retriever, run inside LlamaIndex's own RetrieverQueryEngine."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.query_engine import RetrieverQueryEngine

from ragidx.engine import Engine
from ragidx.retrieval.node_retriever import ArticleNodeRetriever
from tests.agent.llamaindex_helpers import writer_engine
from tests.fakes.scripted_llm import ScriptedLLM, text_of

QUERY = "create a table of contents"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, writer_kb_file: str) -> Iterator[Engine]:
    yield from writer_engine(tmp_path_factory.mktemp("node-retriever"), writer_kb_file)


def test_as_retriever_gives_the_chains_whole_articles_as_nodes(engine: Engine) -> None:
    retriever = engine.as_retriever(top_k=4)
    assert isinstance(retriever, BaseRetriever)
    nodes = retriever.retrieve(QUERY)
    articles = engine.retrieve(QUERY, top_k=4)

    assert [n.node.metadata["kb_id"] for n in nodes] == [a.kb_id for a in articles] and len(nodes) == 4
    assert [n.score for n in nodes] == [a.metadata["rerank_score"] for a in articles]
    assert [n.node.metadata["article_rank"] for n in nodes] == [0, 1, 2, 3]
    assert nodes[0].node.metadata["normalized_rank"] == 0.0 and nodes[-1].node.metadata["normalized_rank"] == 1.0
    assert {"title", "url", "rerank_score"} <= set(nodes[0].node.metadata)
    whole = engine.article_store.get([articles[0].kb_id])[articles[0].kb_id]
    assert nodes[0].node.get_content() == whole.content  # the whole article, not a chunk
    again = asyncio.run(retriever.aretrieve(QUERY))
    assert [n.node.node_id for n in again] == [n.node.node_id for n in nodes]


def test_the_retriever_inside_a_retriever_query_engine(engine: Engine) -> None:
    llm = ScriptedLLM(["Use Insert - Table of Contents and Index."])
    query_engine = RetrieverQueryEngine.from_args(engine.as_retriever(top_k=2), llm=llm)

    response = query_engine.query(QUERY)

    assert str(response) == "Use Insert - Table of Contents and Index."
    expected = [a.kb_id for a in engine.retrieve(QUERY, top_k=2)]
    assert [n.node.metadata["kb_id"] for n in response.source_nodes] == expected
    prompt = "\n".join(text_of(m) for m in llm.calls[0].messages)
    first = response.source_nodes[0].node
    assert first.get_content()[:200] in prompt  # the stock synthesizer read the whole article
    assert f"title: {first.metadata['title']}" in prompt and "rerank_score" not in prompt  # only the title


def test_top_k_must_be_positive(engine: Engine) -> None:
    with pytest.raises(ValueError, match=r"top_k must be at least 1 \(got 0\)"):
        ArticleNodeRetriever(engine.retriever, top_k=0)
