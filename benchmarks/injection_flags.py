"""Injection flags on whole knowledge bases (issue 48): how many articles the ingest-time detector flags.

Prints ONE JSON line: per knowledge-base file, the articles read, the articles flagged
(``ragidx.safety.injection.injection_kinds``, what ingest records as ``injection_flags``), their share, the flags
by ``where:kind`` and the seconds the detector took. On help text every flag is a false flag, so this is the
detector's false-positive figure; ``--show`` lists each flagged article with the flagged sentences (stderr),
to read them by hand.

    python benchmarks/injection_flags.py ragidx/data/kb/*.jsonl /work/shared/data/kb/*.jsonl [--show]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ragidx.article import Article  # noqa: E402
from ragidx.evaluation.answers import machine_line  # noqa: E402
from ragidx.safety.injection import find_injections, injection_kinds, kinds_of, url_words  # noqa: E402


def _articles(path: Path) -> list[Article]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            out.append(Article(d["id"], d.get("title", ""), d.get("url", ""), d.get("text", ""), d.get("lang")))
    return out


def _show(article: Article, flags: list[str]) -> None:
    spans = [f"title: {article.title}"] if kinds_of(article.title) else []
    spans += [f"url: {article.url}"] if kinds_of(url_words(article.url)) else []
    spans += [f"text ({i.kind}): {' '.join(i.text.split())[:300]}" for i in find_injections(article.content)]
    print(json.dumps({"kb_id": article.kb_id, "flags": flags, "spans": spans}, ensure_ascii=False), file=sys.stderr)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kb", nargs="+", type=Path, help="knowledge-base JSONL files (id, title, url, text, lang)")
    p.add_argument("--show", action="store_true", help="each flagged article and its flagged spans, on stderr")
    args = p.parse_args()
    result: dict[str, object] = {"benchmark": "injection_flags"}
    for path in args.kb:
        articles = _articles(path)
        t0 = time.perf_counter()
        flagged = [(a, injection_kinds(a)) for a in articles]
        flagged = [(a, f) for a, f in flagged if f]
        seconds = time.perf_counter() - t0
        if args.show:
            for a, f in flagged:
                _show(a, f)
        result[path.name] = {
            "articles": len(articles),
            "flagged": len(flagged),
            "share": round(len(flagged) / len(articles), 4) if articles else 0.0,
            "by_flag": dict(Counter(x for _, f in flagged for x in f).most_common()),
            "seconds": round(seconds, 1),
        }
    result["machine"] = machine_line()
    print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
