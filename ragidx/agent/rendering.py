"""How articles and the answer instruction are written into the prompt: inline search results, titles without
section numbers, article text fenced inside one ``<kb_data>`` region of quoted data with instruction-like text
replaced (``ragidx.safety``), the ``[n] title`` source lines, the answer's language.

Example:
    >>> prompt_title("20.4. Resource Consumption")
    'Resource Consumption'
    >>> fence("text")
    '<article>\\ntext\\n</article>'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate

from ragidx.agent.prompts import ANSWER_PROMPT
from ragidx.article import SEE_ABOVE, Article, SearchResult
from ragidx.budget.messages import call_id, message_text
from ragidx.language import detect_language
from ragidx.providers.chat import to_inline as inline
from ragidx.safety.injection import neutralize_article
from ragidx.safety.spotlight import data_region, fence, one_line
from ragidx.terms import SNOWBALL_LANGUAGES, base_language, is_cyrillic_language


def to_inline(
    messages: Sequence[ChatMessage], results: Mapping[str, SearchResult], articles: Sequence[Article]
) -> list[ChatMessage]:
    """Tool calls and results as plain assistant / user text, for chat templates without tool messages.

    Search results (``results`` by call id) are written as readable text, each article under the ``[n]``
    it has in ``articles`` (the answer's source list, the deduplicated ranking), which small models
    follow far better than JSON.
    """
    numbers = {a.kb_id: i for i, a in enumerate(articles, start=1)}

    def render(m: ChatMessage) -> str:
        result = results.get(call_id(m) or "")
        return _articles_as_text(result, numbers) if result is not None else message_text(m)

    return inline(messages, render)


def _articles_as_text(result: SearchResult, numbers: dict[str, int]) -> str:
    """A search result as the inline transport writes it: its articles, numbered, in one ``<kb_data>`` region of
    quoted data (``ragidx.safety.spotlight``); instruction-like text already replaced (``neutralize_article``)."""
    parts = []
    for a in map(neutralize_article, result.articles):
        n = numbers.get(a.kb_id)
        label = f"[{n}] " if n else ""
        title = prompt_title(a.title or a.kb_id or "")
        if a.metadata.get(SEE_ABOVE) or not a.content:
            parts.append(f"{label}{title} (shown above)")
        else:
            parts.append(f"{label}{title}\n{fence(a.content)}")
    text = data_region(parts) if parts else ""
    if result.error:
        text = f"{text}\n\nSearch error: {result.error}" if text else f"Search error: {result.error}"
    return text or "No articles found."


def _source_lines(sources: Sequence[Article]) -> str:
    """The answer prompt's source list: one line per article, its title neutralized and defused (document text)."""
    return "\n".join(
        f"[{i}] {prompt_title(neutralize_article(a).title or a.kb_id)}" for i, a in enumerate(sources, start=1)
    )


def _answer_prompt(question: str, sources: Sequence[Article], template: BasePromptTemplate | None = None) -> str:
    """The answer call's closing instruction: ``template`` (default: ``ANSWER_PROMPT``) filled with the source
    lines, the question and the language clause."""
    language = answer_language(question, (a.language for a in sources))
    clause = f" Write the answer in {language}." if language else ""
    prompt = template if template is not None else PromptTemplate(ANSWER_PROMPT)
    return prompt.format(sources=_source_lines(sources), question=question, language=clause)


# "20.4. Resource Consumption", "F.12. pg_trgm", "Chapter 25. Routine ..." → the words only: a section number
# shown beside a question about a value can be taken for the value ("work_mem is 20.4").
_SECTION_NUMBER = re.compile(r"^\s*(?:(?:chapter|appendix|part)\s+)?(?:[A-Z]\.)?\d+(?:\.\d+)*\.?\s+(?=\w)", re.I)


def prompt_title(title: str) -> str:
    """An article title as the model sees it: one line, unable to close a tag, without a leading section number."""
    title = one_line(title)
    stripped = _SECTION_NUMBER.sub("", title, count=1)
    return stripped or title


def answer_language(question: str, languages: Iterable[str | None] = ()) -> str:
    """The language to answer in when it is not English (``""`` for English): the question's, told among
    English, the shown articles' languages and Russian for a Cyrillic question, those in the question's
    script only (a short question is only told apart reliably among a few; one left needs no model). A
    language without a known English name is named by reference."""
    letters = [c for c in question if c.isalpha()]
    cyrillic = bool(letters) and sum("\u0400" <= c <= "\u04ff" for c in letters) / len(letters) > 0.3
    candidates = {"ru" if cyrillic else "en"} | {
        code for code in map(base_language, languages) if code and is_cyrillic_language(code) == cyrillic
    }
    code = detect_language(question, candidates) if len(candidates) > 1 else next(iter(candidates))
    if code is None or code == "en":
        return ""
    name = SNOWBALL_LANGUAGES.get(code)
    return name.capitalize() if name else "the language of the question"
