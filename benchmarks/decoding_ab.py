"""One setting of the local model's decoding against another on a question set: written tokens/s, time per answer
and the answers.

Runs ``ragidx eval answers`` once per value of an ``[llm]`` setting (``--setting split_decode --values false,true``;
the first value is the reference) on the same questions and index, one after the other (never two model runs at
once), and prints ONE JSON line: per value, the writing speed (completion tokens over the answer call's time after
its first token, summed over answers), p50 and p95 seconds per question, the time to the first answer token,
containment; and how many answers are the same text as with the reference. The machine's load before and after.

    python benchmarks/decoding_ab.py --setting split_decode --values false,true -- \
        --kb ragidx/data/kb/libreoffice_en_sample.jsonl \
        --questions ragidx/evaluation/data/answers_libreoffice_en.jsonl --data-dir /tmp/ab

``benchmarks/prompt_lookup.py --tokens 0,8 -- …`` is this with ``--setting prompt_lookup --values 0,8``.
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
        "ttft_p50_s": round(statistics.median(ttft), 2) if (ttft := _ttft(rows)) else None,
        "containment": round(sum(bool(r.get("contained")) for r in answerable) / len(answerable), 4)
        if answerable
        else None,
    }


def _ttft(rows: list[dict[str, Any]]) -> list[float]:
    return [float(r["ttft_s"]) for r in rows if r.get("ttft_s") is not None]


def main(argv: Sequence[str] | None = None, *, label: str | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    eval_args = args_in[args_in.index("--") + 1 :] if "--" in args_in else []
    own = args_in[: args_in.index("--")] if "--" in args_in else args_in
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setting", required=True, help="an [llm] setting, e.g. split_decode or prompt_lookup")
    parser.add_argument("--values", required=True, help="its values to compare, comma-separated (first: reference)")
    parser.add_argument("--out-dir", type=Path, default=None, help="keep each run's rows here")
    args = parser.parse_args(own)
    values = args.values.split(",")
    name = label or args.setting
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix=f"{name}-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"benchmark": name, "eval_args": eval_args, "load_before": os.getloadavg()}
    texts: dict[str, dict[str, str]] = {}
    for value in values:
        rows_path = out_dir / f"rows-{value}.jsonl"
        env = dict(os.environ, HF_HUB_OFFLINE="1", **{f"RAGIDX_LLM__{args.setting.upper()}": value})
        cmd = [sys.executable, "-m", "ragidx.cli", "eval", "answers", *eval_args, "--out", str(rows_path)]
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"ragidx eval answers failed with {args.setting}={value}:\n{done.stderr[-2000:]}", file=sys.stderr)
            return 1
        rows = [json.loads(line) for line in rows_path.read_text(encoding="utf-8").splitlines() if line.strip()]
        texts[value] = {r["id"]: r.get("model_text") or r.get("text") or "" for r in rows}
        result[f"{args.setting}={value}"] = _figures(rows)
    reference = texts[values[0]]
    for value in values[1:]:
        same = sum(texts[value].get(qid) == text for qid, text in reference.items())
        result[f"{args.setting}={value}"][f"same_text_as_{values[0]}"] = f"{same} of {len(reference)}"
    result["load_after"] = os.getloadavg()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
