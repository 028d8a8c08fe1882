"""Does tiktoken, run on a GGUF vocabulary, tokenize exactly as llama.cpp does? And how much faster?

``GGUFTokenCounter`` counts the local model's tokens with tiktoken where ``gguf_encoding`` says the
vocabulary allows it (Qwen2's). This compares the two token for token over every article of one or
more knowledge-base JSONL files (``text``, ``title``, and ``text`` as a JSON string, the way tool
results carry it) and prints ONE JSON line: texts, tokens, mismatching texts (the first few ids
listed), and the seconds each tokenizer took.

Run::

    python benchmarks/gguf_tokenizer.py ../shared/data/kb/*.jsonl --gguf-model qwen2.5-1.5b
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ragidx.providers.local_llm import assemble_gguf
from ragidx.providers.tokenizer import _llama_tokens, gguf_encoding, load_gguf_vocab


def compare(path: str, files: list[Path], limit: int | None) -> dict[str, Any]:
    started = time.perf_counter()
    enc = gguf_encoding(path)
    build_s = time.perf_counter() - started
    if enc is None:
        return {"benchmark": "gguf_tokenizer", "gguf": path, "supported": False}
    vocab = load_gguf_vocab(path)
    texts = tokens = 0
    mismatches: list[str] = []
    tiktoken_s = llama_s = 0.0
    for file in files:
        with open(file, encoding="utf-8") as f:
            for n, line in enumerate(f):
                if limit is not None and n >= limit:
                    break
                row = json.loads(line)
                for text in (row["text"], row["title"], json.dumps(row["text"], ensure_ascii=False)):
                    t0 = time.perf_counter()
                    ours = enc.encode_ordinary(text)
                    t1 = time.perf_counter()
                    theirs = _llama_tokens(vocab, text) if text else []
                    t2 = time.perf_counter()
                    tiktoken_s, llama_s = tiktoken_s + t1 - t0, llama_s + t2 - t1
                    texts, tokens = texts + 1, tokens + len(theirs)
                    if ours != theirs:
                        mismatches.append(f"{file.name}:{row.get('id', n)}")
    return {
        "benchmark": "gguf_tokenizer",
        "gguf": Path(path).name,
        "supported": True,
        "files": [f.name for f in files],
        "texts": texts,
        "tokens": tokens,
        "mismatching_texts": len(mismatches),
        "first_mismatches": mismatches[:5],
        "build_s": round(build_s, 2),
        "tiktoken_s": round(tiktoken_s, 2),
        "llama_cpp_s": round(llama_s, 2),
        "speedup": round(llama_s / tiktoken_s, 2) if tiktoken_s else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("files", type=Path, nargs="+", help="knowledge-base JSONL files (id, title, text)")
    parser.add_argument("--gguf-model", default="qwen2.5-1.5b", help="packaged local model or a .gguf path")
    parser.add_argument("--limit", type=int, default=None, help="articles per file (default: all)")
    args = parser.parse_args(argv)
    print(json.dumps(compare(str(assemble_gguf(args.gguf_model)), args.files, args.limit)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
