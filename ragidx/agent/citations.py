"""Which articles an answer cites: ``[n]`` markers first, shared words when the model wrote none.

Example:
    >>> sources = [{"kb_id": "a", "title": "Tables", "url": "u", "content": "Insert a table."}]
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
from ragidx.article import LOCATION, describe_location
from ragidx.sentences import split_units
from ragidx.terms import terms

_ENTITY = re.compile(r"&(?:gt|lt|amp|quot|apos|#39|#x27);")
_MARKER = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]")
_ASKING = frozenset({"explain", "tell", "describe", "like", "would", "could", "also"})
"""Words of a request, not of its topic (beside the stop words of ``ragidx.terms``)."""
_CITING = frozenset(
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


def _words(text: str) -> set[str]:
    return set(terms(text, extra_stop_words=_ASKING))


def restore_entities(text: str, sources: Sequence[dict[str, Any]]) -> str:
    """``text`` with the HTML entities a model wrote for plain characters (``&gt;`` for ``>``) turned
    back into them; an entity that the articles shown also write (say, a page about HTML) is kept.

    Example:
        >>> restore_entities("Click the &gt;&gt; button.", [{"content": "Click the >> button."}])
        'Click the >> button.'
    """
    found = set(_ENTITY.findall(text))
    if not found:
        return text
    kept = {e for e in found if any(e in str(s.get("content") or "") for s in sources)}
    return _ENTITY.sub(lambda m: m.group(0) if m.group(0) in kept else html.unescape(m.group(0)), text)


def resolve_citations(
    text: str, sources: Sequence[dict[str, Any]], *, question: str = "", min_overlap: float = 0.35
) -> tuple[str, list[Citation], str]:
    """(text with invalid markers removed, citations in order of first use, method).

    ``sources[i]`` is cited as ``[i + 1]``. Markers for numbers that name no source are removed from
    the text (never turned into invented citations); valid ones are checked against the statement they
    close (see :func:`check_markers`). Without any valid marker, a source is attributed when it holds at
    least ``min_overlap`` of the answer's content words, weighted by how rare each word is among the
    sources, and at least half of the best source's share (at most 3 sources).
    """

    def keep_valid(match: re.Match[str]) -> str:
        numbers = [int(n) for n in re.split(r"\s*,\s*", match.group(1))]
        return "".join(f"[{n}]" for n in numbers if 1 <= n <= len(sources))

    cleaned = _MARKER.sub(keep_valid, text)
    if _MARKER.search(cleaned):
        cleaned = check_markers(cleaned, sources, question=question)
        cited = list(dict.fromkeys(int(m.group(1)) for m in _MARKER.finditer(cleaned)))
        return cleaned, [_citation(n, sources[n - 1]) for n in cited], "markers"
    answer_words = _words(cleaned)
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
    return cleaned, [_citation(i + 1, sources[i]) for i in sorted(picked)], "overlap"


def _source_words(source: dict[str, Any]) -> set[str]:
    return _words(f"{source.get('title', '')} {source.get('content', '')}")


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
    text: str, sources: Sequence[dict[str, Any]], *, question: str = "", keep_ratio: float = 0.5, min_share: float = 0.3
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
        >>> sources = [{"title": "Preset Options", "content": "block_size reports 8192."},
        ...            {"title": "Resource Consumption", "content": "shared_buffers defaults to 128MB."}]
        >>> check_markers("shared_buffers defaults to 128MB [1].", sources, question="shared_buffers default?")
        'shared_buffers defaults to 128MB [2].'
        >>> check_markers("It is 128MB. This is found in articles [1] and [2].", sources)
        'It is 128MB. This is found in articles [2].'
    """
    source_words = [_source_words(s) for s in sources]
    source_texts = [_shown_text([s], "") for s in sources]
    asked = _words(question)
    asked_values = set(_values(question))

    def new_words(span: str) -> set[str]:
        return set(terms(span, extra_stop_words=_ASKING | _CITING)) - asked

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


# A value a statement asserts: a number with what is stuck to it ("1min", "2kB", "-1", "8.0.2") or an escape
# such as "\\N". A numbered list's "1." is not one (see ``_LIST_NUMBER``).
_VALUE = re.compile(r"(?<![\w.\\-])(?:-?\d[\w.,:/%-]*\w|-?\d|\\[A-Za-z]\w*)")


def _values(text: str) -> list[str]:
    plain = _LIST_NUMBER.sub(r"\1", html.unescape(text))
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


def _citation(number: int, source: dict[str, Any]) -> Citation:
    meta = source.get("metadata")
    location = meta.get(LOCATION) if isinstance(meta, dict) else None
    location = location if isinstance(location, dict) else {}
    title = str(source.get("title", ""))
    if location.get("section") == title:  # the document's opening section: its title says it already
        location = {k: v for k, v in location.items() if k != "section"}
    return Citation(
        number=number,
        kb_id=str(source.get("kb_id", "")),
        title=title,
        url=str(location.get("url") or source.get("url", "")),
        where=describe_location(location),
    )


def _shown_text(sources: Sequence[dict[str, Any]], question: str) -> str:
    """The titles and texts of the articles shown, then the question: what an answer may take values from."""
    return " ".join(f"{s.get('title', '')} {s.get('content', '')}" for s in sources) + " " + question


# Names a question can mention that a knowledge base either has or has not: snake_case and dotted names
# (``io_method``, ``pg_stat_io``, ``postgresql.conf``), command-line flags (``--incremental``), camelCase and
# ALL-CAPS terms (``HNSW``). Plain words are not (documentation paraphrases them), nor capitalized names
# such as PostgreSQL or LibreOffice: a product's own pages rarely repeat its name.
_IDENTIFIER = re.compile(
    r"(?<![\w-])(--?[A-Za-z][\w-]+|[A-Za-z]\w*(?:[_.][A-Za-z0-9]\w*)+|[a-z]+[A-Z]\w*|[A-Z]{3,}\d*)(?!\w)"
)


def missing_identifiers(question: str, sources: Sequence[dict[str, Any]]) -> list[str]:
    """The names in ``question`` (see ``_IDENTIFIER``) that no source writes, case-insensitively.

    A question about ``io_method`` over articles that never write ``io_method`` cannot be answered from
    them; a small model asked anyway invents a value ("the default of io_method is 1").

    Example:
        >>> missing_identifiers("What is the default of io_method and work_mem?", [{"content": "work_mem: 4MB"}])
        ['io_method']
    """
    names = dict.fromkeys(m.strip(".") for m in _IDENTIFIER.findall(question))
    text = _shown_text(sources, "").lower()
    return [n for n in names if n and n.lower() not in text]


_NUMBER = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*")
# "1. Open the Tools menu" / "2) Click New": a list's own numbering, not a value the answer states.
_LIST_NUMBER = re.compile(r"^([ \t]*(?:[-*][ \t]*)?)\d{1,2}[.)](?=[ \t])", re.M)


# Where the model says it read something: "found in article [2] at line 108", "в статье [1] на странице 6". Its
# number points into a source (and is often made up); it is no value the answer states.
_LOCATOR = re.compile(
    r"(?i)((?:\[\d{1,3}\]|\barticles?\b|\bsources?\b|\bстать\w*|\bисточник\w*)[^.!?\n]{0,30}?"
    r"\b(?:at|on|in|на|в)\s+(?:line|page|paragraph|строке|странице|абзаце)\s+)\d+"
)


def ungrounded_numbers(answer: str, sources: Sequence[dict[str, Any]], question: str = "") -> list[str]:
    """The numbers an answer states when **none** of them occurs in the sources or the question, else ``[]``.

    Such an answer was not read from the articles: asked for "the maximum number of rows in a Calc sheet"
    over articles that never give it, a small model writes "65,536" from memory. One number the articles
    do write is enough to trust the rest (conversions, counts). ``[n]`` markers, a numbered list's "1.", the
    digits of an HTML entity a model wrote (``&#34;``) and where the model says it read something ("article
    [2] at line 108": the local model added that to a right PostgreSQL answer) are not numbers it states.

    Example:
        >>> ungrounded_numbers("It is 65,536 rows [1].", [{"content": "Rows and columns."}])
        ['65536']
        >>> ungrounded_numbers("128MB, that is 131072 kB [1].", [{"content": "default 128MB"}])
        []
        >>> ungrounded_numbers("1. Choose Help - About.\\n2. Read the version [1].", [{"content": "Help - About"}])
        []
        >>> ungrounded_numbers("It is WARNING, as article [2] says at line 108.", [{"content": "WARNING"}])
        []
    """
    plain = _LIST_NUMBER.sub(r"\1", _MARKER.sub(" ", _LOCATOR.sub(r"\1", html.unescape(answer))))
    stated = dict.fromkeys(n.replace(",", "") for n in _NUMBER.findall(plain))
    if not stated:
        return []
    seen = _shown_text(sources, question)
    known = {n.replace(",", "") for n in _NUMBER.findall(seen)}
    return [] if any(n in known for n in stated) else list(stated)


# Words of a sentence that only says where its answer came from ("This can be confirmed by citing article [1].",
# "The source for this information is [2].", "Sources: [1]"), beside ``_CITING`` and ``_ASKING``.
_TALK = _CITING | _ASKING | frozenset(
    {
        "confirm", "confirmed", "seen", "cite", "citing", "taken", "derived", "based", "shown", "section", "line",
        "more", "further", "additional", "topic", "подробнее", "дополнительная", "теме",
        "paragraph", "result", "results", "search", "это", "эта", "этой", "этом", "данная", "данной", "можно",
        "найти", "найдена", "находится", "подтверждается", "взята", "взято", "разделе", "строке", "странице", "абзаце",
        "результатах", "поиска",
    }
)  # fmt: skip
_NAMES_SOURCE = re.compile(r"\[\d{1,3}\]|\b(?:articles?|sources?)\b|\bстать|\bисточник", re.I)


def strip_source_talk(text: str, titles: Sequence[str] = ()) -> str:
    """``text`` without the sentences that only say where the answer was found ("This information is found in
    article [1].", "This can be found in article [2] at line 108.", "Sources: [1]", or with ``titles``, those of the
    articles shown: 'This is in article [1] on "Saving Documents".'), their markers moved onto the sentence before
    them. A small model adds such a sentence to about one answer in ten; it says nothing, and the place it names
    ("at line 108", "on page 6") is usually made up. A sentence with any other word ("According to article [1],
    the default is 4MB.") stays, as does such a sentence when nothing comes before it.

    Example:
        >>> strip_source_talk("Choose Insert - Table. This information is found in article [2].")
        'Choose Insert - Table [2].'
        >>> strip_source_talk("It is 4MB [1]. The source for this information is [1] at line 12.")
        'It is 4MB [1].'
        >>> strip_source_talk("According to article [1], the default is 4MB.")
        'According to article [1], the default is 4MB.'
        >>> strip_source_talk('It is .BAK. This is in article [1] on "Saving Documents".', ["Saving Documents"])
        'It is .BAK [1].'
    """
    units = split_units(text)
    talking = _talk_words(titles)
    talk = [i for i, u in enumerate(units) if i > 0 and _only_source_talk(u.text, talking)]
    if not talk:
        return text
    pieces, pos = [], 0
    for i in talk:
        pieces.append(text[pos : units[i - 1].end])  # "" when the sentence before was talk too
        pos = units[i].end
        markers = [f"[{m}]" for m in _MARKER.findall(units[i].text)]
        if markers:  # onto the last sentence kept (the first sentence never is talk)
            last = max(n for n, piece in enumerate(pieces) if piece.strip())
            pieces[last] = with_markers(pieces[last], markers)
    pieces.append(text[pos:])
    return "".join(pieces)


def _talk_words(titles: Sequence[str]) -> frozenset[str]:
    return _TALK.union(w for title in titles for w in re.findall(r"\w+", title.lower())) if titles else _TALK


def _only_source_talk(sentence: str, talking: frozenset[str] = _TALK) -> bool:
    """Whether ``sentence`` names a source and has no word beside ``talking`` ones (those that talk about sources)."""
    return bool(_NAMES_SOURCE.search(sentence)) and _talk_words_only(sentence, talking, complete=True)


def source_talk_units(text: str, *, finished: bool = False, titles: Sequence[str] = ()) -> tuple[int, list[str]]:
    """Where the sentences at the end of a reply that is still being written may turn out to be source talk
    (:func:`strip_source_talk` would drop them), and their markers: ``(len(text), [])`` when they cannot. Unless
    the reply is ``finished``, its last sentence may be too: its words so far must all be ones that talk about
    sources, its last word may be cut. A streaming reader holds that tail back (``ragidx ask``).

    Example:
        >>> source_talk_units("It is 4MB. This information is fou")
        (11, [])
        >>> source_talk_units("It is 4MB. This information is found in article [1].")
        (11, ['[1]'])
        >>> source_talk_units("It is 4MB. This tells Calc")
        (26, [])
    """
    units = split_units(text)
    talking = _talk_words(titles)
    start = len(text)
    for i in range(len(units) - 1, 0, -1):
        last = i == len(units) - 1
        whole = finished or not last or bool(re.search(r"[.!?…]\s*$", text))
        sentence = units[i].text
        if not (_only_source_talk(sentence, talking) if whole else _talk_words_only(sentence, talking, complete=False)):
            break
        start = units[i].start
    return start, [f"[{m}]" for m in dict.fromkeys(_MARKER.findall(text[start:]))]


def _talk_words_only(sentence: str, talking: frozenset[str], *, complete: bool) -> bool:
    """Whether every word of ``sentence`` (numbers where it says where it read something aside) talks about
    sources; with ``complete=False`` its last word may be cut and is not judged."""
    plain = _MARKER.sub(" ", _LOCATOR.sub(r"\1", sentence))
    found = [w for w in re.findall(r"\w+", plain.lower()) if not w.isdigit()]
    if not complete and found and re.search(r"\w$", plain):
        found = found[:-1]
    if not found:
        return not complete
    return not terms(" ".join(found), extra_stop_words=talking)


def with_markers(kept: str, markers: Sequence[str]) -> str:
    """``kept`` with those of ``markers`` its last sentence does not have, before that sentence's closing stop.

    Example:
        >>> with_markers("It is 4MB [2].", ["[1]", "[2]"])
        'It is 4MB [2] [1].'
    """
    units = split_units(kept)
    last = units[-1].text if units else ""
    new = [m for m in dict.fromkeys(markers) if m not in last]
    if not new:
        return kept
    body = kept.rstrip()
    stop = len(body) if body.endswith("]") else len(body.rstrip(".!?…"))
    return body[:stop] + " " + "".join(new) + body[stop:] + kept[len(body) :]


_MODIFIER = r"(?:commandctrl|optionalt|ctrl|control|command|cmd|option|alt|altgr|shift|fn)"
_KEY = r"(?:f\d{1,2}|enter|return|tab|space|spacebar|esc|escape|backspace|del|delete|ins|insert|home|end|[a-z0-9])"
# "Ctrl+Shift+Enter", "Command + Option + V", "CommandCtrl+F12": a modifier, then "+" and keys.
_SHORTCUT = re.compile(rf"(?i)(?<![\w+]){_MODIFIER}(?:\s*\+\s*(?:{_MODIFIER}|{_KEY}))+(?![\w+])")


def ungrounded_shortcuts(answer: str, sources: Sequence[dict[str, Any]], question: str = "") -> list[str]:
    """The key combinations an answer states when **none** of them is written in the sources or the question
    (spaces aside, case-insensitively), else ``[]``: a help centre's values are its shortcuts as much as its
    numbers. Asked which shortcut starts voice dictation, over pages that list other shortcuts, a small model
    answers "Command + Option + V".

    Example:
        >>> ungrounded_shortcuts("Press Command + Option + V [1].", [{"content": "Command+Option+F10 docks it."}])
        ['Command + Option + V']
        >>> ungrounded_shortcuts("Press Command + Shift + F10 [1].", [{"content": "CommandCtrl+Shift+F10 docks."}])
        []
    """
    stated = list(dict.fromkeys(m.group(0) for m in _SHORTCUT.finditer(answer)))
    if not stated:
        return []
    seen = _keys(_shown_text(sources, question))
    return [] if any(_keys(k) in seen for k in stated) else stated


_PLATFORM_KEYS = (
    (re.compile(r"commandctrl|command|cmd|control|ctrl"), "ctrl"),
    (re.compile(r"optionalt|option|alt"), "alt"),
)


def _keys(text: str) -> str:
    """``text`` lower-cased without spaces, with each platform's name of a modifier made one: LibreOffice's
    help writes "CommandCtrl+Shift+F10" for what a model may write "Command + Shift + F10" or "Ctrl+Shift+F10"."""
    text = re.sub(r"\s+", "", text.lower())
    for names, key in _PLATFORM_KEYS:
        text = names.sub(key, text)
    return text


# A capitalized name inside a sentence (after a lower-case word or a comma): "Google Sheets", "Excel".
_NAME = re.compile(r"(?<=[a-zа-яё,;:] )([A-Z][A-Za-z]{2,}(?:\s+[A-Z][A-Za-z]+)*)")


def ungrounded_names(
    answer: str, sources: Sequence[dict[str, Any]], question: str = "", *, min_names: int = 2
) -> list[str]:
    """The names an answer writes inside its sentences that neither the sources nor the question write, when
    there are at least ``min_names`` of them, else ``[]``.

    Asked how to co-edit a sheet in real time through the cloud, over help pages that never mention it, a small
    model recommends "Google Sheets", "Microsoft Excel", "Tableau" and "Snowflake" from memory. One such name
    is not enough: a right answer may compare with a product the articles do not name ("unlike Excel").

    Example:
        >>> ungrounded_names("Use Google Sheets, or try Microsoft Excel.", [{"content": "Share a document."}])
        ['Google Sheets', 'Microsoft Excel']
        >>> ungrounded_names("Unlike in Excel, choose Data - Filter.", [{"content": "Choose Data - Filter."}])
        []
        >>> ungrounded_names("Open it in Microsoft Excel, then save it in Excel.", [{"content": "Save a file."}])
        []
    """
    seen = _shown_text(sources, question).lower()
    found = dict.fromkeys(
        name
        for name in _NAME.findall(html.unescape(answer))
        if name.lower() not in seen and all(word.lower() not in seen for word in name.split())
    )
    # "Excel" after "Microsoft Excel" is the same name
    names = [n for n in found if not any(n != other and n in other.split() for other in found)]
    return names if len(names) >= min_names else []


def shares_terms(question: str, sources: Sequence[dict[str, Any]]) -> bool:
    """Whether any source contains any content word of the question (a cheap "is this on topic" gate).

    A question none of whose words occur in the retrieved articles cannot be answered from them;
    the agent then says so instead of letting a small model improvise.
    """
    words = _words(question)
    if not words:
        return True
    return any(words & _words(f"{s.get('title', '')} {s.get('content', '')}") for s in sources)
