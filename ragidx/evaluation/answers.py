"""Answer evaluation: how often the answer is right, whether its citations hold it, how long it took.

Two input forms:

- a knowledge base ragidx can ingest (JSONL, Markdown/HTML files or folders; several may be given) plus
  a questions JSONL, one ``{id, question, answers[], gold_kb_ids[]?, answerable?, kind?}`` a line
  (``answers`` empty and ``answerable: false`` for a question the knowledge base cannot answer);
- a HotpotQA-style ``qa.jsonl`` (``question``, ``answers``, ``contexts`` with ``doc_id``, ``title``,
  ``text``, ``is_supporting``): the contexts of *every* question in the file become the knowledge base
  (so ``--limit`` never changes it) and each question's supporting paragraphs are its gold articles.

Each question is asked through ``Engine.astream_ask`` (the path ``ragidx ask`` takes) and scored with
SQuAD-style answer normalization:

- ``containment``: a normalized gold answer occurs in the normalized answer (on word boundaries);
- ``f1``: SQuAD token F1, best over the golds;
- ``citation_precision``: share of cited articles that are gold or contain a gold answer;
  ``citation_recall``: share of the gold articles cited (both over answerable questions with golds);
- ``abstention``: "not found" on unanswerable questions; ``false_not_found``: on answerable ones;
- time: ``p50_s`` / ``p95_s`` per answer and ``ttft_p50_s``, the time to the first answer token (the
  whole answer's time where nothing was streamed, e.g. a "not found" decided without the model);
- ``prompt_tokens_mean`` (all LLM calls of a question), ``overflows`` (a prompt past the window, or the
  endpoint's refusal of one);
- where wrong answers were lost: ``gold_shown`` (the gold articles were among those shown),
  ``answer_in_prompt`` (a gold answer was in the text the model was shown, after compression) and
  ``misses``, each wrong answer counted once as ``retrieval`` (the answer never reached the prompt and a
  gold article is missing), ``compression`` (the gold articles were shown but the answer was cut from
  them), ``model`` (the answer was in the prompt) or ``error``;
- with the answer check on (the local model), ``answer_check``: its margin, how well its log-odds separate
  answerable from unanswerable questions (``auc``) and containment, false "not found" and abstention at
  higher margins (``by_margin``, :func:`check_curve`): how to choose ``[llm] answer_check_margin`` for a
  knowledge base from questions about it.

The scoring functions and the loop (:func:`run_questions`, :func:`summarize`) are shared with
``benchmarks/peer_llamaindex.py``, which asks LlamaIndex's stock query engine the same questions.

Run::

    ragidx eval answers --kb ../shared/data/kb/postgresql15.jsonl \\
        --questions ragidx/evaluation/data/answers_postgresql15.jsonl --out pg.jsonl
    ragidx eval answers --hotpotqa ../shared/data/hotpotqa_dev500/qa.jsonl --limit 50

Example:
    >>> normalize_answer("The default is 128MB.")
    'default is 128mb'
    >>> contains_answer("It uses 128MB by default [1].", ["128MB"])
    True
    >>> round(answer_f1("about 128 MB", ["128 MB"]), 3)
    0.8
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import platform
import re
import statistics
import sys
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ragidx.agent.guards.not_found import says_not_found as _says_not_found
from ragidx.article import ARTICLE_RANK, NORMALIZED_RANK, RERANK_SCORE, Article

__all__ = [
    "Outcome",
    "Question",
    "answer_f1",
    "citation_scores",
    "contains_answer",
    "evaluate_answers",
    "load_hotpotqa",
    "load_questions",
    "main",
    "normalize_answer",
    "run_questions",
    "says_not_found",
    "score_outcome",
    "spread",
    "summarize",
]

logger = logging.getLogger(__name__)
T = TypeVar("T")

_NON_WORD = re.compile(r"[^\w]+|_")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_YES_NO = frozenset({"yes", "no"})


# --- questions ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Question:
    """One evaluation question.

    ``answers`` are the acceptable variants of the right answer (empty when ``answerable`` is false);
    ``gold_kb_ids`` the articles that hold it, when known; ``kind`` a free label (``point``, ``compound``,
    ``bridge``, ``comparison``, ``injection``, ``unanswerable`` ...) for per-kind figures.
    """

    id: str
    question: str
    answers: tuple[str, ...] = ()
    gold_kb_ids: tuple[str, ...] = ()
    answerable: bool = True
    kind: str = ""


def load_questions(path: str | Path) -> list[Question]:
    """Questions of a JSONL file; a clear error names the line of a malformed one.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line is not JSON, lacks ``question``, has no ``answers`` while answerable, or
            repeats an id; or the file holds no question.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"questions file {path} not found: give a JSONL file of {{id, question, answers}}")
    questions: list[Question] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not JSON ({exc.msg}); each line must be one question object") from exc
            if not isinstance(data, dict) or not str(data.get("question") or "").strip():
                raise ValueError(f"{where}: a question needs a non-empty 'question' field")
            answers = data.get("answers") or []
            if isinstance(answers, str):
                answers = [answers]
            answers = tuple(str(a).strip() for a in answers if str(a).strip())
            answerable = bool(data.get("answerable", True))
            if answerable and not answers:
                raise ValueError(
                    f"{where}: an answerable question needs 'answers'; "
                    'for one the knowledge base cannot answer, set "answerable": false'
                )
            qid = str(data.get("id") or f"q{line_no}")
            if qid in seen:
                raise ValueError(f"{where}: id {qid!r} appears twice")
            seen.add(qid)
            questions.append(
                Question(
                    id=qid,
                    question=str(data["question"]).strip(),
                    answers=answers if answerable else (),
                    gold_kb_ids=tuple(str(k) for k in data.get("gold_kb_ids") or ()),
                    answerable=answerable,
                    kind=str(data.get("kind") or ("" if answerable else "unanswerable")),
                )
            )
    if not questions:
        raise ValueError(f"{path} holds no question")
    return questions


def load_hotpotqa(path: str | Path) -> tuple[list[Question], list[Article]]:
    """The questions of a HotpotQA-style file and its knowledge base: every paragraph of every question,
    once (by ``doc_id``, else by title), as an article; the supporting paragraphs are the gold articles."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"HotpotQA file {path} not found: give a qa.jsonl with question, answers, contexts")
    questions: list[Question] = []
    articles: dict[str, Article] = {}
    with path.open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                contexts = item["contexts"]
                text = str(item["question"]).strip()
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(
                    f"{path}:{line_no}: not a HotpotQA-style line (question, answers, contexts): {exc}"
                ) from exc
            gold: list[str] = []
            for c in contexts:
                kb_id = str(c.get("doc_id") or f"hp-{c.get('title', '')}")
                if kb_id not in articles and str(c.get("text") or "").strip():
                    articles[kb_id] = Article(
                        kb_id=kb_id, title=str(c.get("title") or kb_id), url="", content=c["text"]
                    )
                if c.get("is_supporting"):
                    gold.append(kb_id)
            answers = tuple(str(a).strip() for a in item.get("answers") or () if str(a).strip())
            questions.append(
                Question(
                    id=str(item.get("id") or f"q{line_no}"),
                    question=text,
                    answers=answers,
                    gold_kb_ids=tuple(gold),
                    answerable=bool(answers),
                    kind=str(item.get("type") or ("yes/no" if {a.lower() for a in answers} <= _YES_NO else "span")),
                )
            )
    if not questions:
        raise ValueError(f"{path} holds no question")
    return questions, list(articles.values())


def spread(items: Sequence[T], limit: int | None) -> list[T]:
    """``limit`` items spread evenly over ``items`` (the same ones every run); all when ``limit`` is None.

    Example:
        >>> spread(list(range(10)), 3)
        [0, 3, 6]
    """
    if limit is None or limit >= len(items):
        return list(items)
    if limit <= 0:
        raise ValueError("limit must be a positive number of questions")
    return [items[(i * len(items)) // limit] for i in range(limit)]


# --- scoring --------------------------------------------------------------------------------------
def normalize_answer(text: str) -> str:
    """SQuAD normalization, for any script: NFKC, lower case, punctuation to spaces, no English articles."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = _NON_WORD.sub(" ", text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def contains_answer(prediction: str, golds: Iterable[str]) -> bool:
    """A normalized gold occurs in the normalized prediction, on word boundaries."""
    haystack = f" {normalize_answer(prediction)} "
    return any((needle := normalize_answer(g)) and f" {needle} " in haystack for g in golds)


def answer_f1(prediction: str, golds: Iterable[str]) -> float:
    """SQuAD token F1 of ``prediction``, best over ``golds`` (0.0 when there is none)."""
    pred = normalize_answer(prediction).split()
    best = 0.0
    for gold in golds:
        ref = normalize_answer(gold).split()
        common = sum((Counter(pred) & Counter(ref)).values())
        if not common:
            continue
        precision, recall = common / len(pred), common / len(ref)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def says_not_found(text: str) -> bool:
    """The reply says the knowledge base does not answer: empty, or as the agent reads a model's reply
    (:func:`ragidx.agent.guards.not_found.says_not_found`; a reply citing an article is an answer)."""
    return not text.strip() or _says_not_found(text, cited_is_answer=True)


def citation_scores(
    cited: Sequence[str], question: Question, article_texts: Mapping[str, str]
) -> tuple[float | None, float | None]:
    """(precision, recall) of one answer's citations; None where undefined.

    A cited article is right when it is gold or its text contains a gold answer (yes/no answers excepted:
    every text "contains" them). Precision needs citations and something to judge them by; recall needs
    gold articles. Unanswerable questions have neither.
    """
    if not question.answerable:
        return None, None
    cited_set = list(dict.fromkeys(cited))
    gold = set(question.gold_kb_ids)
    span_answers = [a for a in question.answers if a.lower() not in _YES_NO]
    precision: float | None = None
    if cited_set and (gold or span_answers):
        right = sum(
            1 for kb_id in cited_set if kb_id in gold or contains_answer(article_texts.get(kb_id, ""), span_answers)
        )
        precision = right / len(cited_set)
    recall = len(gold & set(cited_set)) / len(gold) if gold else None
    return precision, recall


@dataclass
class Outcome:
    """What a system did with one question, before scoring.

    ``shown``: the articles it read, best first (kb_id, title and ranks). ``cited``: the kb_ids it cites
    (for a system without inline citations, its sources). ``error``: why it failed, when it did.
    """

    text: str = ""
    not_found: bool = False
    cited: list[str] = field(default_factory=list)
    shown: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    ttft_s: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_calls: int = 0
    queries: list[str] = field(default_factory=list)
    overflow: bool = False
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def score_outcome(question: Question, outcome: Outcome, article_texts: Mapping[str, str]) -> dict[str, Any]:
    """One per-question row: the question, its golds, what the system did, its scores, and for a wrong
    answer where it was lost (``miss``: ``retrieval``, ``compression``, ``model`` or ``error``).

    ``outcome.shown`` entries may carry the ``content`` the model was shown; it is checked for a gold
    answer (``holds_answer`` per article, ``answer_in_prompt`` overall) and left out of the row.
    """
    not_found = outcome.not_found or says_not_found(outcome.text)
    precision, recall = citation_scores(outcome.cited, question, article_texts)
    span_answers = [a for a in question.answers if a.lower() not in _YES_NO]
    shown: list[dict[str, Any]] = []
    in_prompt: bool | None = None
    for article in outcome.shown:
        entry = {k: v for k, v in article.items() if k != "content"}
        if span_answers and "content" in article:
            text = f"{article.get('title') or ''}\n{article['content']}"
            entry["holds_answer"] = contains_answer(text, span_answers)
            in_prompt = bool(in_prompt) or entry["holds_answer"]
        shown.append(entry)
    shown_ids = {a.get("kb_id") for a in shown}
    gold_shown = [k for k in question.gold_kb_ids if k in shown_ids]
    # an article shown (in whatever form) whose full text holds an answer: then compression lost it, not retrieval
    answer_shown = bool(span_answers) and any(
        contains_answer(article_texts.get(str(k), ""), span_answers) for k in shown_ids
    )
    contained = contains_answer(outcome.text, question.answers) if question.answerable else None
    row: dict[str, Any] = {
        "id": question.id,
        "kind": question.kind,
        "question": question.question,
        "answerable": question.answerable,
        "answers": list(question.answers),
        "gold_kb_ids": list(question.gold_kb_ids),
        **{k: v for k, v in asdict(outcome).items() if k not in ("not_found", "extra", "shown")},
        "shown": shown,
        "not_found": not_found,
        "contained": contained,
        "f1": round(answer_f1(outcome.text, question.answers), 4) if question.answerable else None,
        "citation_precision": precision,
        "citation_recall": recall,
        "gold_shown": gold_shown,
        "answer_in_prompt": in_prompt if question.answerable else None,
        "miss": _miss(question, outcome, contained, gold_shown, in_prompt, answer_shown),
        **outcome.extra,
    }
    return row


def _miss(
    question: Question,
    outcome: Outcome,
    contained: bool | None,
    gold_shown: list[str],
    in_prompt: bool | None,
    answer_shown: bool = False,
) -> str | None:
    """Where a wrong answer to an answerable question was lost, read from what the model was shown.

    ``compression`` when every gold article was shown, or when any shown article's full text holds an answer
    (a compound question's second gold article may be missing while the one with the answer was cut).
    """
    if not question.answerable or contained:
        return None
    if outcome.error:
        return "error"
    if in_prompt:
        return "model"  # the answer was in front of the model
    all_gold = bool(question.gold_kb_ids) and len(gold_shown) == len(question.gold_kb_ids)
    if in_prompt is None:  # nothing to look for in the text (yes/no): judge by the gold articles alone
        return "model" if all_gold or not question.gold_kb_ids else "retrieval"
    return "compression" if all_gold or answer_shown else "retrieval"


def run_questions(
    questions: Sequence[Question],
    ask: Callable[[Question], Outcome],
    article_texts: Callable[[Sequence[str]], Mapping[str, str]],
    *,
    out: str | Path | None = None,
    progress: bool = False,
    label: str = "answers",
) -> list[dict[str, Any]]:
    """Ask every question, score it, and write its row to ``out`` (JSONL) as soon as it is scored.

    ``article_texts(kb_ids)`` gives the full texts of the cited and shown articles (to judge a citation by its
    content, and whether a shown article held an answer before it was compressed).
    """
    from tqdm.auto import tqdm

    rows: list[dict[str, Any]] = []
    sink = Path(out).open("w", encoding="utf-8") if out is not None else None  # noqa: SIM115
    try:
        bar = tqdm(questions, desc=label, unit="q", disable=not progress, file=sys.stderr)
        for question in bar:
            outcome = ask(question)
            wanted = list(dict.fromkeys([*outcome.cited, *(str(a.get("kb_id")) for a in outcome.shown)]))
            texts = article_texts(wanted) if wanted else {}
            row = score_outcome(question, outcome, texts)
            rows.append(row)
            if sink is not None:
                sink.write(json.dumps(row, ensure_ascii=False) + "\n")
                sink.flush()
            answered = [r for r in rows if r["answerable"]]
            if answered:
                bar.set_postfix(contained=f"{sum(bool(r['contained']) for r in answered)}/{len(answered)}")
    finally:
        if sink is not None:
            sink.close()
    return rows


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return round(statistics.fmean(kept), 4) if kept else None


def _pct(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile, interpolated between the two nearest values (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (pos - low), 2)


def summarize(rows: Sequence[Mapping[str, Any]], **extra: Any) -> dict[str, Any]:
    """The summary line: answer quality over answerable questions, abstention over unanswerable ones,
    citations, time and tokens over all; ``by_kind`` repeats containment and time for each kind."""
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    seconds = [float(r["seconds"]) for r in rows if not r["error"]]
    ttft = [float(r["ttft_s"] if r["ttft_s"] is not None else r["seconds"]) for r in rows if not r["error"]]
    kinds = sorted({str(r["kind"]) for r in rows if r["kind"]})
    summary: dict[str, Any] = {
        **extra,
        "questions": len(rows),
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "containment": _mean(float(bool(r["contained"])) for r in answerable),
        "f1": _mean(r["f1"] for r in answerable),
        "citation_precision": _mean(r["citation_precision"] for r in answerable),
        "citation_recall": _mean(r["citation_recall"] for r in answerable),
        "abstention": _mean(float(r["not_found"]) for r in unanswerable),
        "false_not_found": _mean(float(r["not_found"]) for r in answerable),
        "p50_s": _pct(seconds, 0.5),
        "p95_s": _pct(seconds, 0.95),
        "ttft_p50_s": _pct(ttft, 0.5),
        "prompt_tokens_mean": round(statistics.fmean(r["prompt_tokens"] for r in rows), 1) if rows else None,
        "llm_calls_mean": round(statistics.fmean(r["llm_calls"] for r in rows), 2) if rows else None,
        "overflows": sum(bool(r["overflow"]) for r in rows),
        "errors": sum(bool(r["error"]) for r in rows),
        "gold_shown": _mean(len(r["gold_shown"]) / len(r["gold_kb_ids"]) for r in answerable if r["gold_kb_ids"]),
        "answer_in_prompt": _mean(
            float(r["answer_in_prompt"]) for r in answerable if r.get("answer_in_prompt") is not None
        ),
        "misses": dict(Counter(str(r["miss"]) for r in answerable if r.get("miss"))),
    }
    if any("guards" in r for r in rows):  # ragidx's own rows: its guard profile, and how often each guard fired
        summary["guard_profile"] = next((r.get("guard_profile") for r in rows if r.get("guard_profile")), None)
        summary["guards_fired"] = dict(Counter(g["name"] for r in rows for g in r.get("guards") or []))
    if kinds:
        summary["by_kind"] = {
            kind: {
                "questions": len(group),
                "containment": _mean(float(bool(r["contained"])) for r in group if r["answerable"]),
                "not_found": _mean(float(r["not_found"]) for r in group),
                "p50_s": _pct([float(r["seconds"]) for r in group if not r["error"]], 0.5),
            }
            for kind in kinds
            if (group := [r for r in rows if r["kind"] == kind])
        }
    summary["machine"] = machine_line()
    return summary


def machine_line() -> str:
    """The machine and its load, for the summary line (figures from a busy machine are not comparable)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{platform.machine()}, {os.cpu_count()} cpus, load {load:.1f}"


# --- ragidx --------------------------------------------------------------------------------------
def answer_outcome(answer: Any, *, seconds: float, ttft_s: float | None, window: int, max_output: int) -> Outcome:
    """An ``Answer`` as an :class:`Outcome`: citations, the articles shown with their ranks, tokens."""
    shown = [
        {
            "kb_id": a.get("kb_id"),
            "title": a.get("title"),
            RERANK_SCORE: (a.get("metadata") or {}).get(RERANK_SCORE),
            NORMALIZED_RANK: (a.get("metadata") or {}).get(NORMALIZED_RANK),
            ARTICLE_RANK: (a.get("metadata") or {}).get(ARTICLE_RANK),
            "content": a.get("content") or "",  # as the model was shown it; checked, then left out of the row
        }
        for a in answer.articles
    ]
    tokens = answer.tokens or {}
    prompt_max = int(tokens.get("prompt_max", 0))
    return Outcome(
        text=answer.text,
        not_found=bool(answer.not_found),
        cited=[c.kb_id for c in answer.citations],
        shown=shown,
        seconds=round(seconds, 3),
        ttft_s=round(ttft_s, 3) if ttft_s is not None else None,
        prompt_tokens=int(tokens.get("prompt_total", 0)),
        completion_tokens=int(tokens.get("completion", 0)),
        llm_calls=len(tokens.get("prompt_per_call", [])),
        queries=list(answer.queries),
        overflow=prompt_max > window - max_output,
        extra={
            "model_text": answer.model_text,
            "citation_method": answer.citation_method,
            "answer_check": answer.answer_check,
            "not_found_reason": answer.not_found_reason,
            "guards": list(answer.guards),
            "guard_profile": answer.guard_profile.get("profile"),
            "timings": answer.timings,
            "prompt_per_call": tokens.get("prompt_per_call", []),
            "tool_errors": answer.tool_errors,
        },
    )


def _ask_streaming(engine: Any, question: str) -> tuple[Any, float, float | None]:
    """(the Answer, seconds in all, seconds to the model's first answer token) through ``Engine.stream_ask``
    (``raw``: the model's own words, so the figure times the model, not the guard profile's hold)."""
    started = time.perf_counter()
    first: float | None = None
    answer: Any = None
    for item in engine.stream_ask(question, raw=True):
        if isinstance(item, str):
            if first is None and item.strip():
                first = time.perf_counter() - started
        else:
            answer = item
    return answer, time.perf_counter() - started, first


def engine_asker(engine: Any) -> Callable[[Question], Outcome]:
    """``ask(question) -> Outcome`` over ``engine`` (streamed, to time the first answer token).

    A prompt the endpoint refuses as too long is an overflow; a failed tool or model call is recorded on
    the row; an endpoint that is down ends the run (every later question would fail the same way).
    """
    from ragidx.providers.chat import ContextOverflowError, LLMUnavailableError

    llm = engine.settings.llm

    def ask(question: Question) -> Outcome:
        started = time.perf_counter()
        try:
            answer, seconds, ttft = _ask_streaming(engine, question.question)
        except ContextOverflowError as exc:
            return Outcome(seconds=time.perf_counter() - started, overflow=True, error=f"context overflow: {exc}")
        except LLMUnavailableError:
            raise
        except Exception as exc:  # one broken question is a row with its error, not a lost run
            logger.warning("question %s failed: %s: %s", question.id, type(exc).__name__, exc)
            return Outcome(seconds=time.perf_counter() - started, error=f"{type(exc).__name__}: {exc}")
        return answer_outcome(
            answer, seconds=seconds, ttft_s=ttft, window=llm.context_window, max_output=llm.max_output_tokens
        )

    return ask


def store_texts(article_store: Any) -> Callable[[Sequence[str]], dict[str, str]]:
    """Full article texts by kb_id from an article store (for judging citations by content)."""

    def texts(kb_ids: Sequence[str]) -> dict[str, str]:
        return {k: f"{a.title}\n{a.content}" for k, a in article_store.get(list(kb_ids)).items()}

    return texts


def evaluate_answers(
    engine: Any,
    questions: Sequence[Question],
    *,
    out: str | Path | None = None,
    progress: bool = False,
    **extra: Any,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Ask ``questions`` through ``engine`` (its knowledge base already ingested); (summary, rows).

    Example:
        >>> summary, rows = evaluate_answers(engine, load_questions("q.jsonl"))   # doctest: +SKIP
        >>> summary["containment"], summary["p50_s"]                               # doctest: +SKIP
    """
    if engine.article_store.count() == 0:
        raise ValueError(f"the knowledge base in {engine.settings.data_dir} is empty: ingest it first")
    t0 = time.perf_counter()
    agent = engine.agent()  # starts a local model server: its start is not any question's time
    startup = time.perf_counter() - t0
    rows = run_questions(
        questions, engine_asker(engine), store_texts(engine.article_store), out=out, progress=progress, label="ragidx"
    )
    llm = engine.settings.llm
    summary = summarize(
        rows,
        system="ragidx",
        model=llm.model,
        context_window=llm.context_window,
        server_start_s=round(startup, 2),
        **extra,
    )
    if agent.answer_check is not None:  # the margin the questions were asked with
        summary["answer_check"] = check_curve(rows, agent.answer_check)
    return summary, rows


CURVE_MARGINS = (-0.5, -0.25, 0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2)
"""Answer-check margins the summary reports outcomes at (those at or above the margin of the run)."""


def check_curve(rows: Sequence[Mapping[str, Any]], margin: float) -> dict[str, Any]:
    """What the answer check would have done at higher margins, from the log-odds each row records.

    Raising the margin only turns answers into "not found" (a question whose log-odds fall below it), and
    the other answers stay as they were, so the outcomes at every margin at or above the run's are exact.
    Run with a low margin (``RAGIDX_LLM__ANSWER_CHECK_MARGIN=-20``: the check never says no, but records)
    to see them all. ``auc``: how well the log-odds separate answerable from unanswerable questions
    (among those the check was asked about; 1.0 perfect, 0.5 chance).
    """
    odds = [r.get("answer_check") for r in rows]
    pos = [float(o) for r, o in zip(rows, odds, strict=True) if r["answerable"] and o is not None]
    neg = [float(o) for r, o in zip(rows, odds, strict=True) if not r["answerable"] and o is not None]
    auc = (
        round(statistics.fmean(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg), 4)
        if pos and neg
        else None
    )
    by_margin = {}
    for m in sorted({margin, *(m for m in CURVE_MARGINS if m > margin)}):
        declined = [o is not None and float(o) < m for o in odds]
        answerable = [(r, d) for r, d in zip(rows, declined, strict=True) if r["answerable"]]
        unanswerable = [(r, d) for r, d in zip(rows, declined, strict=True) if not r["answerable"]]
        by_margin[f"{m:g}"] = {
            "containment": _mean(float(bool(r["contained"]) and not d) for r, d in answerable),
            "false_not_found": _mean(float(r["not_found"] or d) for r, d in answerable),
            "abstention": _mean(float(r["not_found"] or d) for r, d in unanswerable),
        }
    return {"margin": margin, "checked": len(pos) + len(neg), "auc": auc, "by_margin": by_margin}


# --- the knowledge base --------------------------------------------------------------------------
def kb_fingerprint(paths: Sequence[Path], **settings: Any) -> str:
    """A key for an index of these files (their bytes, names) and the settings that change an index."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    for path in paths:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            h.update(f.name.encode() + b"\x00")
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def prepare_kb(
    engine: Any, sources: Sequence[Path | Sequence[Article]], *, names: Sequence[str], progress: bool = False
) -> dict[str, Any]:
    """Ingest each source into ``engine`` (idempotent: unchanged articles are skipped); a combined report.

    Raises:
        ValueError: nothing could be ingested (every item was malformed, or the sources are empty).
    """
    totals: Counter[str] = Counter()
    errors: list[str] = []
    for source, name in zip(sources, names, strict=True):
        report = engine.ingest(source, source_name=name, progress=progress)
        for key, value in report.as_dict().items():
            if isinstance(value, int) and not isinstance(value, bool):
                totals[key] += value
        errors.extend(str(e) for e in report.errors)
    if engine.article_store.count() == 0:
        raise ValueError(f"no article could be ingested from {', '.join(names)}: {errors[:3] or 'empty sources'}")
    return {**totals, "errors": len(errors), "articles": engine.article_store.count()}


def default_data_dir(base: Path, key_paths: Sequence[Path], settings: Any, kind: str) -> Path:
    """``<base>/eval-answers/<kind>-<key>``: one index per knowledge base and index settings, reused."""
    from ragidx.evaluation.retrieval import index_settings

    return base / "eval-answers" / f"{kind}-{kb_fingerprint(key_paths, **index_settings(settings))}"


# --- CLI ----------------------------------------------------------------------------------------
def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The model options shared by ``ragidx eval answers`` and the peer benchmark."""
    group = parser.add_argument_group("model (defaults: RAGIDX_LLM__* settings, else the local qwen2.5-1.5b)")
    group.add_argument("--model", default=None, help="model name, or a local .gguf path")
    group.add_argument("--api-base", default=None, help="OpenAI-compatible URL (key: RAGIDX_LLM__API_KEY)")
    group.add_argument("--context-window", type=int, default=None, help="tokens the model accepts")
    group.add_argument("--max-output-tokens", type=int, default=None, help="tokens reserved for the answer")
    group.add_argument("--temperature", type=float, default=None, help="sampling temperature")


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """The knowledge-base and question options shared by ``ragidx eval answers`` and the peer benchmark."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--hotpotqa", type=Path, help="HotpotQA-style qa.jsonl: its contexts become the KB")
    source.add_argument(
        "--kb", type=Path, action="append", help="a KB file or folder ragidx can ingest (repeat for several)"
    )
    parser.add_argument("--questions", type=Path, help="questions JSONL (with --kb)")
    parser.add_argument("--limit", type=int, default=None, help="N questions spread evenly over the file")
    parser.add_argument("--out", type=Path, default=None, help="write one JSONL row per question here")
    parser.add_argument("--data-dir", type=Path, default=None, help="where the index lives (default: one per KB)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def settings_from_args(args: argparse.Namespace, **overrides: Any) -> Any:
    """Settings with the command line's model options applied over env / ``ragidx.toml``."""
    from ragidx.config import Settings

    settings = Settings(**overrides)
    llm_updates = {
        key: value
        for key, value in (
            ("model", args.model),
            ("api_base", args.api_base),
            ("context_window", args.context_window),
            ("max_output_tokens", args.max_output_tokens),
            ("temperature", args.temperature),
        )
        if value is not None
    }
    if llm_updates:
        llm = type(settings.llm).model_validate({**settings.llm.model_dump(), **llm_updates})
        settings = settings.model_copy(update={"llm": llm})
    return settings


@dataclass
class EvalData:
    """The questions and knowledge base an answer evaluation runs on."""

    questions: list[Question]
    sources: list[Path | list[Article]]
    names: list[str]
    key_paths: list[Path]
    kind: str
    label: str


def load_eval_data(args: argparse.Namespace) -> EvalData:
    """Questions and KB sources from the parsed options (``--hotpotqa``, or ``--kb`` with ``--questions``)."""
    if args.hotpotqa is not None:
        if args.questions is not None:
            raise ValueError("--questions goes with --kb; a --hotpotqa file holds its own questions")
        questions, articles = load_hotpotqa(args.hotpotqa)
        name = f"hotpotqa:{args.hotpotqa.name}"
        data = EvalData(questions, [articles], [name], [args.hotpotqa], "hotpotqa", str(args.hotpotqa))
    else:
        if args.questions is None:
            raise ValueError("--kb needs --questions FILE (a JSONL of {id, question, answers, gold_kb_ids})")
        for path in args.kb:
            if not path.exists():
                raise FileNotFoundError(f"knowledge base {path} not found")
        questions = load_questions(args.questions)
        names = [p.resolve().name for p in args.kb]
        data = EvalData(questions, list(args.kb), names, list(args.kb), "kb", str(args.questions))
    data.questions = spread(data.questions, args.limit)
    return data


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragidx eval answers",
        description="Answer quality, citations and time of ragidx on a question set; prints one JSON line.",
    )
    add_data_arguments(parser)
    add_model_arguments(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``ragidx eval answers``: ingest (or reuse) the KB, ask every question, print the summary line."""
    from ragidx.engine import Engine
    from ragidx.providers.chat import LLMUnavailableError

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr)
    progress = not args.no_progress and sys.stderr.isatty()
    try:
        data = load_eval_data(args)
        settings = settings_from_args(args)
        data_dir = args.data_dir or default_data_dir(settings.data_dir, data.key_paths, settings, data.kind)
        settings = settings.model_copy(update={"data_dir": data_dir})
    except (ValueError, FileNotFoundError) as exc:
        print(f"ragidx eval answers: {exc}", file=sys.stderr)
        return 2
    with Engine(settings) as engine:
        try:
            ingested = prepare_kb(engine, data.sources, names=data.names, progress=progress)
            summary, _ = evaluate_answers(
                engine,
                data.questions,
                out=args.out,
                progress=progress,
                dataset=data.label,
                kb_articles=ingested["articles"],
            )
        except (ValueError, FileNotFoundError, LLMUnavailableError) as exc:
            print(f"ragidx eval answers: {exc}", file=sys.stderr)
            return 1
    print(json.dumps(summary, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
