"""Prompt-lookup decoding on a question set, with it and without: ``benchmarks/decoding_ab.py`` over
``[llm] prompt_lookup`` (``--tokens 0,8``; 0 is off, and the reference). Prints ONE JSON line.

    python benchmarks/prompt_lookup.py --tokens 0,8 -- --kb ragidx/data/kb/libreoffice_en_sample.jsonl \
        --questions ragidx/evaluation/data/answers_libreoffice_en.jsonl --data-dir /tmp/pl
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import decoding_ab  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    own, rest = (args[: args.index("--")], args[args.index("--") :]) if "--" in args else (args, [])
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--tokens", default="0,8", help="prompt_lookup settings to compare (first: reference)")
    known, others = parser.parse_known_args(own)
    values = ["--setting", "prompt_lookup", "--values", known.tokens]
    return decoding_ab.main([*values, *others, *rest], label="prompt_lookup")


if __name__ == "__main__":
    raise SystemExit(main())
