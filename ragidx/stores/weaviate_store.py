"""Weaviate chunk store: ``llama-index-vector-stores-weaviate`` with the gaps ragidx needs filled.

Fixes over the integration as shipped (1.7.x):

- ``alpha=0.0`` (keyword only) is honoured; the integration turns it into 0.5 (``alpha or 0.5``);
- ``query(..., fusion="rrf")`` asks for ranked fusion, otherwise relative score fusion;
- a tenant is a property filter on every query and delete (the integration has no tenants);
- ``delete_articles`` removes the chunks of many articles in one ``delete_many``;
- ``finalize`` is a no-op (Weaviate indexes as it writes), so ingestion has one code path;
- ``vector_dim`` reads the width of the collection's vectors back (so ``embed_model="auto"`` finds the model
  the collection was built with, as on LanceDB), and vectors of another width are refused with
  :class:`EmbeddingMismatch` before a write or a query instead of Weaviate's own error; each chunk also
  carries the ``embed_model`` that embedded it (``embed_model_name``), which tells models of the same width
  apart (multilingual-e5 and MiniLM);
- keyword search is language-aware, as on LanceDB: each chunk gets a ``search_terms`` property (its
  title and text as ``ragidx.terms`` stems in the chunk's language, space-separated), and BM25 runs on
  that property alone with the query stemmed in its own language (detected among the collection's
  languages). The property's default ``word`` tokenization splits the stems on spaces and changes
  nothing else (they are lower-case already). A collection written before this has no such property:
  re-ingest it into a new collection;
- filters are translated here, natively (``filters_to_weaviate``): ==, !=, <, >, <=, >=, in, nin, any, all,
  contains and nested AND/OR/NOT (the integration has no in/nin/NOT); they go into the query itself, before
  its limit, ANDed with the tenant;
- metadata is declared with types: each article metadata field gets a property the first time an article
  carries it (text with ``field`` tokenization, so ``product == "writer"`` matches the whole value and not a
  word of "O'Reilly's writer"; int, number, boolean, text[]); permissions are the ``allowed`` (text[],
  ``field`` tokenization: ``user:ann`` is one token) and ``public`` properties (:mod:`ragidx.stores.access`).
  A collection whose ``allowed`` was tokenized otherwise is refused: its filter could match a part of a name;
- ``update_article_metadata`` gives an article's chunks new metadata and permissions in place (no embedding).

Example:
    >>> import weaviate                                                   # doctest: +SKIP
    >>> client = weaviate.connect_to_local()                               # doctest: +SKIP
    >>> store = WeaviateChunkStore(weaviate_client=client, index_name="Articles", tenant="acme")  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import weaviate.classes as wvc
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)
from llama_index.vector_stores.weaviate import WeaviateVectorStore
from llama_index.vector_stores.weaviate.utils import get_data_object
from pydantic import PrivateAttr

from ragidx.language import detect_language
from ragidx.stores.access import ALLOWED, PUBLIC, allowed_of
from ragidx.stores.lancedb_store import EmbeddingMismatch, chunk_terms
from ragidx.terms import terms

DEFAULT_ALPHA = 0.5
TERMS_PROPERTY = "search_terms"
EMBED_MODEL_PROPERTY = "embed_model"


class WeaviateChunkStore(WeaviateVectorStore):
    """A Weaviate collection of chunks, optionally scoped to one tenant value.

    Example:
        >>> from unittest.mock import MagicMock; import weaviate
        >>> store = WeaviateChunkStore(weaviate_client=MagicMock(spec=weaviate.WeaviateClient),
        ...                            index_name="Articles")  # doctest: +SKIP
    """

    _tenant: str | None = PrivateAttr(default=None)
    _languages: frozenset[str] | None = PrivateAttr(default=None)
    _dim: int | None = PrivateAttr(default=None)
    _recorded_model: str | None = PrivateAttr(default=None)
    _model_name: str | None = PrivateAttr(default=None)
    _properties: dict[str, str] | None = PrivateAttr(default=None)

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
        if query.query_embedding:
            self.check_embedding_dim(len(query.query_embedding))
        filters = query.filters
        bare = dataclasses.replace(query, filters=None)  # translated below, with in/nin/NOT and types
        params: dict[str, Any] = super().get_query_parameters(bare, property_types=property_types, **kwargs)
        if filters is not None and filters.filters:
            params["filters"] = filters_to_weaviate(filters, property_types)
        if query.query_str:
            params["query"] = self.query_terms(query.query_str)
            params["query_properties"] = [TERMS_PROPERTY]
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

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Write the chunks with their vectors and a ``search_terms`` property (see the module docstring)."""
        widths = {len(n.embedding) for n in nodes if n.embedding}
        for width in widths:
            self.check_embedding_dim(width)
        self._declare_properties([n.metadata for n in nodes])
        batch_writer = self._custom_batch or self.client.batch.dynamic()
        with batch_writer as batch:
            for node in nodes:
                data_object: Any = get_data_object(node=node, text_key=self.text_key)  # a DataObject (mistyped)
                meta = node.metadata
                properties = {
                    **data_object.properties,
                    **_access_properties(meta),
                    TERMS_PROPERTY: chunk_terms(
                        str(meta.get("title") or ""), node.get_content(), meta.get("language") or None
                    ),
                }
                if self._model_name:
                    properties[EMBED_MODEL_PROPERTY] = self._model_name
                batch.add_object(
                    collection=self.index_name,
                    properties=properties,
                    uuid=data_object.uuid,
                    vector=data_object.vector,
                )
        self._languages = None
        if widths and self._dim is None:
            self._dim = next(iter(widths))
            self._recorded_model = self._model_name
        return [n.node_id for n in nodes]

    def _declare_properties(self, metadata: Sequence[dict[str, Any]]) -> None:
        """Give each metadata field these chunks carry a typed property before the first write of it (text
        tokenized as a whole value), and the permission properties; refuse a word-tokenized ``allowed``."""
        collection = self.client.collections.get(self.index_name)
        if self._properties is None:
            config = collection.config.get()
            self._properties = {
                p.name: str(getattr(p.tokenization, "value", p.tokenization) or "")
                for p in getattr(config, "properties", None) or []
            }
            if ALLOWED in self._properties and self._properties[ALLOWED] not in ("field", ""):
                raise ValueError(
                    f"the Weaviate collection {self.index_name} holds '{ALLOWED}' with {self._properties[ALLOWED]!r} "
                    "tokenization, where a filter on one principal could match part of another: ingest into a new "
                    "collection (RAGIDX_COLLECTION)"
                )
        wanted: dict[str, Any] = {ALLOWED: wvc.config.DataType.TEXT_ARRAY, PUBLIC: wvc.config.DataType.BOOL}
        for meta in metadata:
            for key, value in meta.items():
                kind = _data_type(value)
                if kind is not None and key not in wanted and key != TERMS_PROPERTY:
                    wanted[key] = kind
        for name, kind in wanted.items():
            if name in self._properties:
                continue
            text = kind in (wvc.config.DataType.TEXT, wvc.config.DataType.TEXT_ARRAY)
            collection.config.add_property(
                wvc.config.Property(
                    name=name,
                    data_type=kind,
                    tokenization=wvc.config.Tokenization.FIELD if text else None,
                    index_filterable=True,
                )
            )
            self._properties[name] = "field" if text else ""

    def update_article_metadata(self, metadata: dict[str, dict[str, Any]]) -> dict[str, int]:
        """Give the chunks of these articles (kb_id → the article's metadata) their new metadata and permissions
        in place, vectors kept. Returns kb_id → chunks updated."""
        self._declare_properties(list(metadata.values()))
        collection = self.client.collections.get(self.index_name)
        updated: dict[str, int] = {}
        for kb_id, meta in metadata.items():
            where = self._and_tenant(wvc.query.Filter.by_property("ref_doc_id").equal(kb_id))
            found = collection.query.fetch_objects(filters=where, limit=10_000)
            article = {k: v for k, v in meta.items() if k not in ("chunk_no",)}
            properties = {**article, **_access_properties(article)}
            for obj in getattr(found, "objects", None) or []:
                collection.data.update(uuid=obj.uuid, properties=properties)
            updated[kb_id] = len(getattr(found, "objects", None) or [])
        return updated

    def vector_dim(self) -> int | None:
        """The width of the collection's vectors, read from one stored object (None while it holds none).

        Collection-wide, not per tenant: all tenants share one vector index, so one embedding model.
        """
        if self._dim is None:
            collection = self.client.collections.get(self.index_name)
            found = collection.query.fetch_objects(limit=1, include_vector=True)
            for obj in getattr(found, "objects", None) or []:
                vector = obj.vector
                if isinstance(vector, dict):  # named vectors; the integration writes the default one
                    vector = next(iter(vector.values()), None)
                if vector:
                    self._dim = len(vector)
                    recorded = (getattr(obj, "properties", None) or {}).get(EMBED_MODEL_PROPERTY)
                    self._recorded_model = recorded if isinstance(recorded, str) and recorded else None
        return self._dim

    def embed_model_name(self) -> str | None:
        """The ``embed_model`` the collection's chunks were embedded with (read from the same stored object as
        :meth:`vector_dim`); None while it is empty or for chunks written before ragidx recorded it."""
        self.vector_dim()
        return self._recorded_model

    def check_embedding(self, dim: int, model_name: str | None) -> None:
        """Before writing: width and, where both are known, name must match (``LanceDBChunkStore.check_embedding``);
        the chunks written next record ``model_name``."""
        self._model_name = model_name
        self.check_embedding_dim(dim)
        recorded = self.embed_model_name()
        if recorded and model_name and recorded != model_name:
            raise EmbeddingMismatch.of_models(
                f"the Weaviate collection {self.index_name}",
                recorded,
                model_name,
                elsewhere="a new collection (RAGIDX_COLLECTION)",
            )

    def check_embedding_dim(self, dim: int) -> None:
        """Raise :class:`EmbeddingMismatch` when the collection holds vectors of another width than ``dim``."""
        stored = self.vector_dim()
        if stored is not None and stored != dim:
            raise EmbeddingMismatch.between(
                f"the Weaviate collection {self.index_name}",
                stored,
                dim,
                elsewhere="a new collection (RAGIDX_COLLECTION)",
            )

    def languages(self) -> frozenset[str]:
        """The chunks' ``language`` values in the collection, asked once per store (and after each add)."""
        if self._languages is None:
            collection = self.client.collections.get(self.index_name)
            result = collection.aggregate.over_all(
                group_by=wvc.aggregate.GroupByAggregate(prop="language"), filters=self._tenant_filter()
            )
            groups = getattr(result, "groups", None) or []
            self._languages = frozenset(
                str(g.grouped_by.value) for g in groups if isinstance(getattr(g.grouped_by, "value", None), str)
            ) - {""}
        return self._languages

    def query_terms(self, text: str) -> str:
        """The query as ``search_terms`` hold text: stems in its language (see ``LanceDBChunkStore.query_terms``)."""
        languages = self.languages()
        language = detect_language(text, languages) if len(languages) > 1 else next(iter(languages), None)
        return " ".join(terms(text, language=language))

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


def _access_properties(metadata: dict[str, Any]) -> dict[str, Any]:
    """``allowed`` (the principals; absent when public) and ``public`` for a chunk of an article with ``metadata``."""
    allowed = allowed_of(metadata)
    return {ALLOWED: list(allowed), PUBLIC: not allowed}


def _data_type(value: Any) -> Any:
    if isinstance(value, bool):
        return wvc.config.DataType.BOOL
    if isinstance(value, int):
        return wvc.config.DataType.INT
    if isinstance(value, float):
        return wvc.config.DataType.NUMBER
    if isinstance(value, str):
        return wvc.config.DataType.TEXT
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return wvc.config.DataType.TEXT_ARRAY
    return None


_COMPARE = {
    FilterOperator.EQ: "equal",
    FilterOperator.NE: "not_equal",
    FilterOperator.GT: "greater_than",
    FilterOperator.LT: "less_than",
    FilterOperator.GTE: "greater_or_equal",
    FilterOperator.LTE: "less_or_equal",
}


def filters_to_weaviate(filters: MetadataFilters, types: dict[str, Any] | None = None) -> Any:
    """LlamaIndex filters (nested allowed) as a Weaviate filter: the same meaning as the LanceDB store's.

    ``types`` (property → Weaviate data type, from the collection) converts values to the property's type
    (``"7"`` for an int property is 7).

    Example:
        >>> f = MetadataFilters(filters=[MetadataFilter(key="product", value=["a", "b"], operator="in")])
        >>> type(filters_to_weaviate(f)).__name__
        '_FilterOr'
    """
    parts = [
        filters_to_weaviate(f, types) if isinstance(f, MetadataFilters) else _filter_to_weaviate(f, types or {})
        for f in filters.filters
    ]
    if not parts:
        raise ValueError("an empty filter group")
    if filters.condition == FilterCondition.NOT:
        raise ValueError("the Weaviate store cannot negate a filter group (NOT): write it with != and 'nin'")
    if len(parts) == 1:
        return parts[0]
    return wvc.query.Filter.any_of(parts) if filters.condition == FilterCondition.OR else wvc.query.Filter.all_of(parts)


def _filter_to_weaviate(f: MetadataFilter, types: dict[str, Any]) -> Any:
    prop = wvc.query.Filter.by_property(f.key)
    op = f.operator
    kind = str(getattr(types.get(f.key), "value", types.get(f.key) or ""))
    if f.key == PUBLIC:
        kind = "boolean"
    value = [_typed(v, kind) for v in f.value] if isinstance(f.value, list) else _typed(f.value, kind)
    if op == FilterOperator.IS_EMPTY:
        return prop.is_none(True)
    listed = f.key == ALLOWED or kind.endswith("[]")
    if op in (FilterOperator.ANY, FilterOperator.CONTAINS) or (listed and op in (FilterOperator.IN, FilterOperator.EQ)):
        return prop.contains_any(value if isinstance(value, list) else [value])
    if op == FilterOperator.ALL:
        return prop.contains_all(value if isinstance(value, list) else [value])
    if op in (FilterOperator.IN, FilterOperator.NIN):
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ValueError(f"filter {f.key!r} {op.value}: no values")
        if op == FilterOperator.IN:
            any_of = [wvc.query.Filter.by_property(f.key).equal(v) for v in values]
            return any_of[0] if len(any_of) == 1 else wvc.query.Filter.any_of(any_of)
        none_of = [wvc.query.Filter.by_property(f.key).not_equal(v) for v in values]
        return none_of[0] if len(none_of) == 1 else wvc.query.Filter.all_of(none_of)
    if op in _COMPARE:
        if isinstance(value, list):
            raise ValueError(f"filter {f.key!r} {op.value}: one value, not a list (use 'in' for several)")
        return getattr(prop, _COMPARE[op])(value)
    raise ValueError(f"filter operator {op.value!r} is not supported by the Weaviate store")


def _typed(value: Any, kind: str) -> Any:
    """A filter value as the property's type (Weaviate's wire types are strict: an int is not a number)."""
    base = kind.removesuffix("[]")
    try:
        if base == "boolean":
            return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "1", "yes")
        if base == "int":
            return int(value)
        if base == "number":
            return float(value)
        if base == "text":
            return str(value)
    except (TypeError, ValueError):
        raise ValueError(f"filter value {value!r} is not of the field's type ({kind})") from None
    return value
