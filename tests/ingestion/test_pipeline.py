"""Ingestion: idempotent, change-aware, prunable, and exact after a SIGKILL mid-run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ingestion.pipeline import Ingestor, chunk_id
from ingestion.sources import SourceError
from ragidx.article import Article
from ragidx.stores.article_store import INDEXED, PENDING, ArticleStore
from ragidx.stores.lancedb_store import LanceDBChunkStore
from tests.fakes.hash_embedding import HashEmbedding
from tests.ingestion.crash_worker import corpus, make_ingestor

ROOT = Path(__file__).resolve().parents[2]


def chunk_rows(data_dir: Path) -> list[tuple[str, str, int, str]]:
    """(id, kb_id, chunk_no, text) of every chunk in the LanceDB table."""
    store = LanceDBChunkStore(uri=data_dir / "lancedb")
    table = store._open()
    if table is None:
        return []
    cols = table.to_lance().to_table(columns=["id", "kb_id", "chunk_no", "text"]).to_pylist()
    return sorted((r["id"], r["kb_id"], r["chunk_no"], r["text"]) for r in cols)


def test_ingest_writes_chunks_with_metadata_and_full_articles(tmp_path: Path) -> None:
    ing = make_ingestor(tmp_path)
    report = ing.ingest(corpus(10), source="gen")
    assert (report.new, report.chunks_written, report.errors) == (10, len(chunk_rows(tmp_path)), [])
    assert report.chunks_written > 10  # long articles were split
    rows = chunk_rows(tmp_path)
    a3 = sorted((r for r in rows if r[1] == "a3"), key=lambda r: r[2])
    assert [r[2] for r in a3] == list(range(len(a3)))  # positions 0..n-1
    assert [r[0] for r in a3] == [chunk_id("a3", n) for n in range(len(a3))]  # stable UUIDs
    stored = ing.article_store.get(["a3"])["a3"]
    assert stored.content == corpus(10)[3].content  # the whole article is kept
    node = ing.vector_store.get_nodes(node_ids=[a3[0][0]])[0]
    assert node.metadata["title"] == "Article 3" and node.metadata["url"] == "https://kb/3"


def test_reingest_unchanged_embeds_nothing(tmp_path: Path) -> None:
    make_ingestor(tmp_path).ingest(corpus(12), source="gen")
    before = chunk_rows(tmp_path)
    embed = HashEmbedding(dim=32)
    report = make_ingestor(tmp_path, embed).ingest(corpus(12), source="gen")
    assert (report.unchanged, report.new, report.changed, report.chunks_written) == (12, 0, 0, 0)
    assert embed.calls == 0
    assert chunk_rows(tmp_path) == before


def test_changed_article_replaces_its_chunks_only(tmp_path: Path) -> None:
    make_ingestor(tmp_path).ingest(corpus(9), source="gen")
    before = {r[0]: r for r in chunk_rows(tmp_path)}
    embed = HashEmbedding(dim=32)
    report = make_ingestor(tmp_path, embed).ingest(corpus(9, version=2), source="gen")
    assert (report.changed, report.unchanged) == (3, 6)  # a0, a3, a6 changed
    after = chunk_rows(tmp_path)
    assert {r[1] for r in after if r[0] not in before or before[r[0]] != r} <= {"a0", "a3", "a6"}
    assert any("version two" in r[3] for r in after if r[1] == "a3")
    # Only the changed articles were embedded again: the embedded text is "title: …" + the chunk.
    assert embed.texts_embedded
    assert {t.split("\n")[0] for t in embed.texts_embedded} == {
        "title: Article 0",
        "title: Article 3",
        "title: Article 6",
    }
    assert not any("chunk_no" in t for t in embed.texts_embedded)
    fresh = tmp_path / "fresh"
    make_ingestor(fresh).ingest(corpus(9, version=2), source="gen")
    assert after == chunk_rows(fresh)  # exactly what a clean ingest of v2 gives


def test_shrinking_article_leaves_no_stale_chunks(tmp_path: Path) -> None:
    long = Article("x", "X", "", " ".join(f"Sentence number {i} is here." for i in range(80)))
    ing = make_ingestor(tmp_path)
    ing.ingest([long], source="s")
    assert len(chunk_rows(tmp_path)) > 3
    ing.ingest([Article("x", "X", "", "Now it is one short sentence.")], source="s")
    assert [(r[1], r[2]) for r in chunk_rows(tmp_path)] == [("x", 0)]


def test_prune_deletes_articles_missing_from_the_source(tmp_path: Path) -> None:
    ing = make_ingestor(tmp_path)
    ing.ingest(corpus(6), source="gen")
    ing.ingest([Article("other", "O", "", "Another source's article.")], source="elsewhere")
    report = ing.ingest(corpus(4), source="gen", prune=True)
    assert report.deleted == 2
    assert {r[1] for r in chunk_rows(tmp_path)} == {"a0", "a1", "a2", "a3", "other"}
    assert set(ing.article_store.get(["a4", "a5", "other"])) == {"other"}


def test_bad_items_are_reported_and_the_rest_ingested_without_losing_stored_data(tmp_path: Path) -> None:
    ing = make_ingestor(tmp_path)
    ing.ingest(corpus(3), source="gen")
    items = [
        SourceError("kb.jsonl", 2, "invalid JSON"),
        *corpus(5)[3:],
        SourceError("kb.jsonl", 9, "missing 'id'"),
    ]
    report = ing.ingest(items, source="gen")
    assert report.errors == ["kb.jsonl:2: invalid JSON", "kb.jsonl:9: missing 'id'"]
    assert {r[1] for r in chunk_rows(tmp_path)} == {"a0", "a1", "a2", "a3", "a4"}


def test_duplicate_ids_in_one_run_keep_the_later_copy(tmp_path: Path) -> None:
    ing = make_ingestor(tmp_path)
    report = ing.ingest([Article("d", "D", "", "first text"), Article("d", "D", "", "second text")], source="s")
    assert report.duplicates == 1
    assert ing.article_store.get(["d"])["d"].content == "second text"
    assert [r[3] for r in chunk_rows(tmp_path)] == ["second text"]


def test_one_megabyte_article_is_chunked_within_the_model_window(tmp_path: Path) -> None:
    sentence = "LibreOffice lets you format cells, insert charts and print ranges quickly. "
    big = Article("big", "Big", "", sentence * (1_000_000 // len(sentence)))
    assert len(big.content) > 990_000
    embed = HashEmbedding(dim=32)
    ing = Ingestor(
        LanceDBChunkStore(uri=tmp_path / "lancedb"),
        ArticleStore(tmp_path / "a.sqlite"),
        embed,
        chunk_tokens=200,
    )
    report = ing.ingest([big], source="s")
    assert report.chunks_written == len(chunk_rows(tmp_path)) > 500
    from llama_index.core.utils import get_tokenizer

    tok = get_tokenizer()
    assert max(len(tok(t)) for t in embed.texts_embedded) <= 210  # title line + chunk


def run_worker(data_dir: Path, n: int, kill_after: int | None, version: int = 1) -> str:
    """Run the crash worker; SIGKILL it after ``kill_after`` embedding calls. Returns its output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.ingestion.crash_worker", str(data_dir), str(n), str(version)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env=env,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if kill_after is not None and sum(ln.startswith("embedding") for ln in lines) >= kill_after:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=120)
    if kill_after is not None:
        assert proc.returncode == -signal.SIGKILL, "the worker finished before it could be killed"
    return "".join(lines)


@pytest.mark.slow
def test_sigkill_mid_ingest_then_rerun_gives_exactly_the_right_chunks(tmp_path: Path) -> None:
    expected_dir = tmp_path / "clean"
    make_ingestor(expected_dir).ingest(corpus(24), source="gen")
    expected = chunk_rows(expected_dir)

    data = tmp_path / "killed"
    run_worker(data, 24, kill_after=2)
    run_worker(data, 24, kill_after=3)  # killed again, now while recovering / continuing
    killed_state = ArticleStore(data / "articles.sqlite")
    assert killed_state.count() < 24 or killed_state.count(PENDING) > 0  # really interrupted
    out = run_worker(data, 24, kill_after=None)
    assert re.search(r"done [1-9]\d* ", out), out[-500:]

    got = chunk_rows(data)
    assert got == expected  # none lost, none duplicated, same ids, positions and text
    assert max(Counter(r[0] for r in got).values()) == 1
    assert ArticleStore(data / "articles.sqlite").count(INDEXED) == 24

    # A killed re-ingest of a changed corpus also converges to exactly the clean result.
    run_worker(data, 24, kill_after=2, version=2)
    run_worker(data, 24, kill_after=None, version=2)
    clean_v2 = tmp_path / "clean_v2"
    make_ingestor(clean_v2).ingest(corpus(24, version=2), source="gen")
    assert chunk_rows(data) == chunk_rows(clean_v2)
