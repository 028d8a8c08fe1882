"""Scheduled syncs in ``ragidx serve``: when a source is due, the background thread syncing it through the runner
while a real server on loopback answers, and ``GET /v1/admin/sources`` for admin keys only."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ingestion.sync import schedule
from ingestion.sync.config import SourceConfig
from ingestion.sync.schedule import next_due, scheduled_syncs, scheduler_of
from ragidx.config import ServerKey, ServerSettings, Settings
from ragidx.engine import Engine
from ragidx.server import create_app
from tests.fakes.hash_embedding import HashEmbedding
from tests.server.helpers import running

ADMIN, READER = "sk-admin-1a2b3c", "sk-reader-4d5e6f"


def folder_source(path: Path, schedule: str | None = "1h") -> SourceConfig:
    return SourceConfig(name="docs", kind="folder", path=path, schedule=schedule)


def test_next_due_for_intervals_and_cron(tmp_path: Path) -> None:
    hourly = folder_source(tmp_path, "1h")
    assert next_due(hourly, last_finished=None, now=1000.0) == 1000.0 + schedule.FIRST_DELAY_S
    assert next_due(hourly, last_finished=1000.0, now=1500.0) == 4600.0
    assert next_due(hourly, last_finished=0.0, now=99_999.0) == 99_999.0 + schedule.FIRST_DELAY_S  # overdue
    assert next_due(folder_source(tmp_path, None), last_finished=None, now=0.0) is None

    nightly = folder_source(tmp_path, "30 3 * * *")
    last = dt.datetime(2026, 11, 27, 12, 0).astimezone().timestamp()
    due = dt.datetime.fromtimestamp(next_due(nightly, last_finished=last, now=last) or 0).astimezone()
    assert (due.day, due.hour, due.minute) == (28, 3, 30)


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Engine, Path]]:
    monkeypatch.setattr(schedule, "FIRST_DELAY_S", 0.0)
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"p{i}.md").write_text(f"# Page {i}\n\nThe answer to question {i} is here.\n")
    settings = Settings(
        data_dir=tmp_path / "data",
        sources=[folder_source(docs, "1h"), SourceConfig(name="manual", kind="folder", path=docs)],
        serve=ServerSettings(keys=[ServerKey(key=ADMIN, user="lead", role="admin"), ServerKey(key=READER, user="x")]),
    )
    with Engine(settings, embed_model=HashEmbedding(dim=32)) as engine:
        yield engine, docs


def test_a_scheduled_source_syncs_in_the_background_while_the_server_answers(
    served: tuple[Engine, Path],
) -> None:
    engine, _ = served
    with running(create_app(engine)) as url, scheduled_syncs(engine) as scheduler:
        assert scheduler_of(engine) is scheduler and [c.name for c in scheduler.sources] == ["docs"]
        deadline = time.monotonic() + 120
        while "docs" not in scheduler.last and time.monotonic() < deadline:
            health = httpx.get(f"{url}/health", timeout=30)  # answered while the sync runs
            assert health.status_code == 200
            time.sleep(0.05)
        report = scheduler.last["docs"]
        assert (report.status, report.count("new")) == ("ok", 3)
        assert scheduler.due["docs"] > time.time() + 3000  # the next one in an hour

        listed = httpx.get(f"{url}/v1/admin/sources", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        assert listed.status_code == 200
        rows = {r["name"]: r for r in listed.json()["data"]}
        assert rows["docs"]["last_sync"]["status"] == "ok" and rows["docs"]["last_sync"]["new"] == 3
        assert rows["docs"]["next_sync"] and rows["docs"]["schedule"] == "1h"
        assert rows["manual"]["last_sync"] is None and rows["manual"]["next_sync"] is None

        refused = httpx.get(f"{url}/v1/admin/sources", headers={"Authorization": f"Bearer {READER}"}, timeout=30)
        assert refused.status_code == 403
    assert scheduler_of(engine) is None and not any(t.name == "ragidx-sync" for t in threading.enumerate())


def test_a_scheduled_sync_another_process_runs_is_left_to_it(served: tuple[Engine, Path]) -> None:
    engine, _ = served
    from ingestion.sync.state import SyncStateStore

    with SyncStateStore(engine.article_store).lock("docs"), scheduled_syncs(engine) as scheduler:
        deadline = time.monotonic() + 60
        while "docs" not in scheduler.last and time.monotonic() < deadline:
            time.sleep(0.05)
        assert scheduler.last["docs"].status == "already running"
    assert engine.article_store.count() == 0
