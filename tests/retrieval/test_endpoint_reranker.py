"""EndpointChunkReranker against a loopback ``/rerank`` server (tests/rerank_server.py: the Cohere, Voyage and TEI
shapes at the HTTP edge) and against real failures: 5xx, nonsense, a server that never answers, a refused port."""

from __future__ import annotations

import asyncio
import json

import pytest
from llama_index.core.schema import QueryBundle

from ragidx.article import RERANK_SCORE
from ragidx.retrieval.chunk_reranker import RETRIEVAL_SCORE
from ragidx.retrieval.endpoint_reranker import EndpointChunkReranker, RerankUnavailable
from ragidx.retrieval.rerank_endpoint import RerankEndpoint
from tests.endpoints import SilentServer, dead_endpoint
from tests.rerank_server import RerankServer
from tests.retrieval.helpers import chunk, snapshot

QUERY = "insert a table"


def nodes() -> list:
    """Search order: printing first; the rerank server prefers the chunk with most query words."""
    return [
        chunk("print", 0, 0.9, text="print the page", title="Printing"),
        chunk("toc", 0, 0.5, text="insert an index", title="Contents"),
        chunk("tables", 0, 0.1, text="insert a table here", title="Tables"),
    ]


def reranker(server: RerankServer, **kw: object) -> EndpointChunkReranker:
    endpoint = RerankEndpoint(api=server.api, api_base=server.url, **kw)  # type: ignore[arg-type]
    return EndpointChunkReranker.from_endpoint(endpoint, top_n=2)


@pytest.mark.parametrize("api", ["cohere", "voyage", "tei"])
def test_each_shape_is_sent_and_its_answer_mapped_back_by_index(api: str) -> None:
    given = nodes()
    before = snapshot(given)
    with RerankServer(api) as server:
        out = reranker(server, model="rr-1", api_key="sk-test").postprocess_nodes(given, query_str=QUERY)
    assert [n.node.node_id for n in out] == ["tables#0", "toc#0"]
    assert out[0].node.metadata[RETRIEVAL_SCORE] == 0.1 and out[0].node.metadata[RERANK_SCORE] == 1.0
    assert snapshot(given) == before  # the candidates are never touched
    sent, headers = server.requests[0], server.headers[0]
    assert headers["Authorization"] == "Bearer sk-test"
    if api == "tei":
        assert sent == {"query": QUERY, "texts": ["Printing\n\nprint the page", *sent["texts"][1:]], "truncate": True}
    else:
        assert sent["model"] == "rr-1" and sent["documents"][2] == "Tables\n\ninsert a table here"
        assert sent["top_k" if api == "voyage" else "top_n"] == 2


def test_the_async_path_sends_the_same_request() -> None:
    with RerankServer() as server:
        out = asyncio.run(reranker(server).apostprocess_nodes(nodes(), query_bundle=QueryBundle(QUERY)))
    assert [n.node.node_id for n in out] == ["tables#0", "toc#0"]
    assert "model" not in server.requests[0] and "Authorization" not in server.headers[0]  # none configured


def test_a_503_is_retried_after_its_retry_after() -> None:
    with RerankServer() as server:
        server.fail_next.append((503, {"Retry-After": "0"}, '{"error": "loading"}'))
        out = reranker(server, max_retries=1).postprocess_nodes(nodes(), query_str=QUERY)
    assert len(server.requests) == 2 and out[0].node.node_id == "tables#0"


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_5xx_past_its_retries_says_the_status_and_the_servers_words(run: str) -> None:
    with RerankServer() as server:
        server.fail_next.extend([(500, {}, '{"error": "CUDA out of memory"}')] * 2)
        r = reranker(server, max_retries=1)
        with pytest.raises(RerankUnavailable, match=r"answered HTTP 500: \{\"error\": \"CUDA out of memory\"\}"):
            if run == "sync":
                r.postprocess_nodes(nodes(), query_str=QUERY)
            else:
                asyncio.run(r.apostprocess_nodes(nodes(), query_bundle=QueryBundle(QUERY)))
    assert len(server.requests) == 2


def test_a_client_error_is_not_retried() -> None:
    with RerankServer() as server:
        server.fail_next.append((401, {}, '{"message": "invalid api token"}'))
        with pytest.raises(RerankUnavailable, match="HTTP 401: .*invalid api token"):
            reranker(server, max_retries=3).postprocess_nodes(nodes(), query_str=QUERY)
    assert len(server.requests) == 1


def test_an_answer_that_is_no_rerank_result_names_the_setting_to_check() -> None:
    with RerankServer() as server:
        server.fail_next.append((200, {}, "<html>proxy login</html>"))
        with pytest.raises(RerankUnavailable, match=r"no cohere rerank result .*check \[rerank\] api"):
            reranker(server).postprocess_nodes(nodes(), query_str=QUERY)
    with RerankServer("tei") as server:  # a TEI server configured as Cohere-style refuses the request's shape
        r = EndpointChunkReranker.from_endpoint(RerankEndpoint(api="cohere", api_base=server.url))
        with pytest.raises(RerankUnavailable, match="HTTP 422: .*missing field `texts`"):
            r.postprocess_nodes(nodes(), query_str=QUERY)


def test_a_server_that_never_answers_times_out() -> None:
    with SilentServer() as silent:
        endpoint = RerankEndpoint(api_base=silent.url, timeout_s=0.3)
        r = EndpointChunkReranker.from_endpoint(endpoint)
        with pytest.raises(RerankUnavailable, match=r"did not answer within 0.3 s"):
            r.postprocess_nodes(nodes(), query_str=QUERY)
        with pytest.raises(RerankUnavailable, match=r"did not answer within 0.3 s"):
            asyncio.run(r.apostprocess_nodes(nodes(), query_bundle=QueryBundle(QUERY)))


def test_a_refused_connection_says_the_reranker_could_not_be_reached() -> None:
    url = dead_endpoint()
    r = EndpointChunkReranker.from_endpoint(RerankEndpoint(api_base=url))
    with pytest.raises(RerankUnavailable, match=f"the reranker at {url}/rerank could not be reached"):
        r.postprocess_nodes(nodes(), query_str=QUERY)


def test_no_api_base_is_refused_with_what_to_set() -> None:
    with pytest.raises(ValueError, match=r"set \[rerank\] api_base .*RAGIDX_RERANK__API_BASE"):
        EndpointChunkReranker.from_endpoint(RerankEndpoint())


def test_the_key_is_never_in_the_components_dict_or_repr() -> None:
    r = EndpointChunkReranker.from_endpoint(RerankEndpoint(api_base="http://127.0.0.1:9", api_key="sk-secret"))
    assert "sk-secret" not in json.dumps(r.to_dict()) and "sk-secret" not in repr(r)
