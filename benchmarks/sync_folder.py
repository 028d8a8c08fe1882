"""A folder kept in sync: what the first sync, a second one with nothing changed, and a small edit cost. One JSON line.

    nice python benchmarks/sync_folder.py [--docs 200] [--kb ragidx/data/kb/libreoffice_en_sample.jsonl]
                                          [--embed default|hash]

The folder holds the first ``--docs`` articles of a JSONL knowledge base (by default the bundled LibreOffice help
sample), one Markdown file each in a folder per product, and is synced by the sync runner
(``ingestion.sync.runner``) into a fresh data folder with the default embedding model (``--embed hash``: the
tests' hashed one, for the runner's own overhead):

1. ``first``: files, chunks embedded, seconds;
2. ``unchanged``: the same again with nothing changed: ``chunks_embedded`` must be 0, ``time_share`` (its seconds
   over the first's) at most 0.05;
3. ``changes``: 3 files changed (a paragraph added), 2 deleted, 1 added: the counts must be exactly 3 / 2 / 1,
   and only the changed and added files embedded;
4. ``moved``: one file moved to another folder: 1 moved, 0 embedded.

``ok`` is true when every must above holds. Timings depend on the machine's load (quote ``uptime`` with them).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingestion.sync.config import SourceConfig  # noqa: E402
from ingestion.sync.runner import SyncReport, SyncRunner  # noqa: E402
from ragidx.config import Settings  # noqa: E402
from ragidx.engine import Engine  # noqa: E402


def write_folder(kb: Path, folder: Path, n: int) -> list[Path]:
    """The first ``n`` articles of ``kb`` as Markdown files under ``folder`` (a subfolder per id prefix)."""
    paths = []
    with kb.open() as fh:
        for line in fh:
            if len(paths) >= n:
                break
            article = json.loads(line)
            kb_id = str(article["id"])
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", kb_id).strip("_") or f"a{len(paths)}"
            path = folder / (kb_id.split("/")[0] or "misc") / f"{name}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# {article.get('title') or name}\n\n{article['text']}\n")
            paths.append(path)
    return paths


def figures(report: SyncReport) -> dict[str, Any]:
    d = report.as_dict(items=False)
    keys = ("new", "changed", "unchanged", "moved", "deleted", "failed", "chunks_embedded", "chunks_reused", "seconds")
    return {k: d[k] for k in keys}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--docs", type=int, default=200)
    p.add_argument("--kb", type=Path, default=Path("ragidx/data/kb/libreoffice_en_sample.jsonl"))
    p.add_argument("--embed", choices=["default", "hash"], default="default")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "docs"
        paths = write_folder(args.kb, folder, args.docs)
        source = SourceConfig(name="docs", kind="folder", path=folder)
        settings = Settings(data_dir=Path(tmp) / "data", sources=[source])
        embed = None
        if args.embed == "hash":
            from tests.fakes.hash_embedding import HashEmbedding

            embed = HashEmbedding(dim=384)
        with Engine(settings, embed_model=embed) as engine:
            runner = SyncRunner(engine)
            engine.embed_model  # noqa: B018  (the model loads before the clock starts)
            first = runner.sync(source)
            unchanged = runner.sync(source)

            for path in paths[:3]:
                path.write_text(path.read_text() + "\nA paragraph added since the last sync.\n")
            for path in paths[3:5]:
                path.unlink()
            (folder / "misc").mkdir(exist_ok=True)
            (folder / "misc" / "new.md").write_text("# A new page\n\nWritten after the first sync.\n")
            time.sleep(0.01)
            changes = runner.sync(source)

            moved_to = folder / "archive" / paths[5].name
            moved_to.parent.mkdir(exist_ok=True)
            paths[5].rename(moved_to)
            moved = runner.sync(source)

    out = {
        "benchmark": "sync_folder",
        "embed": args.embed,
        "files": len(paths),
        "first": figures(first),
        "unchanged": {**figures(unchanged), "time_share": round(unchanged.seconds / first.seconds, 4)},
        "changes": figures(changes),
        "moved": figures(moved),
    }
    c, m = out["changes"], out["moved"]
    out["ok"] = (
        first.count("new") == len(paths)
        and unchanged.chunks_embedded == 0
        and out["unchanged"]["time_share"] <= 0.05
        and (c["changed"], c["deleted"], c["new"], c["failed"]) == (3, 2, 1, 0)
        and (m["moved"], m["new"], m["deleted"], m["chunks_embedded"]) == (1, 0, 0, 0)
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
