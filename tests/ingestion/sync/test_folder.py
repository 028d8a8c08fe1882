"""The folder source's scan over real files: patterns, file types, links out of the folder, the mtime shortcut,
JSONL lines as items, and a missing folder that deletes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ingestion.sync.base import Failed, Fetched, ItemState, Skipped, SourceUnavailable, Unchanged
from ingestion.sync.config import SourceConfig
from ingestion.sync.folder import FolderReader, matches


@pytest.mark.parametrize(
    ("path", "glob", "expected"),
    [
        ("guide/a/b.md", "guide/**/*.md", True),
        ("guide/b.md", "guide/**/*.md", True),
        ("other/b.md", "guide/**/*.md", False),
        ("guide/a/b.md", "guide/*.md", False),
        ("drafts/x/y.md", "drafts/", True),
        ("x/notes.tmp", "*.tmp", True),
        ("a.md", "?.md", True),
    ],
)
def test_globs(path: str, glob: str, expected: bool) -> None:
    assert matches(path, glob) is expected


def reader(folder: Path, **fields: object) -> FolderReader:
    return FolderReader(SourceConfig(name="docs", kind="folder", path=folder, **fields))  # type: ignore[arg-type]


def test_scan_reports_every_file(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "guide").mkdir(parents=True)
    (docs / "guide" / "a.md").write_text("# A\n\nAbout A.\n")
    (docs / "guide" / "draft.md").write_text("# Draft\n\nNot yet.\n")
    (docs / "guide" / "empty.md").write_text("")
    (docs / "logo.png").write_bytes(b"\x89PNG\r\n")
    (docs / ".git").mkdir()
    (docs / ".git" / "HEAD.md").write_text("ref")
    (tmp_path / "secret.md").write_text("# Secret\n\nNot in the folder.\n")
    os.symlink(tmp_path / "secret.md", docs / "guide" / "link.md")
    (docs / "faq.jsonl").write_text(
        '{"id": "q1", "title": "Q1", "text": "Answer one."}\n{"id": "q2", "text": "Two."}\n'
    )

    events = {e.key: e for e in reader(docs, exclude=["draft.md"]).scan({})}
    assert sorted(events) == ["faq.jsonl:q1", "faq.jsonl:q2", "guide/a.md", "guide/draft.md", "guide/empty.md",
                              "guide/link.md", "logo.png"]  # fmt: skip
    assert isinstance(events["guide/a.md"], Fetched) and events["guide/a.md"].article.kb_id == "guide/a.md"
    assert isinstance(events["faq.jsonl:q2"], Fetched) and events["faq.jsonl:q2"].article.kb_id == "q2"
    skipped = {k: e.reason for k, e in events.items() if isinstance(e, Skipped)}
    assert skipped["guide/draft.md"] == "exclude pattern" and skipped["logo.png"] == "file type .png is not read"
    assert "outside the folder" in skipped["guide/link.md"]
    assert isinstance(events["guide/empty.md"], Failed) and "empty file" in events["guide/empty.md"].reason


def test_a_file_with_the_same_size_and_time_is_not_read(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nAbout A.\n")
    first = next(iter(reader(docs).scan({})))
    assert isinstance(first, Fetched) and first.state.lastmod
    state = ItemState("a.md", "a.md", "hash", lastmod=first.state.lastmod)
    assert isinstance(next(iter(reader(docs).scan({"a.md": state}))), Unchanged)
    (docs / "a.md").write_text("# A\n\nAbout A, longer now.\n")
    assert isinstance(next(iter(reader(docs).scan({"a.md": state}))), Fetched)


def test_a_jsonl_line_that_cannot_be_read_keeps_the_files_other_lines(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "faq.jsonl").write_text('{"id": "q1", "text": "One."}\n{not json}\n')
    previous = {k: ItemState(k, k.split(":")[1], "h", lastmod="old") for k in ("faq.jsonl:q1", "faq.jsonl:q2")}
    events = {e.key: e for e in reader(docs).scan(previous)}
    assert isinstance(events["faq.jsonl:q1"], Fetched) and isinstance(events["faq.jsonl#line=2"], Failed)
    assert isinstance(events["faq.jsonl:q2"], Failed)  # perhaps the broken line: never deleted for it


def test_a_missing_folder_stops_the_sync(tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailable, match="does not exist or is not a folder"):
        list(reader(tmp_path / "unmounted").scan({}))
