"""multilingual-e5-small on onnxruntime at two precisions: the 4-bit graph (``q4``) and the default ``int8`` graph.

Prints ONE JSON line with

- ``speed``: chunks/s on the real chunks of ``make demo``'s bilingual sample (the ingestion chunker's, title line
  included, ``--chunks`` drawn evenly), embedded in calls of 16 texts as ingestion makes them: ``q4@32`` (the 4-bit
  graph in runs of up to 32 windows, as before), ``q4@1`` and ``int8@1`` (one text per run, now). The variants run
  interleaved (A, B, C, A, B, C ...) on the same chunks, each run with wall chunks/s, chunks per CPU-second of this
  process (all threads) and the load average before it: on a shared machine the per-CPU-second figures and the
  ratios are the robust ones;
- ``padding``: padded tokens over real tokens in runs of 32 (none in runs of one);
- ``cosine``: int8 against q4 vectors of the same chunks (min, p5, mean) per language, and of the queries;
- ``retrieval`` (with ``--kb-dir``): dense nDCG@10 per precision on two sets. ``parallel`` (where the precision
  was chosen): the 65 parallel LibreOffice questions over the gold articles and same-folder ones, one passage
  per article (``benchmarks/e5_engines.py``'s corpus), sets en, ru, mixed. ``answers`` (held out): the answer
  sets' questions with gold articles (``answers_libreoffice_{en,ru}.jsonl``: 26 en, 23 ru) over their gold
  articles and other articles of the same folders (``--articles`` per language, another draw), cut into chunks
  by the ingestion splitter (200 cl100k tokens, 32 overlap, title line), an article scored by its best chunk;
  sets en, ru, bilingual (both languages in one corpus).

Usage:
    HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE python benchmarks/e5_precision.py --threads 2 --chunks 256 \
        --rounds 2 --kb-dir ../shared/data/kb
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
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
SAMPLE = ROOT / "ragidx" / "data" / "kb"
DATA = ROOT / "ragidx" / "evaluation" / "data"
VARIANTS = (("q4", 32), ("q4", 1), ("int8", 1))
"""(precision, windows per run)."""
CALL = 16
"""Texts per call, as LlamaIndex hands them to the embedding model while ingesting."""


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def demo_chunks() -> tuple[list[str], list[str]]:
    """The texts ingestion embeds for ``make demo``'s sample (chunker, section tags, title line) and their languages."""
    from llama_index.core.schema import MetadataMode

    from ingestion.pipeline import Ingestor
    from ingestion.sources import read_source
    from ragidx.article import Article
    from ragidx.providers.e5_embedding import E5Embedding

    ingestor = Ingestor(None, None, E5Embedding())  # type: ignore[arg-type]  # only its chunker runs here
    nodes: list[Any] = [ingestor._document(a) for a in read_source(SAMPLE) if isinstance(a, Article)]
    for transform in ingestor.pipeline.transformations[:-1]:  # all but the embedding
        nodes = transform(nodes)
    return [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes], [n.metadata["language"] for n in nodes]


def _encode(encoder: Any, texts: list[str], call: int, *, query: bool = False) -> np.ndarray:
    return np.concatenate([encoder.encode(texts[i : i + call], query=query) for i in range(0, len(texts), call)])


def _padding(encoder: Any, texts: list[str], call: int, rows: int) -> float:
    lengths = [len(t) + 2 for t in encoder.token_ids(texts, query=False)]
    padded = 0
    for i in range(0, len(lengths), call):
        group = sorted(lengths[i : i + call], reverse=True)
        for j in range(0, len(group), rows):
            padded += group[j] * len(group[j : j + rows])
    return round(padded / sum(lengths), 3)


def speed(encoders: dict[str, Any], texts: list[str], langs: list[str], rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {f"{p}@{b}": [] for p, b in VARIANTS}
    vectors: dict[str, np.ndarray] = {}
    for encoder in encoders.values():
        encoder.encode(texts[:4])  # warm
    for _ in range(rounds):
        for precision, rows in VARIANTS:
            name = f"{precision}@{rows}"
            encoders[name].batch_size = rows
            load = _load()
            c0, t0 = time.process_time(), time.perf_counter()
            vectors[name] = _encode(encoders[name], texts, CALL)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            runs[name].append(
                {"chunks_s": round(len(texts) / wall, 2), "chunks_per_cpu_s": round(len(texts) / cpu, 2), "load": load}
            )
    out: dict[str, Any] = {"chunks": len(texts), "call": CALL, "runs": runs}
    best = {k: max(r["chunks_per_cpu_s"] for r in v) for k, v in runs.items()}
    wall = {k: max(r["chunks_s"] for r in v) for k, v in runs.items()}
    out["ratio_per_cpu_s"] = {
        "int8@1_over_q4@32": round(best["int8@1"] / best["q4@32"], 2),
        "int8@1_over_q4@1": round(best["int8@1"] / best["q4@1"], 2),
        "q4@1_over_q4@32": round(best["q4@1"] / best["q4@32"], 2),
    }
    out["ratio_wall_best"] = {"int8@1_over_q4@32": round(wall["int8@1"] / wall["q4@32"], 2)}
    out["padding_runs_of_32"] = _padding(encoders["q4@32"], texts, CALL, 32)
    cos = np.sum(vectors["q4@1"] * vectors["int8@1"], axis=1)
    out["q4_runs_of_32_vs_1_cosine_min"] = round(float(np.sum(vectors["q4@1"] * vectors["q4@32"], axis=1).min()), 5)
    mask = np.array(langs)
    out["cosine_int8_q4"] = {
        lang: {
            "min": round(float(cos[mask == lang].min()), 4),
            "p5": round(float(np.percentile(cos[mask == lang], 5)), 4),
            "mean": round(float(cos[mask == lang].mean()), 4),
        }
        for lang in ("en", "ru")
        if (mask == lang).any()
    }
    return out


def _ndcg(ranked: list[str], gold: set[str], k: int = 10) -> float:
    dcg = sum(1 / math.log2(i + 2) for i, p in enumerate(ranked[:k]) if p in gold)
    return dcg / sum(1 / math.log2(i + 2) for i in range(min(len(gold), k)))


def _rank(
    vec: dict[str, np.ndarray], ids: dict[str, list[str]], questions: dict[str, list[tuple[str, set[str]]]]
) -> dict[str, float]:
    """nDCG@10 per set: each language alone, and both in one corpus; an article ranks by its best passage."""
    out: dict[str, float] = {}
    for name, langs in (("en", ("en",)), ("ru", ("ru",)), ("mixed", ("en", "ru"))):
        all_ids = [f"{lang}:{i}" for lang in langs for i in ids[lang]]
        matrix = np.concatenate([vec[f"doc_{lang}"] for lang in langs])
        scores = []
        for lang in langs:
            sims = vec[f"q_{lang}"] @ matrix.T
            for qi, (_, gold) in enumerate(questions[lang]):
                ranked: list[str] = []
                for j in np.argsort(-sims[qi]):
                    if all_ids[j] not in ranked:
                        ranked.append(all_ids[j])
                    if len(ranked) == 10:
                        break
                scores.append(_ndcg(ranked, {f"{lang}:{g}" for g in gold}))
        out[name] = round(float(np.mean(scores)), 4)
    return out


def parallel_set(kb_dir: Path, per_lang: int, chars: int) -> tuple[dict, dict, dict]:
    from e5_engines import corpus

    docs, questions = corpus(kb_dir, per_lang, chars)
    texts = {lang: [t for _, t in docs[lang]] for lang in ("en", "ru")}
    ids = {lang: [p for p, _ in docs[lang]] for lang in ("en", "ru")}
    qs = {lang: [(q[f"question_{lang}"], set(q["gold_paths"])) for q in questions] for lang in ("en", "ru")}
    return texts, ids, qs


def answers_set(kb_dir: Path, per_lang: int, seed: int = 1) -> tuple[dict, dict, dict]:
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.utils import get_tokenizer

    splitter = SentenceSplitter(chunk_size=200, chunk_overlap=32, tokenizer=get_tokenizer(), paragraph_separator="\n\n")
    texts: dict[str, list[str]] = {}
    ids: dict[str, list[str]] = {}
    qs: dict[str, list[tuple[str, set[str]]]] = {}
    for lang in ("en", "ru"):
        rows = [json.loads(line) for line in (DATA / f"answers_libreoffice_{lang}.jsonl").read_text().splitlines()]
        qs[lang] = [(q["question"], set(q["gold_kb_ids"])) for q in rows if q.get("gold_kb_ids")]
        kb = {}
        for line in (kb_dir / f"libreoffice_{lang}.jsonl").read_text().splitlines():
            row = json.loads(line)
            kb[row["id"]] = row
        gold = sorted({g for _, golds in qs[lang] for g in golds})
        folders = {g.rsplit("/", 1)[0] for g in gold}
        near = sorted(k for k in kb if k.rsplit("/", 1)[0] in folders and k not in gold)
        random.Random(seed).shuffle(near)
        chosen = gold + near[: max(0, per_lang - len(gold))]
        pairs = [(k, f"title: {kb[k]['title']}\n\n{c}") for k in chosen for c in splitter.split_text(kb[k]["text"])]
        ids[lang], texts[lang] = [k for k, _ in pairs], [t for _, t in pairs]
    return texts, ids, qs


def retrieval(encoders: dict[str, Any], kb_dir: Path, per_lang: int, chars: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for set_name, (texts, ids, qs) in (
        ("parallel", parallel_set(kb_dir, per_lang, chars)),
        ("answers", answers_set(kb_dir, per_lang)),
    ):
        result: dict[str, Any] = {
            "passages": {lang: len(texts[lang]) for lang in texts},
            "questions": {lang: len(qs[lang]) for lang in qs},
        }
        vectors: dict[str, dict[str, np.ndarray]] = {}
        for precision, encoder in encoders.items():
            vec = {}
            for lang in ("en", "ru"):
                vec[f"doc_{lang}"] = _encode(encoder, texts[lang], CALL)
                vec[f"q_{lang}"] = encoder.encode([q for q, _ in qs[lang]], query=True)
            vectors[precision] = vec
            result[precision] = _rank(vec, ids, qs)
        result["delta_int8_minus_q4"] = {s: round(result["int8"][s] - result["q4"][s], 4) for s in result["q4"]}
        cos = np.concatenate(
            [np.sum(vectors["q4"][f"q_{x}"] * vectors["int8"][f"q_{x}"], axis=1) for x in ("en", "ru")]
        )
        result["query_cosine_min"] = round(float(cos.min()), 4)
        out[set_name] = result
    out["load_end"] = _load()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=256, help="demo chunks timed (drawn evenly; 0: all)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kb-dir", type=Path, default=None, help="folder with libreoffice_{en,ru}.jsonl (full KBs)")
    parser.add_argument("--articles", type=int, default=300, help="articles per language in the retrieval corpora")
    parser.add_argument("--chars", type=int, default=1000, help="characters of each article (parallel set)")
    parser.add_argument("--cache-dir", default=None, help="ONNX cache (default ~/.cache/ragidx/models)")
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    from ragidx.providers.e5_onnx import OnnxE5Encoder

    result: dict[str, Any] = {"benchmark": "e5_precision", "threads": args.threads, "cores": os.cpu_count()}
    result["load_start"] = _load()
    encoders: dict[str, Any] = {}
    load_s: dict[str, float] = {}
    for precision, rows in VARIANTS:
        encoder = OnnxE5Encoder(cache_dir=args.cache_dir, precision=precision, num_threads=args.threads)
        t0 = time.perf_counter()
        encoder.load()  # exports into the cache the first time
        load_s.setdefault(precision, round(time.perf_counter() - t0, 1))
        encoders[f"{precision}@{rows}"] = encoder
    result["load_s"] = load_s
    if not args.skip_speed:
        texts, langs = demo_chunks()
        if args.chunks and args.chunks < len(texts):
            step = len(texts) / args.chunks
            picked = [int(i * step) for i in range(args.chunks)]
            texts, langs = [texts[i] for i in picked], [langs[i] for i in picked]
        result["speed"] = speed(encoders, texts, langs, args.rounds)
    if args.kb_dir is not None:
        by_precision = {"q4": encoders["q4@1"], "int8": encoders["int8@1"]}
        result["retrieval"] = retrieval(by_precision, args.kb_dir, args.articles, args.chars)
    result["load_end"] = _load()
    print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
