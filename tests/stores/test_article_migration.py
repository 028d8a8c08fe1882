"""Copying a SQLite article store and ledger into PostgreSQL: exact, resumable, never a regression."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragidx.article import Article
from ragidx.stores.article_migration import migrate_articles
from ragidx.stores.article_store import INDEXED, PENDING, ArticleStore
from tests.stores.test_article_store import legacy_file


def rows(location: str | Path) -> list[dict[str, object]]:
    store = ArticleStore(location)
    out = [r for batch in store.export_rows() for r in batch]
    store.close()
    return out


def sqlite_store(path: Path) -> None:
    """Two tenants, indexed and pending articles, more rows than one batch."""
    for tenant in (None, "acme"):
        s = ArticleStore(path, tenant=tenant)
        s.save_pending([Article(f"k{i}", f"T{i}", "u", f"text {i} ü", metadata={"i": i}) for i in range(700)], "src")
        s.mark_indexed({f"k{i}": i % 5 for i in range(650)})
        s.close()


def test_every_row_of_every_tenant_is_copied_as_it_is_and_a_second_run_writes_nothing(
    tmp_path: Path, pg_url: str
) -> None:
    path = tmp_path / "articles.sqlite"
    sqlite_store(path)
    report = migrate_articles(path, pg_url).as_dict()
    assert (report["rows"], report["written"], report["kept_newer"]) == (1400, 1400, 0)
    assert report["tenants"] == {"(none)": 700, "acme": 700}
    assert rows(pg_url) == rows(path)  # text, metadata, hash, state, chunk count, source, time
    acme = ArticleStore(pg_url, tenant="acme")
    assert (acme.count(INDEXED), acme.count(PENDING), acme.total_chunks()) == (650, 50, 1300)
    assert migrate_articles(path, pg_url).as_dict()["written"] == 0


def test_an_interrupted_copy_is_completed_and_newer_rows_in_the_target_are_kept(tmp_path: Path, pg_url: str) -> None:
    path = tmp_path / "articles.sqlite"
    sqlite_store(path)
    target = ArticleStore(pg_url)
    target.import_rows(next(ArticleStore(path).export_rows(300)))  # a copy killed after its first batch
    target.save_pending([Article("k1", "Changed since", "u", "newer text")], "src")  # ingested into PG meanwhile
    report = migrate_articles(path, pg_url, batch_size=300).as_dict()
    assert (report["written"], report["kept_newer"]) == (1100, 300)
    assert target.get(["k1"])["k1"].content == "newer text"
    assert len(rows(pg_url)) == 1400


def test_a_file_from_before_tenants_is_copied_under_the_configured_tenant(tmp_path: Path, pg_url: str) -> None:
    path = tmp_path / "old.sqlite"
    legacy_file(path)
    migrate_articles(path, pg_url, tenant="acme")
    acme = ArticleStore(pg_url, tenant="acme")
    assert acme.states(["k1", "k2"]) == {"k1": ("h1", INDEXED), "k2": ("h2", PENDING)}
    assert ArticleStore(pg_url).count() == 0


def test_a_missing_source_or_the_same_database_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=re.escape(f"no article store at {tmp_path / 'nope.sqlite'}")):
        migrate_articles(tmp_path / "nope.sqlite", "postgresql://u@127.0.0.1/db")
    ArticleStore(tmp_path / "a.sqlite").count()
    with pytest.raises(ValueError, match="same database"):
        migrate_articles(tmp_path / "a.sqlite", f"sqlite:///{tmp_path / 'a.sqlite'}")
