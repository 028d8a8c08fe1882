"""A real engine (LanceDB, article store, retriever chain, agent, budget) over the 26 Writer articles,
with hash embeddings and a scripted chat model, for the LlamaIndex-surface tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ragidx.config import Settings
from ragidx.engine import Engine
from tests.dashboard.fakes import make_engine


def writer_engine(data_dir: Path, kb_file: str) -> Iterator[Engine]:
    with make_engine(Settings(data_dir=data_dir)) as engine:
        report = engine.ingest(kb_file)
        assert report.new == 26 and not report.errors
        yield engine
