from __future__ import annotations

import asyncio
import re
from types import SimpleNamespace
from typing import Any

import pytest
from llama_index.core.schema import QueryBundle

from ragidx.article import RERANK_SCORE
from ragidx.retrieval.chunk_reranker import RETRIEVAL_SCORE
from ragidx.retrieval.cohere_reranker import CohereChunkReranker
from tests.retrieval.helpers import chunk, snapshot


def response(*pairs: tuple[int, float]) -> SimpleNamespace:
    return SimpleNamespace(results=[SimpleNamespace(index=i, relevance_score=s) for i, s in pairs])


class FakeClient:
    """Answers like Cohere: results sorted by score, cut to top_n, each with its input index."""

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores
        self.calls: list[dict[str, Any]] = []

    def rerank(self, **request: Any) -> SimpleNamespace:
        self.calls.append(request)
        ranked = sorted(
            ((i, self.scores[doc.split("\n\n", 1)[1]]) for i, doc in enumerate(request["documents"])),
            key=lambda p: -p[1],
        )
        return response(*ranked[: request["top_n"]])


class FakeAsyncClient(FakeClient):
    async def rerank(self, **request: Any) -> SimpleNamespace:  # type: ignore[override]
        return FakeClient.rerank(self, **request)


def nodes() -> list:
    return [
        chunk("a", 0, 0.9, text="alpha"),
        chunk("b", 0, 0.5, text="beta"),
        chunk("c", 0, 0.1, text="gamma"),
    ]


SCORES = {"alpha": 0.1, "beta": 0.7, "gamma": 0.95}


def test_results_are_mapped_by_the_returned_index() -> None:
    client = FakeClient(SCORES)
    out = CohereChunkReranker(client=client, top_n=2).postprocess_nodes(nodes(), query_str="q")
    # Cohere answered [(2, .95), (1, .7)]: position 0 in the answer is input 2, not input 0.
    assert [n.node.node_id for n in out] == ["c#0", "b#0"]
    assert [n.node.get_content() for n in out] == ["gamma", "beta"]
    assert out[0].node.metadata[RERANK_SCORE] == 0.95
    assert out[0].node.metadata[RETRIEVAL_SCORE] == 0.1


def test_request_carries_model_query_titles_and_top_n() -> None:
    client = FakeClient(SCORES)
    CohereChunkReranker(client=client, model="rerank-v3.5", top_n=10, max_retries=1).postprocess_nodes(
        nodes(), query_str="what is beta"
    )
    (call,) = client.calls
    assert call["model"] == "rerank-v3.5" and call["query"] == "what is beta"
    assert call["documents"][1] == "Title b\n\nbeta"
    assert call["top_n"] == 3  # never more than the documents sent
    assert call["request_options"] == {"max_retries": 1}


def test_an_answer_with_indices_in_any_order_is_sorted_by_score() -> None:
    class Shuffled:
        def rerank(self, **request: Any) -> SimpleNamespace:
            return response((0, 0.2), (2, 0.9), (1, 0.5))

    out = CohereChunkReranker(client=Shuffled()).postprocess_nodes(nodes(), query_str="q")
    assert [n.node.node_id for n in out] == ["c#0", "b#0", "a#0"]


def test_async_uses_the_async_client() -> None:
    aclient = FakeAsyncClient(SCORES)
    reranker = CohereChunkReranker(aclient=aclient, top_n=1)
    out = asyncio.run(reranker.apostprocess_nodes(nodes(), query_bundle=QueryBundle("q")))
    assert [n.node.node_id for n in out] == ["c#0"]
    assert len(aclient.calls) == 1


def test_inputs_are_not_mutated() -> None:
    ns = nodes()
    before = snapshot(ns)
    CohereChunkReranker(client=FakeClient(SCORES)).postprocess_nodes(ns, query_str="q")
    assert snapshot(ns) == before


def test_constructor_is_cheap_and_keeps_the_key_secret() -> None:
    reranker = CohereChunkReranker(api_key="sk-secret")
    assert reranker._client is None and reranker._aclient is None
    assert "sk-secret" not in repr(reranker) and "sk-secret" not in reranker.model_dump_json()


def test_without_key_or_client_it_says_what_to_do() -> None:
    with pytest.raises(ValueError, match=re.escape("reranker='offline'")):
        CohereChunkReranker()


def test_the_real_client_is_built_lazily_and_never_reaches_the_network_in_tests() -> None:
    reranker = CohereChunkReranker(api_key="k", timeout_s=1.0, max_retries=0)
    client = reranker.client  # building the client makes no request
    assert client is reranker.client
    with pytest.raises(Exception):  # noqa: B017 - the autouse guard blocks the request
        reranker.postprocess_nodes(nodes(), query_str="q")
