"""What each guard profile and each guard costs on right answers: replayed, no model runs.

Right answers are run through every guard profile (``small-model``, ``endpoint``, ``off``) and through each
gate and guard alone, as the agent runs them after the model's reply, then through citation resolution.
An answer is counted when the guards turn it into "not found", when its text loses the gold value it held,
or when it loses the citation of an article that holds the answer (a gold article, or one whose text holds a
gold value), compared with the same answer under the ``off`` profile (marker validation only).

Inputs (one or both):

- ``--rows FILE`` (repeatable): a ``ragidx eval answers --out`` file; its right answers (``contained``) are
  replayed from the model's own reply (``model_text``) over the articles it was shown (``shown``).
- ``--answers FILE`` (repeatable): strong-style right answers, one JSON object a line: ``id``, ``question``,
  ``answers`` (gold forms), ``sources`` (``kb_id``, ``title``, ``url``: ``[n]`` is the n-th), ``reply``.

Article texts come from ``--kb`` files (JSONL: id, title, url, text). The gates run over the whole articles
(a run's prompt showed them compressed); the answer check is a model call and is not replayed.

    python benchmarks/guard_replay.py --answers ragidx/evaluation/data/strong_answers.jsonl \\
        --kb ../shared/data/kb/postgresql15.jsonl --kb ../shared/data/kb/libreoffice_en.jsonl \\
        --kb ../shared/data/kb/libreoffice_ru.jsonl [--details lost.jsonl]

Prints ONE JSON line: per input (and for ``all`` inputs together when there are several), per profile and per
rule, ``answers``, ``not_found``, ``value_lost``, ``citation_lost`` and ``lost`` (answers with any of the three),
and per profile how often each guard fired; ``value_in_reply``: the answers whose reply holds a gold form.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ragidx.agent.citations import resolve_citations  # noqa: E402
from ragidx.agent.guards import ALL_NAMES, PROFILE_NAMES, GateInput, GuardChain  # noqa: E402
from ragidx.agent.guards.gates import ANSWER_CHECK  # noqa: E402
from ragidx.agent.rendering import prompt_title  # noqa: E402
from ragidx.article import Article  # noqa: E402
from ragidx.evaluation.answers import contains_answer  # noqa: E402


@dataclass(frozen=True)
class RightAnswer:
    """A right answer to replay: the model's reply over the articles it was shown."""

    id: str
    source: str  # which input it came from
    question: str
    answers: tuple[str, ...]
    reply: str
    sources: tuple[Article, ...]  # [n] is the n-th
    gold_kb_ids: tuple[str, ...] = ()


def load_kb(paths: Iterable[Path]) -> dict[str, dict[str, Any]]:
    """Articles by id from JSONL knowledge-base files."""
    articles: dict[str, dict[str, Any]] = {}
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                articles[str(row["id"])] = row
            except (json.JSONDecodeError, KeyError) as exc:
                raise ValueError(f"{path}:{number}: not a KB line with an id ({exc})") from exc
    return articles


def _article(kb: Mapping[str, dict[str, Any]], kb_id: str, title: str, where: str) -> Article:
    row = kb.get(kb_id)
    if row is None:
        raise ValueError(f"{where}: article {kb_id!r} is in no --kb file; pass the KB that holds it")
    return Article(kb_id, title or str(row.get("title", "")), str(row.get("url", "")), str(row["text"]))


def load_strong(path: Path, kb: Mapping[str, dict[str, Any]]) -> list[RightAnswer]:
    """Right answers of a strong-style set (see the module docstring)."""
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        where = f"{path}:{number}"
        sources = tuple(_article(kb, s["kb_id"], s.get("title", ""), where) for s in row["sources"])
        cited = [sources[n - 1].kb_id for n in row.get("cited", []) if 1 <= n <= len(sources)]
        out.append(
            RightAnswer(
                str(row["id"]), path.stem, row["question"], tuple(row["answers"]), row["reply"], sources, tuple(cited)
            )
        )
    return out


def load_rows(path: Path, kb: Mapping[str, dict[str, Any]]) -> tuple[list[RightAnswer], int]:
    """The right answers of a ``ragidx eval answers`` rows file, and how many right ones could not be replayed
    (no ``model_text``, or an article shown that no --kb file holds)."""
    out, skipped = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line) if line.strip() else {}
        if not row.get("answerable", True) or not row.get("contained"):
            continue
        reply = row.get("model_text") or ""
        shown = row.get("shown") or []
        if not reply or any(str(a.get("kb_id")) not in kb for a in shown):
            skipped += 1
            continue
        sources = tuple(_article(kb, str(a["kb_id"]), str(a.get("title") or ""), str(path)) for a in shown)
        gold = tuple(row.get("gold_kb_ids") or ())
        out.append(
            RightAnswer(str(row.get("id")), path.stem, row["question"], tuple(row["answers"]), reply, sources, gold)
        )
    return out, skipped


@dataclass(frozen=True)
class Outcome:
    not_found: bool
    text: str
    cited: tuple[str, ...]
    fired: tuple[str, ...]
    by: str | None  # the gate or guard that set the answer aside


def replay(chain: GuardChain, answer: RightAnswer) -> Outcome:
    """The answer as ``chain`` leaves it: the gates (but the answer check), the guards, citation resolution."""
    sources = list(answer.sources)
    gates = [n for n in chain.names if n != ANSWER_CHECK]
    gate = chain.gate(GateInput(answer.question, sources, sources), only=gates)
    if gate is not None:
        return Outcome(True, "", (), (gate.name,), gate.name)
    verdict = chain.review(answer.question, answer.reply, sources)
    fired = tuple(f.name for f in verdict.fired)
    if verdict.not_found:
        return Outcome(True, "", (), fired, fired[-1] if fired else None)
    text, citations, _ = resolve_citations(verdict.text, sources, question=answer.question)
    return Outcome(False, text, tuple(c.kb_id for c in citations), fired, None)


def _holds_answer(answer: RightAnswer, kb_id: str) -> bool:
    if kb_id in answer.gold_kb_ids:
        return True
    article = next((s for s in answer.sources if s.kb_id == kb_id), None)
    return article is not None and contains_answer(f"{article.title}\n{article.content}", answer.answers)


def losses(base: Outcome, got: Outcome, answer: RightAnswer) -> dict[str, bool]:
    """What ``got`` lost against ``base`` (the answer under marker validation only)."""
    had_value = contains_answer(base.text, answer.answers)
    had_cite = any(_holds_answer(answer, k) for k in base.cited)
    return {
        "not_found": got.not_found and not base.not_found,
        "value_lost": not got.not_found and had_value and not contains_answer(got.text, answer.answers),
        "citation_lost": not got.not_found and had_cite and not any(_holds_answer(answer, k) for k in got.cited),
    }


def _tally(rows: Iterable[dict[str, bool]], n: int) -> dict[str, int]:
    rows = list(rows)
    out = {"answers": n, "lost": sum(any(r.values()) for r in rows)}
    for key in ("not_found", "value_lost", "citation_lost"):
        out[key] = sum(r[key] for r in rows)
    return out


def measure(answers: Sequence[RightAnswer], details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Per profile and per rule: how many of ``answers`` were lost, and how."""
    off = GuardChain("off", (), title=prompt_title)
    base = {a.id: replay(off, a) for a in answers}
    chains = {p: GuardChain.from_profile(p, title=prompt_title) for p in PROFILE_NAMES}
    rules = {name: GuardChain("small-model", (name,), title=prompt_title) for name in ALL_NAMES if name != ANSWER_CHECK}
    rules["model_not_found(endpoint)"] = GuardChain("endpoint", ("model_not_found",), title=prompt_title)
    result: dict[str, Any] = {"profiles": {}, "rules": {}}
    for group, named in (("profiles", chains), ("rules", rules)):
        for name, chain in named.items():
            rows, fired = [], Counter[str]()
            for a in answers:
                got = replay(chain, a)
                lost = losses(base[a.id], got, a)
                rows.append(lost)
                fired.update(got.fired)
                if details is not None and any(lost.values()):
                    details.append(
                        {"id": a.id, group[:-1]: name, **lost, "by": got.by, "fired": got.fired, "text": got.text}
                    )
            result[group][name] = _tally(rows, len(answers))
            if group == "profiles":
                result[group][name]["fired"] = dict(sorted(fired.items()))
    result["value_in_reply"] = sum(contains_answer(a.reply, a.answers) for a in answers)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=Path, action="append", default=[], help="a ragidx eval answers --out file")
    parser.add_argument("--answers", type=Path, action="append", default=[], help="a strong-style answers file")
    parser.add_argument("--kb", type=Path, action="append", default=[], help="a KB JSONL file with the articles")
    parser.add_argument("--details", type=Path, help="write one line per lost answer here")
    args = parser.parse_args(argv)
    if not args.rows and not args.answers:
        parser.error("give --rows FILE and/or --answers FILE")
    kb = load_kb(args.kb)
    inputs: dict[str, list[RightAnswer]] = {}
    skipped: dict[str, int] = {}
    for path in args.rows:
        inputs[path.stem], skipped[path.stem] = load_rows(path, kb)
    for path in args.answers:
        inputs[path.stem] = load_strong(path, kb)
    details: list[dict[str, Any]] | None = [] if args.details else None
    out: dict[str, Any] = {"inputs": {}}
    for name, answers in inputs.items():
        out["inputs"][name] = {**measure(answers, details), **({"skipped": skipped[name]} if name in skipped else {})}
    every = [a for answers in inputs.values() for a in answers]
    if len(inputs) > 1:
        out["all"] = measure(every)
    if args.details and details is not None:
        args.details.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in details), encoding="utf-8")
    print(json.dumps(out, ensure_ascii=False, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
