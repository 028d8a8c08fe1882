"""The article store: every full article by kb_id, and the ingestion ledger, in one SQL table.

Two backends behind one class, chosen by where it points (SQLAlchemy Core does the dialects):

- a SQLite file (the embedded default, ``data_dir/articles.sqlite``), or ``:memory:``;
- a PostgreSQL database (``postgresql+psycopg://user:pass@host/db``) that several engine processes on
  several machines share, next to a Weaviate cluster.

Retrieval returns whole articles from here. Ingestion records, per article, the content hash, the source it
came from (``source``: its name, as ``--prune`` knows it; ``origin``: the resolved path of its file, or of the
JSONL file or folder ingested; '' for articles handed in through the API), and
whether its chunks are known to be in the vector store (``state``): an article is ``pending`` from the
moment its new text is saved until its chunks are written, then ``indexed``. A crash between the two
leaves it ``pending``; the next run re-indexes it (deleting whatever partial chunks exist first), so
re-running after a kill ends with exactly the right chunks.

Several processes: whoever changes an article's chunks first *claims* it (``claim(kb_ids)``) and holds
the claim until its ledger row says what the chunks are. On PostgreSQL a claim is a session advisory
lock per article (taken in one global order, so two claims never deadlock; a killed process's locks end
with its connection); on SQLite it is a lock on ``<file>.lock`` covering the whole store. Inside a claim
the caller re-reads the ledger, so work another process finished meanwhile is not done twice.

Permissions: an article's principals (``allowed`` in its metadata, :mod:`ragidx.stores.access`) are kept in a
second table, one row per (tenant, kb_id, principal), written in the same transaction as the article (from
its metadata, also on import), and every read of whole articles for a query takes the query's principal:
``get(kb_ids, principal=...)`` returns only the articles it may read, filtered in the SQL itself.

Tenants: a store is bound to one ``tenant`` (``None`` = no tenant); rows are keyed by (tenant, kb_id),
so two tenants may use the same kb_id without seeing each other's articles or ledger.

Example:
    >>> store = ArticleStore(":memory:")
    >>> store.count()
    0
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    Column,
    Connection,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    bindparam,
    case,
    create_engine,
    event,
    func,
    literal,
    select,
    text,
    tuple_,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from ragidx.article import Article
from ragidx.stores.access import Principal, allowed_of

logger = logging.getLogger(__name__)

PENDING = "pending"
INDEXED = "indexed"

SQLITE_TABLE = "articles"
POSTGRES_TABLE = "ragidx_articles"
RETRY_DELAYS_S = (0.2, 1.0, 3.0)
"""Waits before each retry of a step whose database connection dropped (PostgreSQL)."""
SQLITE_TIMEOUT_S = 30.0
"""How long a SQLite statement waits for another process's lock before it fails."""

_LEGACY_COLUMNS = (
    "kb_id, title, url, language, content, metadata_json, source, content_hash, chunk_count, state, updated_at"
)
T = TypeVar("T")


class ArticleStoreUnavailable(ConnectionError):
    """The article store's database could not be reached; the step it was doing was not written."""


def _table(name: str) -> Table:
    return Table(
        name,
        MetaData(),
        Column("tenant", Text, nullable=False, server_default=""),
        Column("kb_id", Text, nullable=False),
        Column("title", Text, nullable=False),
        Column("url", Text, nullable=False),
        Column("language", Text),
        Column("content", Text, nullable=False),
        Column("metadata_json", Text, nullable=False, server_default="{}"),
        Column("source", Text, nullable=False, server_default=""),
        Column("origin", Text, nullable=False, server_default=""),
        Column("content_hash", Text, nullable=False),
        Column("chunk_count", Integer, nullable=False, server_default="0"),
        Column("state", Text, nullable=False),
        Column("updated_at", Float, nullable=False),
        PrimaryKeyConstraint("tenant", "kb_id", name=f"{name}_pkey"),
        Index(f"{name}_tenant_source", "tenant", "source"),
        Index(f"{name}_tenant_state", "tenant", "state"),
        Index(f"{name}_tenant_origin", "tenant", "origin"),
    )


def _access_table(name: str, metadata: MetaData) -> Table:
    """Who may read each article: one row per principal; an article without rows is public."""
    return Table(
        f"{name}_access",
        metadata,
        Column("tenant", Text, nullable=False),
        Column("kb_id", Text, nullable=False),
        Column("principal", Text, nullable=False),
        PrimaryKeyConstraint("tenant", "kb_id", "principal", name=f"{name}_access_pkey"),
    )


def database_url(location: str | Path) -> URL:
    """The SQLAlchemy URL for a path, ``:memory:`` or a URL (``postgresql://`` is given psycopg 3)."""
    raw = str(location)
    if raw == ":memory:":
        return make_url("sqlite://")
    if "://" not in raw:
        return URL.create("sqlite", database=str(Path(raw)))
    url = make_url(raw)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    if url.drivername not in ("sqlite", "sqlite+pysqlite", "postgresql+psycopg"):
        raise ValueError(
            f"article store URL {url.render_as_string(hide_password=True)!r}: use a SQLite path or "
            "sqlite:///PATH, or postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE"
        )
    return url


@dataclass(frozen=True)
class ArticleEntry:
    """One stored article as ``ArticleStore.listing`` gives it: its id, title, url, source, ingest state, chunks,
    and who may read it (``user:NAME`` / ``group:NAME``; empty: the public)."""

    kb_id: str
    title: str
    url: str
    source: str
    state: str
    chunks: int
    allowed: tuple[str, ...]


class ArticleStore:
    """Full articles plus their indexing state, in SQLite or PostgreSQL. Thread-safe.

    Args:
        location: a SQLite file path, ``":memory:"``, or a database URL (``sqlite:///PATH``,
            ``postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB``). Nothing is opened until first use.
        tenant: the tenant this store reads and writes; ``None`` for none.
        retry_delays_s: on PostgreSQL, waits before retrying a step whose connection dropped.

    Example:
        >>> s = ArticleStore(":memory:")
        >>> s.save_pending([Article("a", "A", "u", "text")], source="demo")
        >>> s.get(["a"])["a"].title
        'A'
    """

    def __init__(
        self,
        location: str | Path,
        *,
        tenant: str | None = None,
        retry_delays_s: Sequence[float] = RETRY_DELAYS_S,
    ) -> None:
        self.url = database_url(location)
        self.tenant = tenant or None
        self.retry_delays_s = tuple(retry_delays_s)
        self.is_postgres = self.url.get_backend_name() == "postgresql"
        self.table = _table(POSTGRES_TABLE if self.is_postgres else SQLITE_TABLE)
        self.access = _access_table(self.table.name, self.table.metadata)
        self._tenant_value = self.tenant or ""
        self._engine: Engine | None = None
        self._lock = threading.RLock()
        # SQLite: one statement at a time per process (":memory:" is one shared connection); a server: none.
        self._serial: contextlib.AbstractContextManager[Any] = (
            contextlib.nullcontext() if self.is_postgres else threading.RLock()
        )
        self._memory_claim = threading.Lock()

    @property
    def path(self) -> str:
        """The SQLite file (``":memory:"`` for memory); the masked URL for a server."""
        if self.is_postgres:
            return self.display_url
        return self.url.database or ":memory:"

    @property
    def display_url(self) -> str:
        """Where the store is, with any password masked: safe to log and show."""
        return self.url.render_as_string(hide_password=True)

    @property
    def engine(self) -> Engine:
        with self._lock:
            if self._engine is None:
                self._engine = self._open()
            return self._engine

    def close(self) -> None:
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None

    # --- opening ---------------------------------------------------------------------------------
    def _open(self) -> Engine:
        if self.is_postgres:
            try:
                engine = create_engine(
                    self.url, pool_pre_ping=True, pool_size=5, max_overflow=10, connect_args={"connect_timeout": 10}
                )
            except ImportError as exc:
                raise RuntimeError(
                    f"the article store {self.display_url} is a PostgreSQL database, which needs psycopg 3: "
                    "pip install 'ragidx[postgres]'"
                ) from exc
        else:
            engine = self._sqlite_engine()
        try:
            self._with_retries("opening the article store", lambda: self._create_schema(engine))
        except BaseException:
            engine.dispose()
            raise
        return engine

    def _sqlite_engine(self) -> Engine:
        memory = self.url.database in (None, "", ":memory:")
        if not memory:
            Path(str(self.url.database)).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            self.url,
            connect_args={"check_same_thread": False, "timeout": SQLITE_TIMEOUT_S},
            **({"poolclass": StaticPool} if memory else {}),
        )

        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN itself (below)
            if not memory:
                _enable_wal(dbapi_conn, timeout_s=SQLITE_TIMEOUT_S)
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            # Writers take the write lock up front: no upgrade deadlock between two processes.
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("write") else "BEGIN")

        return engine

    def _create_schema(self, engine: Engine) -> None:
        # One process at a time: on SQLite the transaction starts with the write lock (BEGIN IMMEDIATE), on
        # PostgreSQL with a lock of its own (CREATE TABLE IF NOT EXISTS races between two processes).
        with engine.connect() as conn:
            conn = conn.execution_options(write=True)
            with conn.begin():
                if self.is_postgres:
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key("schema", self.table.name)})
                else:
                    self._migrate_legacy_sqlite(conn)
                self._add_origin(conn)
                self.table.metadata.create_all(conn, checkfirst=True)

    def _add_origin(self, conn: Connection) -> None:
        """Tables written before articles recorded their origin get the column (''), and its index."""
        from sqlalchemy import inspect

        inspector = inspect(conn)
        if not inspector.has_table(self.table.name):
            return
        if "origin" in {c["name"] for c in inspector.get_columns(self.table.name)}:
            return
        name = self.table.name
        conn.exec_driver_sql(f"ALTER TABLE {name} ADD COLUMN origin TEXT NOT NULL DEFAULT ''")
        conn.exec_driver_sql(f"CREATE INDEX IF NOT EXISTS {name}_tenant_origin ON {name} (tenant, origin)")

    def _migrate_legacy_sqlite(self, conn: Connection) -> None:
        """Files written before tenants were kept apart: key (kb_id) becomes (tenant, kb_id), rows kept."""
        columns = [row[1] for row in conn.exec_driver_sql(f"PRAGMA table_info({SQLITE_TABLE})")]
        if not columns or "tenant" in columns:
            return
        legacy = f"{SQLITE_TABLE}_before_tenants"
        conn.exec_driver_sql(f"ALTER TABLE {SQLITE_TABLE} RENAME TO {legacy}")
        for name in ("articles_source", "articles_state"):
            conn.exec_driver_sql(f"DROP INDEX IF EXISTS {name}")
        self.table.metadata.create_all(conn, checkfirst=True)
        moved = conn.exec_driver_sql(
            f"INSERT INTO {SQLITE_TABLE} (tenant, {_LEGACY_COLUMNS}) SELECT ?, {_LEGACY_COLUMNS} FROM {legacy}",
            (self._tenant_value,),
        ).rowcount
        conn.exec_driver_sql(f"DROP TABLE {legacy}")
        # Rows of a file written before tenants are taken to belong to the tenant that opens it first.
        logger.warning(
            "article store %s: added tenants to the ledger; its %d articles belong to tenant %r",
            self.path,
            moved,
            self._tenant_value,
        )

    # --- running statements ---------------------------------------------------------------------
    def _with_retries(self, step: str, fn: Callable[[], T]) -> T:
        """Run one whole step; if the server connection drops, run it again (every step is idempotent)."""
        delays = self.retry_delays_s if self.is_postgres else ()
        for attempt in range(len(delays) + 1):
            try:
                return fn()
            except DBAPIError as exc:
                if not (self.is_postgres and _is_disconnect(exc)):
                    raise
                if attempt == len(delays):
                    raise self._unavailable(step, exc, attempts=attempt + 1) from exc
                logger.warning(
                    "article store %s: connection lost during %s (%s); retrying in %.1f s",
                    self.display_url,
                    step,
                    _first_line(exc),
                    delays[attempt],
                )
                time.sleep(delays[attempt])
        raise AssertionError("unreachable")

    def _unavailable(self, step: str, exc: BaseException, *, attempts: int) -> ArticleStoreUnavailable:
        return ArticleStoreUnavailable(
            f"article store {self.display_url} unreachable during {step} ({attempts} attempt"
            f"{'s' if attempts > 1 else ''}): {_first_line(exc)}. That step was rolled back, nothing of it "
            "was written; check the database server and run the same command again."
        )

    def _read(self, step: str, fn: Callable[[Connection], T], conn: Connection | None = None) -> T:
        if conn is not None:
            return _on_claim(self, step, conn, fn)

        def run() -> T:
            with self._serial, self.engine.connect() as c:
                return fn(c)

        return self._with_retries(step, run)

    def _write(self, step: str, fn: Callable[[Connection], T], conn: Connection | None = None) -> T:
        """One transaction: all of ``fn`` is written or none of it."""
        if conn is not None:
            return _on_claim(self, step, conn, fn)

        def run() -> T:
            with self._serial, self.engine.connect() as c:
                c = c.execution_options(write=True)
                with c.begin():
                    return fn(c)

        return self._with_retries(step, run)

    def _upsert(self, rows: list[dict[str, Any]], *, only_if_newer: bool = False) -> Any:
        t = self.table
        stmt: Any = (postgresql.insert if self.is_postgres else sqlite.insert)(t)
        updated = {c.name: stmt.excluded[c.name] for c in t.columns if c.name not in ("tenant", "kb_id")}
        where = t.c.updated_at < stmt.excluded.updated_at if only_if_newer else None
        return stmt.on_conflict_do_update(index_elements=[t.c.tenant, t.c.kb_id], set_=updated, where=where)

    def _mine(self) -> Any:
        return self.table.c.tenant == self._tenant_value

    # --- ledger ------------------------------------------------------------------------------------
    def states(self, kb_ids: Sequence[str], *, _conn: Connection | None = None) -> dict[str, tuple[str, str]]:
        """kb_id → (content_hash, state) for the ids that are stored."""
        t = self.table

        def run(conn: Connection) -> dict[str, tuple[str, str]]:
            out: dict[str, tuple[str, str]] = {}
            for batch in _batches(kb_ids, 500):
                rows = conn.execute(
                    select(t.c.kb_id, t.c.content_hash, t.c.state).where(self._mine(), t.c.kb_id.in_(batch))
                )
                out.update({r[0]: (r[1], r[2]) for r in rows})
            return out

        return self._read("reading the ledger", run, _conn)

    def save_pending(
        self,
        articles: Iterable[Article],
        source: str = "",
        *,
        origins: Mapping[str, str] | None = None,
        _conn: Connection | None = None,
    ) -> None:
        """Save new article text and mark it pending, in one transaction. ``origins``: kb_id → where each came from
        (the resolved path of its file; absent: '')."""
        now = time.time()
        origins = origins or {}
        rows = [
            {
                "tenant": self._tenant_value,
                "kb_id": a.kb_id,
                "title": a.title,
                "url": a.url,
                "language": a.language,
                "content": a.content,
                "metadata_json": json.dumps(a.metadata, ensure_ascii=False),
                "source": source,
                "origin": origins.get(a.kb_id, ""),
                "content_hash": a.content_hash,
                "chunk_count": 0,
                "state": PENDING,
                "updated_at": now,
            }
            for a in articles
        ]
        if rows:

            def run(conn: Connection) -> None:
                conn.execute(self._upsert(rows), rows)
                self._write_access(conn, rows)

            self._write("saving articles", run, _conn)

    def _write_access(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
        """Replace the principals of these article rows with the ones their metadata allows."""
        a = self.access
        for tenant in {r["tenant"] for r in rows}:
            ids = [r["kb_id"] for r in rows if r["tenant"] == tenant]
            for batch in _batches(ids, 500):
                conn.execute(a.delete().where(a.c.tenant == tenant, a.c.kb_id.in_(batch)))
        grants = [
            {"tenant": r["tenant"], "kb_id": r["kb_id"], "principal": name}
            for r in rows
            for name in allowed_of(json.loads(r["metadata_json"] or "{}"))
        ]
        if grants:
            conn.execute(a.insert(), grants)

    def mark_indexed(self, chunk_counts: dict[str, int], *, _conn: Connection | None = None) -> None:
        t = self.table
        stmt = (
            t.update()
            .where(t.c.tenant == bindparam("b_tenant"), t.c.kb_id == bindparam("b_kb_id"))
            .values(state=INDEXED, chunk_count=bindparam("b_chunks"))
        )
        params = [{"b_tenant": self._tenant_value, "b_kb_id": k, "b_chunks": n} for k, n in chunk_counts.items()]
        if params:
            self._write("marking articles indexed", lambda conn: conn.execute(stmt, params), _conn)

    def pending_ids(self) -> list[str]:
        t = self.table
        stmt = select(t.c.kb_id).where(self._mine(), t.c.state == PENDING).order_by(t.c.kb_id)
        return self._read("reading the ledger", lambda conn: [r[0] for r in conn.execute(stmt)])

    def indexed_ids(self, min_chunks: int = 0) -> list[str]:
        """The kb_ids whose chunks (at least ``min_chunks``) are in the vector store, in kb_id order."""
        t = self.table
        stmt = (
            select(t.c.kb_id)
            .where(self._mine(), t.c.state == INDEXED, t.c.chunk_count >= min_chunks)
            .order_by(t.c.kb_id)
        )
        return self._read("reading the ledger", lambda conn: [r[0] for r in conn.execute(stmt)])

    def ledger_digest(self) -> dict[str, Any]:
        """What changes whenever an ingest or delete changes the index: article and chunk counts and the
        latest write (every write stamps ``updated_at``; a delete lowers the count). One aggregate query."""
        t = self.table
        stmt = select(
            func.count(),
            func.coalesce(func.sum(t.c.chunk_count), 0),
            func.coalesce(func.sum(case((t.c.state == INDEXED, 1), else_=0)), 0),
            func.max(t.c.updated_at),
        ).where(self._mine())
        count, chunks, indexed, last = self._read("reading the ledger", lambda conn: conn.execute(stmt).one())
        return {"articles": int(count), "indexed": int(indexed), "chunks": int(chunks), "updated_at": last}

    def ids_for_source(self, source: str, origin: str | None = None) -> list[str]:
        """The articles of a source: those recorded with the name ``source``; with ``origin`` (a resolved path),
        those whose file is ``origin`` or lies under it, and those with no origin recorded named ``source`` (two
        folders of the same name are then two sources)."""
        t = self.table
        mine = t.c.source == source
        if origin:
            inside = (t.c.origin == origin) | t.c.origin.startswith(origin.rstrip("/") + "/", autoescape=True)
            mine = ((t.c.origin != "") & inside) | ((t.c.origin == "") & mine)
        stmt = select(t.c.kb_id).where(self._mine(), mine)
        return self._read("reading the ledger", lambda conn: [r[0] for r in conn.execute(stmt)])

    def id_of_origin(self, origin: str) -> str | None:
        """The id the store holds the file at ``origin`` (a resolved path) under, or None: the file keeps it."""
        t = self.table
        stmt = select(t.c.kb_id).where(self._mine(), t.c.origin == origin).order_by(t.c.updated_at).limit(1)
        return self._read("reading the ledger", lambda conn: conn.execute(stmt).scalar())

    def owners(self, kb_ids: Sequence[str], *, _conn: Connection | None = None) -> dict[str, tuple[str, str]]:
        """kb_id → (source, origin) recorded for the ids that are stored: whose the article is."""
        t = self.table

        def run(conn: Connection) -> dict[str, tuple[str, str]]:
            out: dict[str, tuple[str, str]] = {}
            for batch in _batches(kb_ids, 500):
                rows = conn.execute(select(t.c.kb_id, t.c.source, t.c.origin).where(self._mine(), t.c.kb_id.in_(batch)))
                out.update({r[0]: (r[1], r[2]) for r in rows})
            return out

        return self._read("reading the ledger", run, _conn)

    def delete(self, kb_ids: Sequence[str], *, _conn: Connection | None = None) -> None:
        t = self.table

        def run(conn: Connection) -> None:
            a = self.access
            for batch in _batches(kb_ids, 500):
                conn.execute(t.delete().where(self._mine(), t.c.kb_id.in_(batch)))
                conn.execute(a.delete().where(a.c.tenant == self._tenant_value, a.c.kb_id.in_(batch)))

        if kb_ids:
            self._write("deleting articles", run, _conn)

    # --- claims (several processes) ---------------------------------------------------------------
    @contextlib.contextmanager
    def claim(self, kb_ids: Sequence[str]) -> Iterator[Claim]:
        """Hold these articles against every other process (and thread) until the block ends.

        Blocks while another claim holds any of them. Inside, re-read ``claim.states`` before acting:
        another process may have indexed them while this one waited.
        """
        if not self.is_postgres:
            with self._sqlite_claim():
                yield Claim(self, None)
            return
        keys = sorted({_lock_key(self._tenant_value, self.table.name, k) for k in kb_ids})
        conn = self._with_retries("claiming articles", lambda: self._locked_connection(keys))
        try:
            yield Claim(self, conn)
        finally:
            _release(conn)

    def _locked_connection(self, keys: list[int]) -> Connection:
        conn = self.engine.connect()
        try:
            got = conn.execute(
                text("SELECT bool_and(pg_try_advisory_lock(k)) FROM unnest(CAST(:keys AS bigint[])) AS k"),
                {"keys": keys},
            ).scalar()
            if got is False:
                # Someone holds some of them: let go, then wait for each in one global order (no deadlock).
                conn.execute(text("SELECT pg_advisory_unlock_all()"))
                logger.info("waiting for another process working on some of %d articles", len(keys))
                for key in keys:
                    conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
            conn.commit()  # session locks outlive the transaction; no transaction stays open while we embed
        except BaseException:
            _release(conn)
            raise
        return conn

    @contextlib.contextmanager
    def _sqlite_claim(self) -> Iterator[None]:
        if self.url.database in (None, "", ":memory:"):
            with self._memory_claim:
                yield
            return
        import fcntl

        lock_path = Path(f"{self.url.database}.lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "a+b") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # released by close, or by the kernel when the process dies
            yield

    # --- reads ---------------------------------------------------------------------------------------
    def get(self, kb_ids: Sequence[str], *, principal: Principal | None = None) -> dict[str, Article]:
        """The stored articles among ``kb_ids``, by kb_id.

        Args:
            kb_ids: the articles wanted; those not stored (or not readable) are absent from the result.
            principal: whom the read is for (every query passes one: :class:`Principal` ``()`` is the public);
                only the articles it may read are read, by the SQL itself. None: every article, for
                ingestion and maintenance, never for an answer.
        """
        t = self.table
        cols = (t.c.kb_id, t.c.title, t.c.url, t.c.language, t.c.content, t.c.metadata_json)
        readable = self._readable_by(principal) if principal is not None else None

        def run(conn: Connection) -> dict[str, Article]:
            out: dict[str, Article] = {}
            for batch in _batches(list(dict.fromkeys(kb_ids)), 500):
                stmt = select(*cols).where(self._mine(), t.c.kb_id.in_(batch))
                if readable is not None:
                    stmt = stmt.where(readable)
                for kb_id, title, url, language, content, meta in conn.execute(stmt):
                    out[kb_id] = Article(kb_id, title, url, content, language, json.loads(meta))
            return out

        return self._read("reading articles", run) if kb_ids else {}

    def _readable_by(self, principal: Principal) -> Any:
        """The SQL condition: the article has no principals, or one of ``principal``'s names among them."""
        t, a = self.table, self.access
        own = (a.c.tenant == t.c.tenant) & (a.c.kb_id == t.c.kb_id)
        public = ~select(a.c.kb_id).where(own).exists()
        if principal.is_public:
            return public
        allowed = select(a.c.kb_id).where(own, a.c.principal.in_(list(principal.principals))).exists()
        return public | allowed

    def stored_metadata(self, kb_ids: Sequence[str], *, _conn: Connection | None = None) -> dict[str, dict[str, Any]]:
        """kb_id → the metadata stored with the article (to tell a metadata-only change on re-ingest)."""
        t = self.table

        def run(conn: Connection) -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            for batch in _batches(kb_ids, 500):
                rows = conn.execute(select(t.c.kb_id, t.c.metadata_json).where(self._mine(), t.c.kb_id.in_(batch)))
                out.update({r[0]: json.loads(r[1] or "{}") for r in rows})
            return out

        return self._read("reading the ledger", run, _conn)

    def listing(
        self, *, source: str | None = None, like: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[ArticleEntry]:
        """Stored articles of this tenant by id (what ``ragidx list`` prints, to find ids for ``ragidx delete``):
        all readers', for maintenance, never for an answer.

        Args:
            source: only the articles of this source (``IngestReport.source``).
            like: only the ids or titles holding this text (case-insensitive).
            limit, offset: a page of the listing, in id order.

        Example:
            >>> s = ArticleStore(":memory:")
            >>> s.save_pending([Article("a", "Alpha", "u", "text"), Article("b", "Beta", "", "x")], source="demo")
            >>> [(e.kb_id, e.title, e.source) for e in s.listing(like="bet")]
            [('b', 'Beta', 'demo')]
        """
        t, a = self.table, self.access
        stmt = select(t.c.kb_id, t.c.title, t.c.url, t.c.source, t.c.state, t.c.chunk_count).where(self._mine())
        if source is not None:
            stmt = stmt.where(t.c.source == source)
        if like:
            pattern = "%" + like.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            stmt = stmt.where(
                func.lower(t.c.kb_id).like(pattern, escape="\\") | func.lower(t.c.title).like(pattern, escape="\\")
            )
        stmt = stmt.order_by(t.c.kb_id).limit(limit).offset(offset)

        def run(conn: Connection) -> list[ArticleEntry]:
            rows = conn.execute(stmt).all()
            readers: dict[str, list[str]] = {}
            ids = [r[0] for r in rows]
            for batch in _batches(ids, 500):
                own = select(a.c.kb_id, a.c.principal).where(a.c.tenant == self._tenant_value, a.c.kb_id.in_(batch))
                for kb_id, principal in conn.execute(own):
                    readers.setdefault(kb_id, []).append(principal)
            return [
                ArticleEntry(kb_id, title, url, src, state, int(chunks), tuple(sorted(readers.get(kb_id, ()))))
                for kb_id, title, url, src, state, chunks in rows
            ]

        return self._read("listing articles", run)

    def count(self, state: str | None = None) -> int:
        t = self.table
        stmt = select(func.count()).select_from(t).where(self._mine())
        if state is not None:
            stmt = stmt.where(t.c.state == state)
        return int(self._read("counting articles", lambda conn: conn.execute(stmt).scalar_one()))

    def total_chunks(self) -> int:
        t = self.table
        stmt = select(func.coalesce(func.sum(t.c.chunk_count), 0)).where(self._mine())
        return int(self._read("counting chunks", lambda conn: conn.execute(stmt).scalar_one()))

    # --- every tenant, for migration ----------------------------------------------------------------
    def export_rows(self, batch_size: int = 500) -> Iterator[list[dict[str, Any]]]:
        """Every row of every tenant, as plain dicts, in (tenant, kb_id) order, ``batch_size`` at a time."""
        t = self.table
        after: tuple[str, str] | None = None
        while True:
            stmt = select(t).order_by(t.c.tenant, t.c.kb_id).limit(batch_size)
            if after is not None:
                stmt = stmt.where(tuple_(t.c.tenant, t.c.kb_id) > tuple_(literal(after[0]), literal(after[1])))
            rows = self._read("exporting articles", functools.partial(_mappings, stmt))
            if not rows:
                return
            yield rows
            after = (rows[-1]["tenant"], rows[-1]["kb_id"])

    def import_rows(self, rows: list[dict[str, Any]]) -> int:
        """Write exported rows (any tenant) in one transaction; a row already here and newer is kept.

        Returns how many rows were written. Idempotent: importing the same rows again writes none.
        """
        t = self.table
        if not rows:
            return 0

        def run(conn: Connection) -> int:
            keys = [(r["tenant"], r["kb_id"]) for r in rows]
            have = dict(
                ((r[0], r[1]), r[2])
                for r in conn.execute(
                    select(t.c.tenant, t.c.kb_id, t.c.updated_at).where(tuple_(t.c.tenant, t.c.kb_id).in_(keys))
                )
            )
            todo = [r for r in rows if have.get((r["tenant"], r["kb_id"]), float("-inf")) < r["updated_at"]]
            if todo:
                conn.execute(self._upsert(todo, only_if_newer=True), todo)
                self._write_access(conn, todo)  # the principals travel with the article, from its metadata
            return len(todo)

        return self._write("importing articles", run)


class Claim:
    """Articles held by one process (see ``ArticleStore.claim``); ledger steps on them go through here.

    On PostgreSQL they run on the connection that holds the locks: if it dropped, the locks are gone
    too, and the step fails instead of writing over another process's work.
    """

    def __init__(self, store: ArticleStore, conn: Connection | None) -> None:
        self.store = store
        self._conn = conn

    def states(self, kb_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        return self.store.states(kb_ids, _conn=self._conn)

    def save_pending(
        self, articles: Iterable[Article], source: str = "", origins: Mapping[str, str] | None = None
    ) -> None:
        self.store.save_pending(articles, source, origins=origins, _conn=self._conn)

    def owners(self, kb_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        return self.store.owners(kb_ids, _conn=self._conn)

    def mark_indexed(self, chunk_counts: dict[str, int]) -> None:
        self.store.mark_indexed(chunk_counts, _conn=self._conn)

    def delete(self, kb_ids: Sequence[str]) -> None:
        self.store.delete(kb_ids, _conn=self._conn)

    def stored_metadata(self, kb_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        return self.store.stored_metadata(kb_ids, _conn=self._conn)

    def ensure_held(self) -> None:
        """Raise ``ArticleStoreUnavailable`` if the claim was lost (call before writing chunks)."""
        if self._conn is not None:
            _on_claim(self.store, "checking the claim", self._conn, _ping)


def _on_claim(store: ArticleStore, step: str, conn: Connection, fn: Callable[[Connection], T]) -> T:
    """One transaction on a claim's connection; no retry: a dropped connection has lost the claim."""
    try:
        with conn.begin():
            return fn(conn)
    except DBAPIError as exc:
        if not _is_disconnect(exc):
            raise
        raise ArticleStoreUnavailable(
            f"article store {store.display_url}: connection lost during {step} ({_first_line(exc)}), and with it "
            "this process's claim on the articles it was indexing. They stay pending; the next ingest (of any "
            "process) re-indexes them. Check the database server and run the same command again."
        ) from exc


def _mappings(stmt: Any, conn: Connection) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(stmt)]


def _ping(conn: Connection) -> None:
    conn.execute(text("SELECT 1"))


def _release(conn: Connection) -> None:
    """Give the claim's locks back; a connection that cannot say so is closed, which ends them too."""
    try:
        if conn.in_transaction():
            conn.rollback()
        conn.execute(text("SELECT pg_advisory_unlock_all()"))
        conn.commit()
    except SQLAlchemyError:
        with contextlib.suppress(SQLAlchemyError):
            conn.invalidate()
    finally:
        conn.close()


def _is_disconnect(exc: DBAPIError) -> bool:
    """The connection is gone or was never made (not: a statement failed on a live connection)."""
    if exc.connection_invalidated:
        return True
    if not isinstance(exc, OperationalError):
        return False
    sqlstate = getattr(exc.orig, "sqlstate", None)
    # No SQLSTATE: the client could not connect or lost the socket; 08xxx: connection exception;
    # 57P01-57P03: the server is shutting down or terminated this session.
    return sqlstate is None or sqlstate.startswith("08") or sqlstate in ("57P01", "57P02", "57P03")


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return (str(orig).strip().splitlines() or [type(orig).__name__])[0]


def _enable_wal(dbapi_conn: Any, *, timeout_s: float) -> None:
    """Switch the file to WAL (kept by the file). Switching needs the file to itself, and SQLite fails it
    at once, without its busy wait, when two connections switch together (each waits on the other): wait
    and try again, up to ``timeout_s`` like any other locked statement."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        try:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.25)


def _lock_key(*parts: str) -> int:
    """A signed 64-bit advisory-lock key for these parts (a collision only makes two claims wait)."""
    digest = hashlib.blake2b("\x00".join(("ragidx", *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _batches(items: Sequence[str], size: int) -> Iterable[list[str]]:
    items = list(items)
    for i in range(0, len(items), size):
        yield items[i : i + size]
