"""Two-turn conversations: is the second question answered in the light of the first?

Each conversation of a JSONL file (``{"id", "turns": [{"question", "answers", "kind"}], "gold_kb_ids"}``; ``kind``:
``first``, ``follow-up`` (leans on the question before it: "And how do I turn that off again?") or ``switch``
(changes the subject)) runs as one ragidx session (``Engine.ask(..., session_id=...)``), with the configured
model. A turn is right when its answer contains one of its ``answers`` (scored as ``ragidx eval answers`` scores
containment) and is not "not found"; ``gold_kb_ids`` name the article of the second turn's answer. Prints ONE JSON
line: right answers per kind of turn, and seconds per turn.

    python benchmarks/conversations.py --kb ragidx/data/kb/libreoffice_en_sample.jsonl --data-dir DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ragidx.config import Settings  # noqa: E402
from ragidx.engine import Engine  # noqa: E402
from ragidx.evaluation.answers import contains_answer, machine_line  # noqa: E402

DEFAULT = ROOT / "ragidx" / "evaluation" / "data" / "conversations_libreoffice_en.jsonl"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kb", type=Path, required=True, help="ingested first into an empty index")
    parser.add_argument("--data-dir", type=Path, required=True, help="where the index lives (reused)")
    parser.add_argument("--conversations", type=Path, default=DEFAULT)
    parser.add_argument("--out", type=Path, default=None, help="one JSON row per turn")
    args = parser.parse_args(argv)
    conversations = [json.loads(line) for line in args.conversations.read_text(encoding="utf-8").splitlines() if line]
    rows: list[dict[str, Any]] = []
    with Engine(Settings(data_dir=args.data_dir)) as engine:
        if engine.article_store.count() == 0:
            engine.ingest(args.kb)
        for conversation in conversations:
            for n, turn in enumerate(conversation["turns"], start=1):
                t0 = time.perf_counter()
                answer = engine.ask(turn["question"], session_id=conversation["id"])
                seconds = time.perf_counter() - t0
                right = not answer.not_found and contains_answer(answer.text, turn["answers"])
                rows.append(
                    {"id": conversation["id"], "turn": n, "kind": turn["kind"], "right": right,
                     "not_found": answer.not_found, "seconds": round(seconds, 2), "queries": answer.queries,
                     "cited": [c.kb_id for c in answer.citations], "text": answer.text}
                )  # fmt: skip
    result: dict[str, Any] = {"benchmark": "conversations", "conversations": len(conversations), "turns": len(rows)}
    for kind in dict.fromkeys(r["kind"] for r in rows):
        of_kind = [r for r in rows if r["kind"] == kind]
        result[kind] = {"right": sum(r["right"] for r in of_kind), "of": len(of_kind)}
    result["p50_s"] = round(statistics.median(r["seconds"] for r in rows), 2) if rows else None
    result["machine"] = machine_line()
    if args.out:
        args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
