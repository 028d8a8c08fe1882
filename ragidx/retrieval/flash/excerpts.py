"""Snap a model-written excerpt to whole paragraphs of the article it claims to quote.

The model is asked to copy whole paragraphs; models still cut sentences or paraphrase. Each line of
the excerpt must occur (whitespace-insensitively) in the article; the excerpt becomes the enclosing
units in article order. A unit is a paragraph (blank-line separated), or a line of a very long
paragraph (chat logs keep one message per line). If any line is not in the article the excerpt is
rejected (``None``), so a caller falls back to the full text rather than to invented text.
``excerpt_text`` writes an accepted excerpt as the answer model reads it in place of the article.

Example:
    >>> article = "Intro.\\n\\nSet the flag --gpu. Then restart.\\n\\nOutro."
    >>> snap_excerpt("Set the flag --gpu.", article)
    'Set the flag --gpu. Then restart.'
"""

from __future__ import annotations

import re

__all__ = ["EXCERPT_OF_CHARS", "excerpt_text", "snap_excerpt"]

EXCERPT_OF_CHARS = "flash_excerpt_of_chars"
"""Metadata key set on a node (and article) whose text is a flash excerpt: the whole article's length in chars."""

_PARAGRAPH_SPLIT = re.compile(r"\n[ \t]*\n")
_ELLIPSIS = re.compile(r"^[\s.…\[\]()-]*$")
LONG_PARAGRAPH_CHARS = 3000


def _norm(text: str) -> str:
    return " ".join(text.split())


def _units(article: str) -> list[tuple[int, str]]:
    """(paragraph index, unit text) in article order."""
    units: list[tuple[int, str]] = []
    for p_idx, para in enumerate(_PARAGRAPH_SPLIT.split(article)):
        if not para.strip():
            continue
        if len(para) > LONG_PARAGRAPH_CHARS:
            units.extend((p_idx, line) for line in para.splitlines() if line.strip())
        else:
            units.append((p_idx, para.strip()))
    return units


def snap_excerpt(excerpt: str, article: str) -> str | None:
    """Whole units of ``article`` covering every line of ``excerpt``; ``None`` if a line is not there."""
    units = _units(article)
    normed = [_norm(u) for _, u in units]
    picked: set[int] = set()
    start = 0
    for line in excerpt.splitlines():
        frag = _norm(line)
        if not frag or _ELLIPSIS.match(frag):
            continue
        # Prefer a match at or after the previous one: repeated lines map to successive units.
        order = list(range(start, len(units))) + list(range(start))
        hit = next((i for i in order if frag in normed[i]), None)
        if hit is None:
            return None
        picked.add(hit)
        start = hit
    if not picked:
        return None
    out: list[str] = []
    prev_para: int | None = None
    for i in sorted(picked):
        p_idx, text = units[i]
        if out:
            out.append("\n" if p_idx == prev_para else "\n\n")
        out.append(text.strip())
        prev_para = p_idx
    return "".join(out)


def excerpt_text(excerpt: str, *, kb_id: str, title: str, url: str, full_chars: int) -> str:
    """What the answer model reads instead of a large article: the excerpt under a note that says it is one.

    The note gives the article's size and where the whole is (its URL, and its kb_id: ``ArticleStore.get``
    or ``Engine.article_store`` return the full text), so neither the model nor a reader takes the excerpt
    for the article.

    Example:
        >>> text = excerpt_text("Set --gpu.", kb_id="kb-7", title="GPU", url="https://x/gpu", full_chars=40000)
        >>> text.splitlines()[0]
        '[Excerpt: the passages of "GPU" (40000 characters in all) that bear on the question; the whole article \
is kb_id kb-7, https://x/gpu]'
        >>> text.splitlines()[-1]
        'Set --gpu.'
    """
    where = f"kb_id {kb_id}, {url}" if url else f"kb_id {kb_id}"
    note = (
        f'[Excerpt: the passages of "{title}" ({full_chars} characters in all) that bear on the question; '
        f"the whole article is {where}]"
    )
    return f"{note}\n\n{excerpt}"
