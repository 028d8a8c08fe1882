"""Check the strong-style right answers (``ragidx/evaluation/data/strong_answers.jsonl``) against their KBs.

Each line is a right answer written the way strong instruction models answer (extra true context,
comparisons, hedges, steps, markdown, quotes, a closing source line); see ``ANSWERS_README.md``. This
script checks that every line is what it claims to be:

- the fields and their types, ids unique, ``kb`` one of the three knowledge bases, ``style`` tags known;
- every ``[n]`` marker in the reply and every ``cited`` n lies within ``sources``, and each cited n is
  written as a marker in the reply;
- every ``answers`` form is contained in the reply (``contains_answer``, the scorer's normalization);
- for each KB given with ``--kb``: every source ``kb_id`` exists there with that title and url, every
  ``answers`` form is contained in at least one cited article's text, and a reply tagged ``quote`` quotes
  at least one sentence (20+ characters) verbatim from a cited article.

    python benchmarks/strong_answers_check.py \\
        --kb postgresql15=../shared/data/kb/postgresql15.jsonl \\
        --kb libreoffice_en=ragidx/data/kb/libreoffice_en_sample.jsonl \\
        --kb libreoffice_ru=ragidx/data/kb/libreoffice_ru_sample.jsonl

Prints each problem on stderr and ONE JSON line of counts on stdout; exits 1 when there is a problem.
Lines of a KB not given are checked without it (``kb_checked`` says which were).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ragidx.evaluation.answers import contains_answer  # noqa: E402

DATA = ROOT / "ragidx" / "evaluation" / "data" / "strong_answers.jsonl"
KBS = ("postgresql15", "libreoffice_en", "libreoffice_ru")
STYLES = ("extra_context", "comparison", "hedge", "steps", "markdown", "quote", "source_line", "russian")
FIELDS: dict[str, type] = {
    "id": str,
    "kb": str,
    "question": str,
    "answers": list,
    "sources": list,
    "cited": list,
    "reply": str,
    "style": list,
    "provenance": str,
}
_MARKER = re.compile(r"\[(\d+)\]")
_QUOTED = re.compile(r"\"([^\"]{20,})\"|“([^”]{20,})”|«([^»]{20,})»")


def load_rows(path: Path = DATA) -> list[dict[str, Any]]:
    """The file's lines as dicts (a bad JSON line raises ``ValueError`` naming its line number)."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc})") from exc
    return rows


def load_kb(path: Path) -> dict[str, dict[str, Any]]:
    """A KB file (one article a line: id, title, url, text) keyed by id."""
    return {a["id"]: a for a in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


def _squash(text: str) -> str:
    return " ".join(text.split())


def row_problems(row: Mapping[str, Any], kb: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """What is wrong with one line; ``kb`` (its knowledge base by id) adds the checks against the articles."""
    rid = row.get("id", "?")
    problems = [
        f"{rid}: field {k!r} missing or not {t.__name__}" for k, t in FIELDS.items() if not isinstance(row.get(k), t)
    ]
    if problems:
        return problems
    if row["kb"] not in KBS:
        problems.append(f"{rid}: kb {row['kb']!r} is not one of {KBS}")
    if unknown := set(row["style"]) - set(STYLES):
        problems.append(f"{rid}: unknown style tags {sorted(unknown)}")
    sources, reply, answers = row["sources"], row["reply"], row["answers"]
    if not 1 <= len(sources) <= 4:
        problems.append(f"{rid}: {len(sources)} sources (1-4 expected)")
    if not answers or not all(isinstance(a, str) and a.strip() for a in answers):
        problems.append(f"{rid}: answers must be non-empty strings")
    for source in sources:
        if not isinstance(source, dict) or set(source) != {"kb_id", "title", "url"}:
            problems.append(f"{rid}: source {source!r} is not {{kb_id, title, url}}")
    markers = {int(n) for n in _MARKER.findall(reply)}
    if bad := sorted(n for n in markers | set(row["cited"]) if not 1 <= n <= len(sources)):
        problems.append(f"{rid}: markers/cited {bad} outside the {len(sources)} sources")
    if not row["cited"] or set(row["cited"]) - markers:
        problems.append(f"{rid}: cited {row['cited']} not all written as markers in the reply ({sorted(markers)})")
    problems += [f"{rid}: answer form {a!r} not in the reply" for a in answers if not contains_answer(reply, [a])]
    if kb is None or problems:
        return problems
    for source in sources:
        article = kb.get(source["kb_id"])
        if article is None:
            problems.append(f"{rid}: source {source['kb_id']} not in the KB")
        elif (article["title"], article["url"]) != (source["title"], source["url"]):
            problems.append(f"{rid}: source {source['kb_id']} title/url differ from the KB")
    cited = [kb[sources[n - 1]["kb_id"]]["text"] for n in row["cited"] if sources[n - 1]["kb_id"] in kb]
    for form in answers:
        if not any(contains_answer(text, [form]) for text in cited):
            problems.append(f"{rid}: answer form {form!r} in no cited article's text")
    if "quote" in row["style"]:
        quotes = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(reply)]
        texts = [_squash(t) for t in cited]
        if not any(_squash(q).rstrip(".") in t for q in quotes for t in texts):
            problems.append(f"{rid}: tagged quote but no quoted sentence occurs verbatim in a cited article")
    return problems


def check(rows: Sequence[Mapping[str, Any]], kbs: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Problems and counts for all rows; ``kbs`` maps a ``kb`` name to its articles by id (absent: unchecked)."""
    problems: list[str] = []
    ids = Counter(r.get("id") for r in rows)
    problems += [f"{i}: id used {n} times" for i, n in ids.items() if n > 1]
    for row in rows:
        problems += row_problems(row, kbs.get(row.get("kb", "")))
    return {
        "lines": len(rows),
        "per_kb": dict(Counter(r.get("kb") for r in rows)),
        "per_style": {s: sum(s in r.get("style", ()) for r in rows) for s in STYLES},
        "kb_checked": sorted(k for k in KBS if k in kbs),
        "problems": problems,
    }


def _kb_argument(value: str) -> tuple[str, Path]:
    name, _, path = value.partition("=")
    if name not in KBS or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH with NAME one of {', '.join(KBS)}")
    return name, Path(path)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA, help="the strong-answers file")
    parser.add_argument("--kb", type=_kb_argument, action="append", default=[], help="NAME=PATH of a KB file")
    args = parser.parse_args(list(argv) if argv is not None else None)
    result = check(load_rows(args.data), {name: load_kb(path) for name, path in args.kb})
    for problem in result["problems"]:
        print(problem, file=sys.stderr)
    print(json.dumps({**result, "problems": len(result["problems"])}, ensure_ascii=False))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
