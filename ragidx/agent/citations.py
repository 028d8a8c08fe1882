"""Which articles an answer cites: ``[n]`` markers first, shared words when the model wrote none; and where in a
document each citation points: the section and page of the sentence that supports the statement it closes.

A document (PDF, Word, HTML, Markdown) keeps its ``sections`` (character offsets → title, page, anchor): the
cited source's sentence that shares most of the statement's words (weighted by how rare each is in the source)
is found in its text, and its offset names the section, page and link (``manual.pdf#page=2``,
``page.html#anchor``). Where the source's text is not the stored article's (the context budget compressed it,
a flash excerpt, text replaced as instruction-like), or no sentence holds enough of the statement, the
citation keeps the place of the article's best search match (``location``).

Example:
    >>> sources = [Article(kb_id="a", title="Tables", url="u", content="Insert a table.")]
    >>> text, cites, method = resolve_citations("Choose Insert > Table [1][7].", sources)
    >>> ([c.kb_id for c in cites], method)
    (['a'], 'markers')
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from typing import Any

from ragidx.agent.answer import Citation
from ragidx.agent.text_fragments import with_text_fragment
from ragidx.article import (
    COMPRESSED_VERBATIM,
    LOCATION,
    SECTIONS,
    Article,
    as_articles,
    describe_location,
    location_url,
)
from ragidx.budget.extractive import ELLIPSIS
from ragidx.safety.injection import FLAGS_KEY, shown_title, shown_url
from ragidx.sentences import split_units
from ragidx.terms import terms

MARKER = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]")
ASKING = frozenset({"explain", "tell", "describe", "like", "would", "could", "also"})
"""Words of a request, not of its topic (beside the stop words of ``ragidx.terms``)."""
CITING = frozenset(
    {
        "information", "found", "find", "article", "articles", "source", "sources", "provide", "provides",
        "provided", "detailed", "details", "instructions", "mentioned", "according", "listed", "cited", "see",
        "refer", "refers", "page", "given", "can", "this", "stated", "states", "says", "described", "context",
        "explained", "информация", "информации", "информацию", "статья", "статье", "статьи", "статьях", "статей",
        "источник", "источнике", "источника", "источниках", "указано", "описано", "приведено", "см",
    }
)  # fmt: skip
"""Words a model uses to talk about its sources ("This information is found in article [4]"): they say
nothing about which source holds the statement, so the marker check leaves them out."""


def content_words(text: str) -> set[str]:
    return set(terms(text, extra_stop_words=ASKING))


def resolve_citations(
    text: str, sources: Sequence[Article], *, question: str = "", min_overlap: float = 0.35
) -> tuple[str, list[Citation], str]:
    """(text with invalid markers removed, citations in order of first use, method).

    ``sources[i]`` is cited as ``[i + 1]``. Markers for numbers that name no source are removed from
    the text (never turned into invented citations); valid ones are checked against the statement they
    close (see :func:`check_markers`). Without any valid marker, a source is attributed when it holds at
    least ``min_overlap`` of the answer's content words, weighted by how rare each word is among the
    sources, and at least half of the best source's share (at most 3 sources).
    """

    sources = as_articles(sources)

    def keep_valid(match: re.Match[str]) -> str:
        numbers = [int(n) for n in re.split(r"\s*,\s*", match.group(1))]
        return "".join(f"[{n}]" for n in numbers if 1 <= n <= len(sources))

    cleaned = MARKER.sub(keep_valid, text)
    if MARKER.search(cleaned):
        cleaned = check_markers(cleaned, sources, question=question)
        cited = list(dict.fromkeys(int(m.group(1)) for m in MARKER.finditer(cleaned)))
        statements = cited_statements(cleaned)
        return cleaned, [_citation(n, sources[n - 1], statements.get(n, [])) for n in cited], "markers"
    answer_words = content_words(cleaned)
    if not answer_words or not sources:
        return cleaned, [], "none"
    shares = _shares(answer_words, [_source_words(s) for s in sources])
    best = max(shares)
    picked = sorted(
        (i for i, share in enumerate(shares) if share >= min_overlap and share >= 0.5 * best),
        key=lambda i: -shares[i],
    )[:3]
    if not picked:
        return cleaned, [], "none"
    return cleaned, [_citation(i + 1, sources[i], [cleaned]) for i in sorted(picked)], "overlap"


def _source_words(source: Article) -> set[str]:
    return content_words(f"{source.title} {source.content}")


def _shares(claim: set[str], source_words: Sequence[set[str]]) -> list[float]:
    """Each source's share of ``claim``'s words, weighted by how rare each word is among the sources:
    a word every source has proves nothing."""
    n = len(source_words)
    idf = {w: math.log(1 + n / max(1, sum(w in sw for sw in source_words))) for w in claim}
    total = sum(idf.values()) or 1.0
    return [sum(idf[w] for w in claim & sw) / total for sw in source_words]


# Markers side by side ("[1][2]", "[1], [2]", "[1] and [2]") are one group: checked together, against the
# statement before the first of them.
_GROUP = re.compile(r"(?:\[\d{1,3}\](?:\s*(?:[,;&]|\band\b|\bor\b|\bи\b)?\s*))*\[\d{1,3}\]", re.I)
_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|$)")


def check_markers(
    text: str, sources: Sequence[Article], *, question: str = "", keep_ratio: float = 0.5, min_share: float = 0.3
) -> str:
    """``text`` with each group of ``[n]`` markers checked against the statement it closes (the text since
    the previous group, and the rest of the sentence when the group stands inside one): a marker stays when
    its source holds at least ``keep_ratio`` of the share of the statement's new words (those the question
    does not already use, and not the words a model talks about its sources with) that the best source holds,
    on the whole statement or on one of its sentences; when none does, the best source is cited instead,
    provided it holds at least ``min_share`` of them. Where the statement asserts values (a number with its
    unit, an escape such as ``\\N``) that another source writes and the cited ones do not, that source is
    cited instead (see ``_by_values``).

    A small model cites by position more than by content: asked for shared_buffers' default with
    "Preset Options" shown first and "Resource Consumption" second, it wrote the right value (128MB, from
    the second) and cited [1]. A statement whose words no source holds well keeps what the model wrote.
    Checking sentence by sentence keeps a marker for a statement whose first sentence comes from its source
    and whose second paraphrases another ("type an apostrophe … [1]" stays, though "treat the string as
    text, no numeric conversion" reads more like "Converting Text to Numbers").

    Example:
        >>> sources = [Article("p", "Preset Options", "", "block_size reports 8192."),
        ...            Article("r", "Resource Consumption", "", "shared_buffers defaults to 128MB.")]
        >>> check_markers("shared_buffers defaults to 128MB [1].", sources, question="shared_buffers default?")
        'shared_buffers defaults to 128MB [2].'
        >>> check_markers("It is 128MB. This is found in articles [1] and [2].", sources)
        'It is 128MB. This is found in articles [2].'
    """
    source_words = [_source_words(s) for s in sources]
    source_texts = [shown_text([s], "") for s in sources]
    asked = content_words(question)
    asked_values = set(_values(question))

    def new_words(span: str) -> set[str]:
        return set(terms(span, extra_stop_words=ASKING | CITING)) - asked

    out: list[str] = []
    start = 0
    for group in _GROUP.finditer(text):
        numbers = list(dict.fromkeys(int(n) for n in re.findall(r"\d+", group.group(0))))
        before = text[start : group.start()]
        out.append(before)
        statement = before + _rest_of_sentence(text, group)
        claim = new_words(statement)
        start = group.end()
        if not claim or not all(1 <= n <= len(sources) for n in numbers):
            out.append(group.group(0))
            continue
        shares = _shares(claim, source_words)
        best = max(range(len(shares)), key=lambda i: shares[i])
        support = {n: shares[n - 1] / shares[best] if shares[best] else 1.0 for n in numbers}
        for sentence in _SENTENCE.findall(statement):
            words = new_words(sentence)
            if len(words) < 2 or words == claim:
                continue
            by_sentence = _shares(words, source_words)
            top = max(by_sentence)
            if top >= min_share:
                support = {n: max(support[n], by_sentence[n - 1] / top) for n in numbers}
        kept = [n for n in numbers if support[n] >= keep_ratio]
        if not kept:
            kept = [best + 1] if shares[best] >= min_share else numbers
        kept = _by_values(statement, kept, source_texts, asked_values)
        out.append("".join(f"[{n}]" for n in kept) if kept != numbers else group.group(0))
    out.append(text[start:])
    return "".join(out)


def _rest_of_sentence(text: str, group: re.Match[str]) -> str:
    """The words after a group of markers written inside a sentence, up to its end: "… is [1]
    META-INF/documentsignatures.xml." cites the file's name, which comes after the marker. Nothing when the
    marker closes its sentence (or a line)."""
    if re.search(r"[.!?:]\s*$", text[: group.start()]):
        return ""
    rest = re.match(r"[^.!?\n\[]*(?:\.(?=\w)[^.!?\n\[]*)*", text[group.end() :])
    return " " + rest.group(0) if rest and re.search(r"\w", rest.group(0)) else ""


# "1. Open the Tools menu" / "2) Click New": a list's own numbering, not a value the answer states.
LIST_NUMBER = re.compile(r"^([ \t]*(?:[-*][ \t]*)?)\d{1,2}[.)](?=[ \t])", re.M)

# A value a statement asserts: a number with what is stuck to it ("1min", "2kB", "-1", "8.0.2") or an escape
# such as "\\N". A numbered list's "1." is not one (see ``LIST_NUMBER``).
_VALUE = re.compile(r"(?<![\w.\\-])(?:-?\d[\w.,:/%-]*\w|-?\d|\\[A-Za-z]\w*)")


def _values(text: str) -> list[str]:
    plain = LIST_NUMBER.sub(r"\1", html.unescape(text))
    return list(dict.fromkeys(v.rstrip(".,").lower() for v in _VALUE.findall(plain)))


def _by_values(statement: str, cited: list[int], texts: Sequence[str], asked: set[str]) -> list[int]:
    """``cited`` (1-based), unless the statement asserts values that another source writes and the cited ones
    do not (as many): then the source that writes most of them, the first such. A value is what a statement
    is checked by: "autovacuum_naptime defaults to one minute (1min) [2]" where only [1] writes "1min"."""
    values = [v for v in _values(statement) if v not in asked and len(v) > 1]  # a bare "2" is everywhere
    if not values:
        return cited
    held = [sum(1 for v in values if re.search(rf"(?<![\w.]){re.escape(v)}(?!\w)", t, re.I)) for t in texts]
    top = max(held)
    if top == 0 or max(held[n - 1] for n in cited) == top:
        return cited
    return [held.index(top) + 1]


def cited_statements(text: str) -> dict[int, list[str]]:
    """The statements each ``[n]`` closes, by ``n``, in order: the text since the previous group of markers, and
    the rest of the sentence when the group stands inside one (as ``check_markers`` reads them).

    Example:
        >>> cited_statements("Backups are kept 35 days [1]. Restores take an hour [2][1].")
        {1: ['Backups are kept 35 days', 'Restores take an hour'], 2: ['Restores take an hour']}
    """
    out: dict[int, list[str]] = {}
    start = 0
    for group in _GROUP.finditer(text):
        statement = (text[start : group.start()] + _rest_of_sentence(text, group)).strip(" \t\n.;,")
        start = group.end()
        for n in dict.fromkeys(int(n) for n in re.findall(r"\d+", group.group(0))):
            out.setdefault(n, []).append(statement)
    return out


MIN_PASSAGE_SHARE = 0.3
"""The least share of a statement's words (weighted by rarity in the source) a sentence of the source must hold
to be taken as the one the statement cites."""

UNPLACEABLE = ("compressed", "flash_excerpt_of_chars", FLAGS_KEY)
"""Metadata of a source whose text differs from the stored article's (the budget compressed or cut it, a flash
excerpt replaced it: ``ragidx.retrieval.flash.excerpts.EXCERPT_OF_CHARS``, instruction-like text was replaced):
the offsets of its ``sections`` do not hold there."""


def supporting_span(statements: Sequence[str], content: str) -> tuple[int, int] | None:
    """The ``[start, end)`` of the sentence (or line: a table row is one) of ``content`` that supports
    ``statements``: the one holding the largest share of a statement's words, each weighted by how rare it is
    among the sentences of ``content`` (the sentence the statement closes is tried alone too); None when none
    holds ``MIN_PASSAGE_SHARE``.

    Example:
        >>> content = "Backups run nightly. They are kept 35 days."
        >>> start, end = supporting_span(["Backups are kept for 35 days."], content)
        >>> content[start:end]
        'They are kept 35 days.'
    """
    units = split_units(content)
    if not units:
        return None
    unit_words = [content_words(u.text) for u in units]
    df: dict[str, int] = {}
    for words in unit_words:
        for w in words:
            df[w] = df.get(w, 0) + 1
    best: tuple[float, int, int] | None = None
    for statement in statements:
        sentences = _SENTENCE.findall(statement)
        for claim_text in dict.fromkeys([statement, *sentences[-1:]]):
            claim = set(terms(claim_text, extra_stop_words=ASKING | CITING))
            weights = {w: math.log(1 + len(units) / df[w]) for w in claim if w in df}
            total = sum(math.log(1 + len(units) / df.get(w, 1)) for w in claim) or 1.0
            for i, words in enumerate(unit_words):
                share = sum(weights[w] for w in claim & words if w in weights) / total
                if share >= MIN_PASSAGE_SHARE and (best is None or share > best[0]):
                    best = (share, units[i].start, units[i].end)
    return (best[1], best[2]) if best is not None else None


def passage_location(
    source: Article, statements: Sequence[str], *, span: tuple[int, int] | None = None
) -> dict[str, Any] | None:
    """``{"section", "heading_path"?, "page"?, "url"}`` of the section of ``source`` that holds the sentence
    supporting ``statements`` (see :func:`supporting_span`; ``span``: that sentence, when already found), from the
    document's ``sections``; None for an article without sections, one whose text is not the stored article's
    (``UNPLACEABLE``), or when no sentence holds the statements."""
    meta = source.metadata
    if any(meta.get(k) for k in UNPLACEABLE):
        return None
    sections = meta.get(SECTIONS)
    if not isinstance(sections, list) or not sections or not statements:
        return None
    if span is None:
        span = supporting_span(statements, source.content)
    if span is None:
        return None
    offset = span[0]
    found = [s for s in sections if isinstance(s, dict) and int(s.get("start", 0)) <= offset]
    section = found[-1] if found else sections[0]
    page, anchor = section.get("page"), section.get("anchor") or None
    location: dict[str, Any] = {"section": str(section.get("section") or "")}
    if section.get("heading_path"):
        location["heading_path"] = " > ".join(map(str, section["heading_path"]))
    if page is not None:
        location["page"] = int(page)
    location["url"] = location_url(source.url, location.get("page"), anchor)
    return location


MAX_QUOTE_CHARS = 400
"""A longer supporting sentence (a table row, a run-on list) is quoted up to here, cut at a word."""
MIN_QUOTE_WORDS = 3


def passage_quote(source: Article, span: tuple[int, int] | None) -> str:
    """The supporting sentence ``span`` of ``source`` as a verbatim quote of the article: where the text shown was
    compressed or cut ("…" marks the cut), the longest uncut piece; '' for an article whose instruction-like text
    was replaced or that a model summarized (its shown text is not the article's: ``compressed_verbatim`` false),
    or a piece under ``MIN_QUOTE_WORDS`` words."""
    meta = source.metadata
    if span is None or meta.get(FLAGS_KEY) or (meta.get("compressed") and not meta.get(COMPRESSED_VERBATIM)):
        return ""  # not the article's own words: replaced as instruction-like, or rewritten by a model
    text = source.content[span[0] : span[1]]
    if ELLIPSIS in text:
        text = max((p.strip() for p in text.split(ELLIPSIS)), key=len)
    text = text.strip()
    if len(text) > MAX_QUOTE_CHARS:
        text = text[:MAX_QUOTE_CHARS].rsplit(None, 1)[0]
    return text if len(re.findall(r"\w+", text)) >= MIN_QUOTE_WORDS else ""


def _citation(number: int, source: Article, statements: Sequence[str] = ()) -> Citation:
    """The citation of ``source`` as ``[number]``, pointing at the section and page of its sentence that supports
    ``statements`` (the text the marker closes), else at its best search match's place; it quotes that sentence,
    and a web page's link opens at it (:func:`ragidx.agent.text_fragments.with_text_fragment`)."""
    span = supporting_span(statements, source.content) if statements else None
    location = passage_location(source, statements, span=span)
    if location is None:
        location = source.metadata.get(LOCATION)
        location = location if isinstance(location, dict) else {}
    title = source.title
    section = str(location.get("section") or "")
    page = location.get("page")
    shown = location
    if section == title:  # the document's opening section: its title says it already
        shown = {k: v for k, v in location.items() if k != "section"}
    quote = passage_quote(source, span)
    url = str(location.get("url") or source.url)
    link = shown_url(url)  # a reader never gets a link that reads as an instruction
    if quote and link == url:
        fmt = source.metadata.get("format")
        link = with_text_fragment(link, quote, str(fmt) if fmt else None)
    return Citation(
        number=number,
        kb_id=source.kb_id,
        title=shown_title(title),  # a reader never sees instruction-like text under ragidx's heading
        url=link,
        where=describe_location(shown),
        section=section,
        page=int(page) if isinstance(page, int) else None,
        quote=quote,
    )


def shown_text(sources: Sequence[Article], question: str) -> str:
    """The titles and texts of the articles shown, then the question: what an answer may take values from."""
    return " ".join(f"{s.title} {s.content}" for s in sources) + " " + question
