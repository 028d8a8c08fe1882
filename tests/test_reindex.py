"""ragidx reindex with two real bundled models (MiniLM, then the multilingual USE): the old index answers while the
new one is written, a killed run resumes, articles changed or deleted meanwhile are caught up, then the switch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lancedb
import pytest

from ingestion.pipeline import Ingestor
from ragidx.article import Article
from ragidx.cli import main
from ragidx.config import Settings
from ragidx.engine import Engine
from ragidx.reindex import reindex
from ragidx.stores.active_table import active_table, previous_tables
from ragidx.stores.lancedb_store import EmbeddingMismatch, LanceDBChunkStore

pytestmark = pytest.mark.slow


def small_kb(writer_kb_file: str, tmp_path: Path, n: int = 8) -> Path:
    path = tmp_path / "kb.jsonl"
    lines = Path(writer_kb_file).read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(lines[:n]) + "\n", encoding="utf-8")
    return path


def titles(engine: Engine, query: str) -> list[str]:
    return [a.title for a in engine.retrieve(query, top_k=3)]


def test_reindex_resumes_and_switches_while_the_old_index_answers(
    tmp_path: Path, writer_kb_file: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    kb = small_kb(writer_kb_file, tmp_path)
    first_title = json.loads(kb.read_text().splitlines()[0])["title"]
    with Engine(Settings(data_dir=data, embed_model="minilm")) as old:
        assert old.ingest(kb).new == 8
        before = titles(old, first_title)
    assert before[0] == first_title

    use = Settings(data_dir=data, embed_model="use-multilingual")
    with Engine(use) as new, pytest.raises(EmbeddingMismatch, match="ragidx reindex"):
        new.retrieve(first_title)

    real = Ingestor.embedded_chunks
    calls = {"n": 0}

    def killed_after_one_batch(self: Ingestor, articles: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(self, articles)

    monkeypatch.setattr(Ingestor, "embedded_chunks", killed_after_one_batch)
    with pytest.raises(KeyboardInterrupt):
        reindex(use, batch_articles=3)
    monkeypatch.setattr(Ingestor, "embedded_chunks", real)

    uri = use.lancedb_uri
    assert active_table(uri, "Articles") == "Articles"  # not switched: the old index answers
    with Engine(Settings(data_dir=data, embed_model="minilm")) as old:
        assert titles(old, first_title) == before

    monkeypatch.setenv("RAGIDX_EMBED_MODEL", "use-multilingual")
    assert main(["--data-dir", str(data), "reindex", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)

    assert report["resumed"] == 3 and report["articles"] == 5 and report["switched"]
    assert report["old_model"] == "minilm" and report["model"] == "use-multilingual"
    assert active_table(uri, "Articles") == report["table"] != "Articles"
    assert previous_tables(uri, "Articles") == ["Articles"]
    assert not (uri / "Articles.reindex.json").exists()
    monkeypatch.delenv("RAGIDX_EMBED_MODEL")

    with Engine(use) as new:
        assert first_title in titles(new, first_title)
        assert new.stats()["chunks"] == LanceDBChunkStore(uri, table_name=report["table"]).count()
    with Engine(Settings(data_dir=data)) as auto:  # "auto" reads the new index's model
        assert first_title in titles(auto, first_title)
    with Engine(Settings(data_dir=data, embed_model="minilm")) as old, pytest.raises(EmbeddingMismatch):
        old.retrieve(first_title)

    dropped = reindex(use, drop_old=True)
    assert dropped.dropped == ["Articles"] and not dropped.switched
    assert "Articles" not in lancedb.connect(uri).table_names()
    with pytest.raises(ValueError, match="already embedded by 'use-multilingual': nothing to do"):
        reindex(use)


def test_articles_written_and_deleted_during_the_run_are_caught_up(
    tmp_path: Path, writer_kb_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    kb = small_kb(writer_kb_file, tmp_path, n=6)
    minilm = Settings(data_dir=data, embed_model="minilm")
    with Engine(minilm) as old:
        old.ingest(kb)
        ids = sorted(old.article_store.indexed_ids())
    real = Ingestor.embedded_chunks
    calls = {"n": 0}

    def meanwhile(self: Ingestor, articles: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:  # another process ingests and deletes with the old model while the new is written
            with Engine(minilm) as other:
                other.delete([ids[-1]])
                changed = Article(ids[0], "Renamed", "https://x/a", "Pagination of a long report in Writer.")
                other.ingest([changed], replace=True)
                other.ingest([Article("added-1", "Brand new", "https://x/b", "Footnotes at the end of pages.")])
        return real(self, articles)

    monkeypatch.setattr(Ingestor, "embedded_chunks", meanwhile)

    report = reindex(Settings(data_dir=data, embed_model="use-multilingual"), batch_articles=2)

    new = LanceDBChunkStore(Settings(data_dir=data).lancedb_uri, table_name=report.table)
    assert new.kb_ids() == (set(ids[:-1]) | {"added-1"})
    texts = {n.metadata["kb_id"]: n.get_content() for n in new.get_nodes(filters=None)}
    assert "Pagination of a long report" in texts[ids[0]]
