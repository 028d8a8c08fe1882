"""The article store: every full article by kb_id, and the ingestion ledger, in one SQLite file.

Retrieval returns whole articles from here. Ingestion records, per article, the content hash and
whether its chunks are known to be in the vector store (``state``): an article is ``pending`` from the
moment its new text is saved until its chunks are written, then ``indexed``. A crash between the two
leaves it ``pending``; the next run re-indexes it (deleting whatever partial chunks exist first), so
re-running after a kill ends with exactly the right chunks.

Example:
    >>> store = ArticleStore(":memory:")
    >>> store.count()
    0
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from ragidx.article import Article

PENDING = "pending"
INDEXED = "indexed"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS articles (
    kb_id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    url TEXT NOT NULL,
    language TEXT,
    content TEXT NOT NULL,
    metadata_json TEXT NOT NULL DEFAULT '{}',
    source TEXT NOT NULL DEFAULT '',
    content_hash TEXT NOT NULL,
    chunk_count INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS articles_source ON articles(source);
CREATE INDEX IF NOT EXISTS articles_state ON articles(state);
"""


class ArticleStore:
    """SQLite-backed store of full articles plus their indexing state. Thread-safe.

    Example:
        >>> s = ArticleStore(":memory:")
        >>> s.save_pending([Article("a", "A", "u", "text")], source="demo")
        >>> s.get(["a"])["a"].title
        'A'
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # --- ledger ------------------------------------------------------------------------------------
    def states(self, kb_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """kb_id → (content_hash, state) for the ids that are stored."""
        out: dict[str, tuple[str, str]] = {}
        with self._lock:
            for batch in _batches(kb_ids, 500):
                marks = ",".join("?" * len(batch))
                rows = self.conn.execute(
                    f"SELECT kb_id, content_hash, state FROM articles WHERE kb_id IN ({marks})", batch
                )
                out.update({r[0]: (r[1], r[2]) for r in rows})
        return out

    def save_pending(self, articles: Iterable[Article], source: str = "") -> None:
        """Save new article text and mark it pending, in one transaction."""
        now = time.time()
        rows = [
            (
                a.kb_id,
                a.title,
                a.url,
                a.language,
                a.content,
                json.dumps(a.metadata, ensure_ascii=False),
                source,
                a.content_hash,
                PENDING,
                now,
            )
            for a in articles
        ]
        with self._lock, self._transaction():
            self.conn.executemany(
                """INSERT INTO articles
                   (kb_id, title, url, language, content, metadata_json, source, content_hash, state, updated_at)
                   VALUES (?,?,?,?,?,?,?,?,?,?)
                   ON CONFLICT(kb_id) DO UPDATE SET title=excluded.title, url=excluded.url,
                     language=excluded.language, content=excluded.content,
                     metadata_json=excluded.metadata_json, source=excluded.source,
                     content_hash=excluded.content_hash, state=excluded.state,
                     updated_at=excluded.updated_at""",
                rows,
            )

    def mark_indexed(self, chunk_counts: dict[str, int]) -> None:
        with self._lock, self._transaction():
            self.conn.executemany(
                "UPDATE articles SET state=?, chunk_count=? WHERE kb_id=?",
                [(INDEXED, n, kb_id) for kb_id, n in chunk_counts.items()],
            )

    def pending_ids(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self.conn.execute("SELECT kb_id FROM articles WHERE state=?", (PENDING,))]

    def ids_for_source(self, source: str) -> list[str]:
        with self._lock:
            return [r[0] for r in self.conn.execute("SELECT kb_id FROM articles WHERE source=?", (source,))]

    def delete(self, kb_ids: Sequence[str]) -> None:
        with self._lock, self._transaction():
            for batch in _batches(kb_ids, 500):
                self.conn.execute(f"DELETE FROM articles WHERE kb_id IN ({','.join('?' * len(batch))})", batch)

    # --- reads ---------------------------------------------------------------------------------------
    def get(self, kb_ids: Sequence[str]) -> dict[str, Article]:
        out: dict[str, Article] = {}
        with self._lock:
            for batch in _batches(list(dict.fromkeys(kb_ids)), 500):
                rows = self.conn.execute(
                    "SELECT kb_id, title, url, language, content, metadata_json FROM articles "
                    f"WHERE kb_id IN ({','.join('?' * len(batch))})",
                    batch,
                )
                for kb_id, title, url, language, content, meta in rows:
                    out[kb_id] = Article(kb_id, title, url, content, language, json.loads(meta))
        return out

    def count(self, state: str | None = None) -> int:
        with self._lock:
            if state is None:
                return int(self.conn.execute("SELECT COUNT(*) FROM articles").fetchone()[0])
            return int(self.conn.execute("SELECT COUNT(*) FROM articles WHERE state=?", (state,)).fetchone()[0])

    def total_chunks(self) -> int:
        with self._lock:
            return int(self.conn.execute("SELECT COALESCE(SUM(chunk_count),0) FROM articles").fetchone()[0])

    def _transaction(self) -> _Tx:
        return _Tx(self.conn)


class _Tx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")


def _batches(items: Sequence[str], size: int) -> Iterable[list[str]]:
    items = list(items)
    for i in range(0, len(items), size):
        yield items[i : i + size]
