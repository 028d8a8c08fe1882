"""``[rerank]``: the rerank service ``reranker = "endpoint"`` sends the chunks to (settings only, no client).

One table for the services that answer the Cohere-style ``/rerank`` request, chosen by ``api``:

- ``cohere``: ``{model, query, documents, top_n}`` → ``{results: [{index, relevance_score}]}``. Cohere
  (``api_base = "https://api.cohere.com/v2"``), Jina (``https://api.jina.ai/v1``), vLLM
  (``http://HOST:8000/v1``), Infinity (``http://HOST:7997``), and TEI's OpenAI-style proxies;
- ``voyage``: the same with ``top_k`` and ``data`` (``https://api.voyageai.com/v1``);
- ``tei``: Text Embeddings Inference's own ``{query, texts, truncate}`` → ``[{index, score}]``
  (``http://HOST:8080``).

The request goes to ``{api_base}/rerank``. The key comes from ``RAGIDX_RERANK__API_KEY`` (or ``api_key`` in the
table), like ``[llm]``'s. When the service times out, refuses or answers something else, the answer is still
given: the chunks keep the order of the stage before (``fallback``) and the answer's articles say why
(:mod:`ragidx.retrieval.rerank_fallback`).

Example:
    >>> endpoint = RerankEndpoint(api_base="http://127.0.0.1:7997", model="bge-reranker-base")
    >>> endpoint.url, endpoint.fallback
    ('http://127.0.0.1:7997/rerank', 'offline')
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

__all__ = ["RerankApi", "RerankEndpoint"]

RerankApi = Literal["cohere", "voyage", "tei"]


class RerankEndpoint(BaseModel):
    """Where and how ``reranker = "endpoint"`` reranks (``[rerank]`` in ``ragidx.toml``, ``RAGIDX_RERANK__*``).

    Example:
        >>> RerankEndpoint(api="tei", api_base="http://tei:8080/").url
        'http://tei:8080/rerank'
    """

    model_config = ConfigDict(extra="forbid")

    api: RerankApi = Field(
        default="cohere",
        description="Request shape: 'cohere' (Cohere, Jina, vLLM, Infinity: documents, top_n, results), "
        "'voyage' (top_k, data), 'tei' (Text Embeddings Inference: texts).",
    )
    api_base: str | None = Field(
        default=None,
        description="Base URL; requests go to {api_base}/rerank (e.g. https://api.cohere.com/v2, "
        "https://api.jina.ai/v1, http://localhost:7997). Needed with reranker='endpoint'.",
    )
    model: str | None = Field(default=None, description="Model name sent with each request (TEI serves one: none).")
    api_key: SecretStr | None = Field(default=None, description="Bearer key (RAGIDX_RERANK__API_KEY); never logged.")
    timeout_s: float = Field(
        default=10.0, gt=0, description="Seconds to wait for the service's answer before using the fallback order."
    )
    connect_timeout_s: float = Field(default=2.0, gt=0, description="Seconds to wait for a connection.")
    max_retries: int = Field(
        default=1, ge=0, description="Retries of a 429 or 5xx answer (after its Retry-After, at most timeout_s)."
    )
    fallback: Literal["offline", "search"] = Field(
        default="offline",
        description="Order used when the service fails: 'offline' (ragidx's offline reranker) or 'search' (the "
        "hybrid search's order).",
    )
    cooldown_s: float = Field(
        default=30.0,
        ge=0,
        description="After a failure, seconds the service is not asked (questions get the fallback order at once "
        "instead of waiting for another timeout); 0 asks every time.",
    )

    @property
    def url(self) -> str:
        """``{api_base}/rerank`` ('' when no base is set)."""
        return f"{self.api_base.rstrip('/')}/rerank" if self.api_base else ""
