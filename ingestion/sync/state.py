"""What the syncs remember, in the article store's own database: each item's state, each source's last sync, and
the lock that lets one sync of a source run at a time.

Two tables beside the articles (SQLite or PostgreSQL, through SQLAlchemy like :mod:`ragidx.stores.article_store`):

- ``<articles>_sync_items``: one row per (tenant, source, key): the :class:`~ingestion.sync.base.ItemState` and
  the ``body_hash`` of its article's text (by which a moved file is recognised);
- ``<articles>_sync_runs``: one row per (tenant, source): the last sync's report (JSON), when it ran and how.

The lock (:meth:`SyncStateStore.lock`) is taken without waiting: a second sync of the same source, in this process
or another one, is told at once that one is running. On PostgreSQL it is a session advisory lock on a connection of
its own (a killed process's lock ends with its connection); on a SQLite file an exclusive ``flock`` on
``<file>.sync-<source>.lock`` (the kernel drops it when the process dies); on ``:memory:`` a lock in this process.

Example:
    >>> from ragidx.stores.article_store import ArticleStore
    >>> states = SyncStateStore(ArticleStore(":memory:"))
    >>> states.save("docs", [ItemState("a.md", "a.md", "h1")], body_hashes={"a.md": "b1"})
    >>> states.load("docs")["a.md"].content_hash
    'h1'
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Connection, Float, MetaData, PrimaryKeyConstraint, Table, Text, inspect, select, text
from sqlalchemy.dialects import postgresql, sqlite

from ingestion.sync.base import ItemState
from ragidx.stores.article_store import ArticleStore

__all__ = ["LastSync", "SyncBusy", "SyncStateStore"]

_MEMORY_LOCKS: dict[tuple[int, str], threading.Lock] = {}
_MEMORY_LOCKS_GUARD = threading.Lock()


class SyncBusy(RuntimeError):
    """Another sync of the same source is running (in this process or another one)."""


@dataclass(frozen=True)
class LastSync:
    """A source's last sync as stored: when it started and finished, how it ended, and its report (a dict)."""

    source: str
    started_at: float
    finished_at: float
    status: str
    report: dict[str, Any]


class SyncStateStore:
    """Item states, last syncs and the per-source lock, kept with an :class:`ArticleStore` (its tenant too).

    Args:
        article_store: the store whose database (and tenant) the sync state lives in.
    """

    def __init__(self, article_store: ArticleStore) -> None:
        self.article_store = article_store
        self._tenant = article_store.tenant or ""
        base = article_store.table.name
        meta = MetaData()
        self.items = Table(
            f"{base}_sync_items",
            meta,
            Column("tenant", Text, nullable=False),
            Column("source", Text, nullable=False),
            Column("key", Text, nullable=False),
            Column("kb_id", Text, nullable=False),
            Column("content_hash", Text, nullable=False),
            Column("body_hash", Text, nullable=False, server_default=""),
            Column("etag", Text),
            Column("last_modified", Text),
            Column("lastmod", Text),
            Column("links_json", Text),
            Column("updated_at", Float, nullable=False),
            PrimaryKeyConstraint("tenant", "source", "key", name=f"{base}_sync_items_pkey"),
        )
        self.runs = Table(
            f"{base}_sync_runs",
            meta,
            Column("tenant", Text, nullable=False),
            Column("source", Text, nullable=False),
            Column("started_at", Float, nullable=False),
            Column("finished_at", Float, nullable=False),
            Column("status", Text, nullable=False),
            Column("report_json", Text, nullable=False),
            PrimaryKeyConstraint("tenant", "source", name=f"{base}_sync_runs_pkey"),
        )
        self._created = False
        self._guard = threading.Lock()

    # --- connections --------------------------------------------------------------------------
    def _ready(self) -> None:
        with self._guard:
            if self._created:
                return
            engine = self.article_store.engine
            with engine.connect() as conn:
                conn = conn.execution_options(write=True)
                with conn.begin():
                    if self.article_store.is_postgres:  # CREATE TABLE IF NOT EXISTS races between processes
                        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key("schema", "sync")})
                    self.items.metadata.create_all(conn, checkfirst=True)
                    self._add_links_column(conn)
            self._created = True

    def _add_links_column(self, conn: Connection) -> None:
        """A table made before item states kept a page's links gains the column (empty: the next fetch fills it)."""
        if "links_json" not in {c["name"] for c in inspect(conn).get_columns(self.items.name)}:
            conn.execute(text(f'ALTER TABLE "{self.items.name}" ADD COLUMN links_json TEXT'))

    @contextlib.contextmanager
    def _connection(self, *, write: bool) -> Iterator[Connection]:
        self._ready()
        # the article store's own statement lock (SQLite: one statement at a time in a process; ":memory:" is one
        # shared connection)
        serial = getattr(self.article_store, "_serial", None) or contextlib.nullcontext()
        with serial, self.article_store.engine.connect() as conn:
            if write:
                conn = conn.execution_options(write=True)
            with conn.begin():
                yield conn

    def _upsert(self, table: Table, keys: Sequence[str]) -> Any:
        stmt: Any = (postgresql.insert if self.article_store.is_postgres else sqlite.insert)(table)
        updated = {c.name: stmt.excluded[c.name] for c in table.columns if c.name not in keys}
        return stmt.on_conflict_do_update(index_elements=[table.c[k] for k in keys], set_=updated)

    # --- item states --------------------------------------------------------------------------
    def load(self, source: str) -> dict[str, ItemState]:
        """The states of a source's items, by key."""
        t = self.items
        stmt = select(t).where(t.c.tenant == self._tenant, t.c.source == source)
        with self._connection(write=False) as conn:
            rows = conn.execute(stmt).mappings().all()
        return {
            r["key"]: ItemState(
                key=r["key"],
                kb_id=r["kb_id"],
                content_hash=r["content_hash"],
                etag=r["etag"],
                last_modified=r["last_modified"],
                lastmod=r["lastmod"],
                links=tuple(json.loads(r["links_json"])) if r["links_json"] else (),
            )
            for r in rows
        }

    def body_hashes(self, source: str) -> dict[str, str]:
        """key → the hash of its article's text, title and language (no place, no metadata), for moved items."""
        t = self.items
        stmt = select(t.c.key, t.c.body_hash).where(t.c.tenant == self._tenant, t.c.source == source)
        with self._connection(write=False) as conn:
            return {r[0]: r[1] for r in conn.execute(stmt) if r[1]}

    def save(self, source: str, states: Sequence[ItemState], *, body_hashes: Mapping[str, str]) -> None:
        """Write these items' states (one transaction). ``body_hashes``: key → body hash; a key without one keeps
        the hash it has."""
        if not states:
            return
        now = time.time()
        rows: list[dict[str, Any]] = [
            {
                "tenant": self._tenant,
                "source": source,
                "key": s.key,
                "kb_id": s.kb_id,
                "content_hash": s.content_hash,
                "body_hash": body_hashes.get(s.key, ""),
                "etag": s.etag,
                "last_modified": s.last_modified,
                "lastmod": s.lastmod,
                "links_json": json.dumps(list(s.links)) if s.links else None,
                "updated_at": now,
            }
            for s in states
        ]
        keep = [r for r in rows if not r["body_hash"]]
        known = self.body_hashes(source) if keep else {}
        for r in keep:
            r["body_hash"] = known.get(str(r["key"]), "")
        with self._connection(write=True) as conn:
            conn.execute(self._upsert(self.items, ("tenant", "source", "key")), rows)

    def forget(self, source: str, keys: Sequence[str]) -> None:
        """Drop these items' states (their articles are deleted)."""
        t = self.items
        with self._connection(write=True) as conn:
            for i in range(0, len(keys), 500):
                batch = list(keys[i : i + 500])
                conn.execute(t.delete().where(t.c.tenant == self._tenant, t.c.source == source, t.c.key.in_(batch)))

    # --- last syncs ------------------------------------------------------------------------------
    def record(self, source: str, started_at: float, finished_at: float, status: str, report: dict[str, Any]) -> None:
        """Store a source's last sync (replacing the one before)."""
        row = {
            "tenant": self._tenant,
            "source": source,
            "started_at": started_at,
            "finished_at": finished_at,
            "status": status,
            "report_json": json.dumps(report, ensure_ascii=False),
        }
        with self._connection(write=True) as conn:
            conn.execute(self._upsert(self.runs, ("tenant", "source")), [row])

    def last_syncs(self) -> dict[str, LastSync]:
        """Every source's last sync, by source name."""
        t = self.runs
        stmt = select(t).where(t.c.tenant == self._tenant)
        with self._connection(write=False) as conn:
            rows = conn.execute(stmt).mappings().all()
        return {
            r["source"]: LastSync(
                source=r["source"],
                started_at=r["started_at"],
                finished_at=r["finished_at"],
                status=r["status"],
                report=json.loads(r["report_json"] or "{}"),
            )
            for r in rows
        }

    # --- one sync per source ---------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, source: str) -> Iterator[None]:
        """Hold the source's sync lock for the block.

        Raises:
            SyncBusy: another sync of this source holds it (this process or another); nothing was done.
        """
        store = self.article_store
        if store.is_postgres:
            with self._pg_lock(source):
                yield
        elif store.url.database in (None, "", ":memory:"):
            with _memory_lock(id(store), source):
                yield
        else:
            with _file_lock(Path(f"{store.url.database}.sync-{_file_part(source)}.lock"), source):
                yield

    def is_running(self, source: str) -> bool:
        """Whether a sync of this source holds its lock now."""
        try:
            with self.lock(source):
                return False
        except SyncBusy:
            return True

    @contextlib.contextmanager
    def _pg_lock(self, source: str) -> Iterator[None]:
        key = _lock_key(self._tenant, self.article_store.table.name, "sync", source)
        conn = self.article_store.engine.connect()
        try:
            got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
            conn.commit()
            if not got:
                raise SyncBusy(_busy(source))
            try:
                yield
            finally:
                try:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                    conn.commit()
                except Exception:  # a connection that cannot say so is dropped, which ends its lock too
                    with contextlib.suppress(Exception):
                        conn.invalidate()
        finally:
            conn.close()


@contextlib.contextmanager
def _file_lock(path: Path, source: str) -> Iterator[None]:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released by close, or by the kernel when we die
        except BlockingIOError:
            raise SyncBusy(_busy(source)) from None
        yield


@contextlib.contextmanager
def _memory_lock(store_id: int, source: str) -> Iterator[None]:
    with _MEMORY_LOCKS_GUARD:
        lock = _MEMORY_LOCKS.setdefault((store_id, source), threading.Lock())
    if not lock.acquire(blocking=False):
        raise SyncBusy(_busy(source))
    try:
        yield
    finally:
        lock.release()


def _busy(source: str) -> str:
    return f"source {source!r}: a sync of it is already running; this one did nothing (it runs again next time)"


def _file_part(source: str) -> str:
    """The source name as part of a file name (names are checked to be safe; hashed anyway if not)."""
    if source.replace("-", "").replace("_", "").replace(".", "").isalnum():
        return source
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def _lock_key(*parts: str) -> int:
    """A signed 64-bit advisory-lock key for these parts."""
    digest = hashlib.blake2b("\x00".join(("ragidx-sync", *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
