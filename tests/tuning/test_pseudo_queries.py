"""Pseudo-queries: one per article, deterministic, masked ones lose words; LLM questions parsed defensively."""

from __future__ import annotations

import re

import pytest

from ragidx.article import Article
from ragidx.terms import words
from ragidx.tuning.pseudo_queries import LLMQueryWriter, make_pseudo_queries, passage_language
from tests.fakes.scripted_llm import ScriptedLLM

ARTICLES = [
    Article(
        "tables",
        "Insert a table",
        "",
        "Tables hold rows and columns of data in a document. Choose Table - Insert Table and set the number of "
        "rows and columns you want. You can also draw a table with the mouse pointer.",
    ),
    Article("short", "Hi", "", "Too short."),
    Article(
        "print",
        "Printing a document",
        "",
        "Choose File - Print to print the current document on the selected printer. The print dialog lets you "
        "select the page range and the number of copies.",
    ),
]


@pytest.mark.parametrize("method", ["title", "first_sentence", "sentence", "masked_sentence"])
def test_each_query_comes_from_its_article_and_is_reproducible(method: str) -> None:
    first = make_pseudo_queries(ARTICLES, method, seed=3)  # type: ignore[arg-type]
    assert first == make_pseudo_queries(ARTICLES, method, seed=3)  # type: ignore[arg-type]
    assert [q.kb_id for q in first] == ["tables", "print"]  # nothing usable in "short"
    for q in first:
        source = next(a for a in ARTICLES if a.kb_id == q.kb_id)
        assert set(words(q.text)) <= set(words(f"{source.title} {source.content}"))
        assert q.method == method and len(words(q.text)) >= 2


def test_masked_sentences_keep_about_half_of_the_content_words() -> None:
    plain = make_pseudo_queries(ARTICLES, "sentence", seed=1)
    masked = make_pseudo_queries(ARTICLES, "masked_sentence", seed=1)
    for p, m in zip(plain, masked, strict=True):
        assert len(words(m.text)) < len(words(p.text))
        assert len(words(m.text)) >= len(words(p.text)) // 3


def test_llm_is_not_a_cheap_method() -> None:
    with pytest.raises(ValueError, match=re.escape("use LLMQueryWriter for 'llm'")):
        make_pseudo_queries(ARTICLES, "llm")


def test_llm_questions_are_parsed_defensively_and_failures_counted() -> None:
    llm = ScriptedLLM(
        [
            '```\nQuestion: "How many rows can a new table have?"\n```',
            RuntimeError("endpoint down"),
            "Choose File - Print to print the current document on the selected printer.",
        ]
    )
    writer = LLMQueryWriter(llm)
    out = writer.write([ARTICLES[0], ARTICLES[1], ARTICLES[2]])
    assert [(q.kb_id, q.text) for q in out] == [("tables", "How many rows can a new table have?")]
    assert dict(writer.fallbacks) == {"error": 1, "copied": 1}
    prompt = str(llm.calls[0].messages[-1].content)
    assert "Insert a table" in prompt and "Tables hold rows" in prompt


def test_the_question_is_asked_for_in_the_passages_language_by_name() -> None:
    russian = Article(
        "ru-del",
        "Удаление сводных диаграмм",
        "",
        "Чтобы удалить сводную диаграмму, выделите её и нажмите клавишу Delete. Связанная сводная таблица при "
        "этом не удаляется.",
        language="ru",
    )
    llm = ScriptedLLM(["Как удалить сводную диаграмму?", "How do I print a document?"])
    out = LLMQueryWriter(llm).write([russian, ARTICLES[2]])
    assert [q.text for q in out] == ["Как удалить сводную диаграмму?", "How do I print a document?"]
    assert str(llm.calls[0].messages[-1].content).endswith("Reply with the question only, in Russian.")
    assert str(llm.calls[1].messages[-1].content).endswith("in English.")
    # an untranslated page of a Russian help centre gets an English question; an unknown language is referred to
    assert passage_language("To delete a pivot chart, select it and press Delete.", "ru") == "English"
    undeclared = Article("ru-undeclared", russian.title, "", russian.content)  # no lang: the article's is detected
    LLMQueryWriter(llm := ScriptedLLM(["Как удалить сводную диаграмму?"])).write([undeclared])
    assert str(llm.calls[0].messages[-1].content).endswith("in Russian.")
    assert passage_language("これは日本語で書かれた説明の文章です。", "ja") == "the language of the passage"


@pytest.mark.parametrize(
    ("reply", "reason"),
    [("", "empty"), ("Tables?", "too_short"), (" ".join(["word"] * 60) + "?", "too_long")],
)
def test_unusable_questions_are_skipped_with_a_named_reason(reply: str, reason: str) -> None:
    writer = LLMQueryWriter(ScriptedLLM([reply]))
    assert writer.write([ARTICLES[0]]) == []
    assert dict(writer.fallbacks) == {reason: 1}


def test_held_out_queries_hide_the_chunks_that_hold_their_sentence() -> None:
    (q, *_) = make_pseudo_queries(ARTICLES, "held_out", seed=2)
    assert q.hide == q.text and q.kb_id == "tables"
    assert q.hides("tables", f"Some words before. {q.text} And after.")
    assert q.hides("tables", f"A chunk that ends in the first part: {q.text[: len(q.text) // 2]}")
    assert not q.hides("print", q.text)  # another article's chunk is never hidden
    assert not q.hides("tables", "A chunk of the same article without the sentence.")
    assert make_pseudo_queries(ARTICLES, "sentence", seed=2)[0].hide is None
