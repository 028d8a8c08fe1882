"""``ragidx migrate --to postgres|lancedb``: copy the chunk index between LanceDB and PostgreSQL, vectors included.

Nothing is embedded again: each chunk moves with its id, text, metadata, permissions, tenant and vector, and the
target records the embedding model the source recorded. Both stores rank alike (the PostgreSQL store scores its
full text as Lance does: :mod:`ragidx.stores.postgres_store`), so the same searches return the same articles in
the same order on either. Every tenant's chunks are copied.

A copy that was interrupted is completed by running it again: a batch replaces the chunks of its ids in the
target (PostgreSQL's ``add`` replaces; in LanceDB the ids are deleted first), so nothing is doubled. With
``--to postgres``, the article store and ingest ledger of this machine's SQLite file, if there is one, are
copied into the same database too (``ragidx migrate-articles``), so a deployment moves in one command; then set
``store = "postgres"``.

Example:
    >>> report = migrate_chunks(Settings(article_store_url="postgresql://db/kb"), to="postgres")  # doctest: +SKIP
    >>> report.as_dict()["chunks"]                                                              # doctest: +SKIP
    96482
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from ragidx.config import Settings

__all__ = ["ChunkMigrationReport", "add_migrate_command", "migrate_chunks"]

logger = logging.getLogger(__name__)

Target = Literal["postgres", "lancedb"]
BATCH = 1000


@dataclass
class ChunkMigrationReport:
    """What one copy did: chunks copied, and the article store's own report when it was copied too."""

    source: str
    target: str
    chunks: int = 0
    embed_model: str | None = None
    articles: dict[str, Any] | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "from": self.source,
            "to": self.target,
            "chunks": self.chunks,
            "embed_model": self.embed_model,
            "articles": self.articles,
            "seconds": round(self.seconds, 2),
            "notes": self.notes,
        }


def _stores(settings: Settings, url: str | None) -> tuple[Any, Any]:
    """(the LanceDB store of ``data_dir``, the PostgreSQL store of ``url``), both over every tenant."""
    from ragidx.stores.lancedb_store import LanceDBChunkStore
    from ragidx.stores.postgres_store import PostgresChunkStore

    if not url:
        raise ValueError(
            "ragidx migrate needs the PostgreSQL database: set article_store_url (RAGIDX_ARTICLE_STORE_URL="
            "postgresql://USER:PASSWORD@HOST:5432/DB) or give --url"
        )
    from ragidx.stores.active_table import active_table

    # the table that answers for the collection (``ragidx reindex`` may have switched it)
    table = active_table(settings.lancedb_uri, settings.collection)
    lance = LanceDBChunkStore(uri=settings.lancedb_uri, table_name=table, tenant=None)
    postgres = PostgresChunkStore(url=url, collection=settings.collection, tenant=None, hnsw=settings.pgvector)
    return lance, postgres


def _lancedb_batches(store: Any, batch_size: int) -> Any:
    """Every chunk of a LanceDB store with its vector, in batches of nodes."""
    from ragidx.stores.lancedb_store import COLUMNS

    table = store._open()
    if table is None:
        return
    for batch in table.to_lance().to_batches(columns=[*COLUMNS, "vector"], batch_size=batch_size):
        nodes = []
        for row in batch.to_pylist():
            node = store._row_to_node(row)
            node.embedding = [float(x) for x in row["vector"]]
            nodes.append(node)
        if nodes:
            yield nodes


def migrate_chunks(
    settings: Settings, *, to: Target, url: str | None = None, articles: bool = True, batch_size: int = BATCH
) -> ChunkMigrationReport:
    """Copy the chunk index of ``settings`` into the ``to`` store (see the module docstring).

    Args:
        settings: where the stores are: ``data_dir`` and ``collection`` for LanceDB, ``article_store_url`` for
            PostgreSQL (unless ``url`` names it).
        to: the store copied into; the other one is the source.
        articles: with ``to="postgres"``, also copy the SQLite article store of ``data_dir``, if there is one.

    Raises:
        ValueError: no PostgreSQL database named, or the target holds vectors of another embedding model.
    """
    url = url or (settings.article_store_url.get_secret_value() if settings.article_store_url else None)
    lance, postgres = _stores(settings, url)
    source, target = (lance, postgres) if to == "postgres" else (postgres, lance)
    report = ChunkMigrationReport(
        source=f"lancedb:{settings.lancedb_uri}" if to == "postgres" else f"postgres:{postgres.table}",
        target=f"postgres:{postgres.table}" if to == "postgres" else f"lancedb:{settings.lancedb_uri}",
    )
    started = time.perf_counter()
    report.embed_model = source.embed_model_name()
    batches = _lancedb_batches(source, batch_size) if to == "postgres" else source.iter_nodes(batch_size)
    checked = False
    for nodes in batches:
        if not checked:
            target.check_embedding(len(nodes[0].embedding), report.embed_model)
            checked = True
        if to == "lancedb":  # LanceDB appends: take out what an interrupted run copied already
            target.delete_nodes(node_ids=[n.node_id for n in nodes])
        target.add(nodes)
        report.chunks += len(nodes)
        logger.info("copied %d chunks so far", report.chunks)
    target.finalize()
    if not checked:
        report.notes.append("the source index is empty: nothing to copy")
    if to == "postgres" and articles:
        report.articles = _copy_articles(settings, url or "", report)
    elif to == "lancedb" and settings.article_store_url:
        report.notes.append("the articles and the ledger stay in article_store_url, which LanceDB uses as well")
    report.seconds = time.perf_counter() - started
    if hasattr(postgres, "close"):
        postgres.close()
    return report


def _copy_articles(settings: Settings, url: str, report: ChunkMigrationReport) -> dict[str, Any] | None:
    from ragidx.stores.article_migration import migrate_articles

    if not settings.article_db_path.is_file():
        report.notes.append(f"no SQLite article store at {settings.article_db_path}: the articles were not copied")
        return None
    return migrate_articles(settings.article_db_path, url, tenant=settings.tenant).as_dict()


def add_migrate_command(sub: Any) -> None:
    """``ragidx migrate`` in the CLI's subcommands."""
    p = sub.add_parser(
        "migrate",
        help="copy the chunk index between LanceDB (data_dir) and PostgreSQL (article_store_url), vectors "
        "included: nothing is embedded again; --to postgres copies the SQLite articles and ledger too",
    )
    p.add_argument("--to", choices=("postgres", "lancedb"), required=True, help="the store to copy into")
    p.add_argument("--url", help="the PostgreSQL database (default: RAGIDX_ARTICLE_STORE_URL)")
    p.add_argument("--no-articles", action="store_true", help="copy the chunks only, not the SQLite article store")
    p.add_argument("--batch", type=int, default=BATCH, help=f"chunks per write (default {BATCH})")
    p.set_defaults(func=_cmd_migrate)


def _cmd_migrate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ragidx.safe_text import printable_json

    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    report = migrate_chunks(
        Settings(**overrides), to=args.to, url=args.url, articles=not args.no_articles, batch_size=args.batch
    )
    print(printable_json(report.as_dict()))
    store = "postgres" if args.to == "postgres" else "lancedb"
    print(f"done: set store = {store!r} (RAGIDX_STORE={store}) to search the copy", file=sys.stderr)
    return 0
