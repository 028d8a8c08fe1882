"""Several engines over one PostgreSQL (``store = "postgres"``): two ingests from two processes at once count
exactly, an ingest killed half-way loses and doubles nothing on the next run, and three ``ragidx serve`` processes
answer ``/v1/search`` exactly as one does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import httpx

from ragidx.config import Settings
from ragidx.stores.postgres_store import PostgresChunkStore
from tests.dashboard.fakes import make_engine
from tests.postgres_server import PostgresServer
from tests.serve_process import ragidx_serve

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_KB = ROOT / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"


def ingest_process(url: str, data_dir: Path, path: str | Path, pause: float = 0.0) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.stores.ingest_process", url, str(data_dir), str(path), str(pause)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def finished(process: subprocess.Popen[str]) -> int:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    return int(out.split()[-1])


def reference(postgres_server: PostgresServer, tmp_path: Path, path: str | Path) -> tuple[int, Counter[str]]:
    """(chunks, chunks per article) of one ingest alone into a database of its own."""
    url = postgres_server.create_database(f"ref_{abs(hash(str(tmp_path))) % 10**8}")
    postgres_server.execute("CREATE EXTENSION IF NOT EXISTS vector", database=url.rsplit("/", 1)[1])
    with make_engine(Settings(data_dir=tmp_path / "ref", store="postgres", article_store_url=url)) as engine:
        engine.ingest(str(path))
    return chunks_of(url)


def chunks_of(url: str) -> tuple[int, Counter[str]]:
    store = PostgresChunkStore(url=url, tenant="")
    per_article = Counter(n.metadata["kb_id"] for n in store.get_nodes())
    return store.count(), per_article


def assert_statistics_exact(url: str) -> None:
    """The BM25 statistics match the chunks: what every writer added and removed under the write lock."""
    store = PostgresChunkStore(url=url)
    with store._connection() as conn:
        docs, length = conn.execute(
            "SELECT docs, length FROM ragidx_chunk_indexes WHERE name = %s", (store.table,)
        ).fetchone()  # type: ignore[misc]
        assert (docs, length) == conn.execute(f"SELECT count(*), sum(terms_len) FROM {store.table}").fetchone()
        wrong = conn.execute(
            f"SELECT count(*) FROM (SELECT term, count(*) AS n FROM {store.table}, unnest(lexemes) AS term "
            f"GROUP BY term) real FULL JOIN (SELECT * FROM {store.table}_terms WHERE df > 0) kept "
            "ON kept.term = real.term WHERE real.n IS DISTINCT FROM kept.df"
        ).fetchone()
        assert wrong == (0,)


def test_two_ingests_at_once_count_exactly(
    postgres_server: PostgresServer, pgvector_url: str, tmp_path: Path, writer_kb_file: str
) -> None:
    expected = reference(postgres_server, tmp_path, writer_kb_file)
    first, second = (ingest_process(pgvector_url, tmp_path / name, writer_kb_file) for name in ("a", "b"))
    assert finished(first) + finished(second) == 26  # each article indexed by one of them
    assert chunks_of(pgvector_url) == expected
    assert_statistics_exact(pgvector_url)


def test_an_ingest_killed_half_way_loses_and_doubles_nothing(
    postgres_server: PostgresServer, pgvector_url: str, tmp_path: Path
) -> None:
    expected = reference(postgres_server, tmp_path, SAMPLE_KB)
    process = ingest_process(pgvector_url, tmp_path / "a", SAMPLE_KB, pause=0.02)
    store = PostgresChunkStore(url=pgvector_url, tenant="")
    deadline = time.monotonic() + 300
    while store.vector_dim() is None or store.count() < 50:  # some batches written, most of the file still to go
        assert process.poll() is None and time.monotonic() < deadline, "the ingest ended before it could be killed"
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert 0 < store.count() < expected[0]
    finished(ingest_process(pgvector_url, tmp_path / "a", SAMPLE_KB))
    assert chunks_of(pgvector_url) == expected
    assert_statistics_exact(pgvector_url)


def test_three_servers_over_one_database_answer_as_one(pgvector_url: str, tmp_path: Path, writer_kb_file: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RAGIDX_STORE": "postgres",
        "RAGIDX_ARTICLE_STORE_URL": pgvector_url,
        "RAGIDX_EMBED_MODEL": "minilm",
        "RAGIDX_RERANKER": "none",
    }
    ingest = subprocess.run(
        [sys.executable, "-m", "ragidx.cli", "--data-dir", str(tmp_path / "i"), "ingest", writer_kb_file],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ingest.returncode == 0, ingest.stderr[-3000:]
    queries = ["table of contents", "print selected pages", "page numbers in the footer", "merge cells"]

    def answers(url: str) -> list[list[tuple[str, float]]]:
        out = []
        for query in queries:
            found = httpx.post(f"{url}/v1/search", json={"query": query, "top_k": 5}, timeout=120)
            assert found.status_code == 200, found.text
            out.append([(a["kb_id"], round(a["rerank_score"], 5)) for a in found.json()["data"]])
        return out

    with ragidx_serve(env, tmp_path / "alone") as alone:
        expected = answers(alone)
    assert all(len(a) == 5 for a in expected)
    with ExitStack() as stack:
        urls = [stack.enter_context(ragidx_serve(env, tmp_path / f"s{n}")) for n in range(3)]
        for url in urls:
            assert answers(url) == expected
