"""The sync state store: item states round-trip with their links, and a table made before links were kept gains
the column."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from ingestion.sync.base import ItemState
from ingestion.sync.state import SyncStateStore
from ragidx.stores.article_store import ArticleStore


def test_a_pages_links_are_kept_with_its_state(tmp_path: Path) -> None:
    states = SyncStateStore(ArticleStore(tmp_path / "articles.sqlite"))
    hub = ItemState("https://x/docs/", "https://x/docs/", "h1", etag='"e1"', links=("https://x/docs/a", "https://x/b"))
    states.save("site", [hub, ItemState("https://x/docs/a", "https://x/docs/a", "h2")], body_hashes={})
    loaded = SyncStateStore(ArticleStore(tmp_path / "articles.sqlite")).load("site")
    assert loaded["https://x/docs/"] == hub
    assert loaded["https://x/docs/a"].links == ()


def test_a_table_without_the_links_column_gains_it(tmp_path: Path) -> None:
    store = ArticleStore(tmp_path / "articles.sqlite")
    name = f"{store.table.name}_sync_items"
    with store.engine.begin() as conn:  # the table as the first release of sync made it
        conn.execute(
            text(
                f'CREATE TABLE "{name}" (tenant TEXT NOT NULL, source TEXT NOT NULL, key TEXT NOT NULL, kb_id TEXT '
                "NOT NULL, content_hash TEXT NOT NULL, body_hash TEXT NOT NULL DEFAULT '', etag TEXT, last_modified "
                "TEXT, lastmod TEXT, updated_at FLOAT NOT NULL, PRIMARY KEY (tenant, source, key))"
            )
        )
        conn.execute(text(f"INSERT INTO \"{name}\" VALUES ('', 'site', 'k', 'k', 'h', '', NULL, NULL, NULL, 0)"))
    states = SyncStateStore(store)
    assert states.load("site")["k"] == ItemState("k", "k", "h")
    states.save("site", [ItemState("k", "k", "h", links=("https://x/a",))], body_hashes={})
    assert states.load("site")["k"].links == ("https://x/a",)
