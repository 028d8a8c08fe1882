"""``ragidx reindex`` with ``store = "postgres"``: a new chunk table beside the old one, then one switch.

The steps of :mod:`ragidx.reindex`, the PostgreSQL way:

1. the collection's pointer row (:mod:`ragidx.stores.postgres_pointer`) records the run (new table, model, the table
   it started from); every article is embedded by the new model into the new table while the old one answers and
   takes writes; each article's content hash is recorded beside it as it is written;
2. articles written, changed or deleted meanwhile are caught up (by their content hash) until a round finds nothing;
3. the switch is one transaction that holds the old table's write lock (every writer of the old table, in every
   process, waits on it): the last catch-up, articles being indexed at that moment included, then the pointer row
   names the new table. A writer that waited finds the new table named and writes nothing into the old one (a
   delete or relabel applies to both; an add of old-model vectors is refused, its articles left pending for the next
   ingest). Every store notices the switch at its next search, in the statement that reads its table's
   statistics, and the engine over it builds the store and the embedding model again on the new table (questions
   under way finish on the old one).

Killed half-way (kill -9 included), the same command resumes from the pointer row: the new table and the recorded
hashes say which articles are done. Two runs at once are refused (a session advisory lock, released by PostgreSQL
when the process holding it dies). ``--drop-old`` drops the previous tables, once nothing searches them.

Example:
    >>> from ragidx.config import Settings
    >>> settings = Settings(store="postgres", article_store_url="postgresql://db/kb", embed_model="e5-multilingual")
    >>> reindex_postgres(settings).table  # doctest: +SKIP
    'ragidx_chunks_articles_r3f9c1a2b'
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from typing import TYPE_CHECKING, Any

from ragidx.config import Settings
from ragidx.reindex import (
    ReindexReport,
    _configured_model,
    _embed_all,
    already_embedded,
    model_identity,
)
from ragidx.stores.postgres_pointer import (
    HASHES_TABLE,
    Pointer,
    read_pointer,
    reindexed_table_name,
    write_pointer,
)

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from ragidx.stores.postgres_store import PostgresChunkStore

__all__ = ["reindex_postgres"]

logger = logging.getLogger(__name__)


def reindex_postgres(
    settings: Settings,
    *,
    drop_old: bool = False,
    batch_articles: int = 64,
    progress: bool = False,
    embed_model: BaseEmbedding | None = None,
) -> ReindexReport:
    """:func:`ragidx.reindex.reindex` for ``store = "postgres"`` (same arguments, same report)."""
    import psycopg

    from ragidx.stores.factory import build_article_store
    from ragidx.stores.postgres_store import PostgresChunkStore, libpq_url, lock_key

    if settings.article_store_url is None:
        raise ValueError(
            "store='postgres' keeps the chunks in the database of article_store_url: set it "
            "(RAGIDX_ARTICLE_STORE_URL=postgresql://USER:PASSWORD@HOST:5432/DB)"
        )
    started = time.perf_counter()
    url = settings.article_store_url.get_secret_value()

    def open_chunks(tenant: str | None, table: str | None = None) -> PostgresChunkStore:
        return PostgresChunkStore(
            url=url, collection=settings.collection, tenant=tenant, hnsw=settings.pgvector, table_name=table
        )

    current = open_chunks(None)
    old_model = current.embed_model_name()  # connects: the schema, and the table the pointer names now
    old_table, base = current.table, current.base_table
    with psycopg.connect(libpq_url(url), autocommit=True) as guard:  # held for the run; gone with its process
        got = guard.execute("SELECT pg_try_advisory_lock(%s)", (lock_key("reindex", base),)).fetchone()
        if not got or not got[0]:
            raise ValueError(
                f"another ragidx reindex of the collection {settings.collection} is running: wait for it to end"
            )
        articles = build_article_store(settings.model_copy(update={"tenant": None}))
        try:
            model = embed_model or _configured_model(settings, articles)
            identity = model_identity(model)
            table = _resume(current, identity, old_table)
            report = ReindexReport(old_table=old_table, table=table or old_table, model=identity, old_model=old_model)
            if table is None and old_model == identity:
                if drop_old:
                    report.dropped = _drop_previous(current)
                elif not _pointer(current).previous:
                    raise already_embedded(identity)
                report.seconds = time.perf_counter() - started
                return report
            if table is None:
                token = hashlib.sha1(f"{identity}{time.time()}".encode()).hexdigest()
                table = reindexed_table_name(base, token)
                _start(current, identity, table, old_table)
                report.table = table
            recorded = _Hashes(current, table)
            new_table = table

            def fill(*, with_pending: bool) -> None:
                _embed_all(
                    settings,
                    articles,
                    model,
                    lambda tenant: open_chunks(tenant, new_table),
                    report,
                    batch_articles=batch_articles,
                    progress=progress,
                    recorded=recorded,
                    with_pending=with_pending,
                )

            fill(with_pending=False)
            open_chunks(None, table).finalize()  # the HNSW index, once large enough, before it answers
            _switch(current, table, identity, old_table, lambda: fill(with_pending=True))
            report.switched = True
            if drop_old:
                report.dropped = _drop_previous(current)
        finally:
            articles.close()
            current.close()
    report.seconds = time.perf_counter() - started
    return report


def _pointer(store: PostgresChunkStore) -> Pointer:
    with store._connection() as conn:
        return read_pointer(conn, store.base_table)


def _resume(store: PostgresChunkStore, identity: str, old_table: str) -> str | None:
    """The table a killed run for the same model was writing (None: none; one for another model is dropped)."""
    with store._connection() as conn:
        pointer = read_pointer(conn, store.base_table, for_update=True)
        if pointer.building is None:
            return None
        if pointer.building_model == identity and pointer.building_from == old_table:
            logger.info("resuming the reindex into %s", pointer.building)
            return pointer.building
        logger.warning(
            "an unfinished reindex to %s is discarded: the model is now %s", pointer.building_model, identity
        )
        if pointer.building not in (pointer.active, *pointer.previous):
            _drop_table(conn, pointer.building)
        write_pointer(conn, dataclasses.replace(pointer, building=None, building_model=None, building_from=None))
    return None


def _start(store: PostgresChunkStore, identity: str, table: str, old_table: str) -> None:
    with store._connection() as conn:
        pointer = read_pointer(conn, store.base_table, for_update=True)
        write_pointer(
            conn, dataclasses.replace(pointer, building=table, building_model=identity, building_from=old_table)
        )


def _switch(store: PostgresChunkStore, table: str, identity: str, old_table: str, catch_up: Any) -> None:
    """In one transaction holding ``old_table``'s write lock: the last catch-up, then the pointer names ``table``."""
    from ragidx.stores.postgres_store import lock_key

    with store._connection() as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("chunks", old_table),))
        pointer = read_pointer(conn, store.base_table, for_update=True)
        if pointer.active != old_table or pointer.building != table:
            raise RuntimeError(
                f"the collection {store.collection} was switched by another run meanwhile: run ragidx reindex again"
            )
        catch_up()  # the new table is written on other connections; no one writes the old table now
        previous = tuple(t for t in dict.fromkeys([*pointer.previous, old_table]) if t != table)
        write_pointer(
            conn,
            Pointer(base=pointer.base, active=table, model=identity, previous=previous),
            switched=True,
        )
        conn.execute(f"DELETE FROM {HASHES_TABLE} WHERE tbl = %s", (table,))
    logger.info("the collection %s answers from %s (%s)", store.collection, table, identity)


def _drop_previous(store: PostgresChunkStore) -> list[str]:
    """Drop the tables the collection answered from before (never the active one)."""
    with store._connection() as conn:
        pointer = read_pointer(conn, store.base_table, for_update=True)
        dropped = [t for t in pointer.previous if t != pointer.active]
        for name in dropped:
            _drop_table(conn, name)
        write_pointer(conn, dataclasses.replace(pointer, previous=()))
    return dropped


def _drop_table(conn: Any, name: str) -> None:
    """A chunk table with its statistics, declared fields and recorded hashes (under its write lock)."""
    from ragidx.stores.postgres_store import INDEXES_TABLE, lock_key

    conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("chunks", name),))
    conn.execute(f"DROP TABLE IF EXISTS {name}, {name}_terms, {name}_fields")
    conn.execute(f"DELETE FROM {INDEXES_TABLE} WHERE name = %s", (name,))
    conn.execute(f"DELETE FROM {HASHES_TABLE} WHERE tbl = %s", (name,))


class _Hashes:
    """The content hash each article of the new table was embedded from, in the database (a resumed run reads it)."""

    def __init__(self, store: PostgresChunkStore, table: str) -> None:
        self.store = store
        self.table = table

    def load(self, tenant: str) -> dict[str, str]:
        with self.store._connection() as conn:
            rows = conn.execute(
                f"SELECT kb_id, content_hash FROM {HASHES_TABLE} WHERE tbl = %s AND tenant = %s", (self.table, tenant)
            ).fetchall()
        return {str(k): str(h) for k, h in rows}

    def save(self, tenant: str, hashes: dict[str, str]) -> None:
        items = sorted(hashes.items())
        with self.store._connection() as conn:
            conn.execute(
                f"INSERT INTO {HASHES_TABLE} AS h (tbl, tenant, kb_id, content_hash) "
                "SELECT %s, %s, * FROM unnest(%s::text[], %s::text[]) "
                "ON CONFLICT (tbl, tenant, kb_id) DO UPDATE SET content_hash = excluded.content_hash",
                (self.table, tenant, [k for k, _ in items], [h for _, h in items]),
            )

    def forget(self, tenant: str, kb_ids: list[str]) -> None:
        with self.store._connection() as conn:
            conn.execute(
                f"DELETE FROM {HASHES_TABLE} WHERE tbl = %s AND tenant = %s AND kb_id = ANY(%s)",
                (self.table, tenant, kb_ids),
            )
