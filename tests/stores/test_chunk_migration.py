"""``ragidx migrate``: the chunk index moves between LanceDB and PostgreSQL without embedding anything again, and
the same searches find the same articles in the same order on both; a second run doubles nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragidx.cli import main
from ragidx.config import Settings
from ragidx.stores.chunk_migration import migrate_chunks
from ragidx.stores.lancedb_store import LanceDBChunkStore
from ragidx.stores.postgres_store import PostgresChunkStore
from tests.dashboard.fakes import make_engine

QUESTIONS = (
    "How do I insert a table of contents?",
    "print only the selected pages",
    "page numbers in the footer",
    "merge table cells",
    "header on the first page only",
)


def found(settings: Settings) -> list[list[str]]:
    with make_engine(settings) as engine:
        return [[a.kb_id for a in engine.retrieve(q, top_k=5)] for q in QUESTIONS]


def test_migrate_to_postgres_and_back_answers_alike(
    pgvector_url: str, tmp_path: Path, writer_kb_file: str, monkeypatch: pytest.MonkeyPatch, capsys: object
) -> None:
    lance = Settings(data_dir=tmp_path / "kb")
    with make_engine(lance) as engine:
        assert engine.ingest(writer_kb_file).new == 26
        chunks = engine.chunk_store.count()
    before = found(lance)

    monkeypatch.setenv("RAGIDX_ARTICLE_STORE_URL", pgvector_url)
    assert main(["--data-dir", str(tmp_path / "kb"), "migrate", "--to", "postgres"]) == 0
    report = json.loads(capsys.readouterr().out)  # type: ignore[attr-defined]
    assert report["chunks"] == chunks and report["articles"]["written"] == 26
    assert report["embed_model"] == "hash"

    postgres = Settings(data_dir=tmp_path / "kb", store="postgres", article_store_url=pgvector_url)
    assert found(postgres) == before
    store = PostgresChunkStore(url=pgvector_url)
    assert (store.count(), store.embed_model_name()) == (chunks, "hash")
    vectors = {n.node_id: n.embedding for batch in store.iter_nodes() for n in batch}
    table = LanceDBChunkStore(uri=lance.lancedb_uri).client.open_table("Articles").to_arrow().to_pylist()
    assert {r["id"]: pytest.approx(r["vector"], rel=1e-6) for r in table} == vectors  # copied, not embedded again

    again = migrate_chunks(postgres, to="postgres")  # an interrupted copy, run again
    assert again.chunks == chunks and store.count() == chunks

    back = Settings(data_dir=tmp_path / "back", article_store_url=pgvector_url)
    for _ in range(2):
        assert migrate_chunks(back, to="lancedb").chunks == chunks
    assert LanceDBChunkStore(uri=back.lancedb_uri).count() == chunks
    assert found(back) == before


def test_migrate_without_a_database_says_what_to_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGIDX_ARTICLE_STORE_URL", raising=False)
    with pytest.raises(ValueError, match="RAGIDX_ARTICLE_STORE_URL"):
        migrate_chunks(Settings(data_dir=tmp_path), to="postgres")
