"""Curated answers: an editor's own answer, with its citations, pinned to a question or to a gap's questions.

A new question close enough to one a curated answer is pinned to gets that answer at once, before the question
waits for the model, marked ``curated`` (``Answer.curated``; ``"curated": true`` in ``ragidx ask --json`` and in
the server's ``ragidx`` field). Three rules keep it from being served where it should not be:

- **Only to a reader who may read every article it cites** (``ArticleStore.get(kb_ids, principal=...)`` returns
  them all): a curated answer never carries what a reader's own search could not reach.
- **Only while its citations are as they were when an editor last confirmed it**: each cited article's content
  hash is recorded when it is pinned or confirmed; an article changed or gone since stops the answer until an
  editor confirms it again (``ragidx curated confirm ID``), for the answer may say what the article no longer does.
- **Only for the same question, not the same words**: :func:`same_intent` must hold (the same negation, no
  opposite actions such as insert / delete or enable / disable, the same names, versions and numbers), and then
  either of two stages:

  - with a **judge** (the engine's local model, :func:`model_judge`): the model is asked whether an answer
    written for the pinned question fits the new one (:data:`SAME_QUESTION_PROMPT`, one token, YES or NO; its
    log-odds of YES over NO). A question whose embedding is within ``judge_confident`` of a pinned one (cosine)
    gets its answer unless the model clearly says no (below ``judge_veto``); one within only ``judge_threshold``
    (wider) gets it when the model says yes (at least ``judge_margin``). The embedding finds rewordings ("take
    back the last thing I did" for "undo the last change"); the model turns away the close strangers among them
    ("print in colour" for "print in landscape"). Only the closest candidate is judged (``judge_limit``).
  - without one (a model that gives no log-odds, a judge that fails), the embedding alone, within the stricter
    ``threshold`` (``pair_threshold`` for a :func:`minimal_pair`).

  "How do I insert a table?" does not get the answer to "How do I delete a table?" however alike their
  embeddings. Measured in ``benchmarks/curated_matching.py`` (paraphrases' hit rate; false hits on near misses).

Stored in the article store's database (SQLite or PostgreSQL), one row per answer, per tenant, like the articles.

Example:
    >>> curated = CuratedAnswers(engine.article_store, engine.embed_model)             # doctest: +SKIP
    >>> pinned = curated.add(["How much does a licence cost?"], "LibreOffice is free [1].", ["licence"])
    ... # doctest: +SKIP
    >>> curated.match("What does a LibreOffice licence cost?", Principal()).id == pinned.id  # doctest: +SKIP
    True
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
import weakref
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Column, Connection, Float, MetaData, PrimaryKeyConstraint, Table, Text, delete, select, update

from ragidx.stores.access import Principal
from ragidx.terms import is_stop_word, stem, words

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from ragidx.agent.answer import Answer
    from ragidx.engine import Engine
    from ragidx.stores.access import Scope
    from ragidx.stores.article_store import ArticleStore

__all__ = [
    "DEFAULT_JUDGE_CONFIDENT",
    "DEFAULT_JUDGE_LIMIT",
    "DEFAULT_JUDGE_MARGIN",
    "DEFAULT_JUDGE_THRESHOLD",
    "DEFAULT_JUDGE_VETO",
    "DEFAULT_PAIR_THRESHOLD",
    "DEFAULT_THRESHOLD",
    "SAME_QUESTION_PROMPT",
    "CuratedAnswer",
    "CuratedAnswers",
    "CuratedCitation",
    "CuratedEntry",
    "curated_answers",
    "curated_now",
    "ModelJudge",
    "judge_messages",
    "minimal_pair",
    "model_judge",
    "same_intent",
]

DEFAULT_THRESHOLD = 0.65
"""Without a judge: the cosine similarity (MiniLM) a question needs to one a curated answer is pinned to. Chosen for
no false hit on the tune and confirm near misses of benchmarks/data/curated_questions.jsonl (with
:func:`same_intent` and the stricter ``DEFAULT_PAIR_THRESHOLD`` for minimal pairs; 0.6 let two through); the held-out
sets still let 12 of 89 near misses through (figures in benchmarks/curated_matching.py). Paraphrases that reword a
question wholly ("make the document view bigger" for "increase the zoom level") fall under it: pin such phrasings
too."""

DEFAULT_PAIR_THRESHOLD = 0.85
"""The similarity a question needs to a pinned one that it differs from in only a few words (:func:`minimal_pair`)."""

DEFAULT_JUDGE_THRESHOLD = 0.5
"""With a judge: the similarity a question needs to a pinned one to be judged at all (see the module's docstring).
Chosen on the tune set of benchmarks/data/curated_questions.jsonl (figures in the benchmark's docstring)."""

DEFAULT_JUDGE_CONFIDENT = 0.85
"""With a judge: the similarity from which the embedding suffices unless the model vetoes (``DEFAULT_JUDGE_VETO``).
Chosen on the tune set, like the others: a true paraphrase this close was rated as low as -1.5 by the model."""

DEFAULT_JUDGE_MARGIN = -0.7
"""With a judge, between ``DEFAULT_JUDGE_THRESHOLD`` and ``DEFAULT_JUDGE_CONFIDENT``: the log-odds of YES over NO
the model must give. A paraphrase that rewords a question wholly is rated near even, a close stranger that the word
guard lets through lower, so the margin sits between them. The log-odds are the model's own: chosen on the tune set
with the default local model; another model is swept with ``benchmarks/curated_matching.py --judge MODEL``."""

DEFAULT_JUDGE_VETO = -2.0
"""With a judge, from ``DEFAULT_JUDGE_CONFIDENT``: the log-odds under which the model's no stops the answer."""

DEFAULT_JUDGE_LIMIT = 1
"""With a judge: the most candidates judged for one question (each is a model call of about 100 tokens). One: the
closest readable candidate that passes :func:`same_intent` was the right pinned question for 110 of the 112 such
paraphrases in the tune, confirm and first two held-out sets, and a second one judged is mostly a chance to be
wrong."""

SAME_QUESTION_PROMPT = (
    'A user asked: "{question}"\nAn editor wrote an answer for the question: "{pinned}"\nDoes that answer fit '
    "what the user asked (the same task, the same action, the same object, not its opposite)? Reply with one "
    "word: YES or NO."
)
"""The judge's question to the model, read as one token (YES or NO), like the answer check's."""

Judge = Callable[[str, str], "float | None"]
"""The log-odds that an answer written for the second question fits the first; None: no verdict."""

State = Literal["live", "changed", "gone"]
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CuratedCitation:
    """An article a curated answer cites, as it was when an editor last confirmed the answer."""

    kb_id: str
    title: str
    url: str
    content_hash: str


@dataclass(frozen=True)
class CuratedAnswer:
    """An editor's answer and what it is pinned to.

    Attributes:
        id: its id (``ragidx curated list`` shows it).
        questions: the questions it answers (one, or a gap's representative questions).
        text: the answer, with ``[n]`` markers for ``citations`` if the editor wrote them.
        citations: the articles it cites, numbered from 1 in this order.
        editor: who pinned or last confirmed it.
        created: when it was pinned; confirmed: when an editor last confirmed it (then, its citations were
            recorded as they are).
        gap: what it was pinned to when pinned to a gap (the gap's suggested title), else ''.
    """

    id: str
    questions: tuple[str, ...]
    text: str
    citations: tuple[CuratedCitation, ...]
    editor: str
    created: datetime
    confirmed: datetime
    gap: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "questions": list(self.questions),
            "text": self.text,
            "citations": [{"kb_id": c.kb_id, "title": c.title, "url": c.url} for c in self.citations],
            "editor": self.editor,
            "created": self.created.isoformat(),
            "confirmed": self.confirmed.isoformat(),
            "gap": self.gap,
        }


@dataclass(frozen=True)
class CuratedEntry:
    """A curated answer with whether it is served: ``live``, or stopped because a cited article ``changed`` or is
    ``gone`` (``stale`` lists them) until an editor confirms it again."""

    answer: CuratedAnswer
    state: State
    stale: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**self.answer.to_dict(), "state": self.state, "stale": list(self.stale)}


_NEGATIONS = frozenset(
    "not no never without cannot cant can't don't dont doesn't doesnt won't wont isn't isnt aren't arent "
    "didn't didnt shouldn't shouldnt nothing none neither nor non fail fails failed failing".split()
)


def _stems(text: str) -> frozenset[str]:
    return frozenset(stem(w) for w in text.split())


# Pairs of opposite intents; a word of one side against a word of the other is another question. By stem.
_OPPOSITES: tuple[tuple[frozenset[str], frozenset[str]], ...] = tuple(
    (_stems(a), _stems(b))
    for a, b in (
        ("insert add create new make include attach append", "delete remove erase drop clear discard detach"),
        ("enable activate on show display unhide visible", "disable deactivate off hide hidden invisible"),
        ("open", "close"),
        ("lock protect protected freeze", "unlock unprotect unprotected unfreeze"),
        ("encrypt", "decrypt"),
        ("increase enlarge bigger larger raise grow", "decrease reduce shrink smaller lower"),
        ("import", "export"),
        ("upload", "download"),
        ("start begin", "stop end finish"),
        ("before above first top header", "after below last bottom footer"),
        ("maximum max largest highest", "minimum min smallest lowest"),
        ("ascending", "descending"),
        ("install", "uninstall"),
        ("upgrade", "downgrade"),
        ("merge join combine", "split separate unmerge"),
        ("copy", "move cut"),
        ("row rows", "column columns"),
        ("horizontal landscape", "vertical portrait"),
        ("group", "ungroup"),
        ("undo", "redo"),
        ("zip compress", "unzip extract decompress"),
        ("empty blank", "filled nonempty"),
        ("all every entire whole", "last latest recent single"),
    )
)
# What a help-desk question asks to do, by kind: two questions that each name an action, of no common kind, ask
# two things ("update the table of contents" is not "insert the table of contents"). By stem.
_ACTIONS: tuple[frozenset[str], ...] = tuple(
    _stems(kind)
    for kind in (
        "insert add create put place build attach include new",
        "delete remove erase drop clear discard",
        "update refresh reload recalculate recompute",
        "edit modify change alter adjust set",
        "open load import",
        "save export convert store",
        "show unhide display reveal visible",
        "hide",
        "enable activate allow turn switch",
        "disable deactivate block",
        "rename",
        "crop resize scale",
        "sort order arrange",
        "filter",
        "count",
        "sum total add",
        "find search look",
        "print",
        "install download",
        "uninstall",
        "undo revert reverse back",
        "redo",
        "protect lock prevent",
        "unprotect unlock",
        "freeze fix keep lock",
        "unfreeze",
        "merge combine join",
        "split separate",
        "copy duplicate",
        "move cut",
        "zoom magnify",
        "run start launch work open",
        "cost price pay buy expensive",
        "encrypt password",
        "decrypt",
    )
)
_NAME = re.compile(r"(?<![\w.])(?:\d[\w.]*|[A-Z][\w.]*[A-Z0-9][\w.]*|[a-z]+[A-Z][\w.]*)")
_CAPITALIZED = re.compile(r"(?<=[\w,;:] )[A-Z][a-z]\w*")


def _marks(text: str) -> tuple[bool, frozenset[str], frozenset[str]]:
    """A question's negation, the stems of its words, and its names and numbers, lower-cased: words with a digit
    (``7.4``, ``11``), with capitals past their first letter (``PDF``, ``LibreOffice``, ``iPhone``) or capitalized
    inside a sentence (``Android``, ``Calc``, ``Windows``)."""
    plain = text.replace("\u2019", "'")
    lowered = words(plain)
    negated = any(w in _NEGATIONS for w in lowered) or "n't" in plain.lower()
    stems = frozenset(stem(w) for w in lowered)
    names = frozenset(m.lower() for m in [*_NAME.findall(plain), *_CAPITALIZED.findall(plain)])
    return negated, stems, names


def _numbers(names: frozenset[str]) -> frozenset[str]:
    return frozenset(n for n in names if any(ch.isdigit() for ch in n))


def _content(text: str) -> frozenset[str]:
    return frozenset(stem(w) for w in words(text) if len(w) > 1 and not is_stop_word(w))


def minimal_pair(question: str, pinned: str) -> bool:
    """Whether two questions differ in only a few of their content words (they share at least half of them, or one
    word replaces one other): "change the default font size" against "change the default font", "insert an endnote"
    against "insert a footnote". Such a
    pair's embeddings are close whatever the changed word means, so it must be closer still to match
    (``CuratedAnswers.pair_threshold``); a paraphrase rewords more than that.

    Example:
        >>> minimal_pair("How do I change the default font size?", "How do I change the default font?")
        True
        >>> minimal_pair("How can I add a table of contents to my document?", "How do I insert a table of contents?")
        False
    """
    cq, cp = _content(question), _content(pinned)
    if cq == cp:
        return False
    one_for_one = len(cq - cp) == 1 and len(cp - cq) == 1  # "insert an endnote" for "insert a footnote"
    return one_for_one or len(cq & cp) / len(cq | cp) >= 0.5


def _actions(stems: frozenset[str]) -> frozenset[int]:
    return frozenset(i for i, kind in enumerate(_ACTIONS) if stems & kind)


def same_intent(question: str, pinned: str) -> bool:
    """Whether ``question`` asks what ``pinned`` asks, as far as words can tell: both negated or neither; no name,
    version or number of one replaced by another in the other (``Windows 7`` for ``Windows 11``, ``iPhone`` for
    ``Android``; one only adding a name is fine); no word of one side of an opposite pair (insert / delete,
    enable / disable, row / column ...) against the other side; and when both name an action, one kind in common
    (``add`` and ``insert`` are one kind, ``update`` and ``insert`` two).

    Example:
        >>> same_intent("How can I add a table?", "How do I insert a table?")
        True
        >>> same_intent("How do I delete a table?", "How do I insert a table?")
        False
        >>> same_intent("Is LibreOffice 7.5 free?", "Is LibreOffice 7.4 free?")
        False
    """
    neg_q, stems_q, names_q = _marks(question)
    neg_p, stems_p, names_p = _marks(pinned)
    if neg_q != neg_p or (names_q - names_p and names_p - names_q) or _numbers(names_q) != _numbers(names_p):
        return False
    for left, right in _OPPOSITES:
        if (stems_q & left and stems_p & right and not stems_p & left) or (
            stems_q & right and stems_p & left and not stems_p & right
        ):
            return False
    acts_q, acts_p = _actions(stems_q), _actions(stems_p)
    return not (acts_q and acts_p and not acts_q & acts_p)


def _table(is_postgres: bool) -> Table:
    name = "ragidx_curated_answers" if is_postgres else "curated_answers"
    return Table(
        name,
        MetaData(),
        Column("tenant", Text, nullable=False),
        Column("id", Text, nullable=False),
        Column("questions_json", Text, nullable=False),
        Column("answer", Text, nullable=False),
        Column("citations_json", Text, nullable=False),
        Column("editor", Text, nullable=False, server_default=""),
        Column("gap", Text, nullable=False, server_default=""),
        Column("created_at", Float, nullable=False),
        Column("confirmed_at", Float, nullable=False),
        PrimaryKeyConstraint("tenant", "id", name=f"{name}_pkey"),
    )


class CuratedAnswers:
    """The curated answers of one tenant, in its article store's database, and the matching that serves them.

    Args:
        store: the article store (its database holds the answers; its tenant scopes them; its articles are the
            ones cited).
        embed_model: the embedding model questions are compared with (the index's: ``engine.embed_model``), or a
            callable that returns it when first needed.
        threshold: the cosine similarity a question needs to one an answer is pinned to, without a judge.
        pair_threshold: the similarity it needs when the two differ in only a few words (:func:`minimal_pair`).
        judge: the second stage (:func:`model_judge`; a callable giving the log-odds that an answer written for
            its second question fits its first, or None for no verdict); None: the embedding alone decides.
        judge_threshold: with a judge, the similarity a question needs to a pinned one to be judged.
        judge_confident: with a judge, the similarity from which only the judge's clear no (``judge_veto``) stops
            an answer.
        judge_margin: the log-odds the judge must give under ``judge_confident``.
        judge_veto: the log-odds under which the judge stops an answer from ``judge_confident``.
        judge_limit: the most candidates judged for one question.
    """

    def __init__(
        self,
        store: ArticleStore,
        embed_model: BaseEmbedding | Callable[[], BaseEmbedding],
        *,
        threshold: float = DEFAULT_THRESHOLD,
        pair_threshold: float = DEFAULT_PAIR_THRESHOLD,
        judge: Judge | None = None,
        judge_threshold: float = DEFAULT_JUDGE_THRESHOLD,
        judge_margin: float = DEFAULT_JUDGE_MARGIN,
        judge_limit: int = DEFAULT_JUDGE_LIMIT,
        judge_confident: float = DEFAULT_JUDGE_CONFIDENT,
        judge_veto: float = DEFAULT_JUDGE_VETO,
    ) -> None:
        self.store = store
        self.threshold = threshold
        self.pair_threshold = pair_threshold
        self.judge_threshold = judge_threshold
        self.judge_margin = judge_margin
        self.judge_limit = judge_limit
        self.judge_confident = judge_confident
        self.judge_veto = judge_veto
        self.judge = judge
        self._embed_model = embed_model
        self.table = _table(store.is_postgres)
        self._tenant = store.tenant or ""
        self._created = False
        self._lock = threading.Lock()
        self._vectors: dict[str, list[float]] = {}

    # --- storage ---------------------------------------------------------------------------------
    def _ready(self) -> None:
        if not self._created:
            with self._lock:
                if not self._created:
                    self.store._write("creating the curated answers' table", self._create)
                    self._created = True

    def _create(self, conn: Connection) -> None:
        self.table.create(conn, checkfirst=True)

    def _mine(self) -> Any:
        return self.table.c.tenant == self._tenant

    def _row(self, row: Any) -> CuratedAnswer:
        return CuratedAnswer(
            id=row.id,
            questions=tuple(json.loads(row.questions_json)),
            text=row.answer,
            citations=tuple(CuratedCitation(**c) for c in json.loads(row.citations_json)),
            editor=row.editor,
            created=datetime.fromtimestamp(row.created_at, UTC),
            confirmed=datetime.fromtimestamp(row.confirmed_at, UTC),
            gap=row.gap,
        )

    def _all(self) -> list[CuratedAnswer]:
        self._ready()
        t = self.table

        def run(conn: Connection) -> list[CuratedAnswer]:
            rows = conn.execute(select(t).where(self._mine()).order_by(t.c.created_at, t.c.id))
            return [self._row(r) for r in rows]

        return self.store._read("reading curated answers", run)

    def _cite(self, kb_ids: Sequence[str]) -> tuple[CuratedCitation, ...]:
        """The articles ``kb_ids`` as they are now; ValueError naming those that are not stored."""
        wanted = list(dict.fromkeys(kb_ids))
        found = self.store.get(wanted)
        hashes = self.store.states(wanted)
        missing = [k for k in wanted if k not in found]
        if missing:
            raise ValueError(
                f"no article {', '.join(map(repr, missing))} in the knowledge base: cite articles by the ids "
                "`ragidx list` shows"
            )
        return tuple(CuratedCitation(k, found[k].title, found[k].url, hashes[k][0]) for k in wanted)

    def add(
        self, questions: Sequence[str], text: str, citations: Sequence[str] = (), *, editor: str = "", gap: str = ""
    ) -> CuratedAnswer:
        """Pin ``text``, citing the articles ``citations`` (kb_ids), to ``questions``.

        Raises:
            ValueError: no question, an empty answer, or a cited article that is not stored.
        """
        asked = tuple(dict.fromkeys(q.strip() for q in questions if q.strip()))
        if not asked:
            raise ValueError("a curated answer needs the question it answers")
        if not text.strip():
            raise ValueError("a curated answer needs its text")
        cited = self._cite(citations)
        now = time.time()
        answer = CuratedAnswer(
            id=uuid.uuid4().hex[:12],
            questions=asked,
            text=text.strip(),
            citations=cited,
            editor=editor,
            created=datetime.fromtimestamp(now, UTC),
            confirmed=datetime.fromtimestamp(now, UTC),
            gap=gap,
        )
        self._ready()
        row = {
            "tenant": self._tenant,
            "id": answer.id,
            "questions_json": json.dumps(list(asked)),
            "answer": answer.text,
            "citations_json": json.dumps([c.__dict__ for c in cited]),
            "editor": editor,
            "gap": gap,
            "created_at": now,
            "confirmed_at": now,
        }
        self.store._write("saving a curated answer", lambda conn: conn.execute(self.table.insert().values(**row)))
        return answer

    def get(self, answer_id: str) -> CuratedAnswer | None:
        return next((a for a in self._all() if a.id == answer_id), None)

    def confirm(self, answer_id: str, *, editor: str = "") -> CuratedAnswer:
        """Record the cited articles as they are now, so the answer is served again.

        Raises:
            KeyError: no curated answer ``answer_id``.
            ValueError: a cited article is gone (remove the answer, or pin a new one that cites what exists).
        """
        current = self.get(answer_id)
        if current is None:
            raise KeyError(f"no curated answer {answer_id!r}: `ragidx curated list` shows them")
        cited = self._cite([c.kb_id for c in current.citations])
        now = time.time()
        t = self.table
        values = {"citations_json": json.dumps([c.__dict__ for c in cited]), "confirmed_at": now, "editor": editor}
        self.store._write(
            "confirming a curated answer",
            lambda conn: conn.execute(update(t).where(self._mine(), t.c.id == answer_id).values(**values)),
        )
        confirmed = datetime.fromtimestamp(now, UTC)
        return CuratedAnswer(
            current.id, current.questions, current.text, cited, editor, current.created, confirmed, current.gap
        )

    def remove(self, answer_id: str) -> bool:
        """Remove a curated answer; False when there was none of that id."""
        self._ready()
        t = self.table
        result = self.store._write(
            "removing a curated answer",
            lambda conn: conn.execute(delete(t).where(self._mine(), t.c.id == answer_id)),
        )
        return bool(result.rowcount)

    def entries(self) -> list[CuratedEntry]:
        """Every curated answer with whether it is served (``live``) or why not."""
        answers = self._all()
        ids = list(dict.fromkeys(c.kb_id for a in answers for c in a.citations))
        now = {k: h for k, (h, _) in self.store.states(ids).items()} if ids else {}
        return [self._entry(a, now) for a in answers]

    @staticmethod
    def _entry(answer: CuratedAnswer, now: dict[str, str]) -> CuratedEntry:
        gone = tuple(c.kb_id for c in answer.citations if c.kb_id not in now)
        if gone:
            return CuratedEntry(answer, "gone", gone)
        changed = tuple(c.kb_id for c in answer.citations if now[c.kb_id] != c.content_hash)
        return CuratedEntry(answer, "changed", changed) if changed else CuratedEntry(answer, "live")

    # --- matching --------------------------------------------------------------------------------
    @property
    def embed_model(self) -> BaseEmbedding:
        from llama_index.core.base.embeddings.base import BaseEmbedding

        model = self._embed_model
        return model if isinstance(model, BaseEmbedding) else model()

    def _vector(self, text: str) -> list[float]:
        vec = self._vectors.get(text)
        if vec is None:
            raw = self.embed_model.get_text_embedding(text)
            norm = sum(x * x for x in raw) ** 0.5 or 1.0
            vec = [x / norm for x in raw]
            if len(self._vectors) > 10_000:
                self._vectors.clear()
            self._vectors[text] = vec
        return vec

    def similarity(self, question: str, pinned: str) -> float:
        """The cosine similarity of two questions' embeddings."""
        a, b = self._vector(question), self._vector(pinned)
        return float(sum(x * y for x, y in zip(a, b, strict=True)))

    def candidates(self, question: str) -> list[tuple[float, CuratedAnswer, str]]:
        """The curated answers pinned to a question close enough to ``question`` to be considered, best first, each
        with its similarity and that pinned question, whether or not they may be served: :func:`same_intent`, and
        the similarity ``judge_threshold`` with a judge, else ``threshold`` (``pair_threshold`` for a
        :func:`minimal_pair`). With a judge they are not yet judged (:meth:`match` judges them)."""
        answers = self._all()
        if not answers or not question.strip():
            return []
        wide = self.judge is not None
        scored: list[tuple[float, CuratedAnswer, str]] = []
        for answer in answers:
            close = [
                (sim, q)
                for q in answer.questions
                if same_intent(question, q) and (sim := self.similarity(question, q)) >= self._needed(question, q, wide)
            ]
            if close:
                sim, pinned = max(close, key=lambda sq: sq[0])
                scored.append((sim, answer, pinned))
        return sorted(scored, key=lambda sa: (-sa[0], sa[1].id))

    def _needed(self, question: str, pinned: str, wide: bool) -> float:
        if minimal_pair(question, pinned):
            return self.pair_threshold
        return self.judge_threshold if wide else self.threshold

    def confirmed(self, question: str, pinned: str, similarity: float) -> bool:
        """Whether ``pinned``'s answer fits ``question`` by the judge: its log-odds reach ``judge_margin``, or only
        ``judge_veto`` where the two are within ``judge_confident``. Without a judge, or when it gives no verdict
        (a model that reports no log-odds, a failed call: logged), the embedding's stricter rule decides."""
        judge = self.judge
        odds: float | None = None
        if judge is not None:
            try:
                odds = judge(question, pinned)
            except Exception as exc:
                logger.warning("the curated answers' judge failed (%s); the embedding decides", type(exc).__name__)
                logger.debug("curated answers' judge", exc_info=True)
        if odds is None:
            return similarity >= self._needed(question, pinned, wide=False)
        return odds >= (self.judge_veto if similarity >= self.judge_confident else self.judge_margin)

    def match(self, question: str, principal: Principal) -> CuratedAnswer | None:
        """The curated answer ``principal`` gets for ``question``: the closest candidate whose citations are as
        last confirmed and all readable by ``principal``, and that the judge confirms (:meth:`confirmed`; at most
        ``judge_limit`` are judged); None when there is none. Readability is settled before any judging, so the
        judge never sees a pinned question the reader may not be answered from."""
        found = self.candidates(question)
        if not found:
            return None
        ids = list(dict.fromkeys(c.kb_id for _, a, _ in found for c in a.citations))
        now = {k: h for k, (h, _) in self.store.states(ids).items()} if ids else {}
        readable = set(self.store.get(ids, principal=principal)) if ids else set()
        judged = 0
        for sim, answer, pinned in found:
            if self._entry(answer, now).state != "live" or not all(c.kb_id in readable for c in answer.citations):
                continue
            if judged >= self.judge_limit:
                break
            judged += 1
            if self.confirmed(question, pinned, sim):
                return answer
        return None

    def answer(self, question: str, principal: Principal) -> Answer | None:
        """``question``'s curated answer for ``principal`` as an :class:`~ragidx.agent.answer.Answer` marked
        ``curated``; None when there is none to serve."""
        from ragidx.agent.answer import Answer, Citation

        t0 = time.perf_counter()
        found = self.match(question, principal)
        if found is None:
            return None
        return Answer(
            question=question,
            text=found.text,
            citations=[Citation(n, c.kb_id, c.title, c.url) for n, c in enumerate(found.citations, start=1)],
            articles=[{"kb_id": c.kb_id, "title": c.title, "url": c.url} for c in found.citations],
            citation_method="curated",
            model="curated",
            timings={"total": round(time.perf_counter() - t0, 4)},
            curated=True,
        )


# --- the judge: the engine's model -----------------------------------------------------------------
def judge_messages(question: str, pinned: str) -> list[Any]:
    """The judge's chat: one user message, :data:`SAME_QUESTION_PROMPT` on the two questions."""
    from llama_index.core.base.llms.types import ChatMessage, MessageRole

    return [ChatMessage(role=MessageRole.USER, content=SAME_QUESTION_PROMPT.format(question=question, pinned=pinned))]


@dataclass(frozen=True)
class ModelJudge:
    """The engine's chat model as the judge (:func:`model_judge`): one token, YES or NO, asked like the answer
    check (both lifted by ``logit_bias``, greedy), its log-odds read from the reply's log-probabilities; at a place
    in the engine's model queue, like a question. No verdict (None) where the engine's model has
    no answer check (an endpoint that may take no ``logit_bias`` by token or report no log-probabilities): the
    embedding's stricter rule decides there."""

    engine: Engine

    def __call__(self, question: str, pinned: str) -> float | None:
        from ragidx.agent.guards.gates import check_log_odds, check_options

        endpoint = self.engine.settings.llm
        provider = self.engine.llm_provider
        if provider.answer_check(endpoint) is None:
            return None
        llm = provider.get(endpoint)
        with self.engine.model_queue.slot():
            response = llm.chat(judge_messages(question, pinned), **check_options(0.0))
        return check_log_odds(response)


def model_judge(engine: Engine) -> ModelJudge:
    """``engine``'s model as the curated answers' judge (:class:`ModelJudge`)."""
    return ModelJudge(engine)


# --- the engine's hook -----------------------------------------------------------------------------
_BY_ENGINE: weakref.WeakKeyDictionary[Engine, CuratedAnswers] = weakref.WeakKeyDictionary()
_BY_ENGINE_LOCK = threading.Lock()


def curated_answers(engine: Engine) -> CuratedAnswers:
    """The curated answers of ``engine``'s knowledge base (one object per engine, made on first use)."""
    with _BY_ENGINE_LOCK:
        found = _BY_ENGINE.get(engine)
        if found is None:
            found = _BY_ENGINE[engine] = CuratedAnswers(
                engine.article_store, lambda: engine.embed_model, judge=model_judge(engine)
            )
        return found


def _stands_alone(engine: Engine, session_id: str | None, history: Sequence[Any] | None) -> bool:
    """A question with no conversation before it (a follow-up's meaning depends on the turns before it)."""
    return not history and not (session_id is not None and engine.memory.get(session_id))


def curated_now(
    engine: Engine, question: str, session_id: str | None, scope: Scope, history: Sequence[Any] | None
) -> Answer | None:
    """The curated answer for a turn of ``engine``, or None: for a question with no conversation before it (a
    follow-up's meaning depends on the turns before it), on an article store of ragidx's own. A failure to look
    is logged and never fails the turn: the model answers."""
    from ragidx.stores.article_store import ArticleStore

    if not _stands_alone(engine, session_id, history) or not isinstance(engine.article_store, ArticleStore):
        return None
    try:
        answer = curated_answers(engine).answer(question, scope.principal)
    except Exception as exc:
        logger.warning("looking for a curated answer failed (%s); the model answers", type(exc).__name__)
        logger.debug("curated answer lookup", exc_info=True)
        return None
    if answer is not None:
        answer.session_id = session_id
    return answer


async def curated_turn(
    engine: Engine, question: str, session_id: str | None, scope: Scope, history: Sequence[Any] | None
) -> Answer | None:
    """``Engine.ask``'s hook, before the model queue: :func:`curated_now` in a thread."""
    import asyncio

    return await asyncio.to_thread(curated_now, engine, question, session_id, scope, history)


async def curated_stream(
    engine: Engine,
    question: str,
    session_id: str | None,
    scope: Scope,
    history: Sequence[Any] | None,
    stream: AsyncGenerator[Any, None],
) -> AsyncGenerator[Any, None]:
    """``Engine.astream_ask``'s hook: the curated answer's text and the answer when there is one (``stream``, the
    model's turn, is then closed unstarted), else ``stream``'s items."""
    answer = await curated_turn(engine, question, session_id, scope, history)
    if answer is not None:
        await stream.aclose()
        yield answer.text
        yield answer
        return
    async for item in stream:
        yield item
