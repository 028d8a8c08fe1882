"""The sync runner over real folders and real stores (LanceDB, SQLite or PostgreSQL ledger): new, changed,
unchanged, moved and deleted files; what a failure may never do (delete); one sync per source across processes;
a sync killed with SIGKILL resumes exactly. A scripted reader stands in for a source only at the unit's edge."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from ingestion.sync.base import Failed, Fetched, Gone, ItemState, ScanEvent, Skipped, SourceUnavailable, Unchanged
from ingestion.sync.config import SourceConfig
from ingestion.sync.runner import SyncReport, SyncRunner
from ingestion.sync.state import SyncBusy, SyncStateStore
from ragidx.article import Article
from ragidx.engine import Engine
from ragidx.stores.article_store import INDEXED, ArticleStore
from tests.fakes.hash_embedding import HashEmbedding
from tests.ingestion.sync.sync_worker import engine_for
from tests.ingestion.test_pipeline import chunk_rows

ROOT = Path(__file__).resolve().parents[3]


def write_docs(folder: Path, n: int, *, prefix: str = "p") -> None:
    for i in range(n):
        path = folder / ("guide" if i % 2 else "howto") / f"{prefix}{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        body = " ".join(f"Sentence {j} of page {i} explains topic{i % 5} and step{j}." for j in range(3 + i % 9))
        path.write_text(f"# Page {i}\n\n{body}\n")


def counts(report: SyncReport) -> dict[str, int]:
    d = report.as_dict(items=False)
    return {k: d[k] for k in ("new", "changed", "unchanged", "moved", "deleted", "failed", "skipped")}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    write_docs(docs, 8)
    return docs


@pytest.fixture
def engine(tmp_path: Path, folder: Path) -> Iterator[Engine]:
    with engine_for(tmp_path / "data", folder, embed=HashEmbedding(dim=32)) as e:
        yield e


def test_second_sync_embeds_nothing_and_changes_are_exact(engine: Engine, folder: Path) -> None:
    runner = SyncRunner(engine)
    source = engine.settings.sources[0]
    first = runner.sync(source)
    assert counts(first) == dict(new=8, changed=0, unchanged=0, moved=0, deleted=0, failed=0, skipped=0)
    assert first.chunks_embedded == engine.article_store.total_chunks() > 8

    second = runner.sync(source)
    assert counts(second)["unchanged"] == 8 and second.chunks_embedded == 0

    for i in (1, 2, 3):  # change 3
        path = next(folder.rglob(f"p{i}.md"))
        path.write_text(path.read_text() + "\nA sentence added later.\n")
    for i in (4, 5):  # delete 2
        next(folder.rglob(f"p{i}.md")).unlink()
    (folder / "howto" / "new.md").write_text("# New page\n\nSomething written today.\n")  # add 1
    embedded_before = len(engine.embed_model.texts_embedded)  # type: ignore[attr-defined]
    third = runner.sync(source)
    assert counts(third) == dict(new=1, changed=3, unchanged=3, moved=0, deleted=2, failed=0, skipped=0)
    re_embedded = engine.embed_model.texts_embedded[embedded_before:]  # type: ignore[attr-defined]
    assert re_embedded and all(re.search(r"Page [123]\b|New page", t) for t in re_embedded)
    assert sorted(engine.article_store.indexed_ids()) == sorted(
        p.relative_to(folder).as_posix() for p in folder.rglob("*.md")
    )
    assert {i.key: i.what for i in third.items if i.what != "unchanged"} == {
        "guide/p1.md": "changed",
        "guide/p3.md": "changed",
        "howto/p2.md": "changed",
        "howto/new.md": "new",
        "howto/p4.md": "deleted",
        "guide/p5.md": "deleted",
    }


def test_a_moved_file_keeps_its_vectors(engine: Engine, folder: Path) -> None:
    runner = SyncRunner(engine)
    source = engine.settings.sources[0]
    runner.sync(source)
    before = {r[3]: r for r in chunk_rows(engine.settings.data_dir) if r[1] == "howto/p0.md"}
    (folder / "archive").mkdir()
    (folder / "howto" / "p0.md").rename(folder / "archive" / "p0.md")
    embedded_before = len(engine.embed_model.texts_embedded)  # type: ignore[attr-defined]
    report = runner.sync(source)
    assert counts(report)["moved"] == 1 and counts(report)["new"] == 0 and counts(report)["deleted"] == 0
    assert [i.as_dict() for i in report.items if i.what == "moved"] == [
        {"key": "archive/p0.md", "what": "moved", "kb_id": "archive/p0.md", "reason": "from howto/p0.md"}
    ]
    assert report.chunks_embedded == 0 and report.chunks_reused == len(before)
    assert len(engine.embed_model.texts_embedded) == embedded_before  # type: ignore[attr-defined]
    after = {r[3]: r for r in chunk_rows(engine.settings.data_dir) if r[1] == "archive/p0.md"}
    assert after.keys() == before.keys()
    assert "howto/p0.md" not in engine.article_store.indexed_ids()
    moved = engine.article_store.get(["archive/p0.md"])["archive/p0.md"]
    assert moved.url.endswith("/archive/p0.md") and moved.metadata["folder"] == "archive"
    hits = engine.retrieve("Sentence 2 of page 0 explains topic0", top_k=1)
    assert hits[0].kb_id == "archive/p0.md"


def test_an_article_deleted_by_hand_is_stored_again(engine: Engine, folder: Path) -> None:
    runner = SyncRunner(engine)
    source = engine.settings.sources[0]
    runner.sync(source)
    engine.delete(["howto/p0.md"])
    report = runner.sync(source)
    assert counts(report)["new"] == 1 and counts(report)["unchanged"] == 7 and report.chunks_embedded > 0
    assert "howto/p0.md" in engine.article_store.indexed_ids()


def test_include_exclude_and_metadata_and_allowed(tmp_path: Path, folder: Path) -> None:
    (folder / "howto" / "draft.md").write_text("# Draft\n\nNot ready.\n")
    source = SourceConfig(
        name="docs",
        kind="folder",
        path=folder,
        include=["**/*.md"],
        exclude=["draft.md", "guide/"],
        metadata={"product": "writer"},
        allowed=["group:support"],
    )
    with engine_for(tmp_path / "data", folder, embed=HashEmbedding(dim=32)) as engine:
        report = SyncRunner(engine).sync(source)
        assert counts(report)["new"] == 4 and counts(report)["skipped"] == 5
        reasons = {i.key: i.reason for i in report.items if i.what == "skipped"}
        assert reasons["howto/draft.md"] == "exclude pattern" and reasons["guide/p1.md"] == "exclude pattern"
        stored = engine.article_store.get(["howto/p0.md"])["howto/p0.md"]
        assert stored.metadata["product"] == "writer" and stored.metadata["allowed"] == ["group:support"]
        assert engine.retrieve("page 0 topic0", top_k=3) == []  # the public reads none of them
        assert engine.retrieve("page 0 topic0", top_k=3, groups=["support"])

        # the pattern now lets the guide in; a file excluded now that was stored before is deleted
        narrower = source.model_copy(update={"exclude": ["draft.md", "howto/p0.md"]})
        again = SyncRunner(engine).sync(narrower)
        assert counts(again)["new"] == 4 and counts(again)["deleted"] == 1
        assert "howto/p0.md" not in engine.article_store.indexed_ids()


class Scripted:
    """A source reader at the unit's edge: yields the events it is given, then raises ``fail`` if set."""

    def __init__(self, events: list[ScanEvent], fail: Exception | None = None) -> None:
        self.events, self.fail = events, fail
        self.previous: Mapping[str, ItemState] = {}

    def scan(self, previous: Mapping[str, ItemState]) -> Iterator[ScanEvent]:
        self.previous = previous
        yield from self.events
        if self.fail is not None:
            raise self.fail


def fetched(key: str, text: str = "", kb_id: str | None = None) -> Fetched:
    article = Article(kb_id=kb_id or key, title=key, url=f"https://help/{key}", content=text or f"All about {key}.")
    return Fetched(key, article, ItemState(key, article.kb_id, ""))


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[Engine, SourceConfig]]:
    source = SourceConfig(name="help", kind="website", url="https://help.example/")
    with Engine(
        engine_for(tmp_path / "data", tmp_path).settings.model_copy(update={"sources": [source]}),
        embed_model=HashEmbedding(dim=32),
    ) as engine:
        yield engine, source


def test_a_failure_never_deletes(web: tuple[Engine, SourceConfig]) -> None:
    engine, source = web
    runner = SyncRunner(engine)
    runner.sync(source, reader=Scripted([fetched(k) for k in ("a", "b", "c", "d")]))

    failed = runner.sync(source, reader=Scripted([fetched("a"), Failed("b", "timed out after 20 s; retried", 504)]))
    assert counts(failed) == dict(new=0, changed=0, unchanged=1, moved=0, deleted=2, failed=1, skipped=0)
    assert [i.as_dict() for i in failed.items if i.what == "failed"] == [
        {"key": "b", "what": "failed", "reason": "timed out after 20 s; retried", "status": 504}
    ]
    assert sorted(engine.article_store.indexed_ids()) == ["a", "b"]

    down = runner.sync(
        source, reader=Scripted([Gone("a", 404)], fail=SourceUnavailable("the site answers 503: sync again later"))
    )
    assert down.status == "failed" and down.error == "the site answers 503: sync again later"
    assert counts(down)["deleted"] == 1  # only what the site said is gone
    assert engine.article_store.indexed_ids() == ["b"]

    crashed = runner.sync(source, reader=Scripted([], fail=KeyError("parser")))
    assert crashed.status == "failed" and "nothing was deleted" in str(crashed.error)
    assert engine.article_store.indexed_ids() == ["b"]
    last = runner.last_syncs()["help"]
    assert last.status == "failed" and last.report["deleted"] == 0


def test_unchanged_skipped_and_a_new_id(web: tuple[Engine, SourceConfig]) -> None:
    engine, source = web
    runner = SyncRunner(engine)
    runner.sync(source, reader=Scripted([fetched("a"), fetched("b"), fetched("c")]))
    reader = Scripted(
        [
            Unchanged("a", ItemState("a", "a", "", etag='"v2"')),
            Skipped("b", "robots.txt"),
            fetched("c", kb_id="c-canonical"),
        ]
    )
    report = runner.sync(source, reader=reader)
    assert reader.previous["a"].kb_id == "a"
    assert counts(report) == dict(new=0, changed=1, unchanged=1, moved=0, deleted=1, failed=0, skipped=1)
    assert sorted(engine.article_store.indexed_ids()) == ["a", "c-canonical"]
    states = SyncStateStore(engine.article_store).load("help")
    assert states["a"].etag == '"v2"' and states["a"].content_hash == reader.previous["a"].content_hash
    assert sorted(states) == ["a", "c"]


def test_another_sources_article_is_never_taken_or_deleted(web: tuple[Engine, SourceConfig]) -> None:
    engine, source = web
    engine.ingest([Article("shared", "Shared", "u", "Owned by the handbook.")], source_name="handbook")
    report = SyncRunner(engine).sync(source, reader=Scripted([fetched("x", kb_id="shared")]))
    assert [i.as_dict() for i in report.items] == [
        {
            "key": "x",
            "what": "failed",
            "kb_id": "shared",
            "reason": "its id belongs to source 'handbook'; left as it is",
        }
    ]
    assert engine.article_store.get(["shared"])["shared"].content == "Owned by the handbook."


def test_a_widening_is_refused_and_retried(web: tuple[Engine, SourceConfig]) -> None:
    engine, source = web
    restricted = source.model_copy(update={"allowed": ["group:hr"]})
    runner = SyncRunner(engine)
    runner.sync(restricted, reader=Scripted([fetched("pay")]))
    opened = runner.sync(source, reader=Scripted([fetched("pay")]))
    assert counts(opened)["failed"] == 1 and "more people" in str(opened.items[0].reason)
    assert engine.article_store.get(["pay"])["pay"].metadata["allowed"] == ["group:hr"]
    allowed = SyncRunner(engine, allow_widening=True).sync(source, reader=Scripted([fetched("pay")]))
    assert counts(allowed)["changed"] == 1 and allowed.chunks_embedded == 0  # a relabel, not an embedding
    assert "allowed" not in engine.article_store.get(["pay"])["pay"].metadata


def test_a_second_sync_of_the_same_source_is_refused(web: tuple[Engine, SourceConfig]) -> None:
    engine, source = web
    started, release = threading.Event(), threading.Event()

    class Slow(Scripted):
        def scan(self, previous: Mapping[str, ItemState]) -> Iterator[ScanEvent]:
            started.set()
            release.wait(30)
            yield fetched("a")

    first: list[SyncReport] = []
    thread = threading.Thread(target=lambda: first.append(SyncRunner(engine).sync(source, reader=Slow([]))))
    thread.start()
    assert started.wait(30)
    second = SyncRunner(engine).sync(source, reader=Scripted([fetched("b")]))
    release.set()
    thread.join(30)
    assert second.status == "already running" and "already running" in str(second.error)
    assert first[0].status == "ok" and engine.article_store.indexed_ids() == ["a"]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_lock_holds_across_processes(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue("pg_url")) if backend == "postgresql" else str(tmp_path / "a.sqlite")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from ingestion.sync.state import SyncStateStore\n"
            "from ragidx.stores.article_store import ArticleStore\n"
            "with SyncStateStore(ArticleStore(sys.argv[1])).lock('docs'):\n"
            "    print('held', flush=True); time.sleep(60)\n",
            url,
        ],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        states = SyncStateStore(ArticleStore(url))
        with pytest.raises(SyncBusy, match="already running"), states.lock("docs"):
            pass
        assert states.is_running("docs") and not states.is_running("other")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    with states.lock("docs"):  # a killed holder's lock is gone with it
        assert not SyncStateStore(ArticleStore(url)).is_running("other")


def run_worker(data: Path, folder: Path | str, kill_after: int | None, *extra: str) -> str:
    """Run the sync worker; SIGKILL it after ``kill_after`` embedding calls. Returns its output."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.ingestion.sync.sync_worker", str(data), str(folder), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
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


def worker_report(output: str) -> dict[str, int]:
    line = next(ln for ln in output.splitlines() if ln.startswith("report "))
    data: dict[str, int] = json.loads(line.removeprefix("report "))
    return data


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_sync_killed_with_sigkill_resumes_exactly(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    folder = tmp_path / "docs"
    write_docs(folder, 18)
    clean = tmp_path / "clean"
    with engine_for(clean, folder, embed=HashEmbedding(dim=32)) as engine:
        SyncRunner(engine).sync(engine.settings.sources[0])
    expected = chunk_rows(clean)

    data = tmp_path / "killed"
    extra = ("--articles", str(request.getfixturevalue("pg_url"))) if backend == "postgresql" else ()
    articles = extra[1] if extra else str(data / "articles.sqlite")
    run_worker(data, folder, 3, *extra)
    store = ArticleStore(articles)
    saved = len(SyncStateStore(store).load("docs"))
    indexed_chunks = sum(e.chunks for e in store.listing(limit=1000) if e.state == INDEXED)
    assert saved < 18, "the sync finished before it was killed"

    resumed = worker_report(run_worker(data, folder, None, *extra))
    assert (resumed["new"], resumed["unchanged"], resumed["deleted"], resumed["failed"]) == (18 - saved, saved, 0, 0)
    assert resumed["chunks_embedded"] == len(expected) - indexed_chunks
    assert chunk_rows(data) == expected  # exactly the chunks of an uninterrupted sync: none lost, none doubled
    assert store.count() == store.count(INDEXED) == 18

    again = worker_report(run_worker(data, folder, None, *extra))
    assert (again["unchanged"], again["chunks_embedded"]) == (18, 0)


@pytest.mark.slow
def test_a_website_sync_killed_with_sigkill_resumes_exactly(tmp_path: Path) -> None:
    from tests.ingestion.sync.site_server import serve_site
    from tests.ingestion.sync.test_website import page

    with serve_site(tmp_path / "site") as site:
        site.root.mkdir()
        for i in range(16):
            body = " ".join(f"Sentence {j} of page {i} explains topic{i % 5} and step{j}." for j in range(3 + i % 9))
            site.write(f"/docs/p{i}.html", page(f"Page {i}", f"<p>{body}</p>"))
        urls = "".join(f"<url><loc>{site.url(f'/docs/p{i}.html')}</loc></url>" for i in range(16))
        site.write("/sitemap.xml", f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>')
        start = site.url("/sitemap.xml")
        clean = tmp_path / "clean"
        with engine_for(clean, start, embed=HashEmbedding(dim=32)) as engine:
            assert SyncRunner(engine).sync(engine.settings.sources[0]).count("new") == 16
        expected = chunk_rows(clean)

        data = tmp_path / "killed"
        run_worker(data, start, 3)
        store = ArticleStore(data / "articles.sqlite")
        saved = len(SyncStateStore(store).load("docs"))
        indexed_chunks = sum(e.chunks for e in store.listing(limit=1000) if e.state == INDEXED)
        assert saved < 16, "the sync finished before it was killed"

        resumed = worker_report(run_worker(data, start, None))
        outcome = (resumed["new"], resumed["unchanged"], resumed["deleted"], resumed["failed"])
        assert outcome == (16 - saved, saved, 0, 0)
        assert resumed["chunks_embedded"] == len(expected) - indexed_chunks
        assert chunk_rows(data) == expected
        assert store.count() == store.count(INDEXED) == 16
