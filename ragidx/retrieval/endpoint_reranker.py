"""EndpointChunkReranker: a rerank service over HTTP (Cohere, Jina, Voyage, TEI, Infinity, vLLM) as a chunk reranker.

One POST per question to ``{api_base}/rerank`` in the shape ``api`` names (:mod:`ragidx.retrieval.rerank_endpoint`),
with httpx, sync and async. Results are mapped back by their ``index`` (never by position) through
:class:`~ragidx.retrieval.chunk_reranker.ChunkReranker`, which keeps the retrieval score beside the rerank score
and never touches the input nodes. A 429 or 5xx answer is retried ``max_retries`` times after its ``Retry-After``;
anything else that goes wrong (a timeout, a refused connection, an HTTP error, an answer that is no rerank result)
raises :class:`RerankUnavailable` with a sentence a user can act on. :func:`endpoint_reranker` wraps it in a
:class:`~ragidx.retrieval.rerank_fallback.FallbackReranker`, so a question is answered in the fallback order then.

LlamaIndex's own postprocessors for these services (``llama-index-postprocessor-jinaai-rerank``, ``-tei-rerank``,
``-voyageai-rerank``) each speak one service, have no async path, and the Jina one sets no timeout while the TEI
one rescores the nodes it is given in place; one small client covers the shared protocol instead. They still
compose: ``FallbackReranker(JinaRerank(...))`` gives one of them the same fallback.

Example:
    >>> from ragidx.retrieval.rerank_endpoint import RerankEndpoint
    >>> reranker = EndpointChunkReranker.from_endpoint(RerankEndpoint(api_base="http://127.0.0.1:7997"), top_n=5)
    >>> reranker.model_name  # nothing is sent until the first question
    'rerank@http://127.0.0.1:7997/rerank'
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import httpx
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore
from pydantic import SecretStr

from ragidx.retrieval.chunk_reranker import ChunkReranker, chunk_text
from ragidx.retrieval.rerank_endpoint import RerankApi, RerankEndpoint

__all__ = ["EndpointChunkReranker", "RerankUnavailable", "endpoint_reranker"]

RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
DEFAULT_RETRY_WAIT_S = 0.5


class RerankUnavailable(RuntimeError):
    """The rerank service gave no usable answer; the message says what happened, for the answer's reason."""


class EndpointChunkReranker(ChunkReranker):
    """Reranks chunks with a ``/rerank`` service (see the module docstring for the shapes).

    Example:
        >>> EndpointChunkReranker(url="http://tei:8080/rerank", api="tei", top_n=3).api
        'tei'
    """

    url: str = Field(description="The service's rerank URL ({api_base}/rerank).")
    api: RerankApi = Field(default="cohere", description="Request shape: cohere, voyage or tei.")
    model: str | None = Field(default=None, description="Model name sent with each request.")
    timeout_s: float = Field(default=10.0, gt=0, description="Seconds to wait for an answer.")
    connect_timeout_s: float = Field(default=2.0, gt=0, description="Seconds to wait for a connection.")
    max_retries: int = Field(default=1, ge=0, description="Retries of a 429 or 5xx answer.")

    _api_key: SecretStr | None = PrivateAttr(default=None)
    _client: httpx.Client | None = PrivateAttr(default=None)

    def __init__(self, api_key: str | SecretStr | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._api_key = SecretStr(api_key) if isinstance(api_key, str) else api_key

    @classmethod
    def from_endpoint(cls, endpoint: RerankEndpoint, *, top_n: int | None = None) -> EndpointChunkReranker:
        """The reranker ``[rerank]`` describes, keeping ``top_n`` chunks.

        Raises:
            ValueError: the table names no ``api_base``.
        """
        if not endpoint.api_base:
            raise ValueError(
                "reranker='endpoint' needs the rerank service's address: set [rerank] api_base in ragidx.toml "
                "(or RAGIDX_RERANK__API_BASE), e.g. http://localhost:7997"
            )
        return cls(
            api_key=endpoint.api_key,
            url=endpoint.url,
            api=endpoint.api,
            model=endpoint.model,
            timeout_s=endpoint.timeout_s,
            connect_timeout_s=endpoint.connect_timeout_s,
            max_retries=endpoint.max_retries,
            top_n=top_n,
        )

    @classmethod
    def class_name(cls) -> str:
        return "EndpointChunkReranker"

    @property
    def model_name(self) -> str:
        return f"{self.model or 'rerank'}@{self.url}"

    # --- the request and its answer ------------------------------------------------------------------
    def _payload(self, query: str, nodes: Sequence[NodeWithScore]) -> dict[str, Any]:
        texts = [chunk_text(n) for n in nodes]
        keep = min(self.top_n or len(nodes), len(nodes))
        if self.api == "tei":
            return {"query": query, "texts": texts, "truncate": True}
        payload: dict[str, Any] = {
            "query": query,
            "documents": texts,
            "top_k" if self.api == "voyage" else "top_n": keep,
        }
        if self.model:
            payload["model"] = self.model
        return payload

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._api_key is not None and self._api_key.get_secret_value():
            headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"
        return headers

    def _timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s)

    def _parse(self, response: httpx.Response) -> list[tuple[int, float]]:
        if response.status_code >= 400:
            raise RerankUnavailable(
                f"the reranker at {self.url} answered HTTP {response.status_code}{_detail(response)}"
            )
        try:
            data = response.json()
            rows = data if self.api == "tei" else data["data" if self.api == "voyage" else "results"]
            score_key = "score" if self.api == "tei" else "relevance_score"
            return [(int(row["index"]), float(row[score_key])) for row in rows]
        except (ValueError, TypeError, KeyError) as exc:
            raise RerankUnavailable(
                f"the reranker at {self.url} answered something that is no {self.api} rerank result "
                f"({type(exc).__name__}): check [rerank] api"
            ) from None

    def _failure(self, exc: httpx.HTTPError) -> RerankUnavailable:
        if isinstance(exc, httpx.TimeoutException):
            waited = self.connect_timeout_s if isinstance(exc, httpx.ConnectTimeout) else self.timeout_s
            return RerankUnavailable(f"the reranker at {self.url} did not answer within {waited:g} s")
        if isinstance(exc, httpx.ConnectError):
            return RerankUnavailable(f"the reranker at {self.url} could not be reached")
        return RerankUnavailable(f"the reranker at {self.url} failed: {type(exc).__name__}: {exc}")

    def _wait(self, response: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying ``response`` (None: do not retry)."""
        if response.status_code not in RETRIED_STATUSES or attempt >= self.max_retries:
            return None
        try:
            wait = float(response.headers.get("Retry-After", DEFAULT_RETRY_WAIT_S))
        except ValueError:  # an HTTP date: not worth parsing for a wait capped at timeout_s
            wait = DEFAULT_RETRY_WAIT_S
        return min(max(wait, 0.0), self.timeout_s)

    @property
    def client(self) -> httpx.Client:
        """The sync client, made on first use and kept (its connections are reused)."""
        if self._client is None:
            self._client = httpx.Client(timeout=self._timeout())
        return self._client

    def _score(self, query: str, nodes: Sequence[NodeWithScore]) -> list[tuple[int, float]]:
        payload, headers = self._payload(query, nodes), self._headers()
        attempt = 0
        while True:
            try:
                response = self.client.post(self.url, json=payload, headers=headers)
            except httpx.HTTPError as exc:
                raise self._failure(exc) from None
            wait = self._wait(response, attempt)
            if wait is None:
                return self._parse(response)
            time.sleep(wait)
            attempt += 1

    async def _ascore(self, query: str, nodes: Sequence[NodeWithScore]) -> list[tuple[int, float]]:
        payload, headers = self._payload(query, nodes), self._headers()
        # A client per call: an async client is bound to the event loop it first ran on.
        async with httpx.AsyncClient(timeout=self._timeout()) as client:
            attempt = 0
            while True:
                try:
                    response = await client.post(self.url, json=payload, headers=headers)
                except httpx.HTTPError as exc:
                    raise self._failure(exc) from None
                wait = self._wait(response, attempt)
                if wait is None:
                    return self._parse(response)
                await asyncio.sleep(wait)
                attempt += 1


def _detail(response: httpx.Response) -> str:
    """``': <the start of its body>'`` for an error answer ('' when it has none)."""
    text = " ".join(response.text.split())[:200]
    return f": {text}" if text else ""


def endpoint_reranker(
    endpoint: RerankEndpoint, *, top_n: int | None, fallback: BaseNodePostprocessor | None
) -> BaseNodePostprocessor:
    """``[rerank]``'s service, falling back to ``fallback`` (None: the search order) when it fails, and not asked
    for ``endpoint.cooldown_s`` after a failure.

    Raises:
        ValueError: the table names no ``api_base``.
    """
    from ragidx.retrieval.rerank_fallback import FallbackReranker

    primary = EndpointChunkReranker.from_endpoint(endpoint, top_n=top_n)
    return FallbackReranker(primary, fallback=fallback, cooldown_s=endpoint.cooldown_s)
