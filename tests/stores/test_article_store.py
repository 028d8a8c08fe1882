"""The article store and ledger, on both backends: SQLite (a file) and a real PostgreSQL server.

Every behaviour test runs on both; the PostgreSQL-only ones cover what only a server has: claims that
leave other articles free, and a connection that drops (terminated by the server, or never made).
"""

from __future__ import annotations

import re
import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import event

from ragidx.article import Article
from ragidx.stores.article_store import INDEXED, PENDING, ArticleStore, ArticleStoreUnavailable, _enable_wal
from tests.postgres_server import PostgresServer


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a store lives: a SQLite file, or a fresh database on the test PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "a.sqlite")
    return str(request.getfixturevalue("pg_url"))


def test_ledger_tracks_pending_and_indexed_and_survives_reopen(location: str) -> None:
    store = ArticleStore(location)
    a = Article("k1", "Title", "u", "Full text with ' quotes and ünïcode.", language="de", metadata={"source": "s"})
    store.save_pending([a, Article("k2", "T2", "u2", "two")], source="src")
    assert sorted(store.pending_ids()) == ["k1", "k2"]
    store.mark_indexed({"k1": 3})
    store.close()

    again = ArticleStore(location)
    assert again.get(["k1"])["k1"] == a
    assert again.states(["k1", "k2", "nope"]) == {
        "k1": (a.content_hash, INDEXED),
        "k2": (again.states(["k2"])["k2"][0], PENDING),
    }
    assert again.count() == 2 and again.count(INDEXED) == 1 and again.total_chunks() == 3
    assert sorted(again.ids_for_source("src")) == ["k1", "k2"]
    again.delete(["k2"])
    assert again.get(["k2"]) == {} and again.count() == 1
    again.close()


def test_many_ids_are_batched(location: str) -> None:
    store = ArticleStore(location)
    store.save_pending([Article(f"k{i}", "t", "u", "x") for i in range(1200)])
    assert len(store.get([f"k{i}" for i in range(1200)])) == 1200
    assert len(store.states([f"k{i}" for i in range(1200)])) == 1200
    store.mark_indexed({f"k{i}": 1 for i in range(1200)})
    assert store.count(INDEXED) == 1200
    store.close()


def test_tenants_are_kept_apart(location: str) -> None:
    acme, globex, nobody = (ArticleStore(location, tenant=t) for t in ("acme", "globex", None))
    acme.save_pending([Article("same-id", "Acme's", "u", "acme text"), Article("only-acme", "A", "u", "a")], "s")
    globex.save_pending([Article("same-id", "Globex's", "u", "globex text")], "s")
    acme.mark_indexed({"same-id": 2})

    assert acme.get(["same-id"])["same-id"].content == "acme text"
    assert globex.get(["same-id"])["same-id"].content == "globex text"
    assert globex.get(["only-acme"]) == {} and nobody.count() == 0
    assert globex.states(["same-id"])["same-id"][1] == PENDING  # acme's mark_indexed did not touch it
    assert (acme.count(), globex.count(), acme.total_chunks(), globex.total_chunks()) == (2, 1, 2, 0)
    assert globex.pending_ids() == ["same-id"] and acme.pending_ids() == ["only-acme"]
    assert sorted(acme.ids_for_source("s")) == ["only-acme", "same-id"] and globex.ids_for_source("s") == ["same-id"]
    globex.delete(["same-id", "only-acme"])
    assert acme.count() == 2 and globex.count() == 0
    for s in (acme, globex, nobody):
        s.close()


def test_a_second_claim_on_the_same_article_waits_for_the_first(location: str) -> None:
    first, second = ArticleStore(location), ArticleStore(location)  # as two processes would have
    order: list[str] = []

    def other() -> None:
        with second.claim(["b", "c"]) as claim:
            order.append(f"second sees {claim.states(['b'])['b'][1]}")

    with first.claim(["a", "b"]) as claim:
        claim.save_pending([Article("b", "B", "u", "text")])
        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.5)
        order.append("first indexes")
        claim.mark_indexed({"b": 1})
    thread.join(timeout=10)
    assert order == ["first indexes", f"second sees {INDEXED}"]
    first.close()
    second.close()


def test_claims_on_other_articles_do_not_wait(pg_url: str) -> None:
    first, second = ArticleStore(pg_url), ArticleStore(pg_url)
    with first.claim(["a", "b"]):
        started = time.perf_counter()
        with second.claim(["c", "d"]):
            waited = time.perf_counter() - started
        with ArticleStore(pg_url, tenant="acme").claim(["a"]):  # same kb_id, another tenant
            pass
    assert waited < 1.0
    first.close()
    second.close()


LEGACY_SCHEMA = """
CREATE TABLE articles (
    kb_id TEXT PRIMARY KEY, title TEXT NOT NULL, url TEXT NOT NULL, language TEXT, content TEXT NOT NULL,
    metadata_json TEXT NOT NULL DEFAULT '{}', source TEXT NOT NULL DEFAULT '', content_hash TEXT NOT NULL,
    chunk_count INTEGER NOT NULL DEFAULT 0, state TEXT NOT NULL, updated_at REAL NOT NULL
);
CREATE INDEX articles_source ON articles(source);
CREATE INDEX articles_state ON articles(state);
"""


def legacy_file(path: Path) -> None:
    """An article store as ragidx wrote it before tenants: kb_id alone is the key."""
    conn = sqlite3.connect(path)
    conn.executescript(LEGACY_SCHEMA)
    conn.executemany(
        "INSERT INTO articles VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        [
            ("k1", "One", "u1", "en", "text one", '{"x": 1}', "src", "h1", 4, INDEXED, 1.5),
            ("k2", "Two", "u2", None, "text two", "{}", "src", "h2", 0, PENDING, 2.5),
        ],
    )
    conn.commit()
    conn.close()


@pytest.mark.parametrize("tenant", [None, "acme"])
def test_a_file_from_before_tenants_is_migrated_without_losing_anything(tmp_path: Path, tenant: str | None) -> None:
    path = tmp_path / "old.sqlite"
    legacy_file(path)
    store = ArticleStore(path, tenant=tenant)  # the tenant that opens it first gets its rows
    assert store.get(["k1"])["k1"] == Article("k1", "One", "u1", "text one", "en", {"x": 1})
    assert store.states(["k1", "k2"]) == {"k1": ("h1", INDEXED), "k2": ("h2", PENDING)}
    assert (store.count(), store.total_chunks(), store.pending_ids()) == (2, 4, ["k2"])
    store.save_pending([Article("k3", "Three", "u", "new")], "src")
    store.close()
    again = ArticleStore(path, tenant=tenant)
    assert sorted(again.ids_for_source("src")) == ["k1", "k2", "k3"]
    assert ArticleStore(path, tenant="other" if tenant else "x").count() == 0
    again.close()


def test_an_old_file_opened_by_several_at_once_is_migrated_once(tmp_path: Path) -> None:
    # Several rounds: two connections switching a fresh file to WAL together failed about one round in 30.
    for round_ in range(10):
        path = tmp_path / f"old{round_}.sqlite"
        legacy_file(path)
        stores = [ArticleStore(path) for _ in range(4)]
        counts: list[int] = []
        threads = [threading.Thread(target=lambda s=s, c=counts: c.append(s.count())) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert counts == [2, 2, 2, 2] and stores[0].pending_ids() == ["k2"]
        for store in stores:
            store.close()


class LockedTwice:
    """A DB-API connection whose first two journal-mode switches fail as SQLite fails them when two
    connections switch at once: "database is locked", at once, without the busy wait."""

    def __init__(self, error: str = "database is locked", failures: int = 2) -> None:
        self.error, self.failures, self.calls = error, failures, 0

    def execute(self, sql: str) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise sqlite3.OperationalError(self.error)


def test_switching_to_wal_waits_out_another_connection_switching_too() -> None:
    conn = LockedTwice()
    _enable_wal(conn, timeout_s=5)
    assert conn.calls == 3


def test_switching_to_wal_gives_up_after_the_timeout_and_other_errors_are_not_retried() -> None:
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _enable_wal(LockedTwice(failures=10**6), timeout_s=0.05)
    other = LockedTwice(error="disk I/O error")
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        _enable_wal(other, timeout_s=5)
    assert other.calls == 1


def test_an_unreachable_server_is_a_clear_error_that_hides_the_password(postgres_server: PostgresServer) -> None:
    closed_port = postgres_server.port + 1 if postgres_server.port < 65535 else 1
    store = ArticleStore(f"postgresql://ragidx:s3cret@127.0.0.1:{closed_port}/kb", retry_delays_s=(0.05, 0.05))
    started = time.perf_counter()
    with pytest.raises(ArticleStoreUnavailable, match=r"\(3 attempts\).*run the same command again") as info:
        store.count()
    assert "s3cret" not in str(info.value) and "ragidx:***@127.0.0.1" in str(info.value)
    assert time.perf_counter() - started < 10


def test_a_missing_driver_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(RuntimeError, match=re.escape("pip install 'ragidx[postgres]'")):
        ArticleStore("postgresql://ragidx@127.0.0.1:5432/kb").count()


def terminate_on(store: ArticleStore, server: PostgresServer, statement: str, nth: int, times: int) -> list[int]:
    """Kill the server side of the connection just before the ``nth`` statement starting ``statement``
    (counted over the whole test), ``times`` times in a row. Returns the count of matching statements."""
    seen = [0]

    @event.listens_for(store.engine, "before_cursor_execute")
    def kill(conn, cursor, sql, params, context, executemany):  # type: ignore[no-untyped-def]
        if not sql.lstrip().upper().startswith(statement):
            return
        seen[0] += 1
        if nth <= seen[0] < nth + times:
            pid = conn.connection.dbapi_connection.info.backend_pid
            server.execute(f"SELECT pg_terminate_backend({pid})")

    return seen


def test_a_dropped_connection_mid_transaction_is_retried_and_nothing_is_half_written(
    pg_url: str, postgres_server: PostgresServer
) -> None:
    ids = [f"k{i}" for i in range(1200)]
    ArticleStore(pg_url).save_pending([Article(k, "t", "u", "x") for k in ids])

    # Deleting 1200 rows is six DELETE statements in one transaction (three batches of articles, each with its
    # principals); the connection dies before the 2nd.
    store = ArticleStore(pg_url, retry_delays_s=(0.05,))
    seen = terminate_on(store, postgres_server, "DELETE", nth=2, times=1)
    store.delete(ids)  # retried on a new connection, whole
    assert store.count() == 0 and seen[0] == 8  # 2 statements of the lost try, 6 of the retry

    # Without a retry left: a clear error, and the first batch's delete was rolled back with the rest.
    ArticleStore(pg_url).save_pending([Article(k, "t", "u", "x") for k in ids])
    store = ArticleStore(pg_url, retry_delays_s=(0.05,))
    terminate_on(store, postgres_server, "DELETE", nth=2, times=2)
    with pytest.raises(ArticleStoreUnavailable, match=re.escape("during deleting articles (2 attempts)")):
        store.delete(ids)
    assert ArticleStore(pg_url).count() == 1200
    # Idle connections the server dropped are replaced without anyone noticing.
    store = ArticleStore(pg_url)
    assert store.count() == 1200
    postgres_server.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND datname IS NOT NULL"
    )
    assert store.count() == 1200


def test_a_claim_whose_connection_drops_writes_nothing_and_frees_the_articles(
    pg_url: str, postgres_server: PostgresServer
) -> None:
    store = ArticleStore(pg_url)
    with (
        pytest.raises(ArticleStoreUnavailable, match="claim on the articles") as info,
        store.claim(["a"]) as claim,
    ):
        claim.save_pending([Article("a", "A", "u", "text")])
        pid = claim._conn.connection.dbapi_connection.info.backend_pid  # type: ignore[union-attr]
        postgres_server.execute(f"SELECT pg_terminate_backend({pid})")
        claim.ensure_held()
        claim.mark_indexed({"a": 1})
    assert "They stay pending" in str(info.value)
    assert store.states(["a"])["a"][1] == PENDING  # the next ingest re-indexes it
    started = time.perf_counter()
    with ArticleStore(pg_url).claim(["a"]):  # the server ended the lost claim's locks
        assert time.perf_counter() - started < 1.0


def test_indexed_ids_and_the_ledger_digest(tmp_path: Path) -> None:
    store = ArticleStore(tmp_path / "a.sqlite")
    store.save_pending([Article("a", "A", "", "x"), Article("b", "B", "", "y"), Article("c", "C", "", "z")])
    store.mark_indexed({"a": 1, "b": 3})
    assert store.indexed_ids() == ["a", "b"] and store.indexed_ids(min_chunks=2) == ["b"]
    digest = store.ledger_digest()
    assert (digest["articles"], digest["indexed"], digest["chunks"]) == (3, 2, 4) and digest["updated_at"] > 0


def test_articles_record_their_origin_and_a_source_is_scoped_by_it(location: str) -> None:
    store = ArticleStore(location)
    docs = "/kb/docs"
    store.save_pending(
        [Article("a.md", "A", "u", "a"), Article("sub/b.md", "B", "u", "b")],
        "docs",
        origins={"a.md": f"{docs}/a.md", "sub/b.md": f"{docs}/sub/b.md"},
    )
    store.save_pending([Article("c.md", "C", "u", "c")], "docs", origins={"c.md": "/elsewhere/docs/c.md"})
    store.save_pending([Article("old", "O", "u", "o")], "docs")  # written before origins were recorded
    store.save_pending([Article("pct", "P", "u", "p")], "x", origins={"pct": "/kb/dx/p.md"})
    assert store.id_of_origin(f"{docs}/sub/b.md") == "sub/b.md" and store.id_of_origin("/kb/nope.md") is None
    assert store.owners(["a.md", "old", "nope"]) == {"a.md": ("docs", f"{docs}/a.md"), "old": ("docs", "")}
    assert sorted(store.ids_for_source("docs")) == ["a.md", "c.md", "old", "sub/b.md"]  # by name, as before
    assert sorted(store.ids_for_source("docs", docs)) == ["a.md", "old", "sub/b.md"]  # another folder named docs: not
    assert sorted(store.ids_for_source("docs", f"{docs}/sub/b.md")) == ["old", "sub/b.md"]
    assert store.ids_for_source("x", "/kb/d%") == store.ids_for_source("x", "/kb/d_") == []  # wildcards are text
    assert store.ids_for_source("x", "/kb/dx") == ["pct"]
    store.close()


def test_a_store_written_before_origins_gets_the_column_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite"
    store = ArticleStore(path)
    store.save_pending([Article("k1", "T", "u", "text")], "src")
    store.mark_indexed({"k1": 2})
    store.close()
    with sqlite3.connect(path) as conn:  # as an earlier release wrote it: no origin column, no index on it
        conn.execute("DROP INDEX articles_tenant_origin")
        conn.execute("ALTER TABLE articles DROP COLUMN origin")
    again = ArticleStore(path)
    assert again.get(["k1"])["k1"].content == "text" and again.states(["k1"])["k1"][1] == INDEXED
    assert again.owners(["k1"]) == {"k1": ("src", "")} and again.ids_for_source("src", "/any") == ["k1"]
    again.save_pending([Article("k2", "T", "u", "two")], "src", origins={"k2": "/kb/k2.md"})
    assert again.id_of_origin("/kb/k2.md") == "k2"
    with sqlite3.connect(path) as conn:
        assert "articles_tenant_origin" in {r[1] for r in conn.execute("PRAGMA index_list(articles)")}
    again.close()
