"""Copy an article store and its ingest ledger into another database: SQLite file → shared PostgreSQL.

Every row of every tenant is copied as it is (text, metadata, source, content hash, state, chunk count,
time), so the engine processes that use the target next re-embed nothing: ``indexed`` articles stay
indexed (their chunks are already in the shared Weaviate) and ``pending`` ones are finished by the next
ingest. Batches are committed one at a time and a row already in the target is kept when it is newer,
so a copy that was interrupted is completed by running it again, and running it twice changes nothing.

Example:
    >>> report = migrate_articles(".ragidx/articles.sqlite", "postgresql://ragidx@db/ragidx")  # doctest: +SKIP
    >>> report.as_dict()["written"]                                                      # doctest: +SKIP
    2485
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragidx.stores.article_store import ArticleStore, database_url

logger = logging.getLogger(__name__)


@dataclass
class MigrationReport:
    """What one copy did: rows read, written, and kept because the target's were newer."""

    source: str
    target: str
    rows: int = 0
    written: int = 0
    kept_newer: int = 0
    tenants: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "from": self.source,
            "to": self.target,
            "rows": self.rows,
            "written": self.written,
            "kept_newer": self.kept_newer,
            "tenants": {tenant or "(none)": n for tenant, n in sorted(self.tenants.items())},
            "seconds": round(self.seconds, 2),
        }


def migrate_articles(
    source: str | Path, target: str, *, tenant: str | None = None, batch_size: int = 500
) -> MigrationReport:
    """Copy every article and ledger row from ``source`` (a SQLite file or URL) into ``target`` (a URL).

    ``tenant``: the tenant that the rows of a SQLite file written before ragidx kept tenants apart belong
    to (the ``tenant`` setting it was written with); rows that carry a tenant keep theirs.

    Raises:
        FileNotFoundError: ``source`` is a SQLite file that does not exist.
        ValueError: ``source`` and ``target`` are the same database.
    """
    source_url, target_url = database_url(source), database_url(target)
    if source_url.get_backend_name() == "sqlite" and not Path(str(source_url.database or "")).is_file():
        raise FileNotFoundError(
            f"no article store at {source_url.database}: give the SQLite file with --from (default: "
            "DATA_DIR/articles.sqlite)"
        )
    if source_url.render_as_string(hide_password=False) == target_url.render_as_string(hide_password=False):
        raise ValueError(f"source and target are the same database ({target_url.render_as_string()})")
    started = time.perf_counter()
    src, dst = ArticleStore(source, tenant=tenant), ArticleStore(target)
    report = MigrationReport(source=src.display_url, target=dst.display_url)
    try:
        for rows in src.export_rows(batch_size):
            written = dst.import_rows(rows)
            report.rows += len(rows)
            report.written += written
            report.kept_newer += len(rows) - written
            report.tenants.update(r["tenant"] for r in rows)
            logger.info("copied %d of %d rows so far", report.written, report.rows)
    finally:
        src.close()
        dst.close()
    report.seconds = time.perf_counter() - started
    return report
