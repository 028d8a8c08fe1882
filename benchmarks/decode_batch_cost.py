"""What one decoding step costs the local model by batch size: whether prompt-lookup decoding can pay on this machine.

Prompt-lookup decoding (``[llm] prompt_lookup``) reads the model's next token together with up to N drafted tokens
in one batch and keeps the drafted ones the model would have written. It saves time only where a batch of k + 1
tokens costs much less than k + 1 single steps (decoding bound by memory, not by arithmetic). This script reads a
prompt of real article text into the model's cache, then times the decode of batches of 1, 2, … tokens after it
(every token's logits computed, as a draft's verification needs; the cache rolled back after each), median of
``--repeats``, and prints ONE JSON line: milliseconds per batch, the same as a multiple of one token's step, and the
tokens a draft of k must have accepted on average to break even (``k + 1`` tokens' cost over one token's, minus the
one token a step writes anyway).

    HF_HUB_OFFLINE=1 python benchmarks/decode_batch_cost.py --threads 2 --batches 1,2,4,8,12,16,32
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="a .gguf file (default: the packaged 1.5B model)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", default="1,2,3,4,8,12,16,24,32", help="batch sizes to time (1 is the base)")
    parser.add_argument("--prompt-tokens", type=int, default=700, help="tokens in the cache before each batch")
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args(argv)
    from llama_cpp import Llama

    from ragidx.config import Settings
    from ragidx.providers.local_llm import assemble_gguf

    settings = Settings()
    path = args.model or assemble_gguf(settings.llm.model, settings.model_cache_dir)
    batches = sorted({1, *(int(b) for b in args.batches.split(","))})
    text = (ROOT / "ragidx/data/kb/libreoffice_en_sample.jsonl").read_text(encoding="utf-8")[:20_000]
    load_before = os.getloadavg()
    llama = Llama(str(path), n_ctx=args.prompt_tokens + max(batches) + 16, n_threads=args.threads, verbose=False)
    tokens = llama.tokenize(text.encode())
    if len(tokens) < args.prompt_tokens + max(batches):
        raise SystemExit("the sample text is shorter than --prompt-tokens plus the largest batch")
    llama.eval(tokens[: args.prompt_tokens])
    cached = llama.n_tokens
    ms: dict[int, float] = {}
    for size in batches:
        times = []
        for _ in range(args.repeats):
            llama._ctx.kv_cache_seq_rm(-1, cached, -1)
            llama._batch.set_batch(batch=tokens[cached : cached + size], n_past=cached, logits_all=True)
            started = time.perf_counter()
            llama._ctx.decode(llama._batch)
            times.append(time.perf_counter() - started)
        ms[size] = round(statistics.median(times) * 1000, 1)
    one = ms[1]
    print(
        json.dumps(
            {
                "benchmark": "decode_batch_cost",
                "model": path.name,
                "threads": args.threads,
                "prompt_tokens": cached,
                "ms_by_batch": ms,
                "times_one_token": {k: round(v / one, 2) for k, v in ms.items()},
                "break_even_accepted": {k - 1: round(v / one - 1, 2) for k, v in ms.items() if k > 1},
                "load_before": load_before,
                "load_after": os.getloadavg(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
