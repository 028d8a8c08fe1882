"""ragidx reindex with ``store = "postgres"`` on a real throwaway PostgreSQL: a new chunk table written while the old
one answers, the articles written meanwhile caught up, one switch that another store (as another process holds)
follows, writers of the old table after the switch, a run killed with SIGKILL and resumed, ``--drop-old``; and an
engine that follows the switch to a new bundled model without a restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

from ingestion.pipeline import Ingestor
from ragidx import reindex_postgres
from ragidx.article import Article
from ragidx.cli import main
from ragidx.config import Settings
from ragidx.engine import Engine
from ragidx.reindex import reindex
from ragidx.stores.postgres_pointer import read_pointer
from ragidx.stores.postgres_store import IndexSwitched, PostgresChunkStore
from tests.dashboard.fakes import ScriptedProvider, make_engine
from tests.reindex_process import NewHash
from tests.stores.test_postgres_processes import assert_statistics_exact

ROOT = Path(__file__).resolve().parents[1]


def settings(url: str, tmp_path: Path, **kw: Any) -> Settings:
    return Settings(data_dir=tmp_path / "data", store="postgres", article_store_url=url, **kw)


def small_kb(writer_kb_file: str, tmp_path: Path, n: int) -> Path:
    path = tmp_path / "kb.jsonl"
    path.write_text("\n".join(Path(writer_kb_file).read_text(encoding="utf-8").splitlines()[:n]) + "\n")
    return path


def per_article(url: str, table: str | None = None) -> Counter[str]:
    store = PostgresChunkStore(url=url, tenant="", table_name=table)
    return Counter(n.metadata["kb_id"] for n in store.get_nodes())


def dense(store: PostgresChunkStore, dim: int) -> list[str]:
    query = VectorStoreQuery(query_embedding=[1.0] * dim, similarity_top_k=3, mode=VectorStoreQueryMode.DEFAULT)
    return [n.metadata["kb_id"] for n in store.query(query).nodes or []]


def test_the_switch_catches_up_and_another_store_follows_it(
    pgvector_url: str, tmp_path: Path, writer_kb_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = small_kb(writer_kb_file, tmp_path, 8)
    with make_engine(settings(pgvector_url, tmp_path)) as old:  # hash embedding, 256 wide, "hash"
        old.ingest(kb)
        ids = sorted(old.article_store.indexed_ids())
    before = per_article(pgvector_url)
    other = PostgresChunkStore(url=pgvector_url, tenant="")  # what another engine process holds
    noticed: list[str] = []
    other.follow_switch(lambda: noticed.append("switched"))
    assert len(dense(other, 256)) == 3 and other.table == "ragidx_chunks_articles"

    real = Ingestor.embedded_chunks
    calls = {"n": 0}

    def meanwhile(self: Ingestor, articles: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:  # another engine writes with the old model while the new table is written
            with make_engine(settings(pgvector_url, tmp_path)) as writer:
                writer.delete([ids[-1]])
                writer.ingest([Article(ids[0], "Renamed", "https://x/a", "Pagination of a long report.")], replace=True)
                writer.ingest([Article("added-1", "Brand new", "https://x/b", "Footnotes at the end of pages.")])
            assert dense(other, 256) and not noticed  # the old table still answers
        return real(self, articles)

    monkeypatch.setattr(Ingestor, "embedded_chunks", meanwhile)
    report = reindex(settings(pgvector_url, tmp_path), embed_model=NewHash(), batch_articles=3)
    monkeypatch.setattr(Ingestor, "embedded_chunks", real)

    assert report.switched and report.old_model == "hash" and report.model == "hash-96"
    assert report.old_table == "ragidx_chunks_articles" != report.table
    new = per_article(pgvector_url, report.table)
    assert set(new) == (set(ids[:-1]) | {"added-1"})
    assert {k: v for k, v in new.items() if k not in (ids[0], "added-1")} == {
        k: v for k, v in before.items() if k not in (ids[0], ids[-1])
    }
    texts = {n.metadata["kb_id"]: n.get_content() for n in PostgresChunkStore(url=pgvector_url).get_nodes()}
    assert "Pagination of a long report" in texts[ids[0]]  # a fresh store reads the new table
    assert_statistics_exact(pgvector_url)

    # the other store notices at its next search, answers it from its own table, and is replaced by its owner
    assert len(dense(other, 256)) == 3 and noticed == ["switched"]
    assert dense(other, 256) and noticed == ["switched"]  # once
    following = PostgresChunkStore(url=pgvector_url, tenant="")
    assert following.embed_model_name() == "hash-96" and following.table == report.table  # read on first use
    assert len(dense(following, 96)) == 3

    # a writer that still holds the old table: an add of old-model vectors is refused, a delete reaches the new table
    late = {"kb_id": "late", "title": "Late"}
    chunk = TextNode(id_="late#0", text="Late words.", metadata=late, embedding=[0.1] * 256)
    with pytest.raises(IndexSwitched, match="ingest again"):
        other.add([chunk])
    other.delete_articles(["added-1"])
    assert "added-1" not in per_article(pgvector_url, report.table)
    assert "late" not in per_article(pgvector_url, report.old_table)

    dropped = reindex(settings(pgvector_url, tmp_path), embed_model=NewHash(), drop_old=True)
    assert dropped.dropped == ["ragidx_chunks_articles"] and not dropped.switched
    with following._connection() as conn:
        assert conn.execute("SELECT to_regclass('ragidx_chunks_articles')").fetchone() == (None,)
    with pytest.raises(ValueError, match="already embedded by 'hash-96'"):
        reindex(settings(pgvector_url, tmp_path), embed_model=NewHash())
    with pytest.raises(IndexSwitched, match="ask again"):
        dense(other, 256)  # its table is gone: the question is asked again on the new store


def test_a_reindex_killed_with_sigkill_resumes_and_doubles_nothing(
    pgvector_url: str, tmp_path: Path, writer_kb_file: str
) -> None:
    with make_engine(settings(pgvector_url, tmp_path)) as old:
        assert old.ingest(writer_kb_file).new == 26
    before = per_article(pgvector_url)
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.reindex_process", pgvector_url, str(tmp_path / "run"), "0.03"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    store = PostgresChunkStore(url=pgvector_url, tenant="")
    deadline = time.monotonic() + 300
    building = None
    while building is None or len(per_article(pgvector_url, building)) < 4:  # a few writes done, most to go
        assert process.poll() is None and time.monotonic() < deadline, "the reindex ended before it could be killed"
        time.sleep(0.1)
        with store._connection() as conn:
            building = read_pointer(conn, store.base_table).building
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    done = per_article(pgvector_url, building)
    assert 4 <= len(done) < 26
    assert PostgresChunkStore(url=pgvector_url).table == "ragidx_chunks_articles"  # not switched

    report = reindex(settings(pgvector_url, tmp_path), embed_model=NewHash(), batch_articles=2)

    assert report.table == building and report.switched
    assert report.resumed >= len(done) - 2 and report.resumed + report.articles == 26  # the last write may be redone
    assert per_article(pgvector_url, building) == before  # every article, each chunk once
    assert PostgresChunkStore(url=pgvector_url).table == building
    assert_statistics_exact(pgvector_url)


@pytest.mark.slow
def test_an_engine_follows_the_switch_to_a_new_model_without_a_restart(
    pgvector_url: str, tmp_path: Path, writer_kb_file: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    kb = small_kb(writer_kb_file, tmp_path, 6)
    first_title = json.loads(kb.read_text().splitlines()[0])["title"]
    auto = settings(pgvector_url, tmp_path)  # embed_model "auto": the model the index records
    with Engine(auto, llm_provider=ScriptedProvider()) as serving:  # type: ignore[arg-type]
        serving.ingest(kb)
        assert serving.embed_model_name == "minilm"
        assert serving.retrieve(first_title, top_k=3)[0].title == first_title

        monkeypatch.setenv("RAGIDX_STORE", "postgres")
        monkeypatch.setenv("RAGIDX_ARTICLE_STORE_URL", pgvector_url)
        monkeypatch.setenv("RAGIDX_EMBED_MODEL", "use-multilingual")
        assert main(["--data-dir", str(tmp_path / "cli"), "reindex", "--quiet"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["switched"] and report["model"] == "use-multilingual"

        assert serving.retrieve(first_title, top_k=3)[0].title == first_title  # noticed; answered from the old
        assert first_title in [a.title for a in serving.retrieve(first_title, top_k=3)]  # the new table and model
        assert serving.embed_model_name == "use-multilingual"
        store = serving.chunk_store
        assert isinstance(store, PostgresChunkStore) and store.table == report["table"]


def test_an_ingest_waiting_at_the_switch_writes_nothing_old_and_the_next_ingest_indexes_it(
    pgvector_url: str, tmp_path: Path, writer_kb_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with make_engine(settings(pgvector_url, tmp_path)) as old:
        old.ingest(small_kb(writer_kb_file, tmp_path, 4))
    late = Article("late", "Late article", "https://x/late", "Footnotes and endnotes at the end of each page.")
    outcome: list[BaseException | int] = []

    def old_ingest() -> None:  # another engine, still on the old model, ingesting as the switch happens
        try:
            with make_engine(settings(pgvector_url, tmp_path)) as writer:
                outcome.append(writer.ingest([late]).new)
        except BaseException as exc:
            outcome.append(exc)

    real = reindex_postgres._embed_all
    writer = threading.Thread(target=old_ingest)

    def last_catch_up(*args: Any, with_pending: bool = False, **kwargs: Any) -> None:
        if with_pending:  # the switch holds the old table's write lock: the ingest waits on it
            writer.start()
            probe = PostgresChunkStore(url=pgvector_url)
            deadline = time.monotonic() + 120
            while True:
                with probe._connection() as conn:
                    waiting = conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
                if waiting and waiting[0]:
                    break
                assert writer.is_alive() and time.monotonic() < deadline, outcome
                time.sleep(0.05)
        real(*args, with_pending=with_pending, **kwargs)

    monkeypatch.setattr(reindex_postgres, "_embed_all", last_catch_up)
    report = reindex(settings(pgvector_url, tmp_path), embed_model=NewHash(), batch_articles=2)
    writer.join(timeout=120)

    assert report.switched and len(outcome) == 1 and isinstance(outcome[0], IndexSwitched), outcome
    assert "late" not in per_article(pgvector_url, report.old_table)  # nothing written to the old table after it
    with Engine(settings(pgvector_url, tmp_path), embed_model=NewHash(), llm_provider=ScriptedProvider()) as new:  # type: ignore[arg-type]
        assert new.article_store.pending_ids() == ["late"]
        assert new.ingest([]).recovered == 1
    assert "late" in per_article(pgvector_url, report.table)
    assert_statistics_exact(pgvector_url)
