"""Prompt-lookup decoding on a question set: written tokens/s, time per answer and the answers, with it and without.

Runs ``ragidx eval answers`` once per setting of ``[llm] prompt_lookup`` (``--tokens 0,8``; 0 is off) on the same
questions and index, one after the other (never two model runs at once), and prints ONE JSON line: per setting,
the writing speed (completion tokens over the answer call's time after its first token, summed over answers),
p50 and p95 seconds per question, containment; and how many answers are the same text as with the first setting
(greedy decoding with exact verification should give the same text). The machine's load before and after.

    python benchmarks/prompt_lookup.py --tokens 0,8 -- --kb ragidx/data/kb/libreoffice_en_sample.jsonl \
        --questions ragidx/evaluation/data/answers_libreoffice_en.jsonl --data-dir /tmp/pl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def _figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    written = sum(r.get("completion_tokens") or 0 for r in rows)
    writing_s = 0.0
    for r in rows:
        timings = r.get("timings") or {}
        llm, ttft = timings.get("llm"), timings.get("answer_ttft")
        if llm is not None and ttft is not None:
            writing_s += max(0.0, float(llm) - float(ttft) - float(timings.get("answer_check") or 0.0))
    seconds = [float(r["seconds"]) for r in rows if r.get("seconds") is not None]
    answerable = [r for r in rows if r.get("answerable")]
    return {
        "questions": len(rows),
        "written_tokens": written,
        "written_tokens_per_s": round(written / writing_s, 1) if writing_s else None,
        "p50_s": round(statistics.median(seconds), 2) if seconds else None,
        "p95_s": _quantile(seconds, 0.95),
        "containment": round(sum(bool(r.get("contained")) for r in answerable) / len(answerable), 4)
        if answerable
        else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    eval_args = args_in[args_in.index("--") + 1 :] if "--" in args_in else []
    own = args_in[: args_in.index("--")] if "--" in args_in else args_in
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default="0,8", help="prompt_lookup settings to compare (first: reference)")
    parser.add_argument("--out-dir", type=Path, default=None, help="keep each run's rows here")
    args = parser.parse_args(own)
    settings = [int(t) for t in args.tokens.split(",")]
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="prompt-lookup-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"benchmark": "prompt_lookup", "eval_args": eval_args, "load_before": os.getloadavg()}
    texts: dict[int, dict[str, str]] = {}
    for tokens in settings:
        rows_path = out_dir / f"rows-{tokens}.jsonl"
        env = dict(os.environ, RAGIDX_LLM__PROMPT_LOOKUP=str(tokens), HF_HUB_OFFLINE="1")
        cmd = [sys.executable, "-m", "ragidx.cli", "eval", "answers", *eval_args, "--out", str(rows_path)]
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"ragidx eval answers failed with prompt_lookup={tokens}:\n{done.stderr[-2000:]}", file=sys.stderr)
            return 1
        rows = [json.loads(line) for line in rows_path.read_text(encoding="utf-8").splitlines() if line.strip()]
        texts[tokens] = {r["id"]: r.get("model_text") or r.get("text") or "" for r in rows}
        result[f"lookup_{tokens}"] = _figures(rows)
    reference = texts[settings[0]]
    for tokens in settings[1:]:
        same = sum(texts[tokens].get(qid) == text for qid, text in reference.items())
        result[f"lookup_{tokens}"][f"same_text_as_{settings[0]}"] = f"{same} of {len(reference)}"
    result["load_after"] = os.getloadavg()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
