"""Prompt-reading (prefill) and writing (decode) speed of the local model's llama.cpp runtime, in-process.

Reads the same real prompt (the bundled sample KB's text, cut to ``--tokens`` of the model's own tokens) from
an empty cache, then writes ``--write`` tokens greedily, ``--repeats`` times per model, the models interleaved so
the machine's drift hits all alike. ``--quantize Q4_0,Q8_0`` also measures the packaged weights re-quantized by
llama.cpp's own quantizer into a temporary folder (a second rounding of every weight: speed only, the answers'
quality is not measured here). Run it on an idle machine; prints ONE JSON line.

    python benchmarks/runtime_speed.py --tokens 1000 --quantize Q4_0,Q8_0
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ragidx.evaluation.answers import machine_line  # noqa: E402
from ragidx.providers.local_llm import assemble_gguf  # noqa: E402

SAMPLE = ROOT / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"


def quantize(source: Path, target: Path, ftype: str) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.allow_requantize = True
    if llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama.cpp could not quantize {source} to {ftype}")


def measure(path: Path, n_prompt: int, n_write: int, threads: int) -> tuple[float, float]:
    """(prompt tokens/s, written tokens/s) of one read-then-write from an empty cache."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), n_ctx=n_prompt + n_write + 64, n_threads=threads, verbose=False)
    tokens = llm.tokenize(SAMPLE.read_text(encoding="utf-8").encode())[:n_prompt]
    t0 = time.perf_counter()
    llm.eval(tokens)
    prefill = len(tokens) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(n_write):
        llm.eval([llm.sample(temp=0.0)])
    decode = n_write / (time.perf_counter() - t0)
    llm.close()
    return prefill, decode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-1.5b", help="a packaged model name or a .gguf path")
    parser.add_argument("--tokens", type=int, default=1000, help="prompt tokens to read")
    parser.add_argument("--write", type=int, default=24, help="tokens to write")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quantize", default="", help="also re-quantized copies, e.g. Q4_0,Q8_0")
    args = parser.parse_args(argv)
    source = Path(args.model) if args.model.endswith(".gguf") else assemble_gguf(args.model)
    result: dict[str, Any] = {"benchmark": "runtime_speed", "model": args.model, "prompt_tokens": args.tokens}
    with tempfile.TemporaryDirectory() as tmp:
        variants = {"packaged": source}
        for ftype in filter(None, args.quantize.split(",")):
            variants[ftype] = Path(tmp) / f"{ftype}.gguf"
            quantize(source, variants[ftype], ftype)
        sizes = {name: round(path.stat().st_size / 1e6) for name, path in variants.items()}
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        for _ in range(args.repeats):
            for name, path in variants.items():
                runs[name].append(measure(path, args.tokens, args.write, args.threads))
    for name, pairs in runs.items():
        result[name] = {
            "prefill_tps_median": round(statistics.median(p for p, _ in pairs), 1),
            "prefill_tps": [round(p, 1) for p, _ in pairs],
            "decode_tps_median": round(statistics.median(d for _, d in pairs), 1),
            "size_mb": sizes[name],
        }
    result["threads"] = args.threads
    result["machine"] = machine_line()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
