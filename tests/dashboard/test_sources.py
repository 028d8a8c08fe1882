"""The dashboard's Sources page through Streamlit's AppTest: a folder source synced by the runner, then shown with
its last sync and its failures; and the hint when no source is declared."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingestion.sync.runner import SyncRunner
from ragidx.config import Settings
from tests.dashboard.fakes import make_engine
from tests.dashboard.test_app import start


def test_the_sources_page_shows_each_source_and_its_last_sync(
    dashboard_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nAbout A.\n")
    (docs / "empty.md").write_text("")
    monkeypatch.setenv(
        "RAGIDX_SOURCES",
        f'[{{"name": "handbook", "kind": "folder", "path": "{docs}", "schedule": "6h"}},'
        f' {{"name": "wiki", "kind": "llamaindex", "reader": "llama_index.readers.database.DatabaseReader"}}]',
    )
    with make_engine(Settings(data_dir=dashboard_env)) as engine:
        assert SyncRunner(engine).sync(engine.settings.sources[0]).count("new") == 1

    at = start("sources")
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert list(table["source"]) == ["handbook", "wiki"]
    handbook = table.iloc[0]
    assert (handbook["schedule"], handbook["status"], handbook["new"], handbook["failed"]) == ("6h", "ok", 1, 1)
    assert table.iloc[1]["last sync (UTC)"] == "never" and table.iloc[1]["schedule"] == "manual"
    assert "empty.md: empty file" in at.expander[0].children[0].value  # type: ignore[attr-defined]


def test_without_sources_the_page_says_how_to_declare_them(dashboard_env: Path) -> None:
    at = start("sources")
    assert not at.exception and "[[sources]]" in at.info[0].value
