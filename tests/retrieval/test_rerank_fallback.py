"""FallbackReranker and reranker='endpoint': a rerank service that fails never fails the answer; the stage before
(the offline reranker, or the search order) ranks instead, and the answer's articles say why."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from llama_index.core.schema import QueryBundle

from ragidx.article import RERANK_FALLBACK, SearchResult
from ragidx.config import Settings
from ragidx.engine import Engine
from ragidx.retrieval.offline_reranker import OfflineChunkReranker
from ragidx.retrieval.rerank_endpoint import RerankEndpoint
from ragidx.retrieval.rerank_fallback import FallbackReranker
from ragidx.retrieval.rerankers import make_reranker
from ragidx.server.openai_format import answer_extra
from tests.dashboard.fakes import cite_sources
from tests.endpoints import SilentServer, dead_endpoint
from tests.fakes.hash_embedding import HashEmbedding
from tests.fakes.scripted_llm import ScriptedLLM
from tests.rerank_server import RerankServer
from tests.retrieval.test_endpoint_reranker import QUERY, nodes


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def settings(url: str, **rerank: object) -> Settings:
    return Settings(reranker="endpoint", rerank=RerankEndpoint(api_base=url, **rerank))  # type: ignore[arg-type]


def test_a_refused_service_gives_the_offline_rerankers_order_with_the_reason() -> None:
    url = dead_endpoint()
    given = nodes()
    out = make_reranker(settings(url)).postprocess_nodes(given, query_str=QUERY)
    offline = OfflineChunkReranker(top_n=30).postprocess_nodes(nodes(), query_str=QUERY)
    assert [n.node.node_id for n in out] == [n.node.node_id for n in offline]
    reason = out[0].node.metadata[RERANK_FALLBACK]
    assert reason == f"the reranker at {url}/rerank could not be reached; " + ("the offline reranker's order is used")
    assert all(n.node.metadata[RERANK_FALLBACK] == reason for n in out)
    assert RERANK_FALLBACK in out[0].node.excluded_llm_metadata_keys
    assert all(RERANK_FALLBACK not in n.node.metadata for n in given)  # the candidates are never touched


def test_fallback_search_keeps_the_search_order_when_the_service_times_out() -> None:
    with SilentServer() as silent:
        reranker = make_reranker(settings(silent.url, timeout_s=0.3, fallback="search"))
        out = asyncio.run(reranker.apostprocess_nodes(nodes(), query_bundle=QueryBundle(QUERY)))
    assert [n.node.node_id for n in out] == [n.node.node_id for n in nodes()]
    assert [n.score for n in out] == [0.9, 0.5, 0.1]
    assert out[0].node.metadata[RERANK_FALLBACK].endswith("did not answer within 0.3 s; the search order is used")


def test_after_a_failure_the_service_rests_for_its_cooldown_then_is_asked_again() -> None:
    clock = Clock()
    with RerankServer() as server:
        server.fail_next.append((500, {}, "boom"))
        endpoint = RerankEndpoint(api_base=server.url, max_retries=0, cooldown_s=30)
        reranker = make_reranker(Settings(reranker="endpoint", rerank=endpoint))
        assert isinstance(reranker, FallbackReranker)
        reranker._clock = clock  # the test's clock
        first = reranker.postprocess_nodes(nodes(), query_str=QUERY)
        clock.now += 29
        second = reranker.postprocess_nodes(nodes(), query_str=QUERY)
        asked_while_down = len(server.requests)
        clock.now += 2
        third = reranker.postprocess_nodes(nodes(), query_str=QUERY)
    assert asked_while_down == 1 and len(server.requests) == 2
    assert first[0].node.metadata[RERANK_FALLBACK].startswith(f"the reranker at {server.url}/rerank answered HTTP 500")
    assert "(not asked again for 30 s after a failure)" in second[0].node.metadata[RERANK_FALLBACK]
    assert third[0].node.node_id == "tables#0" and RERANK_FALLBACK not in third[0].node.metadata


def test_any_llamaindex_postprocessor_can_be_wrapped() -> None:
    class Broken(OfflineChunkReranker):
        def _score(self, query, nodes):  # type: ignore[no-untyped-def]
            raise RuntimeError("quota exceeded")

    out = FallbackReranker(Broken(), cooldown_s=0).postprocess_nodes(nodes(), query_str=QUERY)
    assert out[0].node.metadata[RERANK_FALLBACK] == (
        "the reranker Broken failed (RuntimeError: quota exceeded); the search order is used"
    )


@pytest.fixture
def engine_kb(tmp_path: Path, writer_kb_file: str) -> tuple[Path, str]:
    return tmp_path, writer_kb_file


@pytest.mark.parametrize("down", [False, True])
def test_an_engine_answers_whether_the_rerank_service_is_up_or_down(engine_kb: tuple[Path, str], down: bool) -> None:
    data_dir, kb = engine_kb
    llm = ScriptedLLM([cite_sources], cycle=True)
    with RerankServer() as server:
        url = dead_endpoint() if down else server.url
        config = Settings(data_dir=data_dir, reranker="endpoint", rerank=RerankEndpoint(api_base=url))
        embed = HashEmbedding(dim=256, reads=frozenset({"en"}))
        with Engine(config, llm=llm, embed_model=embed) as engine:
            assert engine.ingest(kb).new == 26
            answer = engine.ask("How do I create a table of contents?")
    assert not answer.not_found and answer.citations
    reasons = {a["metadata"].get(RERANK_FALLBACK) for a in answer.articles}
    extra = answer_extra(answer)
    if down:
        assert reasons == {f"the reranker at {url}/rerank could not be reached; "
                           "the offline reranker's order is used"}  # fmt: skip
        assert extra["rerank_fallback"] == reasons.pop()
        # the model read the articles without it
        shown = [m for m in llm.calls[-1].messages if RERANK_FALLBACK in str(m.content)]
        assert not shown
    else:
        assert reasons == {None} and extra["rerank_fallback"] is None
        assert server.requests and server.requests[0]["query"]


def test_the_reason_is_not_in_the_json_the_model_reads() -> None:
    from ragidx.article import Article

    result = SearchResult((Article("a", "A", "u", "text", metadata={RERANK_FALLBACK: "down"}),), {})
    assert RERANK_FALLBACK not in result.to_json()


def test_a_cohere_api_error_gives_the_offline_order() -> None:
    from ragidx.retrieval.cohere_reranker import CohereChunkReranker

    class Unavailable:
        def rerank(self, **request: object) -> None:
            raise ConnectionError("Service Unavailable")

    cohere = CohereChunkReranker(client=Unavailable(), top_n=3)
    out = FallbackReranker(cohere, fallback=OfflineChunkReranker(top_n=3)).postprocess_nodes(nodes(), query_str=QUERY)
    assert [n.node.node_id for n in out] == [
        n.node.node_id for n in OfflineChunkReranker(top_n=3).postprocess_nodes(nodes(), query_str=QUERY)
    ]
    assert out[0].node.metadata[RERANK_FALLBACK] == (
        "the reranker CohereChunkReranker failed (ConnectionError: Service Unavailable); "
        "the offline reranker's order is used"
    )
