"""A website synced end to end by the sync runner into real stores, from a real HTTP server on loopback: the second
sync embeds nothing, changes are exact, a sync during server errors deletes nothing and the next one completes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingestion.sync.config import SourceConfig, WebsiteOptions
from ingestion.sync.runner import SyncReport, SyncRunner
from ragidx.article import SECTIONS
from ragidx.config import Settings
from ragidx.engine import Engine
from tests.fakes.hash_embedding import HashEmbedding
from tests.ingestion.sync.site_server import Site, serve_site
from tests.ingestion.sync.test_website import page


def counts(report: SyncReport) -> dict[str, int]:
    d = report.as_dict(items=False)
    return {k: d[k] for k in ("new", "changed", "unchanged", "deleted", "failed")}


def write_page(site: Site, i: int, version: str = "first", links: tuple[int, ...] = ()) -> None:
    more = "".join(f'<a href="p{j}.html">Page {j}</a> ' for j in links)
    body = f"<p>Page {i} explains topic {i} ({version} version).</p><h2 id='details'>Details</h2><p>{more}</p>"
    file = site.write(f"/docs/p{i}.html", page(f"Page {i}", body))
    if version != "first":  # Last-Modified has whole seconds: a page changed in the second it was fetched in looks
        later = time.time() + 5  # unchanged to If-Modified-Since, on any static server
        os.utime(file, (later, later))


@pytest.fixture
def synced(tmp_path: Path) -> Iterator[tuple[Site, Engine, SourceConfig]]:
    with serve_site(tmp_path / "site") as site:
        site.root.mkdir()
        site.write("/docs/index.html", page("Docs", "".join(f'<a href="p{i}.html">Page {i}</a> ' for i in range(6))))
        for i in range(6):
            write_page(site, i)
        source = SourceConfig(
            name="help",
            kind="website",
            url=site.url("/docs/index.html"),
            metadata={"product": "writer"},
            website=WebsiteOptions(user_agent="ragidx-test", concurrency=2),
        )
        settings = Settings(data_dir=tmp_path / "data", sources=[source], chunk_tokens=60, chunk_overlap_tokens=0)
        with Engine(settings, embed_model=HashEmbedding(dim=32)) as engine:
            yield site, engine, source


def test_a_site_synced_again_embeds_nothing_and_changes_are_exact(
    synced: tuple[Site, Engine, SourceConfig],
) -> None:
    site, engine, source = synced
    runner = SyncRunner(engine)

    first = runner.sync(source)
    assert counts(first) == dict(new=7, changed=0, unchanged=0, deleted=0, failed=0)
    assert first.chunks_embedded > 0

    second = runner.sync(source)
    assert counts(second) == dict(new=0, changed=0, unchanged=7, deleted=0, failed=0)
    assert second.chunks_embedded == 0

    write_page(site, 0, "second")
    write_page(site, 1, "second", links=(9,))  # the new page is linked from a changed one
    write_page(site, 9)
    for gone in (4, 5):
        (site.root / "docs" / f"p{gone}.html").unlink()
    third = runner.sync(source)
    assert counts(third) == dict(new=1, changed=2, unchanged=3, deleted=2, failed=0)
    stored = engine.article_store.get([site.url("/docs/p9.html"), site.url("/docs/p4.html")])
    assert list(stored) == [site.url("/docs/p9.html")]
    new = stored[site.url("/docs/p9.html")]
    assert new.url == site.url("/docs/p9.html") and new.metadata["product"] == "writer"
    assert [s.get("anchor") for s in new.metadata[SECTIONS]] == ["top", "details"]


def test_server_errors_delete_nothing_and_the_next_sync_completes(synced: tuple[Site, Engine, SourceConfig]) -> None:
    site, engine, source = synced
    runner = SyncRunner(engine)
    runner.sync(source)
    write_page(site, 2, "second", links=(7,))
    write_page(site, 7)

    site.status.update({"/docs/index.html": 500, "/docs/p2.html": 503, "/docs/p3.html": 500})
    failing = runner.sync(source)
    assert counts(failing) == dict(new=0, changed=0, unchanged=4, deleted=0, failed=3)
    failures = {i.key.removeprefix(site.base): i.status for i in failing.items if i.what == "failed"}
    assert failures == {"/docs/index.html": 500, "/docs/p2.html": 503, "/docs/p3.html": 500}

    site.status.clear()
    clean = runner.sync(source)
    assert counts(clean) == dict(new=1, changed=1, unchanged=6, deleted=0, failed=0)
    assert list(engine.article_store.get([site.url("/docs/p7.html")])) == [site.url("/docs/p7.html")]
