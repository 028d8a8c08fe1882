"""Dashboard test fixtures: a fresh data dir and the scripted-LLM engine factory for every test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import streamlit as st

from ragidx.dashboard.engines import FACTORY_ENV

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "streamlit_app.py")


@pytest.fixture
def dashboard_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The dashboard runs on ``tests.dashboard.fakes:make_engine`` over an empty store in ``tmp_path``."""
    data_dir = tmp_path / "data"
    monkeypatch.setenv(FACTORY_ENV, "tests.dashboard.fakes:make_engine")
    monkeypatch.setenv("RAGIDX_DATA_DIR", str(data_dir))
    monkeypatch.delenv("RAGIDX_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./ragidx.toml of the developer's
    yield data_dir
    st.cache_resource.clear()  # closes the cached engines (on_release)


@pytest.fixture
def kb_dir(dashboard_env: Path, writer_kb_file: str) -> Path:
    """The data dir with the 26 Writer articles already ingested (hash embeddings)."""
    from ragidx.config import Settings
    from tests.dashboard.fakes import make_engine

    with make_engine(Settings(data_dir=dashboard_env)) as engine:
        report = engine.ingest(writer_kb_file)
    assert report.new == 26 and not report.errors
    return dashboard_env


@pytest.fixture
def beir_folder(tmp_path: Path, writer_kb_file: str) -> Path:
    """A tiny BEIR folder: the Writer articles as corpus, three queries judged against their article."""
    import json

    folder = tmp_path / "beir_writer"
    (folder / "qrels").mkdir(parents=True)
    docs = [json.loads(line) for line in Path(writer_kb_file).read_text(encoding="utf-8").splitlines()]
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps({"_id": d["id"], "title": d["title"], "text": d["text"]}) + "\n")
    titles = ("Creating a Table of Contents", "Page Numbers", "Printing a Brochure")
    picked = [d for d in docs if d["title"] in titles]
    assert len(picked) == len(titles)
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for i, d in enumerate(picked):
            fh.write(json.dumps({"_id": f"q{i}", "text": d["title"].lower()}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"] + [f"q{i}\t{d['id']}\t1" for i, d in enumerate(picked)]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder
