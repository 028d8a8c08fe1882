"""Which PostgreSQL table answers for a collection: the switch ``ragidx reindex`` turns with ``store = "postgres"``.

One row per collection in ``ragidx_chunk_pointers`` (keyed by the collection's own table name,
:func:`ragidx.stores.postgres_store.chunk_table_name`): the table that answers (``active``), the model that made its
vectors, the tables answered from before (kept until ``ragidx reindex --drop-old``), and the reindex under way (its
new table, model and the table it started from, so a killed run resumes). Without a row, the collection's own table
answers, as before reindexing existed.

The switch is one UPDATE of that row, in the transaction that holds the old table's write lock (so no write lands in
the old table after it). Every chunk store reads the row in the same statement that reads its table's statistics,
before each search and under the write lock of each write: a store in another process sees the switch at its next
use (:meth:`ragidx.stores.postgres_store.PostgresChunkStore.follow_switch`), without a restart.

Example:
    >>> POINTERS_TABLE
    'ragidx_chunk_pointers'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "HASHES_TABLE",
    "POINTERS_TABLE",
    "Pointer",
    "create_pointers",
    "read_pointer",
    "reindexed_table_name",
    "write_pointer",
]

POINTERS_TABLE = "ragidx_chunk_pointers"
HASHES_TABLE = "ragidx_reindex_hashes"
"""kb_id → the content hash a reindex embedded it from, per new table: a resumed run embeds again only what changed."""


@dataclass(frozen=True)
class Pointer:
    """A collection's row: the table that answers, its model, the tables kept, and the reindex under way."""

    base: str
    active: str
    model: str | None = None
    previous: tuple[str, ...] = ()
    building: str | None = None
    building_model: str | None = None
    building_from: str | None = None


def create_pointers(conn: psycopg.Connection[Any]) -> None:
    """The pointer and hash tables (idempotent; the caller holds the schema lock)."""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {POINTERS_TABLE} (base text PRIMARY KEY, active text NOT NULL, embed_model text, "
        "previous text[] NOT NULL DEFAULT '{}', switched_at timestamptz, building text, building_model text, "
        "building_from text)"
    )
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {HASHES_TABLE} (tbl text NOT NULL, tenant text NOT NULL, kb_id text NOT NULL, "
        "content_hash text NOT NULL, PRIMARY KEY (tbl, tenant, kb_id))"
    )


def read_pointer(conn: psycopg.Connection[Any], base: str, *, for_update: bool = False) -> Pointer:
    """``base``'s row (the collection's own table answering when there is none)."""
    row = conn.execute(
        f"SELECT active, embed_model, previous, building, building_model, building_from FROM {POINTERS_TABLE} "
        f"WHERE base = %s{' FOR UPDATE' if for_update else ''}",
        (base,),
    ).fetchone()
    if row is None:
        return Pointer(base=base, active=base)
    return Pointer(base, row[0], row[1], tuple(row[2] or ()), row[3], row[4], row[5])


def write_pointer(conn: psycopg.Connection[Any], pointer: Pointer, *, switched: bool = False) -> None:
    """Store ``pointer`` as ``base``'s row (``switched``: stamp the switch time)."""
    conn.execute(
        f"INSERT INTO {POINTERS_TABLE} AS p (base, active, embed_model, previous, switched_at, building, "
        "building_model, building_from) VALUES (%s, %s, %s, %s, CASE WHEN %s THEN now() END, %s, %s, %s) "
        "ON CONFLICT (base) DO UPDATE SET active = excluded.active, embed_model = excluded.embed_model, "
        "previous = excluded.previous, switched_at = coalesce(excluded.switched_at, p.switched_at), "
        "building = excluded.building, building_model = excluded.building_model, "
        "building_from = excluded.building_from",
        (
            pointer.base,
            pointer.active,
            pointer.model,
            list(pointer.previous),
            switched,
            pointer.building,
            pointer.building_model,
            pointer.building_from,
        ),
    )


def reindexed_table_name(base: str, token: str) -> str:
    """A new table for ``base``'s collection: at most 50 characters, so its index names stay under PostgreSQL's 63."""
    return f"{base[:40]}_r{token[:8]}"
