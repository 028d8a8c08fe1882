"""Two engines over one data folder, as ``ragidx serve`` and a ``ragidx ingest`` in another process are: what one
writes, the other's searches find within ``READ_CONSISTENCY_S`` seconds, without a restart."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ragidx.config import Settings
from ragidx.stores.lancedb_store import READ_CONSISTENCY_S
from tests.dashboard.fakes import make_engine


def test_a_running_engine_finds_what_another_engine_ingests(tmp_path: Path, writer_kb_file: str) -> None:
    settings = Settings(data_dir=tmp_path / "kb")
    late = tmp_path / "late.jsonl"
    late.write_text(
        json.dumps({"id": "ferns", "title": "Watering ferns", "url": "", "text": "Water ferns twice a week."}) + "\n",
        encoding="utf-8",
    )
    with make_engine(settings) as serving, make_engine(settings) as ingesting:
        assert ingesting.ingest(writer_kb_file).new == 26
        assert "ferns" not in [a.kb_id for a in serving.retrieve("watering ferns", top_k=3)]  # the table is open
        assert ingesting.ingest(str(late)).new == 1
        time.sleep(READ_CONSISTENCY_S + 0.2)
        assert "ferns" in [a.kb_id for a in serving.retrieve("watering ferns", top_k=3)]
