"""``ragidx sync`` and ``ragidx sources`` through ``ragidx.cli.main`` with a real ragidx.toml, folder and stores (the
embedding model is the hashed one: the commands, not the model, are tested)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingestion.sync import cli as sync_cli
from ragidx.cli import _settings, main
from ragidx.engine import Engine
from tests.fakes.hash_embedding import HashEmbedding


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    docs = tmp_path / "docs"
    (docs / "guide").mkdir(parents=True)
    for i in range(3):
        (docs / "guide" / f"g{i}.md").write_text(f"# Guide {i}\n\nHow to do thing {i}. It takes three steps.\n")
    config = tmp_path / "ragidx.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\n'
        f'[[sources]]\nname = "handbook"\nkind = "folder"\npath = "{docs}"\nschedule = "6h"\n'
        f'[[sources]]\nname = "offline"\nkind = "folder"\npath = "{tmp_path / "unmounted"}"\n'
    )
    monkeypatch.setenv("RAGIDX_CONFIG", str(config))
    monkeypatch.setattr(sync_cli, "_engine", lambda args: Engine(_settings(args), embed_model=HashEmbedding(dim=32)))
    return tmp_path


def json_lines(text: str) -> dict[str, dict[str, object]]:
    rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    return {str(r["name"]): r for r in rows}


def test_sync_json_counts_and_exit_status(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sync", "handbook", "--json"]) == 0
    first = json_lines(capsys.readouterr().out)["handbook"]
    assert (first["new"], first["unchanged"], first["deleted"], first["failed"]) == (3, 0, 0, 0)
    assert int(str(first["chunks_embedded"])) >= 3 and "seconds" in first
    assert {i["key"]: i["what"] for i in first["items"]} == {  # type: ignore[attr-defined]
        "guide/g0.md": "new",
        "guide/g1.md": "new",
        "guide/g2.md": "new",
    }

    (project / "docs" / "guide" / "g1.md").unlink()
    assert main(["sync", "--json"]) == sync_cli.SOURCE_FAILED  # the unmounted folder
    reports = json_lines(capsys.readouterr().out)
    assert (reports["handbook"]["deleted"], reports["handbook"]["chunks_embedded"]) == (1, 0)
    assert reports["offline"]["status"] == "failed" and "does not exist" in str(reports["offline"]["error"])


def test_sync_prints_counts_and_items(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sync", "handbook", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("handbook: 3 new, 0 changed, 0 deleted, 0 failed; ")
    assert "  new      guide/g0.md" in out


def test_sync_of_an_unknown_source_names_the_sources(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sync", "handbok"]) == 1
    assert "no source named 'handbok'; the sources are: handbook, offline" in capsys.readouterr().err


def test_sources_lists_each_source_with_its_last_sync(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sources"]) == 0
    listed = capsys.readouterr().out
    assert "handbook (folder, " in listed and ", every 6h): never synced" in listed
    main(["sync", "handbook", "--quiet"])
    capsys.readouterr()
    assert main(["sources", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    last = rows["handbook"]["last_sync"]
    assert (last["status"], last["new"], last["failures"]) == ("ok", 3, [])
    assert rows["offline"]["last_sync"] is None and rows["handbook"]["running"] is False
