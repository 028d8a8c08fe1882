"""``ragidx ingest`` as a user reads it: what was left out and why, files gone, and a full disk in one paragraph."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest

from ragidx.cli import INGEST_SOME_FAILED, main


def _jsonl(path: Path, *rows: tuple[str, str]) -> str:
    path.write_text("".join(json.dumps({"id": k, "title": k, "text": t}) + "\n" for k, t in rows), encoding="utf-8")
    return str(path)


def test_ingest_reports_conflicts_refused_widening_and_files_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path / "data")
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a.md", "b.md"):
        (docs / name).write_text(f"# {name}\n\nPrinting labels, page {name}.\n")
    assert main(["--data-dir", data, "ingest", str(docs), "--quiet"]) == 0
    (docs / "b.md").unlink()
    capsys.readouterr()
    assert main(["--data-dir", data, "ingest", str(docs), "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["missing"] == 1
    assert f"ragidx: 1 article came from files that are gone; `ragidx ingest {docs} --prune` deletes them" in err

    first = _jsonl(tmp_path / "a.jsonl", ("k1", "Refunds take five days."), ("k2", "Printing labels."))
    assert main(["--data-dir", data, "ingest", first, "--quiet"]) == 0
    restricted = json.dumps({"id": "k2", "text": "Printing labels.", "allowed": ["group:hr"]})
    (tmp_path / "a.jsonl").write_text((tmp_path / "a.jsonl").read_text().splitlines()[0] + "\n" + restricted + "\n")
    assert main(["--data-dir", data, "ingest", first, "--quiet"]) == 0
    (tmp_path / "a.jsonl").write_text((tmp_path / "a.jsonl").read_text().replace(', "allowed": ["group:hr"]', ""))
    second = _jsonl(tmp_path / "b.jsonl", ("k1", "Another text for k1."), ("k3", "Shipping is free."))
    capsys.readouterr()
    assert main(["--data-dir", data, "ingest", second, "--quiet"]) == INGEST_SOME_FAILED
    out, err = capsys.readouterr()
    assert json.loads(out)["conflicts"] == [{"kb_id": "k1", "owner": "a.jsonl"}] and json.loads(out)["new"] == 1
    assert "skipped k1: its id belongs to another source ('a.jsonl'), left as it is; --replace replaces it" in err
    assert main(["--data-dir", data, "ingest", first, "--quiet"]) == INGEST_SOME_FAILED
    out, err = capsys.readouterr()
    assert json.loads(out)["widening_refused"] == ["k2"]
    assert "skipped k2: this would let more people read it than before" in err and "--allow-widening" in err
    assert main(["--data-dir", data, "ingest", first, "--quiet", "--allow-widening"]) == 0
    assert json.loads(capsys.readouterr().out)["widened_ids"] == ["k2"]
    assert main(["--data-dir", data, "ingest", second, "--quiet", "--replace"]) == 0


def test_a_full_disk_is_one_paragraph_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragidx.stores.lancedb_store import LanceDBChunkStore

    def full(self: Any, nodes: Any, **kwargs: Any) -> list[str]:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(LanceDBChunkStore, "add", full)
    kb = _jsonl(tmp_path / "kb.jsonl", ("k1", "Refunds take five days."))
    assert main(["--data-dir", str(tmp_path / "data"), "ingest", kb, "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("ragidx: ingest stopped: no space is left on the disk where the index is written")
    assert "Nothing is lost" in err and "Free space on that disk" in err
