"""Parallel English/Russian retrieval set: one question list, three BEIR folders.

The question file (``data/parallel_libreoffice.jsonl``) holds one question a line, asked in both
languages: ``{"id", "question_en", "question_ru", "gold_paths"}``. A gold path is the part of a
knowledge-base id after the source (``libreoffice-7.4-help-en:text/swriter/guide/x.html`` →
``text/swriter/guide/x.html``), the same in both languages, so each question is judged against the
English article in the English KB and the Russian article in the Russian KB. Three BEIR folders are
written under ``--out`` (the format ``ragidx.evaluation.retrieval.load_beir`` reads):

- ``en``: the English KB, the English questions, judged against the English articles;
- ``ru``: the same for Russian;
- ``mixed``: both KBs in one corpus, both question sets (ids ``<id>-en`` and ``<id>-ru``), each judged
  against the article of its own language, so a bilingual KB can be evaluated.

A gold path missing from either KB is a ``ValueError`` naming the question. One JSON line of counts
goes to stdout.

Run::

    python -m ragidx.evaluation.parallel --en ../shared/data/kb/libreoffice_en.jsonl \
        --ru ../shared/data/kb/libreoffice_ru.jsonl \
        --questions ragidx/evaluation/data/parallel_libreoffice.jsonl --out /tmp/parallel_libreoffice
    ragidx eval retrieval --beir /tmp/parallel_libreoffice/en
    ragidx eval retrieval --beir /tmp/parallel_libreoffice/ru
    ragidx eval retrieval --beir /tmp/parallel_libreoffice/mixed

Example:
    >>> kb_path({"id": "libreoffice-7.4-help-ru:text/smath/guide/newline.html"})
    'text/smath/guide/newline.html'
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["LANGS", "build_parallel", "gold_ids", "kb_path", "load_jsonl", "main", "write_beir"]

LANGS = ("en", "ru")
DEFAULT_QUESTIONS = Path(__file__).parent / "data" / "parallel_libreoffice.jsonl"


def load_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Objects of a JSONL file, blank lines skipped."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def kb_path(article: dict[str, Any]) -> str:
    """The language-independent path of a KB article: its id after the ``source:`` prefix."""
    return str(article["id"]).split(":", 1)[-1]


def gold_ids(questions: Sequence[dict[str, Any]], kb: Iterable[dict[str, Any]], lang: str) -> dict[str, list[str]]:
    """Question id → the ids of its gold articles in ``kb``.

    Raises:
        ValueError: a question without gold paths, or with a gold path that is not in ``kb``.
    """
    by_path = {kb_path(a): str(a["id"]) for a in kb}
    golds: dict[str, list[str]] = {}
    for q in questions:
        qid = str(q["id"])
        if not q.get("gold_paths"):
            raise ValueError(f"question {qid}: no gold_paths")
        missing = [p for p in q["gold_paths"] if p not in by_path]
        if missing:
            raise ValueError(f"question {qid}: gold path(s) not in the {lang} knowledge base: {', '.join(missing)}")
        golds[qid] = [by_path[p] for p in q["gold_paths"]]
    return golds


def write_beir(
    root: Path, corpus: Iterable[dict[str, Any]], queries: dict[str, str], qrels: dict[str, list[str]]
) -> None:
    """Write ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/test.tsv`` (score 1 for every gold)."""
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    with (root / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for a in corpus:
            doc = {"_id": str(a["id"]), "title": str(a.get("title") or ""), "text": str(a.get("text") or "")}
            fh.write(json.dumps(doc, ensure_ascii=False) + "\n")
    with (root / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for qid, text in queries.items():
            fh.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    lines = ["query-id\tcorpus-id\tscore"] + [f"{qid}\t{doc}\t1" for qid, docs in qrels.items() for doc in docs]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_parallel(
    kbs: dict[str, list[dict[str, Any]]], questions: Sequence[dict[str, Any]], out: str | Path
) -> dict[str, Any]:
    """Write ``out/en``, ``out/ru`` and ``out/mixed``; return the counts.

    Args:
        kbs: articles (KB format ``{id, title, url, source, lang, text}``) by language (``en``, ``ru``).
        questions: rows of the question file.
        out: parent folder of the three BEIR folders.
    """
    for q in questions:
        missing = [k for k in ("id", "question_en", "question_ru", "gold_paths") if not q.get(k)]
        if missing:
            raise ValueError(f"question {q.get('id', '?')}: missing {', '.join(missing)}")
    ids = [str(q["id"]) for q in questions]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate question ids: {sorted({i for i in ids if ids.count(i) > 1})}")
    out = Path(out)
    summary: dict[str, Any] = {"questions": len(questions)}
    mixed_queries: dict[str, str] = {}
    mixed_qrels: dict[str, list[str]] = {}
    for lang in LANGS:
        golds = gold_ids(questions, kbs[lang], lang)
        queries = {str(q["id"]): str(q[f"question_{lang}"]) for q in questions}
        write_beir(out / lang, kbs[lang], queries, golds)
        summary[lang] = {"corpus": len(kbs[lang]), "queries": len(queries), "qrels": sum(map(len, golds.values()))}
        mixed_queries.update({f"{qid}-{lang}": text for qid, text in queries.items()})
        mixed_qrels.update({f"{qid}-{lang}": docs for qid, docs in golds.items()})
    corpus = [a for lang in LANGS for a in kbs[lang]]
    if len({str(a["id"]) for a in corpus}) != len(corpus):
        raise ValueError("the knowledge bases share article ids: the mixed corpus needs them distinct")
    write_beir(out / "mixed", corpus, mixed_queries, mixed_qrels)
    summary["mixed"] = {
        "corpus": len(corpus),
        "queries": len(mixed_queries),
        "qrels": sum(map(len, mixed_qrels.values())),
    }
    summary["out"] = str(out)
    return summary


def main(argv: list[str] | None = None) -> int:
    """Build the three BEIR folders and print the counts as one JSON line. Returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m ragidx.evaluation.parallel", description="Parallel en/ru BEIR folders.")
    p.add_argument("--en", type=Path, required=True, help="English KB (JSONL, one article a line)")
    p.add_argument("--ru", type=Path, required=True, help="Russian KB (JSONL, one article a line)")
    p.add_argument("--questions", type=Path, default=DEFAULT_QUESTIONS, help="parallel question file")
    p.add_argument("--out", type=Path, required=True, help="folder for the en, ru and mixed BEIR folders")
    args = p.parse_args(argv)
    try:
        kbs = {"en": load_jsonl(args.en), "ru": load_jsonl(args.ru)}
        summary = build_parallel(kbs, load_jsonl(args.questions), args.out)
    except (ValueError, KeyError, OSError) as exc:
        print(f"ragidx.evaluation.parallel: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
