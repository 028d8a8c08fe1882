"""A LlamaIndex embedding over an embedding service (``[embedding]``: :mod:`ragidx.providers.embedding_endpoint`).

The request itself is LlamaIndex's where it fits: ``OpenAIEmbedding`` for ``POST /v1/embeddings`` (its own retries
off), ``CohereEmbedding`` and ``VoyageEmbedding`` where installed. Written here: Text Embeddings Inference's
``/embed`` and Ollama's ``/api/embed`` (LlamaIndex's TEI class reads an error reply as vectors and both truncate
long inputs by default; these send ``truncate: false``), and, once around every kind, what the classes lack:

- a model family's query and document prefixes (e5, bge, nomic, instructor; :func:`preset_prefixes`);
- requests of ``batch_size`` texts sent ``concurrency`` at a time, results in order;
- one retry policy: 408, 409, 429 and 5xx replies and connection failures are sent again after exponential backoff,
  or after the server's ``Retry-After`` (seconds or a date; LlamaIndex's honours it on 429 only);
- the model's input limit: a text over ``max_input_tokens`` is embedded in pieces whose vectors are averaged (or
  refused), never cut by the server; a service that refuses one says so with the fix;
- unit-length vectors, as the bundled models give.

Example:
    >>> emb = EndpointEmbedding(EmbeddingEndpoint(model="bge-small-en-v1.5", api_base="http://127.0.0.1:9/v1"))
    >>> emb.index_name, emb.query_prefix[:9]
    ('bge-small-en-v1.5@openai', 'Represent')
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import Field, PrivateAttr

from ragidx.providers.embedding_endpoint import (
    DEFAULT_API_BASES,
    MAX_BACKOFF_S,
    RETRY_STATUSES,
    EmbeddingEndpoint,
    EmbeddingEndpointError,
    endpoint_identity,
    preset_prefixes,
)

__all__ = ["EndpointEmbedding", "Request", "build_endpoint_embedding"]

logger = logging.getLogger(__name__)

_NO_KEY = "-"  # a keyless local server; never the OPENAI_API_KEY of the environment
_INSTALL = {
    "cohere": ("llama_index.embeddings.cohere", "CohereEmbedding", "llama-index-embeddings-cohere"),
    "voyage": ("llama_index.embeddings.voyageai", "VoyageEmbedding", "llama-index-embeddings-voyageai"),
}

Request = Callable[[list[str], bool], list[list[float]]]
"""One request: texts → their vectors, in order (``True``: they are questions)."""


class EndpointEmbedding(BaseEmbedding):
    """A LlamaIndex embedding over an embedding service (see the module's docstring for what it adds).

    Args:
        endpoint: the ``[embedding]`` settings.
        request: the raw request (tests, other services); None: the one ``endpoint.kind`` names.

    Example:
        >>> emb = EndpointEmbedding(EmbeddingEndpoint(model="m", api_base="http://127.0.0.1:9/v1"))
        >>> emb.model_name, emb.embed_batch_size
        ('m', 64)
    """

    endpoint: EmbeddingEndpoint
    query_prefix: str = ""
    document_prefix: str = ""
    split_texts: int = Field(default=0, description="Texts embedded in pieces so far (over max_input_tokens).")

    _request: Request | None = PrivateAttr(default=None)
    _pool: ThreadPoolExecutor | None = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _encoding: Any = PrivateAttr(default=None)
    _sleep: Callable[[float], None] = PrivateAttr(default=time.sleep)

    def __init__(self, endpoint: EmbeddingEndpoint, request: Request | None = None, **kwargs: Any) -> None:
        query, document = preset_prefixes(endpoint)
        super().__init__(
            endpoint=endpoint,
            model_name=endpoint.model,
            # the core hands this many texts to one _get_text_embeddings call, sent as `concurrency` requests
            embed_batch_size=endpoint.batch_size * endpoint.concurrency,
            query_prefix=query,
            document_prefix=document,
            **kwargs,
        )
        self._request = request

    @classmethod
    def class_name(cls) -> str:
        return "EndpointEmbedding"

    @property
    def index_name(self) -> str:
        """What an index built with this model records (``"<model>@<kind>"``)."""
        return endpoint_identity(self.endpoint)

    @property
    def languages(self) -> frozenset[str] | None:
        """Not known for a service's model: no language warning is given."""
        return None

    # --- LlamaIndex's interface --------------------------------------------------------------------
    def _get_query_embedding(self, query: str) -> Embedding:
        return self._embed([self.query_prefix + query], query=True)[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await asyncio.to_thread(self._get_query_embedding, query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return await asyncio.to_thread(self._get_text_embedding, text)

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._embed([self.document_prefix + t for t in texts], query=False)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)

    # --- the parts ---------------------------------------------------------------------------------
    def _embed(self, texts: list[str], *, query: bool) -> list[Embedding]:
        """Vectors of ``texts`` (prefixed already): long ones in pieces, requests of ``batch_size`` sent
        ``concurrency`` at a time, each retried, results in the order of ``texts``, unit length."""
        pieces, owners = self._pieces(texts)
        size = self.endpoint.batch_size
        batches = [pieces[i : i + size] for i in range(0, len(pieces), size)]
        if len(batches) > 1 and self.endpoint.concurrency > 1:
            vectors = [v for batch in self._executor().map(lambda b: self._send(b, query), batches) for v in batch]
        else:
            vectors = [v for b in batches for v in self._send(b, query)]
        return _combine(vectors, owners, len(texts))

    def _pieces(self, texts: list[str]) -> tuple[list[str], list[tuple[int, int]]]:
        """Each text, or its pieces when it is over ``max_input_tokens``, with (text index, tokens) of each."""
        limit = self.endpoint.max_input_tokens
        if limit is None:
            return texts, [(i, 1) for i in range(len(texts))]
        enc = self._tokenizer()
        pieces: list[str] = []
        owners: list[tuple[int, int]] = []
        split = 0
        for i, text in enumerate(texts):
            tokens = enc.encode(text, disallowed_special=())
            if len(tokens) <= limit:
                pieces.append(text)
                owners.append((i, max(len(tokens), 1)))
                continue
            if self.endpoint.too_long == "error":
                raise EmbeddingEndpointError(
                    f"a text of {len(tokens)} tokens is over the embedding model's limit of {limit} "
                    "(embedding.max_input_tokens): lower chunk_tokens, or set embedding.too_long = 'split' to "
                    "embed it in pieces"
                )
            split += 1
            for start in range(0, len(tokens), limit):
                part = tokens[start : start + limit]
                pieces.append(enc.decode(part))
                owners.append((i, len(part)))
        if split:
            with self._lock:
                self.split_texts += split
            logger.warning(
                "%d text(s) over the embedding model's %d-token limit embedded in pieces (averaged)", split, limit
            )
        return pieces, owners

    def _tokenizer(self) -> Any:
        if self._encoding is None:
            import tiktoken
            from llama_index.core.utils import get_tokenizer

            get_tokenizer()  # points tiktoken at the encodings llama-index ships (offline)
            self._encoding = tiktoken.get_encoding("cl100k_base")
        return self._encoding

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.endpoint.concurrency, thread_name_prefix="ragidx-embed")
            return self._pool

    def _send(self, texts: list[str], query: bool) -> list[list[float]]:
        """One request, sent again after a failure worth retrying (see :data:`RETRY_STATUSES`)."""
        request = self._request or self._build_request()
        attempt = 0
        while True:
            try:
                vectors = request(texts, query)
            except EmbeddingEndpointError:
                raise
            except Exception as exc:
                status, retry_after = _failure(exc)
                retryable = status in RETRY_STATUSES or (status is None and _is_connection_error(exc))
                if not retryable or attempt >= self.endpoint.max_retries:
                    raise self._error(exc, status, attempt) from exc
                wait = retry_after if retry_after is not None else _backoff(attempt)
                wait = min(max(wait, 0.0), self.endpoint.max_retry_wait_s)
                logger.warning(
                    "embedding request failed (%s); retry %d of %d in %.1f s",
                    f"HTTP {status}" if status else type(exc).__name__,
                    attempt + 1,
                    self.endpoint.max_retries,
                    wait,
                )
                self._sleep(wait)
                attempt += 1
                continue
            if len(vectors) != len(texts):
                raise EmbeddingEndpointError(
                    f"the embedding service at {self._where()} returned {len(vectors)} vectors for {len(texts)} "
                    "texts: check that it serves an embedding model"
                )
            if any(not v or not isinstance(v[0], (int, float)) for v in vectors):
                raise EmbeddingEndpointError(
                    f"the embedding service at {self._where()} returned a vector per token, not one per text: "
                    "start it with pooling (llama.cpp's server: --pooling mean, or an embedding model whose GGUF "
                    "names its pooling)"
                )
            return vectors

    def _build_request(self) -> Request:
        with self._lock:
            if self._request is None:
                self._request = _REQUESTS[self.endpoint.kind](self.endpoint)
            return self._request

    def _where(self) -> str:
        return self.endpoint.api_base or DEFAULT_API_BASES.get(self.endpoint.kind, f"{self.endpoint.kind}'s API")

    def _error(self, exc: Exception, status: int | None, attempt: int) -> EmbeddingEndpointError:
        tries = f" after {attempt + 1} attempts" if attempt else ""
        if status is None:
            return EmbeddingEndpointError(
                f"the embedding service at {self._where()} did not answer{tries} ({type(exc).__name__}): check "
                "embedding.api_base and that the service runs"
            )
        said = _server_message(exc)
        hint = ""
        if status in (401, 403):
            hint = ": check embedding.api_key (RAGIDX_EMBEDDING__API_KEY)"
        elif status == 404:
            hint = ": check embedding.api_base, embedding.kind and embedding.model"
        elif status in (400, 413, 422):
            hint = (
                ": if the input is too long, set embedding.max_input_tokens to the model's limit (longer texts "
                "are then embedded in pieces) or lower chunk_tokens"
            )
        return EmbeddingEndpointError(
            f"the embedding service at {self._where()} answered HTTP {status}{tries}"
            f"{f' ({said})' if said else ''}{hint}"
        )


def _combine(vectors: Sequence[Sequence[float]], owners: list[tuple[int, int]], n: int) -> list[Embedding]:
    """Each text's vector: its pieces' unit vectors averaged by their tokens, made unit length."""
    out: list[list[float] | None] = [None] * n
    for vector, (i, weight) in zip(vectors, owners, strict=True):
        unit = _unit(vector)
        acc = out[i]
        out[i] = [x * weight for x in unit] if acc is None else [a + x * weight for a, x in zip(acc, unit, strict=True)]
    return [_unit(v or []) for v in out]


def _unit(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [float(x) / norm for x in vector] if norm > 0 else [float(x) for x in vector]


def _backoff(attempt: int) -> float:
    """0.5 s, 1 s, 2 s ... (with jitter: concurrent requests do not come back at the same moment)."""
    return min(MAX_BACKOFF_S, 0.5 * 2**attempt) * random.uniform(0.75, 1.0)


def _failure(exc: BaseException) -> tuple[int | None, float | None]:
    """The HTTP status of a failed request and the seconds its ``Retry-After`` asks (None: not told)."""
    response = getattr(exc, "response", None)
    status = getattr(exc, "status_code", None) or getattr(response, "status_code", None)
    headers = getattr(response, "headers", None) or getattr(exc, "headers", None) or {}
    try:
        raw = headers.get("retry-after") or headers.get("Retry-After")
    except AttributeError:
        raw = None
    return (int(status) if isinstance(status, int) else None), _retry_after(raw)


def _retry_after(raw: str | None) -> float | None:
    """``Retry-After`` in seconds: a number, or an HTTP date (RFC 9110)."""
    if not raw:
        return None
    try:
        return max(float(raw), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def _is_connection_error(exc: BaseException) -> bool:
    import httpx

    names = {c.__name__ for c in type(exc).__mro__}
    return isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError)) or bool(
        names & {"APIConnectionError", "APITimeoutError"}
    )


def _server_message(exc: BaseException) -> str:
    """The service's own words about a refused request (short, one line), if it sent any."""
    from ragidx.safe_text import printable

    response = getattr(exc, "response", None)
    text = ""
    try:
        body = response.json() if response is not None else None
        if isinstance(body, dict):
            err = body.get("error", body.get("message", body.get("detail")))
            text = str(err.get("message", err) if isinstance(err, dict) else err or "")
        elif body is not None:
            text = str(body)
    except Exception:
        text = getattr(response, "text", "") or ""
    return printable(" ".join(text.split()))[:200]


# --- the requests of each kind ----------------------------------------------------------------------


def _openai_request(endpoint: EmbeddingEndpoint) -> Request:
    """``POST /v1/embeddings`` through LlamaIndex's ``OpenAIEmbedding`` (its own retries off: ours decide)."""
    from llama_index.embeddings.openai import OpenAIEmbedding

    def client(params: dict[str, Any]) -> Any:
        return OpenAIEmbedding(
            model_name=endpoint.model,
            api_base=endpoint.api_base or DEFAULT_API_BASES["openai"],
            api_key=endpoint.api_key.get_secret_value() if endpoint.api_key else _NO_KEY,
            dimensions=endpoint.dimensions,
            additional_kwargs={"extra_body": dict(params)} if params else None,
            max_retries=0,
            timeout=endpoint.timeout_s,
            embed_batch_size=endpoint.batch_size,
        )

    documents = client(endpoint.document_params)
    questions = client(endpoint.query_params) if endpoint.query_params != endpoint.document_params else documents

    def request(texts: list[str], query: bool) -> list[list[float]]:
        return list((questions if query else documents)._get_text_embeddings(texts))

    return request


def _http_request(endpoint: EmbeddingEndpoint, path: str, body: Callable[[list[str]], dict[str, Any]]) -> Request:
    """A JSON ``POST`` to ``api_base + path`` over one pooled connection (thread-safe)."""
    import httpx

    headers = {"Authorization": f"Bearer {endpoint.api_key.get_secret_value()}"} if endpoint.api_key else {}
    http = httpx.Client(timeout=endpoint.timeout_s, headers=headers)
    url = (endpoint.api_base or DEFAULT_API_BASES[endpoint.kind]).rstrip("/") + path

    def request(texts: list[str], query: bool) -> list[list[float]]:
        response = http.post(url, json=body(texts))
        response.raise_for_status()
        data = response.json()
        return list(data["embeddings"] if isinstance(data, dict) else data)

    return request


def _tei_request(endpoint: EmbeddingEndpoint) -> Request:
    """Text Embeddings Inference's ``POST /embed``: a list of vectors; never truncated by the server."""
    return _http_request(endpoint, "/embed", lambda texts: {"inputs": texts, "truncate": False, "normalize": True})


def _ollama_request(endpoint: EmbeddingEndpoint) -> Request:
    """Ollama's ``POST /api/embed``: ``{"embeddings": [...]}``; ``truncate: false`` makes a long input an error."""

    def body(texts: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {"model": endpoint.model, "input": texts, "truncate": False}
        if endpoint.dimensions:
            out["dimensions"] = endpoint.dimensions
        return out

    return _http_request(endpoint, "/api/embed", body)


def _integration(kind: str) -> Any:
    module, name, package = _INSTALL[kind]
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise RuntimeError(f"embedding.kind = {kind!r} needs LlamaIndex's integration: pip install {package}") from exc


def _cohere_request(endpoint: EmbeddingEndpoint) -> Request:
    """Cohere's embed API through LlamaIndex's ``CohereEmbedding`` (search_query / search_document input types)."""
    cls = _integration("cohere")
    emb = cls(
        api_key=endpoint.api_key.get_secret_value() if endpoint.api_key else None,
        model_name=endpoint.model,
        truncate="NONE",
        base_url=endpoint.api_base,
        timeout=endpoint.timeout_s,
        embed_batch_size=endpoint.batch_size,
    )
    return _llama_index_request(emb)


def _voyage_request(endpoint: EmbeddingEndpoint) -> Request:
    """Voyage's embed API through LlamaIndex's ``VoyageEmbedding`` (query / document input types)."""
    cls = _integration("voyage")
    kwargs: dict[str, Any] = {"truncation": False}
    if endpoint.dimensions:
        kwargs["output_dimension"] = endpoint.dimensions
    emb = cls(
        model_name=endpoint.model,
        voyage_api_key=endpoint.api_key.get_secret_value() if endpoint.api_key else None,
        embed_batch_size=endpoint.batch_size,
        **kwargs,
    )
    return _llama_index_request(emb)


def _llama_index_request(emb: BaseEmbedding) -> Request:
    def request(texts: list[str], query: bool) -> list[list[float]]:
        if query:
            return [emb._get_query_embedding(t) for t in texts]
        return list(emb._get_text_embeddings(texts))

    return request


_REQUESTS: dict[str, Callable[[EmbeddingEndpoint], Request]] = {
    "openai": _openai_request,
    "tei": _tei_request,
    "ollama": _ollama_request,
    "cohere": _cohere_request,
    "voyage": _voyage_request,
}


def build_endpoint_embedding(endpoint: EmbeddingEndpoint) -> EndpointEmbedding:
    """The embedding for ``endpoint`` (no connection is made until the first text)."""
    return EndpointEmbedding(endpoint)
