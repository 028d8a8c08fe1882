"""PostgreSQL chunk store (``store = "postgres"``): chunks, pgvector vectors and full text in the database that
already holds the articles and the ingest ledger (``article_store_url``), shared by every engine process.

One table per collection (``ragidx_chunks_<collection>``): a chunk's text, title, url, language, tenant, its
own and its article's metadata, the permissions (``allowed`` text[], ``public``), the vector (``vector(dim)``,
an HNSW index with cosine distance once the table holds ``index_min_rows`` chunks; below that every search is
exact), its search terms (the distinct terms and their counts, and a ``tsvector`` of them for a GIN index).
Beside it, the document frequency of every term and the table's size (for BM25) and the declared type of every
filterable metadata field. A keyword search finds the chunks holding a query term by the GIN index and scores
each from its term counts (``array_position``), no row expanded into its terms.

It ranks exactly as :class:`~ragidx.stores.lancedb_store.LanceDBChunkStore` does, so an index moved between the
two (``ragidx migrate``) answers the same:

- dense: cosine similarity (1 - pgvector's ``<=>``);
- full text: the chunk's terms are :func:`ragidx.terms.terms` of its title and text in the article's language
  (Snowball stems per language, stop words dropped), the same terms LanceDB indexes, scored by BM25 as Lance
  does (k1 1.2, b 0.75, idf ``ln((N - df + 0.5) / (df + 0.5) + 1)``, terms of 40 bytes or more dropped), in SQL;
- hybrid: both lists fused by :func:`ragidx.stores.fusion.fuse` (relative score with ``alpha``, or ``rrf``).

Why not PostgreSQL's own text-search configurations (``to_tsvector('english', ...)``): they stem with the same
Snowball algorithms but split words and drop stop words otherwise (``foo_bar`` is two words, ``e-mail`` three;
another stop-word list), so the keyword lists, and with them the fused order, would differ from LanceDB's on
the same articles. The tsvector holds ragidx's terms instead (``simple``: no further processing), which are
per-language already.

Why not LlamaIndex's ``PGVectorStore`` (``llama-index-vector-stores-postgres`` 0.9, read in its ``base.py``):
its hybrid query returns the dense and the keyword hits concatenated without fusion and ignores ``alpha`` (it
logs "does not support alpha"); its keyword score is ``ts_rank``, not BM25; it has one text-search configuration
per table, not per article; it keeps metadata in one JSON column with no tenant and no typed fields. Readers as
predicates would fit (its ``ANY`` filter), the ranking would not. Measured (``benchmarks/pgvector_peer.py``: 3,000
real chunks with MiniLM vectors, 100 hybrid queries, top 10, against LanceDB's top 10): ``PGVectorStore`` returned
LanceDB's order for 0 queries and 67.5 % of its chunks; this store 97 queries, 100 % of the chunks, the other 3
differing only in the order of chunks whose scores are equal to 7 digits (Lance scores in float32).

Filters and readers (:mod:`ragidx.stores.access`) are compiled into the WHERE clause of the same SQL statement
that ranks (never a post-filter); with the HNSW index, pgvector's iterative scan keeps reading until a narrow
filter has its k chunks. Every write (add, delete, metadata update) is one transaction under a per-table
advisory lock, so engines in several processes write one after another and the term statistics stay exact; an
``add`` of chunk ids already stored replaces them, so a run repeated after a crash doubles nothing.

Example:
    >>> store = PostgresChunkStore(url="postgresql://ragidx@db/ragidx")  # connects lazily
    >>> store.table                                                       # doctest: +SKIP
    'ragidx_chunks_articles'
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import queue
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow as pa
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
from ragidx.stores.access import ALLOWED, PUBLIC
from ragidx.stores.filters import user_fields
from ragidx.stores.fusion import FUSIONS, fuse
from ragidx.stores.lancedb_store import (
    ARTICLE_METADATA_COLUMN,
    CHUNK_KEYS,
    CHUNK_PLACE_KEYS,
    META_PREFIX,
    EmbeddingMismatch,
    _article_columns,
    _coerce,
    _filter_value,
    _type_name,
    _with_meta_fields,
)
from ragidx.stores.postgres_pointer import POINTERS_TABLE, create_pointers, read_pointer
from ragidx.stores.postgres_settings import PgvectorSettings
from ragidx.terms import TERMS_FORMAT, terms

if TYPE_CHECKING:
    import psycopg

__all__ = ["IndexSwitched", "PostgresChunkStore", "chunk_table_name", "libpq_url"]

logger = logging.getLogger(__name__)

INDEXES_TABLE = "ragidx_chunk_indexes"
"""One row per chunk table: the vectors' width and model, the terms' format, and the BM25 totals."""
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
    ARTICLE_METADATA_COLUMN,
)
BM25_K1 = 1.2
BM25_B = 0.75
MAX_TERM_BYTES = 40
"""Lance's full-text index drops tokens of 40 bytes or more (``max_token_length``): so does this store."""
POOL_SIZE = 8
_KINDS: dict[str, pa.DataType] = {
    "string": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "list[string]": pa.list_(pa.string()),
}
_FIXED: dict[str, str] = {
    "id": "string",
    "kb_id": "string",
    "chunk_no": "int",
    "title": "string",
    "url": "string",
    "language": "string",
    "tenant": "string",
    ALLOWED: "list[string]",
    PUBLIC: "bool",
}
_OPS = {
    FilterOperator.EQ: "=",
    FilterOperator.NE: "!=",
    FilterOperator.GT: ">",
    FilterOperator.LT: "<",
    FilterOperator.GTE: ">=",
    FilterOperator.LTE: "<=",
}
_CASTS = {"string": "text", "int": "numeric", "float": "numeric", "bool": "boolean"}


def libpq_url(url: str) -> str:
    """A SQLAlchemy URL (``postgresql+psycopg://``) as libpq takes it (``postgresql://``)."""
    return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql://", url)


def chunk_table_name(collection: str) -> str:
    """The table of a collection's chunks: ``ragidx_chunks_`` and the name in lower case, other signs as ``_``."""
    return "ragidx_chunks_" + re.sub(r"[^a-z0-9_]", "_", collection.lower())[:40]


def lock_key(*parts: str) -> int:
    """A signed 64-bit advisory-lock key for these parts."""
    digest = hashlib.blake2b("\x00".join(("ragidx", *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def index_terms(title: str | None, text: str | None, language: str | None) -> list[str]:
    """A chunk's search terms as both stores index them: :func:`ragidx.terms.terms` of its title and text, less
    the terms Lance's index drops (40 bytes or more)."""
    found = terms(f"{title or ''}\n{text or ''}", language=language or None)
    return [t for t in found if len(t.encode()) < MAX_TERM_BYTES]


def tsvector_literal(lexemes: Sequence[str]) -> str:
    """The tsvector of these (distinct) terms, without positions: what the GIN index finds a chunk by."""
    return " ".join("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in lexemes)


def tsquery_literal(query_terms: Sequence[str]) -> str:
    """A tsquery matching any of ``query_terms``."""
    return " | ".join("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in dict.fromkeys(query_terms))


def vector_literal(values: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


class IndexSwitched(RuntimeError):
    """``ragidx reindex`` pointed the collection at a table of another model's vectors while this store wrote
    chunks of the old one: nothing was written (the articles stay pending; the next ingest indexes them)."""


class PostgresChunkStore(BasePydanticVectorStore):
    """Chunks with embeddings and full text in one PostgreSQL table (pgvector).

    Example:
        >>> PostgresChunkStore(url="postgresql://db/kb", collection="Articles").base_table  # connects lazily
        'ragidx_chunks_articles'
    """

    stores_text: bool = True
    flat_metadata: bool = True
    is_embedding_query: bool = True

    url: str = Field(repr=False, description="The database (libpq or SQLAlchemy URL); may carry a password.")
    collection: str = Field(default="Articles", description="Collection name; the table is derived from it.")
    tenant: str | None = Field(
        default=None,
        description="Scope searches, reads, deletes and counts to this tenant's chunks; '' to the chunks of no "
        "tenant; None: every chunk (tools that work on the whole table).",
    )
    hnsw: PgvectorSettings = Field(default_factory=PgvectorSettings, description="HNSW index and search settings.")
    table_name: str | None = Field(
        default=None,
        description="This table, whatever the collection's pointer says (``ragidx reindex`` writes its new table "
        "so); None: the table the pointer names (the collection's own without one), read on first use.",
    )

    _pool: queue.LifoQueue[Any] = PrivateAttr(default_factory=queue.LifoQueue)
    _lock: threading.RLock = PrivateAttr(default_factory=threading.RLock)
    _ready: bool = PrivateAttr(default=False)
    _model_name: str | None = PrivateAttr(default=None)
    _active: str | None = PrivateAttr(default=None)
    _local: threading.local = PrivateAttr(default_factory=threading.local)
    _on_switch: Callable[[], None] | None = PrivateAttr(default=None)
    _switched: bool = PrivateAttr(default=False)

    @classmethod
    def class_name(cls) -> str:
        return "PostgresChunkStore"

    @property
    def table(self) -> str:
        """The table this store reads and writes: ``table_name``, else the one the collection's pointer names when
        the store first connects (read here if it has not yet; kept for the store's life: a switch is followed by a
        new store, see :meth:`follow_switch`), else the collection's own."""
        chosen = getattr(self._local, "table", None) or self.table_name or self._active
        if chosen is None:
            self._ensure_schema()
            chosen = self._active or self.base_table
        return chosen

    @property
    def base_table(self) -> str:
        """The collection's own table name, which keys its pointer row."""
        return chunk_table_name(self.collection)

    def follow_switch(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once this store notices that ``ragidx reindex`` (in any process) pointed the collection
        at another table: before a search (read in the statement that reads the table's statistics) or under a
        write's lock. The store itself keeps its table (searches under way finish on it); the owner builds a new
        store, and the embedding model of the new table's vectors, for what comes next."""
        self._on_switch = callback

    def _noticed(self, active: str | None) -> None:
        """The pointer names ``active``: if that is another table than this store's, report the switch once."""
        if self.table_name is not None or active is None or active == self.table or self._switched:
            return
        self._switched = True
        logger.info("the collection %s now answers from %s (ragidx reindex)", self.collection, active)
        if self._on_switch is not None:
            self._on_switch()

    @property
    def client(self) -> Any:
        return self

    # --- connections and schema ---------------------------------------------------------------------
    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in a transaction, committed when the block ends (rolled back on an error)."""
        import psycopg

        try:
            conn = self._pool.get_nowait()
        except queue.Empty:
            try:
                conn = psycopg.connect(libpq_url(self.url))
            except psycopg.OperationalError as exc:
                raise ConnectionError(
                    f"cannot reach the PostgreSQL database of the chunk store ({type(exc).__name__}): start it, or "
                    "set article_store_url (RAGIDX_ARTICLE_STORE_URL) to one that runs"
                ) from exc
        broken = False
        try:
            with conn.transaction():
                yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError):
            broken = True
            raise
        finally:
            if broken or conn.closed or self._pool.qsize() >= POOL_SIZE:
                conn.close()
            else:
                self._pool.put(conn)

    def close(self) -> None:
        """Close the pooled connections (the store reconnects on its next use)."""
        while True:
            try:
                self._pool.get_nowait().close()
            except queue.Empty:
                return

    def _ensure_schema(self) -> None:
        """The ``vector`` extension and the index table; the chunk table itself comes with the first add."""
        if self._ready:
            return
        import psycopg

        with self._lock, self._connection() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("schema", INDEXES_TABLE),))
            try:
                if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None:
                    conn.execute("CREATE EXTENSION vector")
            except psycopg.errors.FeatureNotSupported as exc:  # no pgvector in this server's installation
                raise RuntimeError(
                    "the PostgreSQL server has no pgvector extension: install your distribution's "
                    "postgresql-NN-pgvector package (or use a managed PostgreSQL that offers pgvector)"
                ) from exc
            except psycopg.errors.InsufficientPrivilege as exc:
                raise RuntimeError(
                    "the pgvector extension is not enabled in this database and this user may not enable it: "
                    "run 'CREATE EXTENSION vector;' in it as its owner"
                ) from exc
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {INDEXES_TABLE} (name text PRIMARY KEY, dim int NOT NULL, "
                "embed_model text, terms_format int NOT NULL, docs bigint NOT NULL DEFAULT 0, "
                "length bigint NOT NULL DEFAULT 0, languages text[] NOT NULL DEFAULT '{}', "
                "created timestamptz NOT NULL DEFAULT now())"
            )
            create_pointers(conn)
            if self.table_name is None and self._active is None:
                self._active = read_pointer(conn, chunk_table_name(self.collection)).active
        self._ready = True

    def _info(self, conn: psycopg.Connection[Any]) -> tuple[int, str | None, list[str]] | None:
        """(dim, embed_model, languages) of this store's table; None while there is none."""
        row = conn.execute(
            f"SELECT dim, embed_model, languages FROM {INDEXES_TABLE} WHERE name = %s", (self.table,)
        ).fetchone()
        return None if row is None else (int(row[0]), row[1], list(row[2]))

    def _table_info(self) -> tuple[int, str | None, list[str]] | None:
        """:meth:`_info`, and in the same statement the collection's pointer (a switch is noticed here)."""
        self._ensure_schema()
        with self._connection() as conn:
            row = conn.execute(
                f"SELECT i.dim, i.embed_model, i.languages, (SELECT active FROM {POINTERS_TABLE} WHERE base = %s) "
                f"FROM (SELECT 1) one LEFT JOIN {INDEXES_TABLE} i ON i.name = %s",
                (self.base_table, self.table),
            ).fetchone()
        assert row is not None
        self._noticed(row[3])
        if row[0] is None:
            if self._switched and self.table_name is None:  # switched, and this store's table dropped since
                raise IndexSwitched(
                    f"the collection {self.collection} was moved to another embedding model (ragidx reindex) and "
                    "the index this process searched was removed: ask again"
                )
            return None
        return (int(row[0]), row[1], list(row[2]))

    def _create_table(self, conn: psycopg.Connection[Any], dim: int) -> None:
        t = self.table
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {t} (id text PRIMARY KEY, kb_id text NOT NULL, chunk_no int NOT NULL, "
            "text text NOT NULL, title text NOT NULL, url text NOT NULL, language text NOT NULL, "
            "tenant text NOT NULL, metadata_json text NOT NULL, "
            f"{ARTICLE_METADATA_COLUMN} text NOT NULL, meta jsonb NOT NULL, {ALLOWED} text[], "
            f"{PUBLIC} boolean NOT NULL, embedding vector({int(dim)}) NOT NULL, terms_len int NOT NULL, "
            "lexemes text[] NOT NULL, tfs int[] NOT NULL, tsv tsvector NOT NULL)"
        )
        conn.execute(f"CREATE INDEX IF NOT EXISTS {t}_kb ON {t} (tenant, kb_id)")
        conn.execute(f"CREATE INDEX IF NOT EXISTS {t}_tsv ON {t} USING gin (tsv)")
        conn.execute(f"CREATE INDEX IF NOT EXISTS {t}_allowed ON {t} USING gin ({ALLOWED})")
        conn.execute(f"CREATE INDEX IF NOT EXISTS {t}_meta ON {t} USING gin (meta jsonb_path_ops)")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {t}_terms (term text PRIMARY KEY, df bigint NOT NULL)")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {t}_fields (name text PRIMARY KEY, kind text NOT NULL)")
        conn.execute(
            f"INSERT INTO {INDEXES_TABLE} (name, dim, embed_model, terms_format) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (name) DO NOTHING",
            (t, dim, self._model_name, TERMS_FORMAT),
        )

    def _write_lock(self, conn: psycopg.Connection[Any]) -> str | None:
        """Writers of this table, in every process, one after another (until the transaction ends). Returns the
        table the collection answers from now when ``ragidx reindex`` switched it away from this store's (whose
        write lock the switch held: nothing is written to the old table after it), else None."""
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("chunks", self.table),))
        if self.table_name is not None:
            return None
        active = read_pointer(conn, self.base_table).active
        if active == self.table:
            return None
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("chunks", active),))
        return active

    @contextmanager
    def _on_table(self, table: str) -> Iterator[None]:
        """This thread's reads and writes go to ``table`` for the block (a delete after a switch: both tables)."""
        self._local.table = table
        try:
            yield
        finally:
            self._local.table = None

    def _fields(self, conn: psycopg.Connection[Any]) -> dict[str, str]:
        """Filter key → type name: the fixed fields, then each declared article metadata field."""
        fields = dict(_FIXED)
        for name, kind in conn.execute(f"SELECT name, kind FROM {self.table}_fields ORDER BY name").fetchall():
            fields.setdefault(name, kind)
        return fields

    # --- the embedding model -------------------------------------------------------------------------
    def vector_dim(self) -> int | None:
        """The width of the vectors this table holds; None while there is no table."""
        info = self._table_info()
        return None if info is None else info[0]

    def embed_model_name(self) -> str | None:
        """The embedding model this table's vectors were made with, as recorded when it was created."""
        info = self._table_info()
        return None if info is None else info[1]

    def _where(self) -> str:
        return f"the index {self.table} in PostgreSQL"

    def check_embedding_dim(self, dim: int) -> None:
        """Raise :class:`EmbeddingMismatch` when the table holds vectors of another width than ``dim``."""
        stored = self.vector_dim()
        if stored is not None and stored != dim:
            raise EmbeddingMismatch.between(self._where(), stored, dim, elsewhere="a new collection")

    def check_embedding(self, dim: int, model_name: str | None) -> None:
        """Before writing: the vectors of ``model_name`` (``dim`` wide) must be the table's, by width and, where
        both are known, by name. A table created after this call records ``model_name``."""
        self._model_name = model_name
        info = self._table_info()
        if info is None:
            return
        if info[0] != dim:
            raise EmbeddingMismatch.between(self._where(), info[0], dim, elsewhere="a new collection")
        if info[1] and model_name and info[1] != model_name:
            raise EmbeddingMismatch.of_models(self._where(), info[1], model_name, elsewhere="a new collection")

    # --- tenants ----------------------------------------------------------------------------------------
    def _tenant_sql(self, params: list[Any]) -> str:
        if self.tenant is None:
            return "TRUE"
        params.append(self.tenant)
        return "tenant = %s"

    # --- writes -----------------------------------------------------------------------------------------
    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Store ``nodes`` (with their embeddings); a chunk id already stored is replaced, not doubled."""
        if not nodes:
            return []
        rows = [_node_to_row(n) for n in nodes]
        dim = len(rows[0]["vector"])
        self._ensure_schema()
        with self._lock, self._connection() as conn:
            moved = self._write_lock(conn)
            if moved is None:
                info = self._info(conn)
                if info is None:
                    self._create_table(conn, dim)
                elif info[0] != dim:
                    raise EmbeddingMismatch.between(self._where(), info[0], dim, elsewhere="a new collection")
                fields = self._declare(conn, rows)
                self._delete_where(conn, "id = ANY(%s)", [[r["id"] for r in rows]])
                self._insert(conn, rows, fields)
        if moved is not None:  # these vectors are the old table's model's: written nowhere
            self._noticed(moved)
            raise IndexSwitched(
                f"the collection {self.collection} was moved to another embedding model (ragidx reindex) while these "
                "articles were being indexed: nothing was written; ingest again (with the new model) to index them"
            )
        return [r["id"] for r in rows]

    def _declare(self, conn: psycopg.Connection[Any], rows: Sequence[dict[str, Any]]) -> dict[str, str]:
        """Declare a type for each article metadata field these rows carry first (the first value's, as LanceDB
        does); return every field's type."""
        schema = _with_meta_fields(pa.schema([]), rows)
        new = [(f.name[len(META_PREFIX) :], _type_name(f.type)) for f in schema]
        if new:
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {self.table}_fields (name, kind) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING",
                    new,
                )
        return self._fields(conn)

    def _insert(self, conn: psycopg.Connection[Any], rows: Sequence[dict[str, Any]], fields: dict[str, str]) -> None:
        df: Counter[str] = Counter()
        length = 0
        languages = sorted({r["language"] for r in rows if r["language"]})
        columns = (*COLUMNS, "meta", ALLOWED, PUBLIC, "embedding", "terms_len", "lexemes", "tfs", "tsv")
        with conn.cursor() as cur, cur.copy(f"COPY {self.table} ({', '.join(columns)}) FROM STDIN") as copy:
            for r in rows:
                meta = {}
                for name, value in r.items():
                    if name.startswith(META_PREFIX):
                        kind = fields.get(name[len(META_PREFIX) :])
                        coerced = None if kind is None else _coerce(value, _KINDS[kind])
                        if coerced is not None:
                            meta[name[len(META_PREFIX) :]] = coerced
                chunk_terms = r["terms"]
                counts = Counter(chunk_terms)
                df.update(counts.keys())
                length += len(chunk_terms)
                copy.write_row(
                    (
                        *(r[c] for c in COLUMNS),
                        json.dumps(meta, ensure_ascii=False),
                        r[ALLOWED],
                        r[PUBLIC],
                        vector_literal(r["vector"]),
                        len(chunk_terms),
                        list(counts),
                        list(counts.values()),
                        tsvector_literal(list(counts)),
                    )
                )
        self._count_terms(conn, df, len(rows), length, languages)

    def _count_terms(
        self, conn: psycopg.Connection[Any], df: Counter[str], docs: int, length: int, languages: Sequence[str] = ()
    ) -> None:
        """Add ``df`` (term → chunks holding it; negative for removed chunks) and the totals to the statistics."""
        if df:
            items = sorted(df.items())
            conn.execute(
                f"INSERT INTO {self.table}_terms AS w (term, df) SELECT * FROM unnest(%s::text[], %s::bigint[]) "
                "ON CONFLICT (term) DO UPDATE SET df = w.df + excluded.df",
                ([t for t, _ in items], [n for _, n in items]),
            )
        conn.execute(
            f"UPDATE {INDEXES_TABLE} SET docs = docs + %s, length = length + %s, "
            "languages = ARRAY(SELECT DISTINCT unnest(languages || %s::text[]) ORDER BY 1) WHERE name = %s",
            (docs, length, list(languages), self.table),
        )

    def _delete_where(self, conn: psycopg.Connection[Any], where: str, params: list[Any]) -> int:
        """Delete the chunks matching ``where`` (within the tenant) and take them out of the term statistics."""
        tenant_params: list[Any] = []
        tenant = self._tenant_sql(tenant_params)
        gone = conn.execute(
            f"DELETE FROM {self.table} WHERE ({where}) AND {tenant} RETURNING lexemes, terms_len",
            [*params, *tenant_params],
        ).fetchall()
        if gone:
            df: Counter[str] = Counter()
            for lexemes, _ in gone:
                df.update(dict.fromkeys(lexemes, -1))
            self._count_terms(conn, df, -len(gone), -sum(int(n) for _, n in gone))
        return len(gone)

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        self.delete_articles([ref_doc_id])

    def delete_articles(self, kb_ids: Sequence[str]) -> None:
        """Delete every chunk of these articles (of this store's tenant, if it has one) in one transaction."""
        if not kb_ids or self._table_info() is None:
            return
        with self._lock, self._connection() as conn:
            moved = self._write_lock(conn)
            for table in self._written(conn, moved):
                with self._on_table(table):
                    self._delete_where(conn, "kb_id = ANY(%s)", [list(kb_ids)])
        self._noticed(moved)

    def _written(self, conn: psycopg.Connection[Any], moved: str | None) -> list[str]:
        """The tables a delete or a metadata update applies to: this store's, and the one the collection answers
        from now if ``ragidx reindex`` switched it (and it holds chunks)."""
        tables = [self.table]
        if moved is not None:
            with self._on_table(moved):
                if self._info(conn) is not None:
                    tables.append(moved)
        return tables

    def delete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **kwargs: Any
    ) -> None:
        if (not node_ids and filters is None) or self._table_info() is None:
            return
        with self._lock, self._connection() as conn:
            moved = self._write_lock(conn)
            for table in self._written(conn, moved):
                with self._on_table(table):
                    params: list[Any] = []
                    clauses = []
                    if node_ids:
                        clauses.append("id = ANY(%s)")
                        params.append(list(node_ids))
                    if filters is not None:
                        clauses.append(filters_to_pg(filters, self._fields(conn), params))
                    self._delete_where(conn, " AND ".join(f"({c})" for c in clauses), params)
        self._noticed(moved)

    def clear(self) -> None:
        """Drop the table with its statistics and declared fields (every tenant's)."""
        self._ensure_schema()
        with self._lock, self._connection() as conn:
            self._write_lock(conn)
            t = self.table
            conn.execute(f"DROP TABLE IF EXISTS {t}, {t}_terms, {t}_fields")
            conn.execute(f"DELETE FROM {INDEXES_TABLE} WHERE name = %s", (t,))

    def update_article_metadata(self, metadata: dict[str, dict[str, Any]]) -> dict[str, int]:
        """Give the chunks of these articles (kb_id → the article's metadata) their new metadata and permissions,
        in place: vectors, text and each chunk's own place (section, page ...) are kept. Returns kb_id → chunks
        updated."""
        if not metadata or self._table_info() is None:
            return {}
        updated: dict[str, int] = {}
        with self._lock, self._connection() as conn:
            moved = self._write_lock(conn)
            for table in self._written(conn, moved):  # the last one answers: its counts are returned
                with self._on_table(table):
                    self._update_metadata(conn, metadata, updated)
        self._noticed(moved)
        return updated

    def _update_metadata(
        self, conn: psycopg.Connection[Any], metadata: dict[str, dict[str, Any]], updated: dict[str, int]
    ) -> None:
        """:meth:`update_article_metadata` in this store's table (under the write lock); counts into ``updated``."""
        rows = [{**_article_columns(meta), "kb_id": kb_id} for kb_id, meta in metadata.items()]
        fields = self._declare(conn, rows)
        for row in rows:
            article = json.loads(row[ARTICLE_METADATA_COLUMN])
            meta = {}
            for name, value in row.items():
                if name.startswith(META_PREFIX):
                    coerced = _coerce(value, _KINDS[fields[name[len(META_PREFIX) :]]])
                    if coerced is not None:
                        meta[name[len(META_PREFIX) :]] = coerced
            params: list[Any] = [row["kb_id"]]
            tenant = self._tenant_sql(params)
            chunks = conn.execute(
                f"SELECT id, {ARTICLE_METADATA_COLUMN} FROM {self.table} WHERE kb_id = %s AND {tenant}", params
            ).fetchall()
            for chunk_id, old in chunks:
                place = {k: v for k, v in json.loads(old or "{}").items() if k in CHUNK_PLACE_KEYS}
                conn.execute(
                    f"UPDATE {self.table} SET {ARTICLE_METADATA_COLUMN} = %s, meta = %s, {ALLOWED} = %s, "
                    f"{PUBLIC} = %s WHERE id = %s",
                    (
                        json.dumps({**article, **place}, ensure_ascii=False),
                        json.dumps(meta, ensure_ascii=False),
                        row[ALLOWED],
                        row[PUBLIC],
                        chunk_id,
                    ),
                )
            updated[row["kb_id"]] = len(chunks)

    def finalize(self) -> None:
        """After a batch of writes: build the HNSW index once the table is large enough, refresh the planner's
        statistics. Idempotent; two processes finishing at once build it once (the write lock)."""
        if self._table_info() is None:
            return
        with self._lock, self._connection() as conn:
            self._write_lock(conn)
            rows, exists = conn.execute(
                f"SELECT docs, to_regclass(%s) FROM {INDEXES_TABLE} WHERE name = %s", (f"{self.table}_hnsw", self.table)
            ).fetchone() or (0, None)
            if exists is None and int(rows) >= self.hnsw.index_min_rows:
                logger.info("building the HNSW index of %s (%d chunks)", self.table, rows)
                conn.execute("SET LOCAL maintenance_work_mem = '1GB'")
                conn.execute(
                    f"CREATE INDEX {self.table}_hnsw ON {self.table} USING hnsw (embedding vector_cosine_ops) "
                    f"WITH (m = {int(self.hnsw.m)}, ef_construction = {int(self.hnsw.ef_construction)})"
                )
            conn.execute(f"ANALYZE {self.table}")

    # --- reads ------------------------------------------------------------------------------------------
    def count(self) -> int:
        if self._table_info() is None:
            return 0
        params: list[Any] = []
        with self._connection() as conn:
            row = conn.execute(f"SELECT count(*) FROM {self.table} WHERE {self._tenant_sql(params)}", params)
            return int(row.fetchone()[0])  # type: ignore[index]

    def kb_ids(self) -> set[str]:
        """Every kb_id that has chunks in the table (of this store's tenant)."""
        if self._table_info() is None:
            return set()
        params: list[Any] = []
        with self._connection() as conn:
            rows = conn.execute(f"SELECT DISTINCT kb_id FROM {self.table} WHERE {self._tenant_sql(params)}", params)
            return {r[0] for r in rows.fetchall()}

    def metadata_fields(self) -> dict[str, str]:
        """The filterable fields and their types: the fixed ones, and each article metadata field declared."""
        if self._table_info() is None:
            return {}
        with self._connection() as conn:
            return self._fields(conn)

    def check_filters(self, filters: MetadataFilters) -> None:
        """Refuse ``filters`` a search would refuse, without searching (ValueError saying which field and why)."""
        if self._table_info() is None:
            return
        with self._connection() as conn:
            filters_to_pg(filters, self._fields(conn), [])

    def languages(self) -> frozenset[str]:
        """The languages of the chunks the table has held."""
        info = self._table_info()
        return frozenset() if info is None else frozenset(info[2])

    def query_terms(self, text: str, languages: frozenset[str] | None = None) -> list[str]:
        """The query's search terms in its language (the table's, or detected among the table's ``languages``,
        read from the database when not given)."""
        languages = self.languages() if languages is None else languages
        language = detect_language(text, languages) if len(languages) > 1 else next(iter(languages), None)
        return [t for t in terms(text, language=language) if len(t.encode()) < MAX_TERM_BYTES]

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **kwargs: Any
    ) -> list[BaseNode]:
        if self._table_info() is None:
            return []
        with self._connection() as conn:
            params: list[Any] = []
            clauses = [self._tenant_sql(params)]
            if node_ids is not None:
                clauses.append("id = ANY(%s)")
                params.append(list(node_ids))
            if filters is not None:
                clauses.append(filters_to_pg(filters, self._fields(conn), params))
            rows = conn.execute(
                f"SELECT {', '.join(COLUMNS)} FROM {self.table} WHERE {' AND '.join(f'({c})' for c in clauses)} "
                "ORDER BY kb_id, chunk_no",
                params,
            ).fetchall()
        return [_row_to_node(dict(zip(COLUMNS, r, strict=True))) for r in rows]

    def iter_nodes(self, batch_size: int = 1000) -> Iterator[list[TextNode]]:
        """Every chunk of this store's tenant (all with ``tenant=None``) with its embedding, in batches: what
        ``ragidx migrate`` copies."""
        if self._table_info() is None:
            return
        after = ""
        while True:
            params: list[Any] = [after]
            tenant = self._tenant_sql(params)
            with self._connection() as conn:
                rows = conn.execute(
                    f"SELECT {', '.join(COLUMNS)}, embedding::real[] FROM {self.table} WHERE id > %s AND {tenant} "
                    "ORDER BY id LIMIT %s",
                    [*params, batch_size],
                ).fetchall()
            if not rows:
                return
            batch = []
            for r in rows:
                node = _row_to_node(dict(zip(COLUMNS, r[:-1], strict=True)))
                node.embedding = [float(x) for x in r[-1]]
                batch.append(node)
            yield batch
            after = rows[-1][0]

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Dense, full-text or hybrid search, ranked as the LanceDB store ranks; ``fusion="rrf"`` (a keyword
        argument, e.g. the retriever's ``vector_store_kwargs``) fuses by reciprocal rank instead of relative score."""
        fusion = kwargs.get("fusion") or "relative_score"
        if fusion not in FUSIONS:
            raise ValueError(f"unknown fusion {fusion!r}: use {' or '.join(FUSIONS)}")
        info = self._table_info()
        empty = VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        if info is None:
            return empty
        k = query.hybrid_top_k or query.similarity_top_k
        mode = query.mode
        with self._connection() as conn:
            params: list[Any] = []
            where = self._tenant_sql(params)
            if query.filters is not None:
                where = f"{where} AND ({filters_to_pg(query.filters, self._fields(conn), params)})"
            if mode in (VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.SPARSE) or (
                mode == VectorStoreQueryMode.HYBRID and query.alpha == 0.0
            ):
                if not query.query_str:
                    raise ValueError("text search needs query_str")
                rows, scores = self._keyword(conn, query.query_str, k, where, params, frozenset(info[2]))
            elif mode == VectorStoreQueryMode.HYBRID and query.query_str:
                alpha = 0.5 if query.alpha is None else query.alpha
                dense_rows, dense_scores = self._dense(conn, query, info[0], k, where, params)
                text_rows, text_scores = self._keyword(
                    conn, query.query_str, query.sparse_top_k or k, where, params, frozenset(info[2])
                )
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
                rows, scores = self._dense(conn, query, info[0], k, where, params)
        nodes = [_row_to_node(r) for r in rows]
        return VectorStoreQueryResult(nodes=nodes, similarities=scores, ids=[n.node_id for n in nodes])

    def _dense(
        self,
        conn: psycopg.Connection[Any],
        query: VectorStoreQuery,
        dim: int,
        k: int,
        where: str,
        params: list[Any],
    ) -> tuple[list[dict[str, Any]], list[float]]:
        if query.query_embedding is None:
            raise ValueError("vector search needs query_embedding")
        if len(query.query_embedding) != dim:
            width = len(query.query_embedding)
            raise EmbeddingMismatch.between(self._where(), dim, width, elsewhere="a new collection")
        conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(max(self.hnsw.ef_search, k)),))
        conn.execute("SELECT set_config('hnsw.iterative_scan', %s, true)", (self.hnsw.iterative_scan,))
        found = conn.execute(
            f"SELECT {', '.join(COLUMNS)}, embedding <=> %s::vector AS distance FROM {self.table} WHERE {where} "
            "ORDER BY distance LIMIT %s",
            [vector_literal(query.query_embedding), *params, k],
        ).fetchall()
        # an iterative scan in relaxed order may return a near neighbour a little late: sort what came back
        found.sort(key=lambda r: (float(r[-1]), r[0]))
        rows = [dict(zip(COLUMNS, r[:-1], strict=True)) for r in found]
        return rows, [1.0 - float(r[-1]) for r in found]

    def _keyword(
        self,
        conn: psycopg.Connection[Any],
        text: str,
        k: int,
        where: str,
        params: list[Any],
        languages: frozenset[str],
    ) -> tuple[list[dict[str, Any]], list[float]]:
        """BM25 over the chunks matching ``where`` that hold a query term, with the whole table's statistics."""
        query_terms = self.query_terms(text, languages)
        if not query_terms:  # only stop words: nothing to match
            return [], []
        t = self.table
        stats = conn.execute(f"SELECT docs, length FROM {INDEXES_TABLE} WHERE name = %s", (t,)).fetchone()
        if stats is None or not stats[0]:
            return [], []
        docs, avgdl = float(stats[0]), float(stats[1]) / float(stats[0])
        df = dict(
            conn.execute(
                f"SELECT term, df FROM {t}_terms WHERE term = ANY(%s::text[]) AND df > 0 ORDER BY term",
                (list(dict.fromkeys(query_terms)),),
            ).fetchall()
        )
        if not df:  # no chunk holds any of the terms
            return [], []
        present = sorted(df)
        idf = [math.log((docs - df[w] + 0.5) / (df[w] + 0.5) + 1.0) for w in present]
        # a term's count in the chunk: its place among the chunk's distinct terms, then the count at that place
        counts = ", ".join(
            f"coalesce(c.tfs[array_position(c.lexemes, %s::text)], 0)::float8 AS tf{i}" for i in range(len(present))
        )
        score = " + ".join(f"%s::float8 * x.tf{i} * {BM25_K1 + 1} / (x.tf{i} + x.norm)" for i in range(len(present)))
        sql = f"""
            WITH scored AS (
                SELECT c.id, ({score}) AS score
                FROM {t} c CROSS JOIN LATERAL (
                    SELECT {counts}, {BM25_K1} * ({1 - BM25_B} + {BM25_B} * c.terms_len / %s::float8) AS norm) x
                WHERE c.tsv @@ %s::tsquery AND {where}
                ORDER BY score DESC, c.id LIMIT %s)
            SELECT {", ".join(f"c.{c}" for c in COLUMNS)}, scored.score
            FROM scored JOIN {t} c ON c.id = scored.id ORDER BY scored.score DESC, c.id
        """
        found = conn.execute(sql, [*idf, *present, avgdl, tsquery_literal(present), *params, k]).fetchall()
        rows = [dict(zip(COLUMNS, r[:-1], strict=True)) for r in found]
        return rows, [float(r[-1]) for r in found]


# --- conversions ---------------------------------------------------------------------------------------
def _node_to_row(node: BaseNode) -> dict[str, Any]:
    meta = dict(node.metadata)
    embedding = node.get_embedding()
    own = {k: v for k, v in meta.items() if k in CHUNK_KEYS}
    article = {k: v for k, v in meta.items() if k not in CHUNK_KEYS}
    title, text, language = str(meta.get("title", "")), node.get_content(), str(meta.get("language") or "")
    return {
        "id": node.node_id,
        "kb_id": str(meta.get("kb_id") or node.ref_doc_id or ""),
        "chunk_no": int(meta.get("chunk_no", 0)),
        "text": text,
        "title": title,
        "url": str(meta.get("url", "")),
        "language": language,
        "tenant": str(meta.get("tenant") or ""),
        "metadata_json": json.dumps(own, ensure_ascii=False),
        **_article_columns(article),
        "vector": [float(x) for x in embedding],
        "terms": index_terms(title, text, language),
    }


def _row_to_node(row: dict[str, Any]) -> TextNode:
    meta = json.loads(row.get("metadata_json") or "{}")
    meta.update(json.loads(row.get(ARTICLE_METADATA_COLUMN) or "{}"))
    node = TextNode(id_=row["id"], text=row["text"], metadata=meta)
    node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=row["kb_id"])
    return node


# --- filters ---------------------------------------------------------------------------------------------
def filters_to_pg(filters: MetadataFilters, fields: dict[str, str], params: list[Any]) -> str:
    """LlamaIndex filters (nested allowed) as a SQL predicate with ``%s`` placeholders; their values are appended
    to ``params`` in order. ``fields`` (key → type name) says which fields exist; values are converted to the
    field's type (``"7"`` for an int field is 7), as the LanceDB store does, and never written into the SQL."""
    parts: list[str] = []
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            parts.append(f"({filters_to_pg(f, fields, params)})")
        else:
            parts.append(_filter_to_pg(f, fields, params))
    if not parts:
        return "TRUE"
    expr = (" OR " if filters.condition == FilterCondition.OR else " AND ").join(parts)
    return f"NOT ({expr})" if filters.condition == FilterCondition.NOT else expr


def _filter_to_pg(f: MetadataFilter, fields: dict[str, str], params: list[Any]) -> str:
    if f.key not in fields:
        raise ValueError(
            f"cannot filter on {f.key!r}: no article carries it; filterable fields are {', '.join(user_fields(fields))}"
        )
    kind = fields[f.key]
    fixed = f.key in _FIXED
    op = f.operator
    values = f.value if isinstance(f.value, list) else [f.value]

    def field() -> str:
        """The field's value as SQL (a column, or the article metadata's key, cast to its type)."""
        if fixed:
            return f.key
        params.append(f.key)
        if kind == "list[string]":
            return "(meta->%s)"
        return "(meta->>%s)" if kind == "string" else f"((meta->>%s)::{_CASTS[kind]})"

    if op == FilterOperator.IS_EMPTY:
        return f"(coalesce({field()}, '') = '')" if kind == "string" else f"({field()} IS NULL)"
    if kind == "list[string]":
        items = [str(_filter_value(f, str, v)) for v in values]
        any_of, all_of = ("&&", "@>") if fixed else ("?|", "?&")
        if op in (FilterOperator.EQ, FilterOperator.CONTAINS, FilterOperator.IN, FilterOperator.ANY):
            return _with(f"coalesce({field()} {any_of} %s::text[], FALSE)", items, params) if items else "FALSE"
        if op == FilterOperator.ALL:
            return _with(f"coalesce({field()} {all_of} %s::text[], FALSE)", items, params) if items else "TRUE"
        if op in (FilterOperator.NE, FilterOperator.NIN):
            return _with(f"NOT coalesce({field()} {any_of} %s::text[], FALSE)", items, params) if items else "TRUE"
        raise ValueError(f"filter {f.key!r} holds a list: use ==, !=, in, nin, any, all or contains, not {op.value!r}")
    convert = {"bool": bool, "int": int, "float": float}.get(kind, str)
    cast = _CASTS[kind]
    if op in (FilterOperator.IN, FilterOperator.NIN, FilterOperator.ANY):
        if not values:
            return "TRUE" if op == FilterOperator.NIN else "FALSE"
        items = [_filter_value(f, convert, v) for v in values]
        if op == FilterOperator.NIN:  # an article without the field is in no list either
            return _with(f"NOT coalesce({field()} = ANY(%s::{cast}[]), FALSE)", items, params)
        return _with(f"{field()} = ANY(%s::{cast}[])", items, params)
    if op in _OPS:
        if isinstance(f.value, list):
            raise ValueError(f"filter {f.key!r} {op.value}: one value, not a list (use 'in' for several)")
        value = _filter_value(f, convert, f.value)
        if op == FilterOperator.EQ and not fixed:  # containment: the metadata's GIN index finds it
            return _with("meta @> %s::jsonb", json.dumps({f.key: value}, ensure_ascii=False), params)
        if op == FilterOperator.NE:  # an article without the field is not equal to the value either
            return _with(f"({field()} IS DISTINCT FROM %s::{cast})", value, params)
        return _with(f"{field()} {_OPS[op]} %s::{cast}", value, params)
    raise ValueError(f"filter operator {op.value!r} is not supported by the PostgreSQL store")


def _with(sql: str, value: Any, params: list[Any]) -> str:
    """``sql``, whose last placeholder takes ``value`` (appended after the ones its field added)."""
    params.append(value)
    return sql
