"""EndpointEmbedding at the HTTP edge: a small embedding server of our own on loopback (tests/embedding_server.py)
answers as told (vectors, 429/503 with Retry-After, 400), and records what it was sent."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from ragidx.providers.embedding_endpoint import EmbeddingEndpoint, EmbeddingEndpointError
from ragidx.providers.endpoint_embedding import EndpointEmbedding
from tests.embedding_server import Server


def vector_of(text: str) -> list[float]:
    """What the server embeds a text as: its length, its 'a's and a constant (not unit length)."""
    return [float(len(text)), float(text.count("a")), 3.0]


def unit(v: list[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server(vector_of)
    yield s
    s.close()


def embedding(server: Server, sleeps: list[float] | None = None, **fields: Any) -> EndpointEmbedding:
    fields.setdefault("api_base", f"{server.url}/v1" if fields.get("kind", "openai") == "openai" else server.url)
    emb = EndpointEmbedding(EmbeddingEndpoint(model=fields.pop("model", "test-model"), **fields))
    if sleeps is not None:
        emb._sleep = sleeps.append  # the waits it chose, not waited
    return emb


def test_vectors_in_order_unit_length_and_concurrent_requests(server: Server) -> None:
    server.barrier = threading.Barrier(3)  # three requests must be in flight together, or each waits 10 s
    emb = embedding(server, batch_size=2, concurrency=3, prefix="none")
    texts = [f"text {'a' * i}" for i in range(6)]

    vectors = emb.get_text_embedding_batch(texts)

    assert [pytest.approx(v) for v in vectors] == [unit(vector_of(t)) for t in texts]
    assert [len(b["input"]) for b in server.bodies] == [2, 2, 2]
    assert not server.barrier.broken


def test_model_family_prefixes_and_request_fields(server: Server) -> None:
    emb = embedding(
        server,
        model="intfloat/e5-small-v2",
        query_params={"input_type": "query"},
        document_params={"input_type": "passage"},
    )

    emb.get_query_embedding("how to print")
    emb.get_text_embedding("Printing a page")

    assert server.texts() == ["query: how to print", "passage: Printing a page"]
    assert [b["input_type"] for b in server.bodies] == ["query", "passage"]
    assert [b["model"] for b in server.bodies] == ["intfloat/e5-small-v2"] * 2


def test_429_and_503_are_retried_after_retry_after(server: Server) -> None:
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    server.script = [
        (429, {"Retry-After": "7"}, {"error": {"message": "slow down"}}),
        (503, {"Retry-After": soon}, {"error": {"message": "loading"}}),
        (502, {}, {"error": {"message": "bad gateway"}}),
    ]
    sleeps: list[float] = []
    emb = embedding(server, sleeps=sleeps, prefix="none")

    vector = emb.get_query_embedding("abc")

    assert vector == pytest.approx(unit(vector_of("abc")))
    assert len(server.bodies) == 4
    assert sleeps[0] == 7.0  # the server's number of seconds
    assert 25 < sleeps[1] <= 30  # the server's date
    assert 1.5 <= sleeps[2] <= 2.0  # no Retry-After: the third backoff step (2 s, less jitter)


def test_retry_after_is_capped_and_retries_end(server: Server) -> None:
    server.script = [(503, {"Retry-After": "3600"}, {"error": {"message": "down"}})] * 3
    sleeps: list[float] = []
    emb = embedding(server, sleeps=sleeps, max_retries=2, max_retry_wait_s=5)

    with pytest.raises(EmbeddingEndpointError, match=r"answered HTTP 503 after 3 attempts \(down\)"):
        emb.get_query_embedding("abc")

    assert sleeps == [5.0, 5.0]


def test_a_refused_request_is_not_retried_and_says_what_to_do(server: Server) -> None:
    server.script = [(400, {}, {"error": {"message": "input is too long for this model"}})]
    emb = embedding(server, api_key="sk-very-secret", prefix="none")

    with pytest.raises(EmbeddingEndpointError) as caught:
        emb.get_text_embedding("a" * 50)

    message = str(caught.value)
    assert "HTTP 400 (input is too long for this model)" in message
    assert "max_input_tokens" in message
    assert "sk-very-secret" not in message and "sk-very-secret" not in repr(emb)
    assert len(server.bodies) == 1
    assert server.headers[0]["Authorization"] == "Bearer sk-very-secret"


def test_no_server_is_reported_after_its_retries() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps: list[float] = []
    emb = EndpointEmbedding(
        EmbeddingEndpoint(model="m", api_base=f"http://127.0.0.1:{port}/v1", max_retries=1, timeout_s=5)
    )
    emb._sleep = sleeps.append

    with pytest.raises(EmbeddingEndpointError, match="did not answer after 2 attempts"):
        emb.get_query_embedding("x")
    assert len(sleeps) == 1


def test_a_text_over_the_limit_is_embedded_in_pieces_never_cut(server: Server) -> None:
    emb = embedding(server, max_input_tokens=8, prefix="none")
    long = " ".join(["word"] * 20)  # 20 cl100k tokens

    vector = emb.get_text_embedding_batch(["short", long])

    enc = emb._tokenizer()
    pieces = server.texts()[1:]
    assert server.texts()[0] == "short"
    assert [len(enc.encode(p)) for p in pieces] == [8, 8, 4]
    assert "".join(pieces) == long  # every word sent, none dropped
    weights = [8, 8, 4]
    mean = [sum(w * unit(vector_of(p))[i] for p, w in zip(pieces, weights, strict=True)) for i in range(3)]
    assert vector[1] == pytest.approx(unit(mean))
    assert emb.split_texts == 1


def test_a_text_over_the_limit_can_be_refused(server: Server) -> None:
    emb = embedding(server, max_input_tokens=8, too_long="error")

    with pytest.raises(EmbeddingEndpointError, match="20 tokens is over the embedding model's limit of 8"):
        emb.get_text_embedding(" ".join(["word"] * 20))
    assert server.bodies == []


def test_tei_native_api_never_truncates(server: Server) -> None:
    emb = embedding(server, kind="tei", prefix="none")

    assert emb.get_text_embedding("abc") == pytest.approx(unit(vector_of("abc")))
    assert server.paths == ["/embed"]
    assert server.bodies[0]["truncate"] is False


def test_ollama_native_api_never_truncates(server: Server) -> None:
    emb = embedding(server, kind="ollama", model="nomic-embed-text", dimensions=3)

    assert emb.get_query_embedding("abc") == pytest.approx(unit(vector_of("search_query: abc")))
    assert server.paths == ["/api/embed"]
    assert server.bodies[0] == {
        "model": "nomic-embed-text",
        "input": ["search_query: abc"],
        "truncate": False,
        "dimensions": 3,
    }


def test_a_missing_integration_says_what_to_install() -> None:
    pytest.importorskip("cohere")  # the SDK is there; LlamaIndex's class is the separate package
    try:
        import llama_index.embeddings.cohere  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("llama-index-embeddings-cohere is installed here")
    emb = EndpointEmbedding(EmbeddingEndpoint(model="embed-english-v3.0", kind="cohere"))

    with pytest.raises(RuntimeError, match="pip install llama-index-embeddings-cohere"):
        emb.get_query_embedding("x")


def test_async_query_embedding(server: Server) -> None:
    emb = embedding(server, prefix="none")

    assert asyncio.run(emb.aget_query_embedding("abc")) == pytest.approx(unit(vector_of("abc")))


def test_per_token_vectors_are_refused_with_the_fix(server: Server) -> None:
    per_token = {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [[0.1, 0.2], [0.3, 0.4]]}]}
    server.script = [(200, {}, per_token)]  # llama.cpp's server over a model without pooling answers so
    emb = embedding(server, prefix="none")

    with pytest.raises(EmbeddingEndpointError, match="a vector per token, not one per text.*--pooling mean"):
        emb.get_query_embedding("abc")
