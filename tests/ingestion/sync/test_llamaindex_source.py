"""A LlamaHub reader as a source, end to end: LlamaIndex's ``DatabaseReader`` over a wiki kept in a real database
(a SQLite file, and PostgreSQL), synced, edited, synced again; and the document → article mapping."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from llama_index.core import Document

from ingestion.sync.base import Fetched, ItemState, Skipped, SourceUnavailable, Unchanged
from ingestion.sync.config import SourceConfig
from ingestion.sync.llamaindex_source import LlamaIndexSource, load_reader_class
from ingestion.sync.runner import SyncRunner
from ragidx.engine import Engine
from tests.fakes.hash_embedding import HashEmbedding
from tests.ingestion.sync.sync_worker import engine_for

pytest.importorskip("llama_index.readers.database", reason="pip install llama-index-readers-database (dev extra)")

PAGES = [
    (1, "Expense claims", "Submit expense claims within 30 days through the finance portal.", None),
    (2, "Parental leave", "Parental leave is 16 weeks at full pay; tell HR two months ahead.", "group:hr"),
    (3, "VPN setup", "Install the VPN client, then sign in with your badge number.", None),
]


def wiki_source(url: str) -> SourceConfig:
    columns = ["id", "title", "body", "url", "updated_at", "readers"]
    return SourceConfig(
        name="wiki",
        kind="llamaindex",
        reader="llama_index.readers.database.DatabaseReader",
        reader_args={"uri": url},
        load_args={
            "query": "SELECT id, title, body, url, updated_at, readers FROM pages ORDER BY id",
            "metadata_cols": columns,
            "excluded_text_cols": columns,
        },
        mapping={"text_key": "body", "allowed_key": "readers"},
        metadata={"space": "handbook"},
    )


def make_wiki(url: str) -> sa.Engine:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE TABLE pages (id INTEGER PRIMARY KEY, title TEXT, body TEXT, url TEXT, updated_at TEXT, "
                "readers TEXT)"
            )
        )
        for pid, title, body, readers in PAGES:
            conn.execute(
                sa.text("INSERT INTO pages VALUES (:i, :t, :b, :u, :d, :r)"),
                {"i": pid, "t": title, "b": body, "u": f"https://wiki/{pid}", "d": "2026-11-01T10:00", "r": readers},
            )
    return engine


@pytest.fixture(params=["sqlite", "postgresql"])
def wiki_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'wiki.sqlite'}"
    else:
        yield str(request.getfixturevalue("pg_url")).replace("postgresql://", "postgresql+psycopg://", 1)


def test_a_wiki_in_a_database_synced_through_databasereader(
    tmp_path: Path, wiki_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = make_wiki(wiki_url)
    monkeypatch.setenv("WIKI_DB_URL", wiki_url)  # the database's URL (its password) stays out of the settings
    source = wiki_source("${WIKI_DB_URL}")
    with Engine(
        engine_for(tmp_path / "data", tmp_path).settings.model_copy(update={"sources": [source]}),
        embed_model=HashEmbedding(dim=32),
    ) as engine:
        runner = SyncRunner(engine)
        first = runner.sync(source)
        assert first.status == "ok", first.error
        assert sorted(i.kb_id or "" for i in first.items if i.what == "new") == ["wiki:1", "wiki:2", "wiki:3"]
        leave = engine.article_store.get(["wiki:2"])["wiki:2"]
        assert (leave.title, leave.url, leave.content) == ("Parental leave", "https://wiki/2", PAGES[1][2])
        assert leave.metadata["allowed"] == ["group:hr"] and leave.metadata["space"] == "handbook"
        assert leave.metadata["updated_at"] == "2026-11-01T10:00"
        assert [a.kb_id for a in engine.retrieve("parental leave weeks", top_k=1, groups=["hr"])] == ["wiki:2"]
        assert "wiki:2" not in [a.kb_id for a in engine.retrieve("parental leave weeks", top_k=3)]

        again = runner.sync(source)
        assert [i.what for i in again.items] == ["unchanged"] * 3 and again.chunks_embedded == 0

        with db.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE pages SET body = body || ' Use the VPN on hotel networks.', "
                    "updated_at = '2026-11-02T09:00' WHERE id = 3"
                )
            )
            conn.execute(sa.text("DELETE FROM pages WHERE id = 1"))
        edited = runner.sync(source)
        assert {i.key: i.what for i in edited.items} == {"1": "deleted", "2": "unchanged", "3": "changed"}
        assert "hotel networks" in engine.article_store.get(["wiki:3"])["wiki:3"].content
        assert sorted(engine.article_store.indexed_ids()) == ["wiki:2", "wiki:3"]

        broken = source.model_copy(update={"load_args": {"query": "SELECT * FROM no_such_table"}})
        failed = runner.sync(broken)
        assert failed.status == "failed" and "loading stopped" in str(failed.error)
        assert sorted(engine.article_store.indexed_ids()) == ["wiki:2", "wiki:3"]  # nothing deleted
    db.dispose()


def mapped(**mapping: Any) -> LlamaIndexSource:
    return LlamaIndexSource(SourceConfig(name="kb", kind="llamaindex", reader="x.Reader", mapping=mapping))


def test_documents_map_to_articles() -> None:
    pages = [
        Document(
            text="Page one text.", metadata={"file_name": "guide.pdf", "page_label": "1", "when": dt.date(2026, 1, 2)}
        ),
        Document(text="Page two text.", metadata={"file_name": "guide.pdf", "page_label": "2"}),
    ]
    article = mapped(id_key="file_name").article_of("guide.pdf", pages)
    assert article.kb_id == "kb:guide.pdf" and article.title == "Page one text."
    assert article.content == "Page one text.\n\nPage two text."
    assert article.metadata["sections"] == [{"start": 0, "page": 1}, {"start": 16, "page": 2}]
    assert article.metadata["when"] == "2026-01-02" and "file_name" not in article.metadata

    restricted = mapped().article_of("7", [Document(text="x", metadata={"allowed": "group:a, user:b", "id": 7})])
    assert restricted.metadata["allowed"] == ["group:a", "user:b"]


def test_scan_groups_pages_skips_empty_and_trusts_update_times() -> None:
    class Reader:
        def load_data(self) -> list[Document]:
            return [
                Document(text="A1", metadata={"id": "a", "updated_at": "t1"}),
                Document(text="A2", metadata={"id": "a", "updated_at": "t1"}),
                Document(text="  ", metadata={"id": "b"}),
                Document(text="C", metadata={"id": "c", "updated_at": "t9"}),
            ]

    reader = mapped()
    reader.documents = lambda: iter(Reader().load_data())  # type: ignore[method-assign]
    events = list(reader.scan({"c": ItemState("c", "kb:c", "h", lastmod="t9")}))
    assert isinstance(events[0], Fetched) and events[0].article.content == "A1\n\nA2"
    assert events[0].state.lastmod == "t1"
    assert isinstance(events[1], Skipped) and events[1].reason == "no text, nothing to index"
    assert isinstance(events[2], Unchanged) and events[2].state.kb_id == "kb:c"


def test_a_reader_that_is_not_installed_says_what_to_install() -> None:
    with pytest.raises(SourceUnavailable, match=r"pip install llama-index-readers-confluence"):
        load_reader_class("llama_index.readers.confluence.ConfluenceReader")
    with pytest.raises(SourceUnavailable, match="has no class 'Nope'"):
        load_reader_class("sqlite3.Nope")


def test_a_variable_that_is_not_set_stops_the_sync_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WIKI_DB_URL", raising=False)
    reader = LlamaIndexSource(
        SourceConfig(
            name="wiki",
            kind="llamaindex",
            reader="llama_index.readers.database.DatabaseReader",
            reader_args={"uri": "${WIKI_DB_URL}"},
        )
    )
    with pytest.raises(SourceUnavailable, match="the environment variable WIKI_DB_URL is not set"):
        list(reader.scan({}))
