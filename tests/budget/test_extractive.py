from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragidx.article import Article
from ragidx.budget.extractive import ELLIPSIS, ExtractiveCompressor
from ragidx.sentences import split_units
from tests.budget.helpers import text_of_tokens

COMP = ExtractiveCompressor()
KB = Path(__file__).resolve().parents[2] / "ragidx" / "data" / "kb"


def doc(text: str, title: str = "Doc") -> Article:
    return Article("k", title, "https://x/k", text)


def test_keeps_the_sentence_that_answers() -> None:
    filler = text_of_tokens(300, 1)
    text = f"{filler} The Eiffel Tower opened on 31 March 1889. {text_of_tokens(300, 2)}"
    out = COMP.compress(doc(text, "Paris"), 40, "When did the Eiffel Tower open?")
    assert "31 March 1889" in out
    assert COMP.tokens.count(out) <= 40


def test_within_and_close_to_target_in_original_order() -> None:
    text = text_of_tokens(2000, 3)
    for target in (50, 333, 1000):
        out = COMP.compress(doc(text), target, "printer driver backup")
        assert target - 5 <= COMP.tokens.count(out) <= target
        # every piece (a cut one ends in "…") is verbatim from the source, in the source's order
        pos = -1
        for unit in split_units(out):
            found = text.find(unit.text.removesuffix(ELLIPSIS), pos + 1)
            assert found > pos, (unit.text, pos)
            pos = found


@pytest.mark.parametrize("kb", ["libreoffice_en_sample.jsonl", "libreoffice_ru_sample.jsonl"])
def test_real_articles_fill_their_target(kb: str) -> None:
    """Help pages are many short lines (headings, function names, menu paths) whose tokens per character
    differ from the prose around them: the fit still lands within a few tokens of every target."""
    counter = COMP.tokens
    comp = COMP
    with open(KB / kb, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f][:120]
    gaps = []
    for row in rows:
        article = Article(row["id"], row["title"], row["url"], row["text"])
        total = counter.count(row["text"])
        for share in (0.8, 0.5, 0.25, 0.1):
            target = max(20, int(total * share))
            if target >= total:
                continue
            got = counter.count(comp.compress(article, target, "How do I insert a table and update it?"))
            assert got <= target, (row["id"], target, got)
            gaps.append(target - got)
    assert len(gaps) > 300
    assert max(gaps) <= 12, sorted(gaps)[-10:]
    assert sum(gaps) / len(gaps) <= 2.5


def test_short_article_is_returned_whole_and_zero_target_is_empty() -> None:
    assert COMP.compress(doc("Tiny text."), 100, "q") == "Tiny text."
    assert COMP.compress(doc(text_of_tokens(100, 4)), 0, "q") == ""


def test_russian_question_guides_selection() -> None:
    text = (
        "Компания основана давно. У неё много офисов. "
        "Резервную копию базы создают в меню «Сервис», пункт «Резервное копирование». "
        "Сотрудники любят кофе. Офис находится в центре."
    )
    out = COMP.compress(doc(text, "Справка"), 25, "Как создать резервную копию базы?")
    assert "Резервную копию базы" in out


def test_without_question_terms_keeps_the_beginning() -> None:
    text = text_of_tokens(400, 5)
    out = COMP.compress(doc(text), 60, "")
    assert text.startswith(out.split(". ")[0])


def test_the_passage_retrieval_matched_is_kept_first() -> None:
    """A reference page: the setting's name is on a heading line, its default in the next sentence, and
    other sentences share more of the question's words. The matched chunk's span keeps the right one."""
    from ragidx.article import MATCHED_SPANS

    decoys = " ".join(f"The default size of the {w} setting is described in its own section." for w in "abcdefgh")
    answer = "shared_buffers (integer)\nSets the amount of memory for shared buffers. The default is 128MB."
    text = f"{decoys}\n\n{answer}\n\n{text_of_tokens(400, 3)}"
    question = "What is the default size of shared_buffers?"
    plain = COMP.compress(doc(text), 60, question)
    start = text.index(answer)
    matched = doc(text).with_metadata(**{MATCHED_SPANS: [[start, start + len(answer)]]})
    kept = COMP.compress(matched, 60, question)
    assert "128MB" not in plain and "128MB" in kept  # the decoys win on words alone
    assert COMP.tokens.count(kept) <= 60
    off = ExtractiveCompressor(match_boost=0.0).compress(matched, 60, question)
    assert off == plain
