"""Syncs a folder (or website) source slowly, announcing each embedding call, so a test can SIGKILL it mid-sync.

python -m tests.ingestion.sync.sync_worker DATA_DIR (FOLDER | START_URL) [--articles URL]

Prints ``embedding N`` before each embedding call and, at the end, the report's JSON on one line
(``report {...}``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ingestion.sync.config import SourceConfig
from ingestion.sync.runner import SyncRunner
from ragidx.config import Settings
from ragidx.engine import Engine
from tests.ingestion.crash_worker import AnnouncingEmbedding


def engine_for(data_dir: Path, folder: Path | str, articles: str | None = None, embed: object | None = None) -> Engine:
    """An engine over ``data_dir`` (and the ledger at ``articles``) with one source named ``docs``: the folder, or
    the website of ``folder`` when it is an http:// URL (its sitemap, or crawled from it)."""
    if str(folder).endswith("sitemap.xml"):
        source = SourceConfig(name="docs", kind="website", sitemap=str(folder))
    elif str(folder).startswith("http://"):
        source = SourceConfig(name="docs", kind="website", url=str(folder))
    else:
        source = SourceConfig(name="docs", kind="folder", path=Path(folder))
    settings = Settings(
        data_dir=data_dir,
        sources=[source],
        chunk_tokens=40,
        chunk_overlap_tokens=0,
        **({"article_store_url": articles} if articles else {}),
    )
    return Engine(settings, embed_model=embed or AnnouncingEmbedding(dim=32))  # type: ignore[arg-type]


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("data_dir", type=Path)
    p.add_argument("folder")
    p.add_argument("--articles", default=None)
    args = p.parse_args()
    engine = engine_for(args.data_dir, args.folder, args.articles)
    report = SyncRunner(engine, batch_articles=3).sync(engine.settings.sources[0])
    print("report", json.dumps(report.as_dict(items=False)), flush=True)
