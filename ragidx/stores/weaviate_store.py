"""Weaviate chunk store: ``llama-index-vector-stores-weaviate`` with the gaps ragidx needs filled.

Fixes over the integration as shipped (1.7.x):

- ``alpha=0.0`` (keyword only) is honoured; the integration turns it into 0.5 (``alpha or 0.5``);
- ``query(..., fusion="rrf")`` asks for ranked fusion, otherwise relative score fusion;
- a tenant is a property filter on every query and delete (the integration has no tenants);
- ``delete_articles`` removes the chunks of many articles in one ``delete_many``;
- ``finalize`` is a no-op (Weaviate indexes as it writes), so ingestion has one code path.

Example:
    >>> import weaviate                                                   # doctest: +SKIP
    >>> client = weaviate.connect_to_local()                               # doctest: +SKIP
    >>> store = WeaviateChunkStore(weaviate_client=client, index_name="Articles", tenant="acme")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import weaviate.classes as wvc
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode
from llama_index.vector_stores.weaviate import WeaviateVectorStore
from pydantic import PrivateAttr

DEFAULT_ALPHA = 0.5


class WeaviateChunkStore(WeaviateVectorStore):
    """A Weaviate collection of chunks, optionally scoped to one tenant value.

    Example:
        >>> from unittest.mock import MagicMock; import weaviate
        >>> store = WeaviateChunkStore(weaviate_client=MagicMock(spec=weaviate.WeaviateClient),
        ...                            index_name="Articles")  # doctest: +SKIP
    """

    _tenant: str | None = PrivateAttr(default=None)

    def __init__(self, *args: Any, tenant: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tenant = tenant

    @classmethod
    def class_name(cls) -> str:
        return "WeaviateChunkStore"

    @property
    def tenant(self) -> str | None:
        return self._tenant

    def _tenant_filter(self) -> Any | None:
        if self._tenant is None:
            return None
        return wvc.query.Filter.by_property("tenant").equal(self._tenant)

    def _and_tenant(self, flt: Any | None) -> Any | None:
        tenant = self._tenant_filter()
        if tenant is None:
            return flt
        return tenant if flt is None else flt & tenant

    def get_query_parameters(
        self, query: VectorStoreQuery, property_types: dict[str, Any] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        fusion = kwargs.pop("fusion", None)  # ours, not a query.hybrid argument
        params: dict[str, Any] = super().get_query_parameters(query, property_types=property_types, **kwargs)
        if query.mode == VectorStoreQueryMode.HYBRID and query.query_str:
            params["alpha"] = DEFAULT_ALPHA if query.alpha is None else query.alpha
            params["fusion_type"] = (
                wvc.query.HybridFusion.RANKED if fusion == "rrf" else wvc.query.HybridFusion.RELATIVE_SCORE
            )
        elif query.mode in (VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.SPARSE):
            params["alpha"] = 0.0
        else:
            params["alpha"] = 1.0
        if query.hybrid_top_k:
            params["limit"] = max(query.similarity_top_k, query.hybrid_top_k)
        params["filters"] = self._and_tenant(params.get("filters"))
        return params

    def delete_articles(self, kb_ids: Sequence[str]) -> None:
        """Delete every chunk of these articles (within the tenant) in one request."""
        if not kb_ids:
            return
        collection = self.client.collections.get(self.index_name)
        by_article = wvc.query.Filter.by_property("ref_doc_id").contains_any(list(kb_ids))
        collection.data.delete_many(where=self._and_tenant(by_article) or by_article)

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        self.delete_articles([ref_doc_id])

    def finalize(self) -> None:
        """Nothing to build: Weaviate indexes on write."""

    def count(self) -> int:
        collection = self.client.collections.get(self.index_name)
        result = collection.aggregate.over_all(total_count=True, filters=self._tenant_filter())
        return int(result.total_count or 0)
