"""A running engine over LanceDB follows `ragidx reindex`'s switch without a restart: its searches move to the new
table, and its writes with the old model reach nothing the new table would miss (the articles stay pending).

Two deterministic hashed-word models stand in for MiniLM and the multilingual USE (different widths and names), so
every step runs on real LanceDB tables in ``tmp_path`` without a model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ingestion.pipeline import Ingestor
from ragidx.article import Article
from ragidx.config import Settings
from ragidx.engine import Engine
from ragidx.reindex import reindex
from ragidx.stores.active_table import active_table
from ragidx.stores.article_store import INDEXED, PENDING
from ragidx.stores.factory import build_article_store, build_chunk_store
from ragidx.stores.lancedb_store import LanceDBChunkStore
from ragidx.stores.postgres_store import IndexSwitched
from tests.fakes.hash_embedding import HashEmbedding

OLD, NEW = "minilm", "use-multilingual"
ARTICLES = [
    Article("tables", "Tables", "https://x/tables", "Insert a table in Writer with Table > Insert Table."),
    Article("charts", "Charts", "https://x/charts", "Create a chart in Calc from a selected cell range."),
    Article("print", "Printing", "https://x/print", "Print a document with File > Print and choose the printer."),
]
LATE = Article("footnotes", "Footnotes", "https://x/footnotes", "Footnotes and endnotes at the end of pages.")


def model(name: str) -> HashEmbedding:
    """A stand-in for ``name``: hashed words, 32 wide for the old model and 48 for the new."""
    emb = HashEmbedding(dim=32 if name == OLD else 48)
    emb.model_name = name
    return emb


@pytest.fixture()
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A knowledge base indexed by the old model; engines build the stand-ins by name."""
    monkeypatch.setattr("ragidx.engine_parts.stores.build_embed_model", lambda s: model(s.embed_model))
    folder = tmp_path / "data"
    with Engine(Settings(data_dir=folder, embed_model=OLD)) as writer:
        assert writer.ingest(ARTICLES).new == 3
    return folder


def switch(folder: Path) -> str:
    """``ragidx reindex`` to the new model; the new table's name."""
    report = reindex(Settings(data_dir=folder, embed_model=NEW), embed_model=model(NEW))
    assert report.switched and report.old_model == OLD and report.model == NEW
    return report.table


def found(engine: Engine, query: str) -> list[str]:
    return [a.kb_id for a in engine.retrieve(query, top_k=3)]


def test_a_store_opened_before_the_switch_follows_it(data: Path) -> None:
    settings = Settings(data_dir=data, embed_model=OLD)
    old: LanceDBChunkStore = build_chunk_store(settings)
    calls: list[str] = []
    old.follow_switch(lambda: calls.append("switched"))
    assert old.count() == 3 and old.moved_to() is None and calls == []

    table = switch(data)
    assert active_table(settings.lancedb_uri, "Articles") == table != old.table_name

    assert old.moved_to() == table and old.moved_to() == table
    assert calls == ["switched"]  # once
    new: LanceDBChunkStore = build_chunk_store(settings)  # what the owner builds next reads the new table
    assert new.table_name == table and new.embed_model_name() == NEW and new.moved_to() is None


def test_an_add_with_the_old_model_after_the_switch_writes_nothing_and_stays_pending(data: Path) -> None:
    settings = Settings(data_dir=data, embed_model=OLD)
    old_store: LanceDBChunkStore = build_chunk_store(settings)
    articles = build_article_store(settings)
    ingestor = Ingestor(old_store, articles, model(OLD))
    assert old_store.count() == 3  # opened (and its pointer seen) before the switch
    old_table = old_store.table_name

    new_table = switch(data)

    with pytest.raises(IndexSwitched, match="ingest again"):
        ingestor.ingest([LATE], source="late")
    assert LATE.kb_id not in LanceDBChunkStore(settings.lancedb_uri, table_name=old_table).kb_ids()
    assert articles.states([LATE.kb_id])[LATE.kb_id][1] == PENDING
    articles.close()

    with Engine(Settings(data_dir=data)) as fresh:  # "auto": the new table's model
        assert fresh.ingest([]).recovered == 1
        assert fresh.article_store.states([LATE.kb_id])[LATE.kb_id][1] == INDEXED
        assert found(fresh, "footnotes endnotes")[0] == LATE.kb_id
    assert LATE.kb_id in LanceDBChunkStore(settings.lancedb_uri, table_name=new_table).kb_ids()


def test_a_delete_through_the_old_store_after_the_switch_reaches_the_new_table(data: Path) -> None:
    settings = Settings(data_dir=data, embed_model=OLD)
    old_store: LanceDBChunkStore = build_chunk_store(settings)
    assert old_store.count() == 3
    new_table = switch(data)

    old_store.delete_articles(["charts"])
    old_store.update_article_metadata({"print": {"product": "writer"}})

    new = LanceDBChunkStore(settings.lancedb_uri, table_name=new_table, tenant="")
    assert new.kb_ids() == {"tables", "print"} and "charts" not in old_store.kb_ids()
    assert {
        n.metadata.get("product") for n in new.get_nodes(node_ids=None, filters=None) if n.metadata["kb_id"] == "print"
    } == {"writer"}


def test_a_running_engine_searches_the_new_table_after_reindex(data: Path) -> None:
    with Engine(Settings(data_dir=data)) as serving:  # "auto": the old table's model until the switch
        assert found(serving, "insert a table")[0] == "tables"
        assert serving.stats()["chunks"] == 3

        switch(data)
        with Engine(Settings(data_dir=data)) as writer:  # an ingest after the switch: only the new table has it
            assert writer.ingest([LATE]).new == 1

        assert found(serving, "footnotes endnotes")[0] == LATE.kb_id  # the first search after the switch
        assert serving.embed_model_name == NEW


def test_a_running_engine_ingests_into_the_new_table_after_reindex(data: Path) -> None:
    with Engine(Settings(data_dir=data)) as serving:  # a server whose scheduled sync runs after the switch
        assert serving.stats()["chunks"] == 3
        table = switch(data)

        assert serving.ingest([LATE]).new == 1
        serving.delete(["charts"])

    uri = Settings(data_dir=data).lancedb_uri
    new = LanceDBChunkStore(uri, table_name=table)
    assert new.kb_ids() == {"tables", "print", LATE.kb_id}
    assert new.embed_model_name() == NEW and new.vector_dim() == 48


def test_a_search_on_a_table_dropped_after_the_switch_says_ask_again(data: Path) -> None:
    from llama_index.core.vector_stores.types import VectorStoreQuery

    settings = Settings(data_dir=data, embed_model=OLD)
    old: LanceDBChunkStore = build_chunk_store(settings)
    question = VectorStoreQuery(query_embedding=model(OLD).get_query_embedding("insert a table"), similarity_top_k=2)
    assert [n.metadata["kb_id"] for n in old.query(question).nodes][0] == "tables"

    switch(data)
    assert [n.metadata["kb_id"] for n in old.query(question).nodes][0] == "tables"  # noticed; finished on its table
    assert reindex(Settings(data_dir=data, embed_model=NEW), embed_model=model(NEW), drop_old=True).dropped
    with pytest.raises(IndexSwitched, match="ask again"):
        old.query(question)
