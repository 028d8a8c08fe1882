"""CohereChunkReranker: Cohere's rerank API as a chunk reranker (sync and async).

Cohere answers with ``results[i].index`` (a position in the documents we sent) and
``results[i].relevance_score``, ordered by score and cut to ``top_n``. Results are mapped back by
that index, never by their position in the answer. The clients are created on first use (needs the
``cohere`` extra: ``pip install 'ragidx[cohere]'``); tests pass fake clients instead.

Unlike ``llama_index.postprocessor.cohere_rerank.CohereRerank`` (which the extra also installs), this
keeps the retrieval score beside the rerank score, has a real async path and a cheap constructor.

Example:
    >>> reranker = CohereChunkReranker(api_key="...", model="rerank-v3.5", top_n=30)  # no network yet
    >>> reranker.model
    'rerank-v3.5'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import NodeWithScore
from pydantic import SecretStr

from ragidx.retrieval.chunk_reranker import ChunkReranker, chunk_text

__all__ = ["CohereChunkReranker"]


class CohereChunkReranker(ChunkReranker):
    """Reranks chunks with Cohere ``/v2/rerank``.

    Example:
        >>> CohereChunkReranker(api_key="k", client=object()).model_name
        'cohere/rerank-v3.5'
    """

    model: str = Field(default="rerank-v3.5", description="Cohere rerank model.")
    base_url: str | None = Field(default=None, description="API base URL; None = Cohere's default.")
    timeout_s: float = Field(default=30.0, gt=0, description="Per-request timeout in seconds.")
    max_retries: int = Field(default=3, ge=0, description="Retries on transient errors.")
    max_tokens_per_doc: int | None = Field(default=None, ge=1, description="Truncate each chunk to this.")

    _api_key: SecretStr | None = PrivateAttr(default=None)
    _client: Any = PrivateAttr(default=None)
    _aclient: Any = PrivateAttr(default=None)

    def __init__(
        self,
        api_key: str | SecretStr | None = None,
        *,
        client: Any = None,
        aclient: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if api_key is None and client is None and aclient is None:
            raise ValueError(
                "CohereChunkReranker needs an API key (Settings.cohere_api_key / RAGIDX_COHERE_API_KEY) "
                "or a client; use reranker='offline' to rerank without one"
            )
        self._api_key = SecretStr(api_key) if isinstance(api_key, str) else api_key
        self._client = client
        self._aclient = aclient

    @classmethod
    def class_name(cls) -> str:
        return "CohereChunkReranker"

    @property
    def model_name(self) -> str:
        return f"cohere/{self.model}"

    def _key(self) -> str | None:
        return self._api_key.get_secret_value() if self._api_key is not None else None

    @property
    def client(self) -> Any:
        if self._client is None:
            from cohere import ClientV2

            self._client = ClientV2(api_key=self._key(), base_url=self.base_url, timeout=self.timeout_s)
        return self._client

    @property
    def aclient(self) -> Any:
        if self._aclient is None:
            from cohere import AsyncClientV2

            self._aclient = AsyncClientV2(api_key=self._key(), base_url=self.base_url, timeout=self.timeout_s)
        return self._aclient

    def _request(self, query: str, nodes: Sequence[NodeWithScore]) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "query": query,
            "documents": [chunk_text(n) for n in nodes],
            "top_n": min(self.top_n or len(nodes), len(nodes)),
            "request_options": {"max_retries": self.max_retries},
        }
        if self.max_tokens_per_doc is not None:
            request["max_tokens_per_doc"] = self.max_tokens_per_doc
        return request

    def _score(self, query: str, nodes: Sequence[NodeWithScore]) -> list[tuple[int, float]]:
        response = self.client.rerank(**self._request(query, nodes))
        return [(int(r.index), float(r.relevance_score)) for r in response.results]

    async def _ascore(self, query: str, nodes: Sequence[NodeWithScore]) -> list[tuple[int, float]]:
        response = await self.aclient.rerank(**self._request(query, nodes))
        return [(int(r.index), float(r.relevance_score)) for r in response.results]
