"""What the knowledge base is missing: unanswered and down-voted questions grouped into gaps.

:func:`build_report` takes the question log's records over a period (those answered "not found", those the
answer check declined, and those a reader down-voted), embeds each distinct question with the index's own
embedding model, and groups them with scikit-learn's ``AgglomerativeClustering`` (average linkage over cosine
distance, cut at ``threshold``). Each group of at least ``min_size`` questions is a :class:`GapCluster`: how many
questions and readers, its trend over the period, the questions closest to its centre (near-duplicates shown
once), the articles a search for its most central question finds (the ones that come closest: likely stale or
incomplete), the articles readers were shown, and a suggested title for the missing article, built from the
group's most distinctive words (class-based TF-IDF: frequent in the group, rare in the others).

Deterministic: the same records give the same report whatever their order (questions are sorted before they
are clustered; clusters are numbered by size, then by their first question).

Why average linkage with a distance cut (measured with ``benchmarks/gaps_recovery.py --compare`` on two planted
sets): the cut is a property of the embedding model ("as far apart as two phrasings of one need"), not of how many
questions were asked, so one threshold serves a log of 300 questions and one of 10,000. HDBSCAN's clusters depend
on density: with ``min_cluster_size=3`` it merged distinct planted topics into clusters about half pure (3 of 8
topics recovered on the LibreOffice set, 6 of 8 on the Docker set, against 8 of 8 on both with average linkage).

Example:
    >>> report = build_report(records, engine.embed_model, article_search=lambda q: engine.retrieve(q, top_k=3))
    ... # doctest: +SKIP
    >>> print(report.to_markdown())  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from ragidx.questions.records import Outcome, QuestionRecord
from ragidx.safe_text import printable
from ragidx.terms import is_stop_word, stem, words

if TYPE_CHECKING:
    import numpy as np
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from ragidx.article import Article
    from ragidx.engine import Engine

__all__ = [
    "DEFAULT_THRESHOLD",
    "GAP_OUTCOMES",
    "GapArticle",
    "GapCluster",
    "GapReport",
    "build_report",
    "engine_report",
    "parse_since",
]

GAP_OUTCOMES: tuple[Outcome, ...] = ("not_found", "declined")
"""The outcomes that make a question a gap (with down-voted answers of any outcome)."""

DEFAULT_THRESHOLD = 0.45
"""Cosine distance at which two groups of questions stop being merged (average linkage), for MiniLM. Tuned on the
planted LibreOffice set (benchmarks/data/gaps_libreoffice.jsonl: cuts 0.35 to 0.5 recover all 8 topics, 0.55
six, 0.6 four), confirmed on the planted Docker set (gaps_docker.jsonl: 0.4 to 0.5 all 8, 0.35 seven, 0.55 six).
Another embedding model may need another cut."""

DEFAULT_MIN_SIZE = 3
"""The fewest questions a gap needs to be reported."""

# Words that say nothing about what is missing, whatever the cluster: question words and the generic verbs of
# help requests (stop lists keep "how" and "can" but not these).
_FILLER = frozenset(
    "use using used way want need get make work works working possible able help please tell know find much many "
    "really also still".split()
)
_NORMAL = re.compile(r"[^\w]+", re.UNICODE)

Direction = Literal["rising", "falling", "steady"]
Bucket = Literal["day", "week"]
ArticleSearch = Callable[[str], Sequence["Article"]]
"""Finds articles for a text, best first (``lambda q: engine.retrieve(q, top_k=3)``)."""


@dataclass(frozen=True)
class GapArticle:
    """An article near a gap: found by searching its most central question, or shown to its readers.

    Attributes:
        kb_id: the article's id.
        title: its title ('' for an article only known from the log).
        url: its URL ('' likewise).
        score: the search's score for it (None for an article only known from the log).
        shown: how many of the gap's questions were shown it.
    """

    kb_id: str
    title: str
    url: str
    score: float | None
    shown: int


@dataclass(frozen=True)
class GapCluster:
    """One gap: questions asked many ways that the knowledge base did not answer.

    Attributes:
        rank: 1 for the largest gap.
        size: how many logged questions it holds (the same question asked twice counts twice).
        readers: how many distinct readers asked them ('' anonymous readers count as one).
        title: a suggested title for the missing article.
        terms: the words most distinctive of it, best first (as its questions spell them most often).
        questions: its most central questions, near-duplicates shown once, most central first.
        articles: the articles nearest to it (likely stale or incomplete), best first.
        outcomes: how many of its questions ended each way (``not_found``, ``declined``, ``downvoted`` ...).
        trend: questions per day or week over the report's period, oldest first (``(start date, count)``).
        direction: whether it grows (``rising``: the second half of the period holds clearly more), shrinks
            (``falling``) or neither (``steady``).
        cohesion: the mean cosine similarity of its questions to their centre (1.0: all alike).
        question_ids: the ids of all its logged questions (the log's, to look each one up).
    """

    rank: int
    size: int
    readers: int
    title: str
    terms: tuple[str, ...]
    questions: tuple[str, ...]
    articles: tuple[GapArticle, ...]
    outcomes: dict[str, int]
    trend: tuple[tuple[str, int], ...]
    direction: Direction
    cohesion: float
    question_ids: tuple[str, ...] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["trend"] = [{"start": start, "count": count} for start, count in self.trend]
        return data


@dataclass(frozen=True)
class GapReport:
    """The gaps of a period, largest first.

    Attributes:
        since, until: the period (UTC).
        bucket: the trend's unit (``day`` for periods up to 31 days, else ``week``).
        questions: how many logged questions were gaps in the period (unanswered or down-voted).
        clustered: how many of them are in a reported gap (the rest were asked too few times alike).
        clusters: the gaps, largest first.
    """

    since: datetime
    until: datetime
    bucket: Bucket
    questions: int
    clustered: int
    clusters: tuple[GapCluster, ...]

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data: ``{"since", "until", "bucket", "questions", "clustered", "clusters":
        [{"rank", "size", "readers", "title", "terms", "questions", "articles", "outcomes", "trend", ...}]}``."""
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "bucket": self.bucket,
            "questions": self.questions,
            "clustered": self.clustered,
            "clusters": [c.to_dict() for c in self.clusters],
        }

    def to_csv(self) -> str:
        """One row per gap: rank, size, readers, direction, trend counts, title, terms, questions, articles."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(
            ["rank", "size", "readers", "direction", "trend", "title", "terms", "questions", "articles", "outcomes"]
        )
        for c in self.clusters:
            writer.writerow(
                [
                    c.rank,
                    c.size,
                    c.readers,
                    c.direction,
                    " ".join(str(n) for _, n in c.trend),
                    _cell(c.title),
                    "; ".join(c.terms),
                    " | ".join(_cell(q) for q in c.questions),
                    " | ".join(_cell(a.title or a.kb_id) for a in c.articles),
                    "; ".join(f"{k}={v}" for k, v in sorted(c.outcomes.items())),
                ]
            )
        return out.getvalue()

    def to_markdown(self) -> str:
        """A page for editors: a table of the gaps, then each gap with its questions, articles and trend."""
        lines = [
            f"# Knowledge-base gaps, {self.since:%Y-%m-%d} to {self.until:%Y-%m-%d}",
            "",
            f"{self.questions} unanswered or down-voted questions; {self.clustered} of them in "
            f"{len(self.clusters)} gaps.",
            "",
        ]
        if not self.clusters:
            return "\n".join([*lines, "No gap was asked about often enough to report."]) + "\n"
        lines += ["| # | Suggested article | Questions | Readers | Trend |", "|---|---|---|---|---|"]
        lines += [f"| {c.rank} | {_md(c.title)} | {c.size} | {c.readers} | {c.direction} |" for c in self.clusters]
        for c in self.clusters:
            lines += ["", f"## {c.rank}. {_md(c.title)}", ""]
            lines.append(
                f"{c.size} questions from {c.readers} readers, {c.direction}; key terms: {', '.join(c.terms)}."
            )
            lines += ["", "Asked as:", ""]
            lines += [f"- {_md(q)}" for q in c.questions]
            if c.articles:
                lines += ["", "Nearest articles (check whether they are stale or incomplete):", ""]
                lines += [
                    f"- {_md(a.title or a.kb_id)} ({_md(a.kb_id)})" + (f", shown {a.shown}x" if a.shown else "")
                    for a in c.articles
                ]
            lines += ["", f"Per {self.bucket}: " + ", ".join(f"{s} {n}" for s, n in c.trend)]
        return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """Text for a CSV cell: control characters escaped, and a leading ``= + - @`` made inert (a spreadsheet would
    run it as a formula)."""
    shown = printable(text)
    return f"'{shown}" if shown[:1] in ("=", "+", "-", "@") else shown


def _md(text: str) -> str:
    """Text for Markdown: control characters escaped, and the characters that would start markup escaped."""
    shown = printable(text)
    return re.sub(r"([\\`*_{}\[\]<>()#+!|~])", r"\\\1", shown)


def parse_since(value: str, *, now: datetime | None = None) -> datetime:
    """A period's start from ``30d``, ``2w``, ``12h`` (before ``now``) or an ISO date or time (UTC unless it says).

    Example:
        >>> parse_since("7d", now=datetime(2026, 11, 28, tzinfo=UTC)).isoformat()
        '2026-11-21T00:00:00+00:00'
    """
    now = now or datetime.now(UTC)
    match = re.fullmatch(r"\s*(\d+)\s*([hdw])\s*", value)
    if match:
        n, unit = int(match.group(1)), match.group(2)
        return now - timedelta(hours=n) * {"h": 1, "d": 24, "w": 24 * 7}[unit]
    try:
        start = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(
            f"--since {value!r} is not a period: use e.g. 30d (days), 2w (weeks), 12h (hours) or a date 2026-11-01"
        ) from None
    return start if start.tzinfo else start.replace(tzinfo=UTC)


def _normal(text: str) -> str:
    return _NORMAL.sub(" ", text.lower()).strip()


def build_report(
    records: Sequence[QuestionRecord],
    embed_model: BaseEmbedding,
    article_search: ArticleSearch | None = None,
    *,
    downvoted: Collection[str] = (),
    since: datetime | None = None,
    until: datetime | None = None,
    min_size: int = DEFAULT_MIN_SIZE,
    threshold: float = DEFAULT_THRESHOLD,
    representatives: int = 5,
    top_articles: int = 3,
    max_terms: int = 5,
    titler: Callable[[Sequence[str], Sequence[str]], str] | None = None,
) -> GapReport:
    """Group the period's unanswered and down-voted questions into gaps.

    Args:
        records: logged questions (any outcome: those answered and not down-voted are left out here).
        embed_model: the index's embedding model (``engine.embed_model``), which embeds each distinct question.
        article_search: finds the articles nearest each gap from its most central question; None: only the
            articles shown to its readers are listed.
        downvoted: ids of questions a reader down-voted (their answers count as gaps too).
        since, until: the period; None: from the first record, up to the last (or now, with ``since``).
        min_size: the fewest questions a reported gap holds.
        threshold: the cosine distance at which groups stop merging (lower: tighter, smaller gaps).
        representatives: the most central questions shown per gap.
        top_articles: the articles searched per gap.
        max_terms: the distinctive terms kept per gap.
        titler: ``titler(terms, questions) -> title`` to write the suggested title (e.g. with an LLM); by default
            the title is built from the terms.

    Raises:
        ValueError: ``min_size`` under 1, or ``threshold`` outside (0, 2).
    """
    if min_size < 1:
        raise ValueError(f"min_size must be at least 1, got {min_size}")
    if not 0 < threshold < 2:
        raise ValueError(f"threshold is a cosine distance between 0 and 2, got {threshold}")
    down = frozenset(downvoted)
    chosen = [
        r
        for r in records
        if (r.outcome in GAP_OUTCOMES or r.id in down)
        and (since is None or r.time >= since)
        and (until is None or r.time <= until)
        and r.question.strip()
    ]
    chosen.sort(key=lambda r: (r.time, r.id))
    start = since or (chosen[0].time if chosen else datetime.now(UTC))
    end = until or (chosen[-1].time if chosen and since is None else datetime.now(UTC))
    bucket: Bucket = "day" if end - start <= timedelta(days=31) else "week"
    if not chosen:
        return GapReport(start, end, bucket, 0, 0, ())

    by_text: dict[str, list[QuestionRecord]] = {}
    for r in chosen:
        by_text.setdefault(_normal(r.question) or r.question, []).append(r)
    keys = sorted(by_text)
    texts = [by_text[k][0].question for k in keys]
    vectors = _embed(embed_model, texts)
    labels = _cluster(vectors, threshold)

    groups: dict[int, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(int(label), []).append(i)
    sized = [(sum(len(by_text[keys[i]]) for i in members), members) for members in groups.values()]
    sized = [(n, m) for n, m in sized if n >= min_size]
    sized.sort(key=lambda item: (-item[0], keys[item[1][0]]))

    all_terms = [_doc_terms([texts[i] for i in members]) for _, members in sized]
    distinctive = _ctfidf(all_terms, max_terms)
    clusters: list[GapCluster] = []
    for rank, ((size, members), top) in enumerate(zip(sized, distinctive, strict=True), start=1):
        recs = [r for i in members for r in by_text[keys[i]]]
        weights = [len(by_text[keys[i]]) for i in members]
        centre, order, cohesion = _centre(vectors, members, weights)
        questions = _representatives([texts[i] for i in order], vectors, order, representatives)
        terms = tuple(_spelling(t, [texts[i] for i in order]) for t in top)
        title = titler(terms, questions) if titler else _title(terms, questions)
        clusters.append(
            GapCluster(
                rank=rank,
                size=size,
                readers=len({r.reader for r in recs}),
                title=title,
                terms=terms,
                questions=questions,
                articles=_articles(recs, questions[0], article_search, top_articles),
                outcomes=_outcomes(recs, down),
                trend=_trend([r.time for r in recs], start, end, bucket),
                direction=_direction([r.time for r in recs], start, end),
                cohesion=round(cohesion, 4),
                question_ids=tuple(r.id for r in sorted(recs, key=lambda r: (r.time, r.id))),
            )
        )
    clustered = sum(c.size for c in clusters)
    return GapReport(start, end, bucket, len(chosen), clustered, tuple(clusters))


def engine_report(
    engine: Engine,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    min_size: int = DEFAULT_MIN_SIZE,
    user: str | None = None,
    groups: Sequence[str] = (),
) -> GapReport:
    """The gaps in ``engine``'s question log (its tenant's) from ``since`` to ``until``: :func:`build_report` over
    its unanswered and down-voted questions, with the engine's embedding model, and its nearest articles searched
    as ``user`` / ``groups`` (by default the public: an admin's report names no article its reader may not read)."""
    from ragidx.questions.log import QuestionLog

    settings = engine.settings
    log = QuestionLog(engine.article_store, tenant=settings.tenant, retention_days=settings.questions.retention_days)
    unanswered = log.records(since=since, until=until, outcomes=GAP_OUTCOMES)
    down = log.downvoted(since=since, until=until)
    records = list({r.id: r for r in [*unanswered, *down]}.values())

    def search(question: str) -> list[Article]:
        return engine.retrieve(question, top_k=3, user=user, groups=list(groups))

    return build_report(
        records,
        engine.embed_model,
        search if engine.article_store.count() else None,
        downvoted={r.id for r in down},
        since=since,
        until=until,
        min_size=min_size,
    )


def _embed(embed_model: BaseEmbedding, texts: Sequence[str]) -> np.ndarray:
    import numpy as np

    rows = embed_model.get_text_embedding_batch(list(texts))
    matrix = np.asarray(rows, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


def _cluster(vectors: np.ndarray, threshold: float) -> np.ndarray:
    import numpy as np

    if len(vectors) == 1:
        return np.zeros(1, dtype=int)
    from sklearn.cluster import AgglomerativeClustering

    model = AgglomerativeClustering(n_clusters=None, metric="cosine", linkage="average", distance_threshold=threshold)
    labels: np.ndarray = model.fit_predict(vectors)
    return labels


def _centre(vectors: np.ndarray, members: list[int], weights: list[int]) -> tuple[np.ndarray, list[int], float]:
    """The members' weighted mean direction, the members most central first, and their mean similarity to it."""
    import numpy as np

    block = vectors[members]
    centre = (block * np.asarray(weights, dtype=np.float64)[:, None]).sum(axis=0)
    centre = centre / (np.linalg.norm(centre) or 1.0)
    sims = block @ centre
    order = [members[j] for j in sorted(range(len(members)), key=lambda j: (-round(float(sims[j]), 9), members[j]))]
    return centre, order, float(np.average(sims, weights=weights))


def _representatives(texts: Sequence[str], vectors: np.ndarray, order: list[int], n: int) -> tuple[str, ...]:
    """The most central questions, each unlike those already taken (cosine under 0.95): paraphrases that differ
    only in punctuation or a word are shown once."""
    chosen: list[int] = []
    shown: list[str] = []
    for text, i in zip(texts, order, strict=True):
        if len(shown) >= n:
            break
        if any(float(vectors[i] @ vectors[j]) > 0.95 for j in chosen):
            continue
        chosen.append(i)
        shown.append(text)
    return tuple(shown)


def _doc_terms(texts: Sequence[str]) -> Counter[str]:
    """A cluster's content words by stem, each counted once per question (a word repeated in one question is not
    more distinctive)."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update({stem(w) for w in words(text) if _content(w)})
    return counts


def _content(word: str) -> bool:
    return len(word) > 1 and not word.isdigit() and not is_stop_word(word) and word not in _FILLER


def _ctfidf(docs: Sequence[Counter[str]], top: int) -> list[list[str]]:
    """Class-based TF-IDF (BERTopic's c-TF-IDF): a term's share of its cluster's words times
    ``log(1 + mean words per cluster / its count over all clusters)``; the ``top`` terms per cluster, as the
    word most often written for each stem."""
    totals: Counter[str] = Counter()
    for doc in docs:
        totals.update(doc)
    mean_words = (sum(totals.values()) / len(docs)) if docs else 0.0
    out: list[list[str]] = []
    for doc in docs:
        size = sum(doc.values()) or 1
        scored = sorted(
            ((count / size) * math.log(1 + mean_words / totals[t]), t) for t, count in doc.items() if count > 1
        )
        ranked = sorted(scored, key=lambda st: (-st[0], st[1]))
        out.append([t for _, t in ranked[:top]])
    return out


def _title(terms: Sequence[str], questions: Sequence[str]) -> str:
    """A title from the first three distinctive terms (as the questions spell them): ``"Licenses, cost and pay"``.
    Falls back on the most central question."""
    if not terms:
        return questions[0] if questions else ""
    first = list(terms[:3])
    body = first[0] if len(first) == 1 else ", ".join(first[:-1]) + " and " + first[-1]
    return body[:1].upper() + body[1:]


def _spelling(term: str, questions: Sequence[str]) -> str:
    """How the questions write the words of stem ``term`` most often (keeping a product name's capitals)."""
    seen: Counter[str] = Counter()
    for q in questions:
        for raw in re.findall(r"\w+", q):
            if stem(raw.lower()) == term:  # a capital past a question's first word is a name's (AI, Android)
                seen[raw if raw != raw.lower() and q.find(raw) > 0 else raw.lower()] += 1
    if not seen:
        return term
    return sorted(seen.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


def _articles(
    recs: Sequence[QuestionRecord], question: str, search: ArticleSearch | None, top: int
) -> tuple[GapArticle, ...]:
    """The articles a search for the gap's most central question finds, then those its readers were shown most
    (each once), with how often each was shown."""
    shown: Counter[str] = Counter()
    for r in recs:
        shown.update({a.kb_id for a in r.articles})
    out: list[GapArticle] = []
    if search is not None and top > 0:
        for article in list(search(question))[:top]:
            score = article.metadata.get("rerank_score")
            out.append(
                GapArticle(
                    article.kb_id,
                    article.title,
                    article.url,
                    round(float(score), 4) if isinstance(score, (int, float)) else None,
                    shown.get(article.kb_id, 0),
                )
            )
    found = {a.kb_id for a in out}
    for kb_id, n in sorted(shown.items(), key=lambda kv: (-kv[1], kv[0]))[:top]:
        if kb_id not in found:
            out.append(GapArticle(kb_id, "", "", None, n))
    return tuple(out)


def _outcomes(recs: Sequence[QuestionRecord], down: frozenset[str]) -> dict[str, int]:
    counts: Counter[str] = Counter(r.outcome for r in recs)
    downs = sum(1 for r in recs if r.id in down)
    if downs:
        counts["downvoted"] = downs
    return dict(sorted(counts.items()))


def _bucket_start(t: datetime, bucket: Bucket) -> datetime:
    day = t.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday()) if bucket == "week" else day


def _trend(times: Sequence[datetime], start: datetime, end: datetime, bucket: Bucket) -> tuple[tuple[str, int], ...]:
    """Questions per day or week from ``start`` to ``end``, every bucket listed (0 for none)."""
    step = timedelta(days=7 if bucket == "week" else 1)
    counts = Counter(_bucket_start(t, bucket) for t in times)
    out: list[tuple[str, int]] = []
    cursor, last = _bucket_start(start, bucket), _bucket_start(end, bucket)
    while cursor <= last:
        out.append((cursor.date().isoformat(), counts.get(cursor, 0)))
        cursor += step
    return tuple(out)


def _direction(times: Sequence[datetime], start: datetime, end: datetime) -> Direction:
    """``rising`` when the period's second half holds at least 1.5 times the first half's questions (and 2 more),
    ``falling`` the other way round, else ``steady``."""
    middle = start + (end - start) / 2
    first = sum(1 for t in times if t < middle)
    second = len(times) - first
    if second >= 1.5 * first and second - first >= 2:
        return "rising"
    if first >= 1.5 * second and first - second >= 2:
        return "falling"
    return "steady"
